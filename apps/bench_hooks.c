/* SPDX-License-Identifier: Apache-2.0
 *
 * gs-bench-hooks: the cost libgpuslice adds to the hot driver entry points,
 * measured side by side in one run. The same driver (the simulated GPU, or a
 * real one) is called directly and through libgpuslice's hooks, alternating
 * batch by batch; the median ns/call of each and the difference are printed.
 *
 *   gs-bench-hooks LIBGPUSLICE_SO [ROUNDS]
 * The memory limit is active during the run (GPUSLICE_MEMORY_LIMIT, default 8 GiB).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuapi.h"

#define BATCH 256

typedef CUresult (*launch_fn)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
			      unsigned int, unsigned int, CUstream, void **, void **);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);

struct variant {
	const char *name;
	launch_fn launch;
	alloc_fn alloc;
	free_fn free;
	double *launch_ns, *alloc_ns;
};

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return v[n / 2];
}

static int one_round(const struct cuapi *api, struct variant *v, CUfunction fn, int round)
{
	unsigned long long us = 0;
	void *params[] = {&us};
	CUdeviceptr ptrs[BATCH];
	double t0 = now_ns();

	for (int i = 0; i < BATCH; i++)
		if (v->launch(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) != CUDA_SUCCESS)
			return -1;
	v->launch_ns[round] = (now_ns() - t0) / BATCH;
	if (api->CtxSynchronize() != CUDA_SUCCESS)
		return -1;
	t0 = now_ns();
	for (int i = 0; i < BATCH; i++)
		if (v->alloc(&ptrs[i], 4096) != CUDA_SUCCESS)
			return -1;
	for (int i = 0; i < BATCH; i++)
		if (v->free(ptrs[i]) != CUDA_SUCCESS)
			return -1;
	v->alloc_ns[round] = (now_ns() - t0) / BATCH;
	return 0;
}

static void report(const char *what, double direct, double hooked)
{
	printf("%-28s direct %8.1f ns  hooked %8.1f ns  added %+7.1f ns  ratio %.3f\n", what, direct, hooked,
	       hooked - direct, hooked / direct);
}

int main(int argc, char **argv)
{
	struct cuapi api;
	char err[256];
	CUdevice dev;
	CUfunction fn;
	int rounds = argc > 2 ? atoi(argv[2]) : 2000;
	void *hooks;

	if (argc < 2 || rounds < 10) {
		fprintf(stderr, "usage: gs-bench-hooks LIBGPUSLICE_SO [ROUNDS>=10]\n");
		return 2;
	}
	setenv("GPUSLICE_MEMORY_LIMIT", "8589934592", 0);
	if (!getenv("GPUSLICE_GROUP_FILE")) {
		static char path[128];
		snprintf(path, sizeof(path), "/tmp/gs-bench-hooks-%d.state", (int)getpid());
		setenv("GPUSLICE_GROUP_FILE", path, 1);
	}
	if (cuapi_load(&api, CUAPI_DLSYM, err, sizeof(err)) != 0 || cuapi_open_device0(&api, &dev) != CUDA_SUCCESS ||
	    cuapi_busy_kernel(&api, &fn) != CUDA_SUCCESS) {
		fprintf(stderr, "gs-bench-hooks: cannot open the driver: %s\n", err);
		return 1;
	}
	hooks = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!hooks) {
		fprintf(stderr, "gs-bench-hooks: %s\n", dlerror());
		return 1;
	}
	double *buf = calloc((size_t)rounds * 4, sizeof(double));
	if (!buf)
		return 1;
	struct variant vs[2] = {
		{"direct", (launch_fn)api.LaunchKernel, (alloc_fn)api.MemAlloc, (free_fn)api.MemFree, buf, buf + rounds},
		{"hooked", (launch_fn)dlsym(hooks, "cuLaunchKernel"), (alloc_fn)dlsym(hooks, "cuMemAlloc_v2"),
		 (free_fn)dlsym(hooks, "cuMemFree_v2"), buf + 2 * rounds, buf + 3 * rounds},
	};
	if (!vs[1].launch || !vs[1].alloc || !vs[1].free) {
		fprintf(stderr, "gs-bench-hooks: %s lacks a hook\n", argv[1]);
		return 1;
	}
	for (int r = 0; r < rounds; r++)
		for (int k = 0; k < 2; k++)
			if (one_round(&api, &vs[(r + k) % 2], fn, r) != 0) {
				fprintf(stderr, "gs-bench-hooks: a driver call failed in round %d\n", r);
				return 1;
			}
	printf("gs-bench-hooks: %d rounds x %d calls, median ns per call, direct vs through %s\n", rounds, BATCH,
	       argv[1]);
	report("cuLaunchKernel", median(vs[0].launch_ns, rounds), median(vs[1].launch_ns, rounds));
	report("cuMemAlloc_v2+cuMemFree_v2", median(vs[0].alloc_ns, rounds), median(vs[1].alloc_ns, rounds));
	unlink(getenv("GPUSLICE_GROUP_FILE"));
	free(buf);
	return 0;
}
