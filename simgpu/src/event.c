/* SPDX-License-Identifier: Apache-2.0
 * Events: a record is an item in the context queue; its completion time is
 * taken when the worker reaches it (after all earlier work on the queue). */
#include <stdlib.h>

#include "cuapi.h"
#include "sim.h"

#define EVENT_FLAGS (CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | 0x4 /* INTERPROCESS */)

void sim_event_put(struct sim_event *e)
{
	if (atomic_fetch_sub(&e->refs, 1) == 1) {
		pthread_mutex_destroy(&e->mu);
		free(e);
	}
}

void sim_event_complete(struct sim_event *e, struct sim_queue *q, uint64_t seq)
{
	uint64_t now = sim_now_ns();

	pthread_mutex_lock(&e->mu);
	if (e->q == q && e->seq == seq) {
		e->time_ns = now;
		e->time_seq = seq;
	}
	pthread_mutex_unlock(&e->mu);
}

static CUresult event_get(CUevent h, struct sim_event **out)
{
	struct sim_event *e = (struct sim_event *)h;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (e == NULL || e->magic != SIM_MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	*out = e;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuEventCreate(CUevent *out, unsigned int flags)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);
	struct sim_event *e;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (out == NULL || (flags & ~(unsigned)EVENT_FLAGS))
		return CUDA_ERROR_INVALID_VALUE;
	e = calloc(1, sizeof(*e));
	if (e == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->magic = SIM_MAGIC_EVENT;
	e->flags = flags;
	atomic_store(&e->refs, 1);
	pthread_mutex_init(&e->mu, NULL);
	*out = (CUevent)e;
	return CUDA_SUCCESS;
}

static CUresult event_destroy(CUevent h)
{
	struct sim_event *e;
	CUresult rc = event_get(h, &e);

	if (rc != CUDA_SUCCESS)
		return rc;
	e->magic = 0;
	sim_event_put(e); /* a pending record keeps it alive until it completes */
	return CUDA_SUCCESS;
}

SIM_API CUresult cuEventDestroy(CUevent e)
{
	return event_destroy(e);
}

SIM_API CUresult cuEventDestroy_v2(CUevent e)
{
	return event_destroy(e);
}

static void record_hook(void *arg, struct sim_queue *q, uint64_t seq)
{
	struct sim_event *e = arg;

	pthread_mutex_lock(&e->mu);
	e->q = q;
	e->seq = seq;
	pthread_mutex_unlock(&e->mu);
}

static CUresult event_record(CUevent h, CUstream hs, unsigned flags)
{
	struct sim_event *e;
	struct sim_stream *s;
	CUresult rc = event_get(h, &e);

	if (rc == CUDA_SUCCESS)
		rc = sim_stream_resolve(hs, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (flags & ~1u)
		return CUDA_ERROR_INVALID_VALUE;
	if (sim_stream_capturing(s))
		return CUDA_SUCCESS; /* captured records only order the capture; no node */
	struct sim_item it = {.kind = SIM_ITEM_EVENT, .ev = e};
	atomic_fetch_add(&e->refs, 1);
	rc = sim_stream_submit_hook(s, &it, record_hook, e);
	if (rc != CUDA_SUCCESS)
		sim_event_put(e);
	return rc;
}

SIM_API CUresult cuEventRecord(CUevent e, CUstream s)
{
	return event_record(e, s, 0);
}

SIM_API CUresult cuEventRecord_ptsz(CUevent e, CUstream s)
{
	return event_record(e, SIM_PT(s), 0);
}

SIM_API CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags)
{
	return event_record(e, s, flags);
}

SIM_API CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int flags)
{
	return event_record(e, SIM_PT(s), flags);
}

static void event_target(struct sim_event *e, struct sim_queue **q, uint64_t *seq)
{
	pthread_mutex_lock(&e->mu);
	*q = e->q;
	*seq = e->seq;
	pthread_mutex_unlock(&e->mu);
}

SIM_API CUresult cuEventQuery(CUevent h)
{
	struct sim_event *e;
	struct sim_queue *q;
	uint64_t seq;
	CUresult rc = event_get(h, &e);

	if (rc != CUDA_SUCCESS)
		return rc;
	event_target(e, &q, &seq);
	if (q == NULL)
		return CUDA_SUCCESS; /* never recorded */
	return atomic_load(&q->done) >= seq ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIM_API CUresult cuEventSynchronize(CUevent h)
{
	struct sim_event *e;
	struct sim_queue *q;
	uint64_t seq;
	CUresult rc = event_get(h, &e);

	if (rc != CUDA_SUCCESS)
		return rc;
	event_target(e, &q, &seq);
	if (q != NULL)
		sim_queue_wait(q, seq);
	sim_pool_sync();
	return CUDA_SUCCESS;
}

static CUresult event_time(struct sim_event *e, uint64_t *t)
{
	CUresult rc = CUDA_SUCCESS;

	if (e->flags & CU_EVENT_DISABLE_TIMING)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&e->mu);
	if (e->q == NULL)
		rc = CUDA_ERROR_INVALID_HANDLE;
	else if (atomic_load(&e->q->done) < e->seq || e->time_seq != e->seq)
		rc = CUDA_ERROR_NOT_READY;
	else
		*t = e->time_ns;
	pthread_mutex_unlock(&e->mu);
	return rc;
}

SIM_API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
	struct sim_event *ea, *eb;
	uint64_t ta = 0, tb = 0;
	CUresult rc = event_get(a, &ea);

	if (rc == CUDA_SUCCESS)
		rc = event_get(b, &eb);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (ms == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	rc = event_time(ea, &ta);
	if (rc == CUDA_SUCCESS)
		rc = event_time(eb, &tb);
	if (rc != CUDA_SUCCESS)
		return rc;
	*ms = (float)((double)((int64_t)(tb - ta)) / 1e6);
	return CUDA_SUCCESS;
}

static CUresult stream_wait_event(CUstream hs, CUevent h, unsigned flags)
{
	struct sim_event *e;
	struct sim_stream *s;
	struct sim_queue *q;
	uint64_t seq;
	CUresult rc = event_get(h, &e);

	if (rc == CUDA_SUCCESS)
		rc = sim_stream_resolve(hs, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (flags & ~1u)
		return CUDA_ERROR_INVALID_VALUE;
	event_target(e, &q, &seq);
	/* Same queue: already ordered. Captures: edges are implied by order. */
	if (q == NULL || q == &s->ctx->q || sim_stream_capturing(s))
		return CUDA_SUCCESS;
	struct sim_item it = {.kind = SIM_ITEM_WAIT, .wait_q = q, .wait_upto = seq};
	return sim_stream_submit(s, &it);
}

SIM_API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags)
{
	return stream_wait_event(s, e, flags);
}

SIM_API CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags)
{
	return stream_wait_event(SIM_PT(s), e, flags);
}
