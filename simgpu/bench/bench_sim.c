/* SPDX-License-Identifier: Apache-2.0
 * bench-sim: cost of the simulator's own hot paths, called directly (the
 * baseline the interception library's overhead is measured against).
 *   cuLaunchKernel (zero-time kernel, async; includes queue backpressure)
 *   cuMemAlloc_v2 + cuMemFree_v2 pair
 *   cuEventRecord + cuStreamSynchronize round trip
 * Usage: bench_sim [iterations]   (uses a private GPUSLICE_SIM_STATE) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cuapi.h"

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int fail(const char *what, CUresult rc)
{
	fprintf(stderr, "bench_sim: %s failed: %d\n", what, rc);
	return 1;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	char state[128];
	CUcontext c;
	CUmodule m;
	CUfunction f;
	CUstream s;
	CUevent e;
	CUdeviceptr p;
	CUresult rc;
	double t0, t1;

	snprintf(state, sizeof(state), "/dev/shm/gpuslice-sim-bench-%d", (int)getpid());
	setenv("GPUSLICE_SIM_STATE", state, 1);
	if ((rc = cuInit(0)) || (rc = cuDevicePrimaryCtxRetain(&c, 0)) || (rc = cuCtxSetCurrent(c)) ||
	    (rc = cuModuleLoadData(&m, "x")) || (rc = cuModuleGetFunction(&f, m, "k")) ||
	    (rc = cuStreamCreate(&s, 0)) || (rc = cuEventCreate(&e, CU_EVENT_DISABLE_TIMING)))
		return fail("setup", rc);
	t0 = now_ns();
	for (long i = 0; i < n; i++)
		cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL);
	t1 = now_ns();
	cuStreamSynchronize(s);
	printf("cuLaunchKernel            %8.1f ns/call\n", (t1 - t0) / (double)n);
	t0 = now_ns();
	for (long i = 0; i < n; i++) {
		cuMemAlloc_v2(&p, 1u << 20);
		cuMemFree_v2(p);
	}
	printf("cuMemAlloc_v2+cuMemFree_v2 %7.1f ns/pair\n", (now_ns() - t0) / (double)n);
	t0 = now_ns();
	for (long i = 0; i < n / 10; i++) {
		cuEventRecord(e, s);
		cuStreamSynchronize(s);
	}
	printf("cuEventRecord+cuStreamSynchronize %7.0f ns/round trip\n", (now_ns() - t0) / (double)(n / 10));
	unlink(state);
	return 0;
}
