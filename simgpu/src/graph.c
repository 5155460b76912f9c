/* SPDX-License-Identifier: Apache-2.0
 * Stream capture and graphs: a capture records the stream's kernels (and
 * host functions, memsets, copies as zero-time nodes) into a graph; an
 * instantiated graph replays them, in order, through the engine. */
#include <stdlib.h>
#include <string.h>

#include "cuapi.h"
#include "sim.h"

static _Thread_local int tl_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static struct sim_graph *graph_new(uint32_t magic)
{
	struct sim_graph *g = calloc(1, sizeof(*g));

	if (g != NULL)
		g->magic = magic;
	return g;
}

static void graph_free(struct sim_graph *g)
{
	if (g == NULL)
		return;
	g->magic = 0;
	free(g->nodes);
	free(g);
}

int sim_graph_add(struct sim_graph *g, const struct sim_node *n)
{
	if (g->n == g->cap) {
		size_t cap = g->cap ? g->cap * 2 : 16;
		struct sim_node *v = realloc(g->nodes, cap * sizeof(*v));
		if (v == NULL)
			return -1;
		g->nodes = v;
		g->cap = cap;
	}
	g->nodes[g->n] = *n;
	g->nodes[g->n++].magic = SIM_MAGIC_NODE;
	return 0;
}

bool sim_stream_capturing(struct sim_stream *s)
{
	return atomic_load_explicit(&s->capturing, memory_order_acquire);
}

bool sim_capture_item(struct sim_stream *s, const struct sim_item *it, CUresult *rc)
{
	struct sim_node n = {.kind = it->kind, .busy_ns = it->busy_ns, .fn = it->fn, .arg = it->arg};
	bool captured = false;

	pthread_mutex_lock(&s->cap_mu);
	if (s->capture != NULL) {
		captured = true;
		if (sim_capture_invalid_locked(s))
			*rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
		else if (it->kind != SIM_ITEM_KERNEL && it->kind != SIM_ITEM_HOSTFN && it->kind != SIM_ITEM_NOP)
			*rc = CUDA_SUCCESS; /* ordering items: implied by the node order */
		else
			*rc = sim_graph_add(s->capture, &n) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&s->cap_mu);
	return captured;
}

bool sim_capture_node(struct sim_stream *s, const struct sim_node *n, CUresult *rc)
{
	bool captured = false;

	pthread_mutex_lock(&s->cap_mu);
	if (s->capture != NULL) {
		captured = true;
		if (sim_capture_invalid_locked(s))
			*rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
		else
			*rc = sim_graph_add(s->capture, n) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&s->cap_mu);
	return captured;
}

static CUresult user_stream(CUstream h, struct sim_stream **s)
{
	CUresult rc = sim_stream_resolve(h, s);

	if (rc == CUDA_SUCCESS && (h == NULL || h == CU_STREAM_LEGACY))
		rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot be captured (the per-thread one can) */
	return rc;
}

/* A capture on s is invalid: marked so, or the legacy stream was used since
 * it began on a blocking stream (cap_mu held). */
bool sim_capture_invalid_locked(struct sim_stream *s)
{
	return s->cap_invalid || (s->cap_blocking && atomic_load(&s->ctx->implicit) != s->cap_implicit);
}

/* Begins a capture on h into into (NULL: a new graph). */
static CUresult begin_capture(CUstream h, int mode, struct sim_graph *into)
{
	struct sim_stream *s;
	CUresult rc = user_stream(h, &s);
	struct sim_graph *g;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	if (into != NULL && into->magic != SIM_MAGIC_GRAPH)
		return CUDA_ERROR_INVALID_VALUE;
	g = into != NULL ? into : graph_new(SIM_MAGIC_GRAPH);
	if (g == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&s->cap_mu);
	if (s->capture != NULL) {
		rc = CUDA_ERROR_ILLEGAL_STATE;
	} else {
		s->capture = g;
		s->cap_owned = into == NULL;
		s->cap_invalid = false;
		s->cap_mode = mode;
		s->cap_id = atomic_fetch_add(&sim_g.next_id, 1) + 1;
		s->cap_blocking = !(s->flags & CU_STREAM_NON_BLOCKING);
		s->cap_implicit = atomic_load(&s->ctx->implicit);
		if (s->cap_blocking)
			atomic_fetch_add(&s->ctx->blocking_captures, 1);
		atomic_store(&s->capturing, true);
	}
	pthread_mutex_unlock(&s->cap_mu);
	if (rc != CUDA_SUCCESS && into == NULL)
		graph_free(g);
	return rc;
}

