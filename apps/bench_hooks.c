/* SPDX-License-Identifier: Apache-2.0
 *
 * gs-bench-hooks: the cost libgpuslice adds to the hot driver entry points,
 * measured side by side in one run. The same driver (the simulated GPU, or a
 * real one) is called directly and through libgpuslice's hooks, alternating
 * batch by batch; the median and p99 ns/call (over batches) of each, the
 * difference and the ratio are printed:
 *  - cuLaunchKernel: a batch of launches queued behind a 1 ms kernel, so that
 *    only the launch call is timed, not the GPU draining the queue;
 *  - cuMemAlloc_v2 + cuMemFree_v2 pairs;
 *  - a launch-bound workload (bench_work.c), whole runs alternating: its
 *    throughput through the hooks over direct;
 *  - the shortest kernels back to back on one stream (bench_work.c), whole runs
 *    alternating: their throughput through the hooks over direct.
 * cuLaunchKernel is also reported per 1,024 launches (4 batches in a row), so
 * that work the gate does every few hundred launches counts in the median.
 *
 *   gs-bench-hooks LIBGPUSLICE_SO [ROUNDS [WORK_ROUNDS]]
 * The memory limit is active during the run (GPUSLICE_MEMORY_LIMIT, default 8 GiB).
 * The last line: "launch x<r> alloc+free x<r> launch-bound throughput x<r> shortest-kernel stream x<r>".
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_work.h"
#include "cuapi.h"

#define BATCH 256
#define BEHIND_US 1000ull /* each launch batch queues behind a kernel this long */
#define GROUP 4           /* batches summed for the per-1,024-launches figure */

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);

struct variant {
	const char *name;
	struct work_fns w;
	alloc_fn alloc;
	free_fn free;
	double *launch_ns, *alloc_ns;
};

double bench_now_ns(void)
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

/* Sorts v; returns its q-quantile. */
double bench_quantile(double *v, int n, double q)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	int i = (int)(q * (n - 1) + 0.5);
	return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static int one_round(const struct cuapi *api, struct variant *v, CUfunction fn, int round)
{
	unsigned long long us = 0, behind = BEHIND_US;
	void *params[] = {&us}, *bparams[] = {&behind};
	CUdeviceptr ptrs[BATCH];

	/* Through the same path: a gate sees this variant's launches only. */
	if (v->w.launch(fn, 1, 1, 1, 1, 1, 1, 0, NULL, bparams, NULL) != CUDA_SUCCESS)
		return -1;
	double t0 = bench_now_ns();
	for (int i = 0; i < BATCH; i++)
		if (v->w.launch(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) != CUDA_SUCCESS)
			return -1;
	v->launch_ns[round] = (bench_now_ns() - t0) / BATCH;
	if (api->CtxSynchronize() != CUDA_SUCCESS)
		return -1;
	t0 = bench_now_ns();
	for (int i = 0; i < BATCH; i++)
		if (v->alloc(&ptrs[i], 4096) != CUDA_SUCCESS)
			return -1;
	for (int i = 0; i < BATCH; i++)
		if (v->free(ptrs[i]) != CUDA_SUCCESS)
			return -1;
	v->alloc_ns[round] = (bench_now_ns() - t0) / BATCH;
	return 0;
}

/* The launch figures of GROUP batches in a row (ns per call), per variant, in
 * out (before report sorts them); returns how many. */
static int group_batches(struct variant vs[2], double *out[2], int rounds)
{
	int n = rounds / GROUP;
	for (int i = 0; i < 2; i++)
		for (int g = 0; g < n; g++) {
			double sum = 0;
			for (int k = 0; k < GROUP; k++)
				sum += vs[i].launch_ns[g * GROUP + k];
			out[i][g] = sum / GROUP;
		}
	return n;
}

