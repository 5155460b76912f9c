/* SPDX-License-Identifier: Apache-2.0
 * Graph memory nodes: allocation nodes charge nothing until their exec is
 * launched or uploaded; the device's graph pool keeps the bytes after the
 * graph frees them (reused by the next launch) until cuDeviceGraphMemTrim;
 * an allocation the graph does not free stays in use until freed; a captured
 * cuMemAllocAsync is an allocation node, not a pool allocation. */
#include <stdbool.h>

#include "testutil.h"

#define GiB (1ull << 30)
#define MiB (1ull << 20)

static size_t free_mem(void)
{
	size_t f = 0, t = 0;

	CU_OK(cuMemGetInfo_v2(&f, &t));
	return f;
}

static cuuint64_t attr(CUgraphMem_attribute a)
{
	cuuint64_t v = ~0ull;

	CU_OK(cuDeviceGetGraphMemAttribute(0, a, &v));
	return v;
}

static CUDA_MEM_ALLOC_NODE_PARAMS alloc_params(size_t n)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p;

	memset(&p, 0, sizeof(p));
	p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.poolProps.location.id = 0;
	p.bytesize = n;
	return p;
}

/* A graph that allocates n bytes and frees them (free: also a free node). */
static CUgraph alloc_graph(size_t n, bool free_it, CUdeviceptr *ptr)
{
	CUgraph g;
	CUgraphNode a, f;
	CUDA_MEM_ALLOC_NODE_PARAMS p = alloc_params(n);

	CU_MUST(cuGraphCreate(&g, 0));
	CU_MUST(cuGraphAddMemAllocNode(&a, g, NULL, 0, &p));
	MUST(p.dptr != 0);
	if (free_it)
		CU_MUST(cuGraphAddMemFreeNode(&f, g, &a, 1, p.dptr));
	*ptr = p.dptr;
	return g;
}

static void test_nodes(void)
{
	CUgraph g;
	CUgraphNode nodes[2];
	size_t n = 2;
	CUgraphNodeType t = -1;
	CUDA_MEM_ALLOC_NODE_PARAMS p;
	CUdeviceptr ptr, fp = 0;
	size_t before = free_mem();

	g = alloc_graph(64 * MiB, true, &ptr);
	CHECK_EQ(free_mem(), before); /* creating nodes charges nothing */
	CU_OK(cuGraphGetNodes(g, nodes, &n));
	CHECK_EQ(n, 2);
	CU_OK(cuGraphNodeGetType(nodes[0], &t));
	CHECK_EQ(t, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
	CU_OK(cuGraphNodeGetType(nodes[1], &t));
	CHECK_EQ(t, CU_GRAPH_NODE_TYPE_MEM_FREE);
	CU_OK(cuGraphMemAllocNodeGetParams(nodes[0], &p));
	CHECK_EQ(p.bytesize, 64 * MiB);
	CHECK_EQ(p.dptr, ptr);
	CHECK_EQ(p.poolProps.location.id, 0);
	CU_OK(cuGraphMemFreeNodeGetParams(nodes[1], &fp));
	CHECK_EQ(fp, ptr);
	CHECK_EQ(cuGraphMemAllocNodeGetParams(nodes[1], &p), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuGraphAddMemFreeNode(&nodes[0], g, NULL, 0, 12345), CUDA_ERROR_NOT_SUPPORTED);
	p = alloc_params(0);
	CHECK_EQ(cuGraphAddMemAllocNode(&nodes[0], g, NULL, 0, &p), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuGraphDestroy(g));
}

/* Launch charges, the pool keeps after the graph's free, the next launch
 * reuses it, trim releases it while the exec is idle. */
static void test_pool(void)
{
	CUgraph g;
	CUgraphExec e, e2;
	CUdeviceptr ptr;
	CUstream s;
	size_t before = free_mem();

	CU_MUST(cuStreamCreate(&s, 0));
	g = alloc_graph(256 * MiB, true, &ptr);
	CU_MUST(cuGraphInstantiateWithFlags(&e, g, 0));
	CHECK_EQ(free_mem(), before); /* instantiation charges nothing */
	CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0);
	CU_OK(cuGraphLaunch(e, s));
	CU_OK(cuStreamSynchronize(s));
	CHECK_EQ(free_mem(), before - 256 * MiB); /* freed by the graph, kept by the pool */
	CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 256 * MiB);
	CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 256 * MiB);
	CU_OK(cuGraphLaunch(e, s));
	CU_OK(cuStreamSynchronize(s));
	CHECK_EQ(free_mem(), before - 256 * MiB); /* reused */
	CU_MUST(cuGraphInstantiateWithFlags(&e2, g, 0));
	CU_OK(cuGraphUpload(e2, s)); /* a second exec: its own bytes */
	CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 512 * MiB);
	CU_OK(cuGraphExecDestroy(e2)); /* back to the pool, still reserved */
	CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 512 * MiB);
	CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 256 * MiB);
	CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), 512 * MiB);
	CU_OK(cuDeviceGraphMemTrim(0)); /* e is idle: everything goes */
	CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0);
	CHECK_EQ(free_mem(), before);
	CU_OK(cuGraphLaunch(e, s)); /* charged again */
	CHECK_EQ(free_mem(), before - 256 * MiB);
	CU_OK(cuGraphExecDestroy(e));
	CU_OK(cuDeviceGraphMemTrim(0));
	CHECK_EQ(free_mem(), before);
	cuuint64_t zero = 0;
	CU_OK(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &zero));
	CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), 0);
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuStreamDestroy_v2(s));
}

