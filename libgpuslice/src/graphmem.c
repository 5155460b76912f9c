/* SPDX-License-Identifier: Apache-2.0
 *
 * Graph memory nodes: the rule is in graphmem.h. One record per exec with
 * allocation nodes and device; records, "left" and every call that can bind,
 * unbind or settle are serialised by one lock, taken only by processes that
 * have such execs (and by instantiations, which walk every graph).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "graphmem.h"
#include "memcore.h"

#define WALK_DEPTH 8

struct gx {
	uint64_t exec, ctx;
	CUdevice dev;
	int slot;
	uint64_t need; /* its allocation nodes' bytes on dev */
	int bound;     /* need counted for it */
	int unknown;   /* a launch that cannot be waited for: never idle */
	int busy;      /* at the trim in progress: not idle */
	CUevent ev;    /* recorded after its last launch or upload; NULL: none */
};

static struct {
	pthread_mutex_t mu;
	struct gx *v;
	size_t n, cap;
	uint64_t left[GS_PROC_SLOTS]; /* counted, not bound to a live exec, by process slot */
	CUdevice left_dev[GS_PROC_SLOTS];
} G = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void add_need(struct gs_graph_op *op, CUdevice dev, uint64_t n)
{
	for (int i = 0; i < op->n; i++) {
		if (op->d[i].dev == dev) {
			op->d[i].need = n > UINT64_MAX - op->d[i].need ? UINT64_MAX : op->d[i].need + n;
			return;
		}
	}
	if (op->n < (int)(sizeof(op->d) / sizeof(op->d[0]))) {
		op->d[op->n].dev = dev;
		op->d[op->n].need = n;
		op->d[op->n++].slot = -1;
	}
}

/* Adds the allocation nodes of g (and of its child graphs) to op. */
static void walk(CUgraph g, struct gs_graph_op *op, int depth)
{
	gs_fn_cuGraphGetNodes nodes = GS_REAL(cuGraphGetNodes);
	gs_fn_cuGraphNodeGetType type = GS_REAL(cuGraphNodeGetType);
	gs_fn_cuGraphMemAllocNodeGetParams params = GS_REAL(cuGraphMemAllocNodeGetParams);
	gs_fn_cuGraphChildGraphNodeGetGraph child =
		(gs_fn_cuGraphChildGraphNodeGetGraph)gs_real_peek(GS_ID_cuGraphChildGraphNodeGetGraph);
	size_t n = 0;
	if (nodes == NULL || type == NULL || nodes(g, NULL, &n) != CUDA_SUCCESS || n == 0)
		return;
	CUgraphNode *v = calloc(n, sizeof(*v));
	size_t got = n;
	if (v == NULL || nodes(g, v, &got) != CUDA_SUCCESS) {
		free(v);
		return;
	}
	for (size_t i = 0; i < n && i < got; i++) {
		CUgraphNodeType t;
		CUDA_MEM_ALLOC_NODE_PARAMS p;
		CUgraph sub;
		if (v[i] == NULL || type(v[i], &t) != CUDA_SUCCESS)
			continue;
		if (t == CU_GRAPH_NODE_TYPE_MEM_ALLOC && params != NULL && params(v[i], &p) == CUDA_SUCCESS &&
		    p.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE)
			add_need(op, p.poolProps.location.id, p.bytesize);
		else if (t == CU_GRAPH_NODE_TYPE_GRAPH && child != NULL && depth < WALK_DEPTH &&
			 child(v[i], &sub) == CUDA_SUCCESS)
			walk(sub, op, depth + 1);
	}
	free(v);
}

/* Under G.mu: counts need bytes on dev (slot learnt). 0 or the refusal. */
static CUresult reserve(CUdevice dev, uint64_t need, int *slot)
{
	struct gs_resv r;
	CUresult rc = gs_resv_dev(dev, need, &r);
	*slot = rc == CUDA_SUCCESS && r.active ? r.slot : -1;
	if (*slot >= 0)
		G.left_dev[*slot] = dev;
	return rc;
}

/* A forked child holds no driver state of its parent's (CUDA is unusable
 * there): no execs, nothing left, a lock nobody holds. */
static void fork_child(void)
{
	free(G.v);
	memset(&G, 0, sizeof(G));
	pthread_mutex_init(&G.mu, NULL);
	atomic_store(&gs_hot.graph_execs, 0);
}

static void at_fork(void)
{
	pthread_atfork(NULL, NULL, fork_child);
}

