/* SPDX-License-Identifier: Apache-2.0
 * Streams: handles onto their context's in-order queue. NULL and
 * CU_STREAM_LEGACY are the context's legacy stream; CU_STREAM_PER_THREAD is
 * the calling thread's own stream, made on first use, which (as cuda.h says)
 * synchronizes with the legacy stream and can be captured. Work on the legacy
 * stream while a blocking stream of its context is capturing is an implicit
 * dependency on the capture: refused (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT),
 * and those captures are invalidated, like the driver. */
#include <stdlib.h>

#include "cuapi.h"
#include "sim.h"

struct sim_stream *sim_stream_new(struct sim_ctx *c, unsigned flags, int prio)
{
	struct sim_stream *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return NULL;
	s->magic = SIM_MAGIC_STREAM;
	s->ctx = c;
	s->flags = flags;
	s->prio = prio;
	s->id = atomic_fetch_add(&sim_g.next_id, 1) + 1;
	pthread_mutex_init(&s->cap_mu, NULL);
	return s;
}

void sim_stream_free(struct sim_stream *s)
{
	if (s == NULL)
		return;
	s->magic = 0;
	pthread_mutex_lock(&s->cap_mu);
	if (s->capture != NULL) {
		free(s->capture->nodes);
		free(s->capture);
	}
	pthread_mutex_unlock(&s->cap_mu);
	pthread_mutex_destroy(&s->cap_mu);
	free(s);
}

void sim_stream_free_pt(struct sim_ctx *c)
{
	while (c->pt != NULL) {
		struct sim_stream *s = c->pt;
		c->pt = s->pt_next;
		sim_stream_free(s);
	}
}

/* The calling thread's per-thread stream of c (this activation of it). */
static struct sim_stream *per_thread(struct sim_ctx *c)
{
	static _Thread_local struct pt_entry {
		struct sim_ctx *c;
		unsigned long long gen;
		struct sim_stream *s;
	} cache[4];
	static _Thread_local unsigned next;
	struct sim_stream *s;

	for (unsigned i = 0; i < 4; i++)
		if (cache[i].c == c && cache[i].gen == c->gen)
			return cache[i].s;
	pthread_mutex_lock(&sim_g.mu);
	s = c->active ? sim_stream_new(c, 0, 0) : NULL;
	if (s != NULL) {
		s->pt_next = c->pt;
		c->pt = s;
	}
	pthread_mutex_unlock(&sim_g.mu);
	if (s != NULL)
		cache[next++ % 4] = (struct pt_entry){c, c->gen, s};
	return s;
}

CUresult sim_stream_resolve(CUstream h, struct sim_stream **out)
{
	struct sim_stream *s = (struct sim_stream *)h;
	struct sim_ctx *c;
	CUresult rc;

	if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
		rc = sim_ctx_get(&c);
		if (rc == CUDA_SUCCESS)
			*out = h == CU_STREAM_PER_THREAD ? per_thread(c) : c->def;
		if (rc == CUDA_SUCCESS && *out == NULL)
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		return rc;
	}
	rc = sim_check_init();
	if (rc != CUDA_SUCCESS)
		return rc;
	if (s->magic != SIM_MAGIC_STREAM)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!s->ctx->active)
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	*out = s;
	return CUDA_SUCCESS;
}

CUresult sim_stream_submit_hook(struct sim_stream *s, const struct sim_item *it, sim_seq_hook hook, void *arg)
{
	CUresult rc = sim_mps_check();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (s == s->ctx->def && atomic_load(&s->ctx->blocking_captures) > 0) {
		atomic_fetch_add(&s->ctx->implicit, 1);
		return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	}
	if (sim_stream_capturing(s) && sim_capture_item(s, it, &rc))
		return rc;
	sim_queue_push(&s->ctx->q, it, &s->last, hook, arg);
	return CUDA_SUCCESS;
}

CUresult sim_stream_submit(struct sim_stream *s, const struct sim_item *it)
{
	return sim_stream_submit_hook(s, it, NULL, NULL);
}

