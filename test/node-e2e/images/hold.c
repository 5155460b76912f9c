/* SPDX-License-Identifier: Apache-2.0
 *
 * gs-hold N US: launches N busy kernels of US microseconds through the hooked
 * launch path (time-slice grants from the time-slice daemon), synchronizes, prints
 * "held", then keeps its context and its daemon connection until killed, so
 * every figure about its group stays put. Exit 1 on a CUDA failure, 2 on bad
 * arguments.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cuapi.h"

int main(int argc, char **argv)
{
	struct cuapi api;
	char err[256];
	CUdevice dev;
	CUfunction fn;

	if (argc != 3) {
		fprintf(stderr, "usage: gs-hold KERNELS MICROSECONDS\n");
		return 2;
	}
	long n = strtol(argv[1], NULL, 10);
	unsigned long long us = strtoull(argv[2], NULL, 10);
	if (cuapi_load(&api, CUAPI_DLSYM, err, sizeof(err)) != 0) {
		fprintf(stderr, "gs-hold: %s\n", err);
		return 1;
	}
	if (cuapi_open_device0(&api, &dev) != CUDA_SUCCESS || cuapi_busy_kernel(&api, &fn) != CUDA_SUCCESS) {
		fprintf(stderr, "gs-hold: cannot open the GPU\n");
		return 1;
	}
	for (long i = 0; i < n; i++) {
		if (cuapi_launch_busy(&api, fn, us) != CUDA_SUCCESS) {
			fprintf(stderr, "gs-hold: launch %ld failed\n", i);
			return 1;
		}
	}
	if (api.CtxSynchronize() != CUDA_SUCCESS) {
		fprintf(stderr, "gs-hold: synchronize failed\n");
		return 1;
	}
	printf("held\n");
	fflush(stdout);
	for (;;)
		pause();
}