GS_HIDDEN CUresult gs_graph_instantiate_begin(CUgraph g, struct gs_graph_op *op)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, at_fork);
	memset(op, 0, sizeof(*op));
	walk(g, op, 0);
	if (op->n == 0)
		return CUDA_SUCCESS;
	gs_fn_cuCtxGetCurrent cur = GS_REAL(cuCtxGetCurrent);
	CUcontext ctx = NULL;
	if (cur != NULL && cur(&ctx) == CUDA_SUCCESS)
		op->ctx = (uint64_t)(uintptr_t)ctx;
	pthread_mutex_lock(&G.mu); /* held until gs_graph_instantiate_end */
	for (int i = 0; i < op->n; i++) {
		CUresult rc = reserve(op->d[i].dev, op->d[i].need, &op->d[i].slot);
		if (rc != CUDA_SUCCESS) {
			for (int j = 0; j < i; j++)
				gs_uncount(op->d[j].slot, op->d[j].need);
			pthread_mutex_unlock(&G.mu);
			return rc;
		}
	}
	return CUDA_SUCCESS;
}

/* Under G.mu: settles left on slot down to what the driver's graph pool
 * reserves on its device (kept if the driver cannot say). */
static void settle(int slot)
{
	gs_fn_cuDeviceGetGraphMemAttribute get = GS_REAL(cuDeviceGetGraphMemAttribute);
	cuuint64_t res = 0;
	if (slot < 0 || G.left[slot] == 0 || get == NULL ||
	    get(G.left_dev[slot], CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &res) != CUDA_SUCCESS || res >= G.left[slot])
		return;
	gs_uncount(slot, G.left[slot] - res);
	G.left[slot] = res;
}

/* Under G.mu: x's bytes are no longer bound to it (the driver's pool keeps them). */
static void unbind(struct gx *x)
{
	if (!x->bound)
		return;
	x->bound = 0;
	if (x->slot >= 0)
		G.left[x->slot] += x->need;
}

/* Under G.mu: drops record i (unbound first). */
static void drop(size_t i)
{
	gs_fn_cuEventDestroy_v2 destroy = GS_REAL(cuEventDestroy_v2);
	unbind(&G.v[i]);
	if (G.v[i].ev != NULL && destroy != NULL)
		(void)destroy(G.v[i].ev);
	G.v[i] = G.v[--G.n];
	atomic_store_explicit(&gs_hot.graph_execs, (int)G.n, memory_order_relaxed);
}

