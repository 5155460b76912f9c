/* SPDX-License-Identifier: Apache-2.0
 * Per-context in-order work queue executed by a worker thread, like the real
 * driver's pushbuffer: bounded (a launch blocks when it is full), asynchronous. */
#include <errno.h>
#include <sys/prctl.h>

#include "sim.h"

static void run_item(struct sim_queue *q, const struct sim_item *it, uint64_t seq)
{
	switch (it->kind) {
	case SIM_ITEM_KERNEL:
		sim_engine_run(&sim_g.st->dev[q->dev].engine, it->busy_ns, sim_g.pid, sim_g.start);
		break;
	case SIM_ITEM_EVENT:
		sim_event_complete(it->ev, q, seq);
		sim_event_put(it->ev);
		break;
	case SIM_ITEM_HOSTFN:
		it->fn(it->arg);
		break;
	case SIM_ITEM_WAIT:
		sim_queue_wait(it->wait_q, it->wait_upto);
		break;
	case SIM_ITEM_NOP:
		break;
	}
}

static void *worker(void *arg)
{
	struct sim_queue *q = arg;
	struct sim_item it;

	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	pthread_mutex_lock(&q->mu);
	for (;;) {
		while (q->head == q->tail && !q->stop) {
			q->worker_idle = true;
			pthread_cond_wait(&q->cv_work, &q->mu);
			q->worker_idle = false;
		}
		if (q->head == q->tail)
			break; /* stopped and drained */
		it = q->ring[q->head % SIM_QUEUE_LEN];
		uint64_t seq = ++q->head;
		if (q->space_waiters > 0)
			pthread_cond_signal(&q->cv_space);
		pthread_mutex_unlock(&q->mu);
		run_item(q, &it, seq);
		pthread_mutex_lock(&q->mu);
		atomic_store(&q->done, seq);
		if (q->done_waiters > 0)
			pthread_cond_broadcast(&q->cv_done);
	}
	pthread_mutex_unlock(&q->mu);
	return NULL;
}

int sim_queue_start(struct sim_queue *q, int dev)
{
	pthread_condattr_t ca;
	int rc;

	q->tail = q->head = 0;
	atomic_store(&q->done, 0);
	q->space_waiters = q->done_waiters = 0;
	q->worker_idle = q->stop = false;
	q->dev = dev;
	pthread_mutex_init(&q->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&q->cv_work, &ca);
	pthread_cond_init(&q->cv_space, &ca);
	pthread_cond_init(&q->cv_done, &ca);
	pthread_condattr_destroy(&ca);
	rc = pthread_create(&q->thread, NULL, worker, q);
	q->started = rc == 0;
	return rc == 0 ? 0 : -1;
}

void sim_queue_stop(struct sim_queue *q)
{
	if (!q->started)
		return;
	pthread_mutex_lock(&q->mu);
	q->stop = true;
	pthread_cond_signal(&q->cv_work);
	pthread_mutex_unlock(&q->mu);
	pthread_join(q->thread, NULL);
	q->started = false;
	pthread_cond_destroy(&q->cv_work);
	pthread_cond_destroy(&q->cv_space);
	pthread_cond_destroy(&q->cv_done);
	pthread_mutex_destroy(&q->mu);
}

uint64_t sim_queue_push(struct sim_queue *q, const struct sim_item *it, _Atomic uint64_t *last,
			sim_seq_hook hook, void *arg)
{
	uint64_t seq;

	pthread_mutex_lock(&q->mu);
	while (q->tail - q->head >= SIM_QUEUE_LEN) {
		q->space_waiters++;
		pthread_cond_wait(&q->cv_space, &q->mu);
		q->space_waiters--;
	}
	q->ring[q->tail % SIM_QUEUE_LEN] = *it;
	seq = ++q->tail;
	if (last != NULL)
		atomic_store(last, seq);
	if (hook != NULL)
		hook(arg, q, seq);
	if (q->worker_idle)
		pthread_cond_signal(&q->cv_work);
	pthread_mutex_unlock(&q->mu);
	return seq;
}

void sim_queue_wait(struct sim_queue *q, uint64_t upto)
{
	if (atomic_load(&q->done) >= upto)
		return;
	pthread_mutex_lock(&q->mu);
	while (atomic_load(&q->done) < upto) {
		q->done_waiters++;
		pthread_cond_wait(&q->cv_done, &q->mu);
		q->done_waiters--;
	}
	pthread_mutex_unlock(&q->mu);
}

uint64_t sim_queue_tail(struct sim_queue *q)
{
	uint64_t t;

	pthread_mutex_lock(&q->mu);
	t = q->tail;
	pthread_mutex_unlock(&q->mu);
	return t;
}