/* Prints median and p99 of both; returns the ratio of the medians. */
static double report(const char *what, double *direct, double *hooked, int n)
{
	double d50 = bench_quantile(direct, n, 0.5), d99 = bench_quantile(direct, n, 0.99);
	double h50 = bench_quantile(hooked, n, 0.5), h99 = bench_quantile(hooked, n, 0.99);
	printf("%-28s direct %8.1f ns  hooked %8.1f ns  added %+7.1f ns  ratio %.3f  p99 direct %8.1f ns  hooked %8.1f ns  "
	       "ratio %.3f\n",
	       what, d50, h50, h50 - d50, h50 / d50, d99, h99, h99 / d99);
	return h50 / d50;
}

/* The run's defaults: an active memory limit and a group file of its own. */
static void default_env(void)
{
	setenv("GPUSLICE_MEMORY_LIMIT", "8589934592", 0);
	if (!getenv("GPUSLICE_GROUP_FILE")) {
		static char path[128];
		snprintf(path, sizeof(path), "/tmp/gs-bench-hooks-%d.state", (int)getpid());
		setenv("GPUSLICE_GROUP_FILE", path, 1);
	}
}

/* Opens the driver (device 0 and the busy kernel), and both ways to call it:
 * the driver itself and the hooks of libgpuslice at so. */
static int open_driver(struct cuapi *api, CUfunction *fn, const char *so, void **cuda, void **hooks)
{
	char err[256];
	CUdevice dev;

	if (cuapi_load(api, CUAPI_DLSYM, err, sizeof(err)) != 0 || cuapi_open_device0(api, &dev) != CUDA_SUCCESS ||
	    cuapi_busy_kernel(api, fn) != CUDA_SUCCESS) {
		fprintf(stderr, "gs-bench-hooks: cannot open the driver: %s\n", err);
		return -1;
	}
	*cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	*hooks = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	if (!*hooks || !*cuda) {
		fprintf(stderr, "gs-bench-hooks: %s\n", dlerror());
		return -1;
	}
	return 0;
}

/* Runs the call batches of both variants, alternating which goes first. */
static int run_calls(const struct cuapi *api, struct variant vs[2], CUfunction fn, int rounds)
{
	for (int r = 0; r < rounds; r++)
		for (int k = 0; k < 2; k++)
			if (one_round(api, &vs[(r + k) % 2], fn, r) != 0) {
				fprintf(stderr, "gs-bench-hooks: a driver call failed in round %d\n", r);
				return -1;
			}
	return 0;
}

/* Runs the launch-bound workload through both variants, alternating which
 * goes first; wt[i][r] is variant i's time in round r. */
static int run_work(const struct cuapi *api, struct variant vs[2], void *cuda, CUfunction fn, double *wt[2],
		    double *st[2], int wrounds)
{
	struct work work;

	if (wrounds > 0 && work_setup(&work, cuda, fn) != 0) {
		fprintf(stderr, "gs-bench-hooks: cannot set up the launch-bound workload\n");
		return -1;
	}
	for (int r = 0; r < wrounds; r++)
		for (int k = 0; k < 2; k++) {
			int i = (r + k) % 2;
			double t = work_run(&work, &vs[i].w, api);
			if (t < 0) {
				fprintf(stderr, "gs-bench-hooks: the workload failed in round %d\n", r);
				return -1;
			}
			wt[i][r] = t;
		}
	for (int r = 0; r < wrounds; r++)
		for (int k = 0; k < 2; k++) {
			int i = (r + k) % 2;
			double t = work_short_run(&work, &vs[i].w);
			if (t < 0) {
				fprintf(stderr, "gs-bench-hooks: the shortest-kernel stream failed in round %d\n", r);
				return -1;
			}
			st[i][r] = t;
		}
	return 0;
}

/* Prints a workload's median times; returns the median of the rounds'
 * throughput ratios (the two runs of a round saw the same load), or -1. */