/* Under G.mu: the event after a launch or upload of e on s. */
static void mark_busy(uint64_t e, CUstream s)
{
	gs_fn_cuEventCreate create = GS_REAL(cuEventCreate);
	gs_fn_cuEventRecord record = GS_REAL(cuEventRecord);
	for (size_t i = 0; i < G.n; i++) {
		struct gx *x = &G.v[i];
		if (x->exec != e)
			continue;
		if (x->ev == NULL && (create == NULL || create(&x->ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS))
			x->ev = NULL;
		if (x->ev == NULL || record == NULL || record(x->ev, s) != CUDA_SUCCESS)
			x->unknown = 1;
	}
}

GS_HIDDEN void gs_graph_instantiate_end(struct gs_graph_op *op, CUresult rc, CUgraphExec e, int upload, CUstream us)
{
	if (op->n == 0)
		return;
	uint64_t h = (uint64_t)(uintptr_t)e;
	for (size_t i = 0; rc == CUDA_SUCCESS && i < G.n;) {
		if (G.v[i].exec == h)
			drop(i); /* a handle the driver reuses: that exec is gone */
		else
			i++;
	}
	for (int i = 0; i < op->n; i++) {
		if (rc != CUDA_SUCCESS || op->d[i].slot < 0) {
			gs_uncount(op->d[i].slot, op->d[i].need);
			continue;
		}
		if (G.n == G.cap) {
			size_t cap = G.cap ? G.cap * 2 : 16;
			struct gx *v = realloc(G.v, cap * sizeof(*v));
			if (v == NULL) { /* cannot follow it: what it holds stays counted */
				G.left[op->d[i].slot] += op->d[i].need;
				continue;
			}
			G.v = v;
			G.cap = cap;
		}
		G.v[G.n++] = (struct gx){.exec = h,
					 .ctx = op->ctx,
					 .dev = op->d[i].dev,
					 .slot = op->d[i].slot,
					 .need = op->d[i].need,
					 .bound = 1};
	}
	atomic_store_explicit(&gs_hot.graph_execs, (int)G.n, memory_order_relaxed);
	if (rc == CUDA_SUCCESS && upload)
		mark_busy(h, us);
	pthread_mutex_unlock(&G.mu);
}

GS_HIDDEN CUresult gs_graph_run_slow(gs_graph_run_fn fn, CUgraphExec e, CUstream s, int ptsz)
{
	int err = errno;
	uint64_t h = (uint64_t)(uintptr_t)e;
	CUresult rc = CUDA_SUCCESS;
	int mine = 0;
	pthread_mutex_lock(&G.mu);
	for (size_t i = 0; i < G.n && rc == CUDA_SUCCESS; i++) {
		struct gx *x = &G.v[i];
		if (x->exec != h)
			continue;
		mine = 1;
		if (!x->bound && (rc = reserve(x->dev, x->need, &x->slot)) == CUDA_SUCCESS)
			x->bound = 1;
	}
	if (rc == CUDA_SUCCESS) {
		errno = err;
		rc = fn(e, s);
		err = errno;
		if (rc == CUDA_SUCCESS && mine)
			mark_busy(h, s == NULL && ptsz ? CU_STREAM_PER_THREAD : s);
	}
	pthread_mutex_unlock(&G.mu);
	errno = err;
	return rc;
}

GS_HIDDEN CUresult gs_graph_exec_destroy(gs_fn_cuGraphExecDestroy fn, CUgraphExec e)
{
	if (atomic_load_explicit(&gs_hot.graph_execs, memory_order_relaxed) == 0)
		return fn(e);
	uint64_t h = (uint64_t)(uintptr_t)e;
	pthread_mutex_lock(&G.mu);
	CUresult rc = fn(e);
	int err = errno;
	for (size_t i = 0; rc == CUDA_SUCCESS && i < G.n;) {
		if (G.v[i].exec == h) {
			int slot = G.v[i].slot;
			drop(i);
			settle(slot);
		} else {
			i++;
		}
	}
	pthread_mutex_unlock(&G.mu);
	errno = err;
	return rc;
}

/* Under G.mu: whether x's last launch or upload is done. */
static int idle(const struct gx *x)
{
	gs_fn_cuEventQuery query = GS_REAL(cuEventQuery);
	if (x->unknown)
		return 0;
	return x->ev == NULL || (query != NULL && query(x->ev) == CUDA_SUCCESS);
}

GS_HIDDEN CUresult gs_graph_trim(gs_fn_cuDeviceGraphMemTrim fn, CUdevice dev)
{
	pthread_mutex_lock(&G.mu);
	/* Idle before the trim stays idle through it: launches wait for G.mu. */
	for (size_t i = 0; i < G.n; i++)
		G.v[i].busy = !idle(&G.v[i]);
	CUresult rc = fn(dev);
	int err = errno;
	for (size_t i = 0; rc == CUDA_SUCCESS && i < G.n; i++)
		if (G.v[i].dev == dev && !G.v[i].busy)
			unbind(&G.v[i]);
	for (int slot = 0; rc == CUDA_SUCCESS && slot < GS_PROC_SLOTS; slot++)
		if (G.left_dev[slot] == dev)
			settle(slot);
	pthread_mutex_unlock(&G.mu);
	errno = err;
	return rc;
}

GS_HIDDEN void gs_graph_teardown(uint64_t ctx)
{
	if (ctx == 0)
		return;
	int err = errno;
	pthread_mutex_lock(&G.mu);
	for (size_t i = 0; i < G.n;) {
		struct gx *x = &G.v[i];
		if (x->ctx != ctx) {
			i++;
			continue;
		}
		unbind(x);       /* settled below on what the driver still reserves */
		*x = G.v[--G.n]; /* its event went with the context */
	}
	atomic_store_explicit(&gs_hot.graph_execs, (int)G.n, memory_order_relaxed);
	for (int slot = 0; slot < GS_PROC_SLOTS; slot++)
		settle(slot);
	pthread_mutex_unlock(&G.mu);
	errno = err;
}

GS_HIDDEN int gs_graph_capturing_slow(CUstream s)
{
	gs_fn_cuStreamIsCapturing is = GS_REAL(cuStreamIsCapturing);
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	if (s == NULL || s == CU_STREAM_LEGACY || is == NULL)
		return 0; /* the legacy stream cannot be captured (the per-thread one can: cuda.h) */
	return is(s, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}
