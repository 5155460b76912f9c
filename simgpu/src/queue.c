/* SPDX-License-Identifier: Apache-2.0
 * Per-context in-order work queue executed by a worker thread, like the real
 * driver's pushbuffer: bounded (a launch blocks when it is full), asynchronous.
 * The launch path takes one uncontended mutex; the worker runs lock-free
 * unless it sleeps or must wake a blocked producer or waiter. */
#include <errno.h>
#include <sys/prctl.h>

#include "sim.h"

#define SIM_QUEUE_POLL_NS 20000ull /* the worker reads an empty queue this long before it sleeps */

/* queued: the item was waiting when the previous one ended. */
static void run_item(struct sim_queue *q, const struct sim_item *it, uint64_t seq, bool queued)
{
	switch (it->kind) {
	case SIM_ITEM_KERNEL: {
		struct sim_engine *e = &sim_g.st->dev[q->dev].engine;
		uint64_t end = queued ? q->mps_end : 0;
		bool mps = sim_mps_run(e, it->busy_ns, &end);
		q->mps_end = end;
		uint64_t ns = mps ? it->busy_ns : sim_engine_run(e, it->busy_ns, sim_g.pid, sim_g.start);
		if (ns != 0 && sim_g.slot >= 0) /* the process's busy time (NVML process utilization) */
			atomic_fetch_add(&sim_g.st->proc[sim_g.slot].busy_ns[q->dev], ns);
		if (it->busy_ns != 0 && sim_g.slot >= 0) /* and its kernels' own durations */
			atomic_fetch_add(&sim_g.st->proc[sim_g.slot].work_ns[q->dev], it->busy_ns);
		break;
	}
	case SIM_ITEM_EVENT:
		sim_event_complete(it->ev, q, seq);
		sim_event_put(it->ev);
		break;
	case SIM_ITEM_HOSTFN:
		q->mps_end = 0; /* the GPU waited for the host: a kernel after it starts when it is seen */
		it->fn(it->arg);
		break;
	case SIM_ITEM_WAIT:
		q->mps_end = 0; /* likewise for another queue */
		sim_queue_wait(it->wait_q, it->wait_upto);
		break;
	case SIM_ITEM_NOP:
		break;
	}
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

/* A GPU's front end keeps reading its queue between kernels; the next launch
 * is a store, not a wake-up. The worker does the same for a while after the
 * queue drains, so a launcher that keeps up with it never makes it sleep (and
 * never pays a futex wake-up per launch, which a real launch does not); past
 * SIM_QUEUE_POLL_NS it sleeps, so an idle simulated GPU takes no CPU. (Busy
 * kernels spin their last 50 us the same way: engine.c.) Returns true when an
 * item came. */
static bool poll_work(struct sim_queue *q, uint64_t h)
{
	uint64_t end = sim_now_ns() + SIM_QUEUE_POLL_NS;

	for (;;) {
		for (int i = 0; i < 64; i++) {
			if (atomic_load(&q->tail) != h)
				return true;
			cpu_relax();
		}
		if (sim_now_ns() >= end)
			return false;
	}
}

/* Sleeps until an item is pushed at position h. Returns false once stopped
 * and drained. */
static bool wait_work(struct sim_queue *q, uint64_t h)
{
	bool more = true;

	atomic_store(&q->worker_idle, true);
	if (atomic_load(&q->tail) == h) {
		pthread_mutex_lock(&q->mu);
		while (atomic_load(&q->tail) == h && !q->stop)
			pthread_cond_wait(&q->cv_work, &q->mu);
		more = atomic_load(&q->tail) != h;
		pthread_mutex_unlock(&q->mu);
	}
	atomic_store(&q->worker_idle, false);
	return more;
}

static void wake(struct sim_queue *q, pthread_cond_t *cv, bool all)
{
	pthread_mutex_lock(&q->mu);
	if (all)
		pthread_cond_broadcast(cv);
	else
		pthread_cond_signal(cv);
	pthread_mutex_unlock(&q->mu);
}

static void *worker(void *arg)
{
	struct sim_queue *q = arg;
	struct sim_item it;

	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	for (;;) {
		uint64_t h = atomic_load(&q->head);
		bool queued = atomic_load(&q->tail) != h;
		if (!queued && !poll_work(q, h) && !wait_work(q, h))
			break;
		it = q->ring[h % SIM_QUEUE_LEN];
		atomic_store(&q->head, h + 1); /* frees the slot */
		if (atomic_load(&q->space_waiters) > 0)
			wake(q, &q->cv_space, false);
		run_item(q, &it, h + 1, queued);
		atomic_store(&q->done, h + 1);
		if (atomic_load(&q->done_waiters) > 0)
			wake(q, &q->cv_done, true);
	}
	return NULL;
}

int sim_queue_start(struct sim_queue *q, int dev)
{
	pthread_condattr_t ca;
	int rc;

	atomic_store(&q->tail, 0);
	atomic_store(&q->head, 0);
	atomic_store(&q->done, 0);
	atomic_store(&q->space_waiters, 0);
	atomic_store(&q->done_waiters, 0);
	atomic_store(&q->worker_idle, false);
	q->stop = false;
	q->dev = dev;
	q->mps_end = 0;
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
	pthread_join(q->thread, NULL); /* drains first */
	q->started = false;
	pthread_cond_destroy(&q->cv_work);
	pthread_cond_destroy(&q->cv_space);
	pthread_cond_destroy(&q->cv_done);
	pthread_mutex_destroy(&q->mu);
}

uint64_t sim_queue_push(struct sim_queue *q, const struct sim_item *it, _Atomic uint64_t *last, sim_seq_hook hook,
			void *arg)
{
	uint64_t seq;

	pthread_mutex_lock(&q->mu);
	while (atomic_load(&q->tail) - atomic_load(&q->head) >= SIM_QUEUE_LEN) {
		atomic_fetch_add(&q->space_waiters, 1);
		if (atomic_load(&q->tail) - atomic_load(&q->head) >= SIM_QUEUE_LEN)
			pthread_cond_wait(&q->cv_space, &q->mu);
		atomic_fetch_sub(&q->space_waiters, 1);
	}
	seq = atomic_load(&q->tail);
	q->ring[seq % SIM_QUEUE_LEN] = *it;
	seq++;
	if (last != NULL)
		atomic_store(last, seq);
	if (hook != NULL)
		hook(arg, q, seq); /* before the worker can see the item */
	atomic_store(&q->tail, seq);
	if (atomic_load(&q->worker_idle))
		pthread_cond_signal(&q->cv_work);
	pthread_mutex_unlock(&q->mu);
	return seq;
}

void sim_queue_wait(struct sim_queue *q, uint64_t upto)
{
	if (atomic_load(&q->done) >= upto)
		return;
	pthread_mutex_lock(&q->mu);
	atomic_fetch_add(&q->done_waiters, 1);
	while (atomic_load(&q->done) < upto)
		pthread_cond_wait(&q->cv_done, &q->mu);
	atomic_fetch_sub(&q->done_waiters, 1);
	pthread_mutex_unlock(&q->mu);
}

uint64_t sim_queue_tail(struct sim_queue *q)
{
	return atomic_load(&q->tail);
}
