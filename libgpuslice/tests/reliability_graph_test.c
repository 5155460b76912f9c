/* SPDX-License-Identifier: Apache-2.0
 * Graph memory nodes are counted like the driver holds them: an exec's
 * allocation nodes from its instantiation (a graph that allocates more than
 * the limit is refused), kept by the device's graph pool after the graph
 * frees them or the exec is destroyed, until cuDeviceGraphMemTrim; an
 * allocation the graph does not free stays counted until freed and trimmed;
 * a captured cuMemAllocAsync is an allocation node, not a pool block. After
 * each step the group's count equals what the simulated GPU says the group
 * holds (or is above it by exactly what an exec not yet launched may take),
 * and never exceeds the 1 GiB limit.
 */
#include "../src/internal.h"
#include "simview.h"

static const struct gs_shm_file *grp;
static const struct sim_state *sim;

/* The group counts c bytes, the simulated GPU holds s. */
#define COUNTS(c, s)                                    \
	do {                                            \
		CHECK_EQ(ht_used(grp), (c));            \
		CHECK_EQ(sv_group_held(sim, grp), (s)); \
		CHECK(ht_used(grp) <= GiB);             \
	} while (0)
#define HOLDS(n) COUNTS(n, n)

typedef CUresult (*graph_create_fn)(CUgraph *, unsigned int);
typedef CUresult (*add_alloc_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUDA_MEM_ALLOC_NODE_PARAMS *);
typedef CUresult (*add_free_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUdeviceptr);
typedef CUresult (*end_capture_fn)(CUstream, CUgraph *);
typedef CUresult (*stream_sync_fn)(CUstream);

static struct drv d;
static CUcontext primary;
static CUstream s;
static stream_sync_fn sync_;

static void open_group(const char *name)
{
	sv_open_group(name, &d, &primary, &grp, &sim);
	CHECK_EQ(d.cuStreamCreate(&s, 0), CUDA_SUCCESS);
	sync_ = (stream_sync_fn)drv_sym(d.cuda, "cuStreamSynchronize");
}

/* A graph allocating n bytes on device 0 (freed in the graph or not). */
static CUgraph alloc_graph(size_t n, int free_it, CUdeviceptr *ptr)
{
	graph_create_fn create = (graph_create_fn)drv_sym(d.cuda, "cuGraphCreate");
	add_alloc_fn add_alloc = (add_alloc_fn)drv_sym(d.cuda, "cuGraphAddMemAllocNode");
	add_free_fn add_free = (add_free_fn)drv_sym(d.cuda, "cuGraphAddMemFreeNode");
	CUDA_MEM_ALLOC_NODE_PARAMS p = {.poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
						      .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}},
					.bytesize = n};
	CUgraph g = NULL;
	CUgraphNode a, f;
	CHECK_EQ(create(&g, 0), CUDA_SUCCESS);
	CHECK_EQ(add_alloc(&a, g, NULL, 0, &p), CUDA_SUCCESS);
	if (free_it)
		CHECK_EQ(add_free(&f, g, &a, 1, p.dptr), CUDA_SUCCESS);
	*ptr = p.dptr;
	return g;
}