static CUresult stream_create(CUstream *out, unsigned flags, int prio)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);
	struct sim_stream *s;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (out == NULL || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	prio = prio > 0 ? 0 : (prio < -5 ? -5 : prio);
	s = sim_stream_new(c, flags, prio);
	if (s == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = (CUstream)s;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamCreate(CUstream *s, unsigned int flags)
{
	return stream_create(s, flags, 0);
}

SIM_API CUresult cuStreamCreateWithPriority(CUstream *s, unsigned int flags, int prio)
{
	return stream_create(s, flags, prio);
}

static CUresult stream_destroy(CUstream h)
{
	struct sim_stream *s;
	CUresult rc;

	if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
		return CUDA_ERROR_INVALID_HANDLE;
	rc = sim_stream_resolve(h, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	sim_stream_free(s); /* queued work still completes, like the real driver */
	return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamDestroy(CUstream s)
{
	return stream_destroy(s);
}

SIM_API CUresult cuStreamDestroy_v2(CUstream s)
{
	return stream_destroy(s);
}

/* Synchronizing or querying a capturing stream is illegal and invalidates
 * the capture, like the real driver. */
static CUresult not_capturing(struct sim_stream *s)
{
	if (!sim_stream_capturing(s))
		return CUDA_SUCCESS;
	pthread_mutex_lock(&s->cap_mu);
	s->cap_invalid = true;
	pthread_mutex_unlock(&s->cap_mu);
	return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

static CUresult stream_query(CUstream h)
{
	struct sim_stream *s;
	CUresult rc = sim_stream_resolve(h, &s);

	if (rc == CUDA_SUCCESS)
		rc = not_capturing(s);
	if (rc != CUDA_SUCCESS)
		return rc;
	return atomic_load(&s->ctx->q.done) >= atomic_load(&s->last) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIM_API CUresult cuStreamQuery(CUstream s)
{
	return stream_query(s);
}

SIM_API CUresult cuStreamQuery_ptsz(CUstream s)
{
	return stream_query(SIM_PT(s));
}

static CUresult stream_sync(CUstream h)
{
	struct sim_stream *s;
	CUresult rc = sim_stream_resolve(h, &s);

	if (rc == CUDA_SUCCESS)
		rc = not_capturing(s);
	if (rc != CUDA_SUCCESS)
		return rc;
	sim_queue_wait(&s->ctx->q, atomic_load(&s->last));
	sim_pool_sync();
	return sim_mps_check();
}

SIM_API CUresult cuStreamSynchronize(CUstream s)
{
	return stream_sync(s);
}

SIM_API CUresult cuStreamSynchronize_ptsz(CUstream s)
{
	return stream_sync(SIM_PT(s));
}

static CUresult stream_get(CUstream h, int what, void *out)
{
	struct sim_stream *s;
	CUresult rc = sim_stream_resolve(h, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (what == 0)
		*(int *)out = s->prio;
	else if (what == 1)
		*(unsigned *)out = s->flags;
	else if (what == 2)
		*(CUcontext *)out = (CUcontext)s->ctx;
	else
		*(unsigned long long *)out = s->id;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamGetPriority(CUstream s, int *p)
{
	return stream_get(s, 0, p);
}
SIM_API CUresult cuStreamGetPriority_ptsz(CUstream s, int *p)
{
	return stream_get(SIM_PT(s), 0, p);
}
SIM_API CUresult cuStreamGetFlags(CUstream s, unsigned int *f)
{
	return stream_get(s, 1, f);
}
SIM_API CUresult cuStreamGetFlags_ptsz(CUstream s, unsigned int *f)
{
	return stream_get(SIM_PT(s), 1, f);
}
SIM_API CUresult cuStreamGetCtx(CUstream s, CUcontext *c)
{
	return stream_get(s, 2, c);
}
SIM_API CUresult cuStreamGetCtx_ptsz(CUstream s, CUcontext *c)
{
	return stream_get(SIM_PT(s), 2, c);
}
/* CUDA 12.5: a stream of a green context would name it; the simulator has none. */
SIM_API CUresult cuStreamGetCtx_v2(CUstream s, CUcontext *c, void **green)
{
	if (c == NULL && green == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (green != NULL)
		*green = NULL;
	return c == NULL ? CUDA_SUCCESS : stream_get(s, 2, c);
}
SIM_API CUresult cuStreamGetCtx_v2_ptsz(CUstream s, CUcontext *c, void **green)
{
	return cuStreamGetCtx_v2(SIM_PT(s), c, green);
}
SIM_API CUresult cuStreamGetId(CUstream s, unsigned long long *id)
{
	return stream_get(s, 3, id);
}
SIM_API CUresult cuStreamGetId_ptsz(CUstream s, unsigned long long *id)
{
	return stream_get(SIM_PT(s), 3, id);
}

static CUresult host_func(CUstream h, CUhostFn fn, void *arg)
{
	struct sim_stream *s;
	CUresult rc = sim_stream_resolve(h, &s);
	struct sim_item it = {.kind = SIM_ITEM_HOSTFN, .fn = fn, .arg = arg};

	if (rc != CUDA_SUCCESS)
		return rc;
	if (fn == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return sim_stream_submit(s, &it);
}

SIM_API CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *arg)
{
	return host_func(s, fn, arg);
}

SIM_API CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *arg)
{
	return host_func(SIM_PT(s), fn, arg);
}

struct callback {
	CUstreamCallback cb;
	CUstream stream;
	void *arg;
};

static void callback_tramp(void *p)
{
	struct callback c = *(struct callback *)p;

	free(p);
	c.cb(c.stream, CUDA_SUCCESS, c.arg);
}

static CUresult add_callback(CUstream h, CUstreamCallback cb, void *arg, unsigned flags)
{
	struct sim_stream *s;
	CUresult rc = sim_stream_resolve(h, &s);
	struct callback *c;
	struct sim_item it = {.kind = SIM_ITEM_HOSTFN, .fn = callback_tramp};

	if (rc != CUDA_SUCCESS)
		return rc;
	if (cb == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (sim_stream_capturing(s))
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	c = malloc(sizeof(*c));
	if (c == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*c = (struct callback){cb, h, arg};
	it.arg = c;
	return sim_stream_submit(s, &it);
}

SIM_API CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *arg, unsigned int flags)
{
	return add_callback(s, cb, arg, flags);
}

SIM_API CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void *arg, unsigned int flags)
{
	return add_callback(SIM_PT(s), cb, arg, flags);
}
