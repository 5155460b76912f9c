/* SPDX-License-Identifier: Apache-2.0
 *
 * gs-nvmlprocs [--want N]: runs in a test container. Takes GPU memory through
 * the CUDA driver API (so the process shows on the GPU), then prints what NVML
 * lists on that GPU (once it lists at least N processes, or after 10 s), and
 * the pids this process can see in its /proc, as one JSON line:
 * {"self":PID,"total":BYTES,"pids":[...],"visible":[...]}.
 * Everything is found with dlopen/dlsym, the way CUDA runtimes load the driver.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpuslice/cuda_abi.h"
#include "gpuslice/nvml_abi.h"

static void *sym(void *lib, const char *name)
{
	void *p = dlsym(lib, name);
	if (!p) {
		fprintf(stderr, "gs-nvmlprocs: %s missing\n", name);
		_exit(2);
	}
	return p;
}

/* Prints the numeric entries of /proc: the pids of this pid namespace. */
static void print_visible(void)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int first = 1;
	while (d && (e = readdir(d)) != NULL) {
		char *end;
		long v = strtol(e->d_name, &end, 10);
		if (*end == '\0' && v > 0) {
			printf("%s%ld", first ? "" : ",", v);
			first = 0;
		}
	}
	if (d)
		closedir(d);
}

int main(int argc, char **argv)
{
	unsigned want = 1;
	if (argc == 3 && strcmp(argv[1], "--want") == 0)
		want = (unsigned)atoi(argv[2]);
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
	void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	if (!cuda || !nvml) {
		fprintf(stderr, "gs-nvmlprocs: %s\n", dlerror());
		return 2;
	}
	CUresult (*init)(unsigned) = sym(cuda, "cuInit");
	CUresult (*get)(CUdevice *, int) = sym(cuda, "cuDeviceGet");
	CUresult (*ctx)(CUcontext *, unsigned, CUdevice) = sym(cuda, "cuCtxCreate_v2");
	CUresult (*alloc)(CUdeviceptr *, size_t) = sym(cuda, "cuMemAlloc_v2");
	CUresult (*info)(size_t *, size_t *) = sym(cuda, "cuMemGetInfo_v2");
	CUdevice dev;
	CUcontext c;
	CUdeviceptr p;
	size_t freeb = 0, total = 0;
	if (init(0) || get(&dev, 0) || ctx(&c, 0, dev) || alloc(&p, 64u << 20) || info(&freeb, &total)) {
		fprintf(stderr, "gs-nvmlprocs: CUDA setup failed\n");
		return 1;
	}
	nvmlReturn_t (*ninit)(void) = sym(nvml, "nvmlInit_v2");
	nvmlReturn_t (*handle)(unsigned, nvmlDevice_t *) = sym(nvml, "nvmlDeviceGetHandleByIndex_v2");
	nvmlReturn_t (*procs)(nvmlDevice_t, unsigned *, nvmlProcessInfo_v2_t *) =
		sym(nvml, "nvmlDeviceGetComputeRunningProcesses_v2");
	nvmlDevice_t h;
	nvmlProcessInfo_v2_t list[64];
	unsigned n = 64;
	if (ninit() || handle(0, &h)) {
		fprintf(stderr, "gs-nvmlprocs: NVML failed\n");
		return 1;
	}
	for (int tries = 0;; tries++) {
		n = 64;
		if (procs(h, &n, list)) {
			fprintf(stderr, "gs-nvmlprocs: NVML process list failed\n");
			return 1;
		}
		if (n >= want || tries >= 1000)
			break;
		struct timespec ts = {.tv_nsec = 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	printf("{\"self\":%d,\"total\":%zu,\"pids\":[", (int)getpid(), total);
	for (unsigned i = 0; i < n; i++)
		printf("%s%u", i ? "," : "", list[i].pid);
	printf("],\"visible\":[");
	print_visible();
	printf("]}\n");
	return 0;
}
