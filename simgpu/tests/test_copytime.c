/* SPDX-License-Identifier: Apache-2.0
 * Device-side copies, memsets and prefetches are timed work on the engine, in
 * stream order, for their bytes at GPUSLICE_SIM_COPY_GBPS (1 GB/s here: a byte
 * a nanosecond), like a kernel: a synchronous one returns after it ran, an
 * asynchronous one spans its events, a captured one replays with its graph.
 * Only lower bounds are asserted (what load cannot shorten). */
#include <stdlib.h>

#include "config.h"
#include "testutil.h"

#define N 40000000ull /* bytes: 40 ms at 1 GB/s */
#define N_MS 40.0f

static float span_ms(CUevent a, CUevent b)
{
	float ms = -1;
	CU_OK(cuEventSynchronize(b));
	CU_OK(cuEventElapsedTime(&ms, a, b));
	return ms;
}

static void test_sync(CUdeviceptr d, CUdeviceptr e)
{
	double t0 = t_now_ms();
	CU_OK(cuMemsetD8_v2(d, 1, N));
	double t1 = t_now_ms();
	CU_OK(cuMemcpyDtoD_v2(e, d, N));
	double t2 = t_now_ms();
	CU_OK(cuMemcpyPeer(e, NULL, d, NULL, N));
	double t3 = t_now_ms();
	CHECK(t1 - t0 >= N_MS);
	CHECK(t2 - t1 >= N_MS);
	CHECK(t3 - t2 >= N_MS);
}

static void test_async(CUdeviceptr d, CUdeviceptr e, CUdeviceptr m)
{
	CUstream s;
	CUevent a, b;
	CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_DEVICE,
			   .srcDevice = d,
			   .srcPitch = N / 4,
			   .dstMemoryType = CU_MEMORYTYPE_DEVICE,
			   .dstDevice = e,
			   .dstPitch = N / 4,
			   .WidthInBytes = N / 4,
			   .Height = 4};

	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_OK(cuEventCreate(&a, 0));
	CU_OK(cuEventCreate(&b, 0));
	CU_OK(cuEventRecord(a, s));
	CU_OK(cuMemcpyDtoDAsync_v2(e, d, N, s));
	CU_OK(cuMemsetD32Async(d, 7, N / 4, s));
	CU_OK(cuMemcpy2DAsync_v2(&c, s));
	CU_OK(cuMemPrefetchAsync(m, N, 0, s));
	CU_OK(cuEventRecord(b, s));
	CHECK(span_ms(a, b) >= 4 * N_MS);

	/* Per-thread stream entry points, and a capture replayed by its graph. */
	CU_OK(cuEventRecord(a, CU_STREAM_PER_THREAD));
	CU_OK(cuMemsetD8Async_ptsz(d, 0, N, NULL));
	CU_OK(cuEventRecord(b, CU_STREAM_PER_THREAD));
	CHECK(span_ms(a, b) >= N_MS);
	CUgraph g;
	CUgraphExec x;
	CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CU_OK(cuMemsetD16Async(d, 3, N / 2, s));
	CU_OK(cuStreamEndCapture(s, &g));
	CU_OK(cuGraphInstantiateWithFlags(&x, g, 0));
	CU_OK(cuEventRecord(a, s));
	CU_OK(cuGraphLaunch(x, s));
	CU_OK(cuEventRecord(b, s));
	CHECK(span_ms(a, b) >= N_MS);
	CU_OK(cuGraphExecDestroy(x));
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuEventDestroy_v2(a));
	CU_OK(cuEventDestroy_v2(b));
	CU_OK(cuStreamDestroy_v2(s));
}

static void test_config(void)
{
	struct sim_config c;
	char err[256];

	setenv("GPUSLICE_SIM_COPY_GBPS", "0", 1);
	CHECK_EQ(sim_config_from_env(&c, err, sizeof(err)), -1);
	setenv("GPUSLICE_SIM_COPY_GBPS", "fast", 1);
	CHECK_EQ(sim_config_from_env(&c, err, sizeof(err)), -1);
	setenv("GPUSLICE_SIM_COPY_GBPS", "3000", 1);
	CHECK_EQ(sim_config_from_env(&c, err, sizeof(err)), 0);
	CHECK_EQ(c.copy_bps, 3000000000000ull);
	unsetenv("GPUSLICE_SIM_COPY_GBPS");
	CHECK_EQ(sim_config_from_env(&c, err, sizeof(err)), 0);
	CHECK_EQ(c.copy_bps, SIM_DEFAULT_COPY_GBPS * 1000000000ull);
}

int main(void)
{
	CUdeviceptr d, e, m;

	t_private_state("copytime");
	setenv("GPUSLICE_SIM_COPY_GBPS", "1", 1);
	t_primary(0);
	CU_OK(cuMemAlloc_v2(&d, N));
	CU_OK(cuMemAlloc_v2(&e, N));
	CU_OK(cuMemAllocManaged(&m, N, CU_MEM_ATTACH_GLOBAL));
	test_sync(d, e);
	test_async(d, e, m);
	CU_OK(cuMemFree_v2(d));
	CU_OK(cuMemFree_v2(e));
	CU_OK(cuMemFree_v2(m));
	test_config();
	return t_done("copies, memsets and prefetches timed on the engine");
}
