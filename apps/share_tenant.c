/* SPDX-License-Identifier: Apache-2.0
 *
 * gs-share-tenant: one tenant of a shared GPU for the sharing-mode benchmark.
 * Launches the busy kernel (KERNEL_US microseconds of work each) and waits for
 * it, again and again for --seconds; --gap-us sleeps between kernels (a
 * latency-sensitive service answering requests; without it the tenant is a
 * busy batch job). Prints one JSON line: kernels, GPU work done, and the
 * launch-to-completion latency percentiles.
 *
 *   gs-share-tenant --kernel-us U [--gap-us G] [--seconds S] [--name T]
 * Exit status: 0 done, 1 CUDA error, 2 bad flags.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuapi.h"

#define MAX_SAMPLES 200000

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double pct(const double *v, long n, double p)
{
	long i = (long)(p * (double)(n - 1) + 0.5);
	return n == 0 ? 0 : v[i];
}

static void sleep_us(long us)
{
	struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
	nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	unsigned long long kernel_us = 0;
	long gap_us = 0, n = 0;
	double seconds = 5, t0, end;
	const char *name = "tenant";
	struct cuapi api;
	CUdevice dev;
	CUfunction fn;
	CUresult rc;
	char err[256];
	static double lat[MAX_SAMPLES];

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--kernel-us") == 0)
			kernel_us = strtoull(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--gap-us") == 0)
			gap_us = atol(argv[i + 1]);
		else if (strcmp(argv[i], "--seconds") == 0)
			seconds = atof(argv[i + 1]);
		else if (strcmp(argv[i], "--name") == 0)
			name = argv[i + 1];
		else
			break;
	}
	if (argc % 2 != 1 || kernel_us == 0 || gap_us < 0 || !(seconds > 0)) {
		fprintf(stderr, "usage: gs-share-tenant --kernel-us U [--gap-us G] [--seconds S] [--name T]\n");
		return 2;
	}
	if (cuapi_load(&api, CUAPI_DLSYM, err, sizeof(err)) != 0) {
		fprintf(stderr, "gs-share-tenant: %s\n", err);
		return 1;
	}
	rc = cuapi_open_device0(&api, &dev);
	if (rc == CUDA_SUCCESS)
		rc = cuapi_busy_kernel(&api, &fn);
	t0 = now_s();
	end = t0 + seconds;
	while (rc == CUDA_SUCCESS && now_s() < end && n < MAX_SAMPLES) {
		double s = now_s();
		rc = cuapi_launch_busy(&api, fn, kernel_us);
		if (rc == CUDA_SUCCESS)
			rc = api.CtxSynchronize();
		lat[n++] = (now_s() - s) * 1e3;
		if (gap_us > 0)
			sleep_us(gap_us);
	}
	if (rc != CUDA_SUCCESS) {
		fprintf(stderr, "gs-share-tenant %s: %s\n", name, cuapi_err(&api, rc));
		return 1;
	}
	double wall = now_s() - t0;
	qsort(lat, (size_t)n, sizeof(lat[0]), cmp_double);
	printf("{\"name\":\"%s\",\"kernels\":%ld,\"work_ms\":%.3f,\"seconds\":%.3f,\"p50_ms\":%.3f,\"p99_ms\":%.3f}\n",
	       name, n, (double)n * (double)kernel_us / 1e3, wall, pct(lat, n, 0.50), pct(lat, n, 0.99));
	return 0;
}