/* Launch, the graph's free, a second exec, trims, destruction. */
static int graph_nodes(void *arg)
{
	(void)arg;
	open_group("graph");
	CUdeviceptr p, q;
	CUgraphExec e1, e2, big;
	CUgraph g1 = alloc_graph(600 * MiB, 1, &p), g2 = alloc_graph(300 * MiB, 0, &q);
	CUgraph g3 = alloc_graph(1536 * MiB, 1, &p);
	CHECK_EQ(cuGraphInstantiateWithFlags(&big, g3, 0), CUDA_ERROR_OUT_OF_MEMORY); /* 1.5 GiB > 1 GiB */
	HOLDS(0);
	CHECK_EQ(cuGraphInstantiateWithFlags(&e1, g1, 0), CUDA_SUCCESS);
	COUNTS(600 * MiB, 0); /* reserved before the driver can take it */
	CHECK_EQ(cuGraphLaunch(e1, s), CUDA_SUCCESS);
	CHECK_EQ(sync_(s), CUDA_SUCCESS);
	HOLDS(600 * MiB); /* freed by the graph, kept by the graph pool */
	CHECK_EQ(cuGraphLaunch(e1, s), CUDA_SUCCESS);
	HOLDS(600 * MiB);
	CHECK_EQ(cuGraphInstantiateWithFlags(&big, g1, 0), CUDA_ERROR_OUT_OF_MEMORY); /* 1.2 GiB */
	CHECK_EQ(cuGraphInstantiate(&e2, g2, NULL, NULL, 0), CUDA_SUCCESS);
	COUNTS(900 * MiB, 600 * MiB);
	CHECK_EQ(cuGraphUpload(e2, s), CUDA_SUCCESS);
	CHECK_EQ(cuGraphLaunch_ptsz(e2, s), CUDA_SUCCESS);
	CHECK_EQ(sync_(s), CUDA_SUCCESS);
	HOLDS(900 * MiB);
	CHECK_EQ(cuMemFree_v2(q), CUDA_SUCCESS); /* e2's allocation: back to the graph pool */
	HOLDS(900 * MiB);
	CHECK_EQ(cuDeviceGraphMemTrim(0), CUDA_SUCCESS); /* both idle: everything goes */
	HOLDS(0);
	CHECK_EQ(cuGraphLaunch(e1, s), CUDA_SUCCESS); /* reserved again */
	HOLDS(600 * MiB);
	CHECK_EQ(cuGraphExecDestroy(e1), CUDA_SUCCESS);
	HOLDS(600 * MiB); /* kept by the pool */
	CHECK_EQ(cuGraphExecDestroy(e2), CUDA_SUCCESS);
	HOLDS(600 * MiB);
	CHECK_EQ(cuDeviceGraphMemTrim(0), CUDA_SUCCESS);
	HOLDS(0);
	return 0;
}