/* A graph allocating more than the device has fails to launch. An
 * allocation the graph does not free outlives its exec until freed. */
static void test_oom_and_escaping(void)
{
	CUgraph g;
	CUgraphExec e;
	CUdeviceptr ptr;
	size_t before = free_mem();

	g = alloc_graph(before + MiB, true, &ptr);
	CU_MUST(cuGraphInstantiateWithFlags(&e, g, 0));
	CHECK_EQ(cuGraphLaunch(e, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(free_mem(), before);
	CU_OK(cuGraphExecDestroy(e));
	CU_OK(cuGraphDestroy(g));

	g = alloc_graph(128 * MiB, false, &ptr);
	CU_MUST(cuGraphInstantiateWithFlags(&e, g, 0));
	CU_OK(cuGraphLaunch(e, NULL));
	CU_OK(cuGraphExecDestroy(e));
	CU_OK(cuDeviceGraphMemTrim(0));
	CHECK_EQ(free_mem(), before - 128 * MiB); /* still allocated */
	CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 128 * MiB);
	CU_OK(cuMemFree_v2(ptr));
	CHECK_EQ(cuMemFree_v2(ptr), CUDA_ERROR_INVALID_VALUE); /* not live any more */
	CHECK_EQ(free_mem(), before - 128 * MiB);              /* kept by the pool */
	CU_OK(cuDeviceGraphMemTrim(0));
	CHECK_EQ(free_mem(), before);
	CU_OK(cuGraphDestroy(g));
}

/* cuMemAllocAsync / cuMemFreeAsync under capture become memory nodes. */
static void test_capture(void)
{
	CUstream s;
	CUgraph g;
	CUgraphExec e;
	CUdeviceptr p = 0, q = 0;
	CUgraphNode nodes[4];
	size_t n = 4;
	CUgraphNodeType t = -1;
	CUmemoryPool pool;
	cuuint64_t used = 1;
	size_t before = free_mem();

	CU_MUST(cuStreamCreate(&s, 0));
	CU_MUST(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CU_OK(cuMemAllocAsync(&p, 64 * MiB, s));
	CHECK(p != 0);
	CU_OK(cuMemsetD8Async(p, 1, 64 * MiB, s));
	CU_OK(cuMemFreeAsync(p, s));
	CU_OK(cuMemAllocAsync(&q, 32 * MiB, s));
	CU_OK(cuStreamEndCapture(s, &g));
	CHECK_EQ(free_mem(), before); /* nothing allocated by the capture */
	CU_OK(cuDeviceGetDefaultMemPool(&pool, 0));
	CU_OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
	CHECK_EQ(used, 0);
	CU_OK(cuGraphGetNodes(g, nodes, &n));
	CHECK_EQ(n, 4);
	CU_OK(cuGraphNodeGetType(nodes[0], &t));
	CHECK_EQ(t, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
	CU_OK(cuGraphNodeGetType(nodes[2], &t));
	CHECK_EQ(t, CU_GRAPH_NODE_TYPE_MEM_FREE);
	CU_MUST(cuGraphInstantiateWithFlags(&e, g, 0));
	CU_OK(cuGraphLaunch(e, s));
	CU_OK(cuStreamSynchronize(s));
	CHECK_EQ(free_mem(), before - 96 * MiB);
	CU_OK(cuMemFreeAsync(q, s)); /* the escaping allocation, freed by the program */
	CU_OK(cuGraphExecDestroy(e));
	CU_OK(cuDeviceGraphMemTrim(0));
	CHECK_EQ(free_mem(), before);
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuStreamDestroy_v2(s));
}

int main(void)
{
	t_private_state("graphmem");
	setenv("GPUSLICE_SIM_MEMORY", "4GiB", 1);
	t_primary(0);
	test_nodes();
	test_pool();
	test_oom_and_escaping();
	test_capture();
	return t_done("graph memory nodes, the graph pool, trim, captured stream-ordered allocations");
}
