/* SPDX-License-Identifier: Apache-2.0
 *
 * gs-devcount: a CUDA program's view of the GPU count, in a test container.
 * Loops on cuDeviceGetCount every millisecond and prints a line on every
 * change: "cuda <CLOCK_REALTIME ns> <count>". With --once prints the count of
 * a fresh process and exits. The driver is found with dlopen, as CUDA
 * runtimes do.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "gpuslice/cuda_abi.h"

int main(int argc, char **argv)
{
	int once = argc > 1 && strcmp(argv[1], "--once") == 0;
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
	if (!cuda) {
		fprintf(stderr, "gs-devcount: %s\n", dlerror());
		return 2;
	}
	CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(cuda, "cuInit");
	CUresult (*count)(int *) = (CUresult(*)(int *))dlsym(cuda, "cuDeviceGetCount");
	if (!init || !count) {
		fprintf(stderr, "gs-devcount: driver symbols missing\n");
		return 2;
	}
	CUresult r = init(0);
	int last = -1;
	struct timespec nap = {0, 1000000};
	for (;;) {
		int n = 0;
		if (r == 0 && count(&n) != 0)
			n = -1;
		if (once) {
			printf("cuda-once %d\n", n);
			return 0;
		}
		if (n != last) {
			struct timespec now;
			clock_gettime(CLOCK_REALTIME, &now);
			printf("cuda %lld %d\n", (long long)now.tv_sec * 1000000000LL + now.tv_nsec, n);
			fflush(stdout);
			last = n;
		}
		nanosleep(&nap, NULL);
	}
}