/* An allocation the graph does not free outlives its exec and a trim. */
static int graph_escaping(void *arg)
{
	(void)arg;
	open_group("escape");
	CUdeviceptr p;
	CUgraphExec e;
	CUgraph g = alloc_graph(400 * MiB, 0, &p);
	CHECK_EQ(cuGraphInstantiate_v2(&e, g, NULL, NULL, 0), CUDA_SUCCESS);
	CHECK_EQ(cuGraphLaunch(e, NULL), CUDA_SUCCESS);
	HOLDS(400 * MiB);
	CHECK_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
	CHECK_EQ(cuDeviceGraphMemTrim(0), CUDA_SUCCESS);
	HOLDS(400 * MiB); /* still allocated */
	CHECK_EQ(cuMemFreeAsync(p, s), CUDA_SUCCESS);
	HOLDS(400 * MiB); /* kept by the graph pool */
	CHECK_EQ(cuDeviceGraphMemTrim(0), CUDA_SUCCESS);
	HOLDS(0);
	/* cudaDeviceReset: the context's execs and the graph pool go with it. */
	CUgraphExec live;
	CUgraph g2 = alloc_graph(200 * MiB, 1, &p);
	CHECK_EQ(cuGraphInstantiate_v2(&e, g, NULL, NULL, 0), CUDA_SUCCESS);
	CHECK_EQ(cuGraphLaunch(e, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
	CHECK_EQ(cuGraphInstantiate_v2(&live, g2, NULL, NULL, 0), CUDA_SUCCESS);
	CHECK_EQ(cuGraphLaunch(live, NULL), CUDA_SUCCESS);
	HOLDS(600 * MiB);
	CHECK_EQ(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
	HOLDS(0);
	return 0;
}

/* cuMemAllocAsync on a capturing stream is an allocation node. */
static int graph_capture(void *arg)
{
	(void)arg;
	open_group("capture");
	end_capture_fn end = (end_capture_fn)drv_sym(d.cuda, "cuStreamEndCapture");
	CUdeviceptr p, q;
	CUgraph g;
	CUgraphExec e, big;
	CHECK_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocAsync(&p, 700 * MiB, s), CUDA_SUCCESS);
	CHECK_EQ(cuMemFreeAsync(p, s), CUDA_SUCCESS);
	CHECK_EQ(end(s, &g), CUDA_SUCCESS);
	HOLDS(0); /* nothing allocated yet: not a pool block */
	CHECK_EQ(cuGraphInstantiateWithFlags(&e, g, 0), CUDA_SUCCESS);
	CHECK_EQ(cuGraphLaunch(e, s), CUDA_SUCCESS);
	CHECK_EQ(sync_(s), CUDA_SUCCESS);
	HOLDS(700 * MiB);
	CUmemoryPool pool;
	CHECK_EQ(d.cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
	CHECK_EQ(cuStreamBeginCapture(s), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocFromPoolAsync(&q, 400 * MiB, pool, s), CUDA_SUCCESS);
	CHECK_EQ(end(s, &g), CUDA_SUCCESS);
	HOLDS(700 * MiB);
	CHECK_EQ(cuGraphInstantiateWithFlags(&big, g, 0), CUDA_ERROR_OUT_OF_MEMORY); /* 1.1 GiB */
	CHECK_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
	CHECK_EQ(cuDeviceGraphMemTrim(0), CUDA_SUCCESS);
	HOLDS(0);
	CHECK_EQ(cuGraphInstantiateWithFlags(&big, g, 0), CUDA_SUCCESS);
	COUNTS(400 * MiB, 0);
	CHECK_EQ(cuGraphLaunch(big, s), CUDA_SUCCESS);
	HOLDS(400 * MiB);
	return 0;
}

/* The per-thread default stream can be captured (cuda.h): a cuMemAllocAsync_ptsz
 * with NULL during its capture is a node too, counted once, with its exec. */
static int graph_capture_per_thread(void *arg)
{
	(void)arg;
	open_group("ptcapture");
	end_capture_fn end_pt = (end_capture_fn)drv_sym(d.cuda, "cuStreamEndCapture_ptsz");
	CUdeviceptr p;
	CUgraph g;
	CUgraphExec e;
	CHECK_EQ(cuStreamBeginCapture_v2_ptsz(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocAsync_ptsz(&p, 700 * MiB, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuMemFreeAsync_ptsz(p, NULL), CUDA_SUCCESS);
	CHECK_EQ(end_pt(NULL, &g), CUDA_SUCCESS);
	HOLDS(0); /* a node, not a pool block */
	CHECK_EQ(cuStreamBeginCapture(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocAsync(&p, 200 * MiB, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
	CHECK_EQ(cuMemFreeAsync(p, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
	CUgraph g2;
	CHECK_EQ(end_pt(NULL, &g2), CUDA_SUCCESS);
	HOLDS(0);
	CHECK_EQ(cuGraphInstantiateWithFlags(&e, g, 0), CUDA_SUCCESS);
	CHECK_EQ(cuGraphLaunch_ptsz(e, NULL), CUDA_SUCCESS);
	CHECK_EQ(sync_(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
	HOLDS(700 * MiB); /* once */
	return 0;
}

/* cuStreamBeginCaptureToGraph (CUDA 12.3) begins a capture like the others,
 * even as the process's first. */
static int graph_capture_to_graph(void *arg)
{
	(void)arg;
	open_group("tograph");
	graph_create_fn create = (graph_create_fn)drv_sym(d.cuda, "cuGraphCreate");
	CUdeviceptr p;
	CUgraph g = NULL, out = NULL;
	CUgraphExec e;
	CHECK_EQ(create(&g, 0), CUDA_SUCCESS);
	CHECK_EQ(cuStreamBeginCaptureToGraph(s, g, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocAsync(&p, 600 * MiB, s), CUDA_SUCCESS);
	CHECK_EQ(cuMemFreeAsync(p, s), CUDA_SUCCESS);
	CHECK_EQ(((end_capture_fn)drv_sym(d.cuda, "cuStreamEndCapture"))(s, &out), CUDA_SUCCESS);
	CHECK(out == g);
	HOLDS(0);
	CHECK_EQ(cuStreamBeginCaptureToGraph_ptsz(NULL, g, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocAsync_ptsz(&p, 300 * MiB, NULL), CUDA_SUCCESS);
	CHECK_EQ(((end_capture_fn)drv_sym(d.cuda, "cuStreamEndCapture_ptsz"))(NULL, &out), CUDA_SUCCESS);
	HOLDS(0);
	CHECK_EQ(cuGraphInstantiateWithFlags(&e, g, 0), CUDA_SUCCESS);
	CHECK_EQ(cuGraphLaunch(e, s), CUDA_SUCCESS);
	CHECK_EQ(sync_(s), CUDA_SUCCESS);
	HOLDS(900 * MiB);
	return 0;
}

int main(void)
{
	ht_setup();
	HT_RUN(graph_nodes, NULL);
	HT_RUN(graph_escaping, NULL);
	HT_RUN(graph_capture, NULL);
	HT_RUN(graph_capture_per_thread, NULL);
	HT_RUN(graph_capture_to_graph, NULL);
	ht_teardown();
	fprintf(stderr, "reliability_graph_test: ok\n");
	return 0;
}