SIM_API CUresult cuStreamBeginCapture(CUstream s)
{
	return begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL, NULL);
}
SIM_API CUresult cuStreamBeginCapture_ptsz(CUstream s)
{
	return begin_capture(SIM_PT(s), CU_STREAM_CAPTURE_MODE_GLOBAL, NULL);
}
SIM_API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m)
{
	return begin_capture(s, m, NULL);
}
SIM_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m)
{
	return begin_capture(SIM_PT(s), m, NULL);
}
/* Into an existing graph (CUDA 12.3); the dependencies are implied by node order here. */
SIM_API CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps,
					     const CUgraphEdgeData *edges, size_t n, CUstreamCaptureMode m)
{
	(void)deps, (void)edges, (void)n;
	return g == NULL ? CUDA_ERROR_INVALID_VALUE : begin_capture(s, m, (struct sim_graph *)g);
}
SIM_API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps,
						  const CUgraphEdgeData *edges, size_t n, CUstreamCaptureMode m)
{
	return cuStreamBeginCaptureToGraph(SIM_PT(s), g, deps, edges, n, m);
}

static CUresult end_capture(CUstream h, CUgraph *out)
{
	struct sim_stream *s;
	CUresult rc = sim_stream_resolve(h, &s);
	struct sim_graph *g;
	bool invalid, owned;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&s->cap_mu);
	g = s->capture;
	invalid = g != NULL && sim_capture_invalid_locked(s);
	owned = s->cap_owned;
	if (g != NULL && s->cap_blocking)
		atomic_fetch_sub(&s->ctx->blocking_captures, 1);
	s->capture = NULL;
	atomic_store(&s->capturing, false);
	pthread_mutex_unlock(&s->cap_mu);
	if (g == NULL)
		return CUDA_ERROR_ILLEGAL_STATE;
	if (invalid) {
		if (owned)
			graph_free(g);
		*out = NULL;
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	}
	*out = (CUgraph)g;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
	return end_capture(s, g);
}
SIM_API CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g)
{
	return end_capture(SIM_PT(s), g);
}

static CUresult capture_info(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g)
{
	struct sim_stream *s;
	CUresult rc = sim_stream_resolve(h, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (st == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&s->cap_mu);
	*st = s->capture == NULL ? CU_STREAM_CAPTURE_STATUS_NONE
				 : (sim_capture_invalid_locked(s) ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
								  : CU_STREAM_CAPTURE_STATUS_ACTIVE);
	if (id != NULL && s->capture != NULL)
		*id = s->cap_id;
	if (g != NULL)
		*g = (CUgraph)s->capture;
	pthread_mutex_unlock(&s->cap_mu);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st)
{
	return capture_info(s, st, NULL, NULL);
}
SIM_API CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *st)
{
	return capture_info(SIM_PT(s), st, NULL, NULL);
}
SIM_API CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id)
{
	return capture_info(s, st, id, NULL);
}
SIM_API CUresult cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id)
{
	return capture_info(SIM_PT(s), st, id, NULL);
}

static CUresult capture_info_v3(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
				const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
	CUresult rc = capture_info(s, st, id, g);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (deps != NULL)
		*deps = NULL;
	if (edges != NULL)
		*edges = NULL;
	if (ndeps != NULL)
		*ndeps = 0;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
					   const CUgraphNode **deps, size_t *ndeps)
{
	return capture_info_v3(s, st, id, g, deps, NULL, ndeps);
}

SIM_API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
						const CUgraphNode **deps, size_t *ndeps)
{
	return capture_info_v3(SIM_PT(s), st, id, g, deps, NULL, ndeps);
}

SIM_API CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
					   const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
	return capture_info_v3(s, st, id, g, deps, edges, ndeps);
}

SIM_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
						const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
	return capture_info_v3(SIM_PT(s), st, id, g, deps, edges, ndeps);
}

SIM_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *m)
{
	int old;

	if (m == NULL || *m < CU_STREAM_CAPTURE_MODE_GLOBAL || *m > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	old = tl_capture_mode;
	tl_capture_mode = *m;
	*m = old;
	return CUDA_SUCCESS;
}
