/* SPDX-License-Identifier: Apache-2.0
 *
 * gs-nvmlprocs: runs in a test container. Takes GPU memory through the CUDA
 * driver API (so the process shows on the GPU), then prints what NVML lists on
 * that GPU, as one JSON line: {"self":PID,"pids":[...],"total":BYTES}.
 * Everything is found with dlopen/dlsym, the way CUDA runtimes load the driver.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
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

int main(void)
{
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
	if (ninit() || handle(0, &h) || procs(h, &n, list)) {
		fprintf(stderr, "gs-nvmlprocs: NVML failed\n");
		return 1;
	}
	printf("{\"self\":%d,\"total\":%zu,\"pids\":[", (int)getpid(), total);
	for (unsigned i = 0; i < n; i++)
		printf("%s%u", i ? "," : "", list[i].pid);
	printf("]}\n");
	return 0;
}