static double report_work(const char *what, double *wt[2], int wrounds)
{
	double *ratio = malloc((size_t)wrounds * sizeof(double));
	if (ratio == NULL)
		return -1;
	for (int r = 0; r < wrounds; r++)
		ratio[r] = wt[0][r] / wt[1][r];
	double through = bench_quantile(ratio, wrounds, 0.5);
	free(ratio);
	double wd = bench_quantile(wt[0], wrounds, 0.5), wh = bench_quantile(wt[1], wrounds, 0.5);
	printf("%s: %d runs each, median %.2f ms direct, %.2f ms hooked; median "
	       "throughput ratio (direct time / hooked time, per round) %.3f\n",
	       what, wrounds, wd / 1e6, wh / 1e6, through);
	return through;
}

int main(int argc, char **argv)
{
	struct cuapi api;
	CUfunction fn;
	int rounds = argc > 2 ? atoi(argv[2]) : 2000, wrounds = argc > 3 ? atoi(argv[3]) : 15;
	void *hooks, *cuda;

	if (argc < 2 || (rounds < 10 && rounds != 0) || wrounds < 0) {
		fprintf(stderr, "usage: gs-bench-hooks LIBGPUSLICE_SO [ROUNDS (0 or >=10) [WORK_ROUNDS (>=0)]]\n");
		return 2;
	}
	default_env();
	if (open_driver(&api, &fn, argv[1], &cuda, &hooks) != 0)
		return 1;
	double *buf = calloc((size_t)rounds * 6 + (size_t)wrounds * 4, sizeof(double));
	if (!buf)
		return 1;
	struct variant vs[2] = {
		{"direct", work_fns(cuda), (alloc_fn)api.MemAlloc, (free_fn)api.MemFree, buf, buf + rounds},
		{"hooked", work_fns(hooks), (alloc_fn)dlsym(hooks, "cuMemAlloc_v2"),
		 (free_fn)dlsym(hooks, "cuMemFree_v2"), buf + 2 * rounds, buf + 3 * rounds},
	};
	if (!vs[0].w.launch || !vs[1].w.launch || !vs[1].w.graph_launch || !vs[1].alloc || !vs[1].free) {
		fprintf(stderr, "gs-bench-hooks: %s lacks a hook\n", argv[1]);
		return 1;
	}
	double *wt[2] = {buf + 4 * rounds, buf + 4 * rounds + wrounds};
	double *st[2] = {buf + 4 * rounds + 2 * wrounds, buf + 4 * rounds + 3 * wrounds};
	double *grouped[2] = {buf + 4 * rounds + 4 * wrounds, buf + 5 * rounds + 4 * wrounds};
	if (run_calls(&api, vs, fn, rounds) != 0 || run_work(&api, vs, cuda, fn, wt, st, wrounds) != 0)
		return 1;
	double launch = 0, alloc = 0, through = 0, shortest = 0;
	if (rounds > 0) {
		int groups = group_batches(vs, grouped, rounds);
		printf("gs-bench-hooks: %d rounds x %d calls, median and p99 ns per call (over rounds), direct vs through %s\n",
		       rounds, BATCH, argv[1]);
		launch = report("cuLaunchKernel", vs[0].launch_ns, vs[1].launch_ns, rounds);
		report("cuLaunchKernel per 1,024", grouped[0], grouped[1], groups);
		alloc = report("cuMemAlloc_v2+cuMemFree_v2", vs[0].alloc_ns, vs[1].alloc_ns, rounds);
	}
	if (wrounds > 0 &&
	    ((through = report_work("launch-bound workload (" WORK_DESCRIPTION ")", wt, wrounds)) < 0 ||
	     (shortest = report_work("shortest-kernel stream (" SHORT_DESCRIPTION ")", st, wrounds)) < 0))
		return 1;
	printf("launch x%.2f alloc+free x%.2f launch-bound throughput x%.2f shortest-kernel stream x%.2f\n", launch,
	       alloc, through, shortest);
	unlink(getenv("GPUSLICE_GROUP_FILE"));
	free(buf);
	return 0;
}
