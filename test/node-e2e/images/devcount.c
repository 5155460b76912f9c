/* SPDX-License-Identifier: Apache-2.0
 *
 * gs-devcount: a CUDA program's view of the GPU count, in a test container.
 * Loops on cuDeviceGetCount every millisecond and prints a line on every
 * change: "cuda <CLOCK_REALTIME ns> <count>", or "cuda-error <ns> <call>
 * <CUresult>" when the driver fails (cuInit failing ends the program).
 *
 * --once [--out FILE]: prints the count of a fresh process, "cuda-once
 * <count>", and exits 0; when the driver fails, "cuda-once error <call>
 * <CUresult>" and exits 1. With --out, everything the process writes (its
 * report and whatever the driver or a preloaded library prints on stdout or
 * stderr) goes to FILE instead, so the report does not depend on the exec
 * transport's output stream. The driver is found with dlopen, as CUDA
 * runtimes do.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpuslice/cuda_abi.h"

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*count_fn)(int *);

static long long now_ns(void)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

/* Points stdout and stderr at path (created or truncated). */
static int redirect(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "gs-devcount: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0) {
		fprintf(stderr, "gs-devcount: dup2 %s: %s\n", path, strerror(errno));
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* Prints the report of a fresh process; 0 on success, 1 if the driver
 * failed, 3 if the report could not be written. */
static int once(init_fn init, count_fn count)
{
	int n = 0, rc = 0;
	CUresult r = init(0);
	if (r != 0) {
		printf("cuda-once error cuInit %d\n", (int)r);
		rc = 1;
	} else if ((r = count(&n)) != 0) {
		printf("cuda-once error cuDeviceGetCount %d\n", (int)r);
		rc = 1;
	} else {
		printf("cuda-once %d\n", n);
	}
	if (fflush(stdout) != 0) {
		fprintf(stderr, "gs-devcount: writing the report: %s\n", strerror(errno));
		return 3;
	}
	return rc;
}

static int loop(init_fn init, count_fn count)
{
	CUresult r = init(0);
	if (r != 0) {
		printf("cuda-error %lld cuInit %d\n", now_ns(), (int)r);
		fflush(stdout);
		return 1;
	}
	int last = -1;
	CUresult last_err = 0;
	struct timespec nap = {0, 1000000};
	for (;;) {
		int n = 0;
		r = count(&n);
		if (r != 0 && r != last_err)
			printf("cuda-error %lld cuDeviceGetCount %d\n", now_ns(), (int)r);
		else if (r == 0 && n != last)
			printf("cuda %lld %d\n", now_ns(), n);
		fflush(stdout);
		last_err = r;
		if (r == 0)
			last = n;
		nanosleep(&nap, NULL);
	}
}

int main(int argc, char **argv)
{
	int single = argc > 1 && strcmp(argv[1], "--once") == 0;
	if (single && argc == 4 && strcmp(argv[2], "--out") == 0) {
		if (redirect(argv[3]) != 0)
			return 2;
	} else if (argc > 2 || (argc == 2 && !single)) {
		fprintf(stderr, "usage: gs-devcount [--once [--out FILE]]\n");
		return 2;
	}
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
	if (!cuda) {
		printf("%s error dlopen %s\n", single ? "cuda-once" : "cuda-error", dlerror());
		fflush(stdout);
		return 2;
	}
	init_fn init = (init_fn)dlsym(cuda, "cuInit");
	count_fn count = (count_fn)dlsym(cuda, "cuDeviceGetCount");
	if (!init || !count) {
		printf("%s error dlsym driver symbols missing\n", single ? "cuda-once" : "cuda-error");
		fflush(stdout);
		return 2;
	}
	return single ? once(init, count) : loop(init, count);
}
