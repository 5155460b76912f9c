/* SPDX-License-Identifier: Apache-2.0
 * A CUDA program as the CUDA runtime is one: not linked to libcuda nor to
 * us; it dlopens libcuda.so.1 and resolves everything through dlsym or
 * cuGetProcAddress_v2. Run with LD_PRELOAD=libgpuslice.so and a limit of
 * 1 GiB, it must see 1 GiB total and be refused at the limit both ways.
 * Usage: preload_probe dlsym|procaddr  -> prints "total=N blocks=N rc=N". */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <gpuslice/cuda_abi.h>

typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void *lookup(void *h, gpa2_fn gpa2, const char *name, const char *versioned)
{
	if (gpa2 == NULL)
		return dlsym(h, versioned);
	void *p = NULL;
	CUdriverProcAddressQueryResult st;
	return gpa2(name, &p, 12040, 0, &st) == CUDA_SUCCESS ? p : NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL)
		return 3;
	gpa2_fn gpa2 = strcmp(argv[1], "procaddr") == 0 ? (gpa2_fn)dlsym(h, "cuGetProcAddress_v2") : NULL;
	CUresult (*init)(unsigned) = lookup(h, gpa2, "cuInit", "cuInit");
	CUresult (*get)(CUdevice *, int) = lookup(h, gpa2, "cuDeviceGet", "cuDeviceGet");
	CUresult (*retain)(CUcontext *, CUdevice) =
		lookup(h, gpa2, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain");
	CUresult (*set)(CUcontext) = lookup(h, gpa2, "cuCtxSetCurrent", "cuCtxSetCurrent");
	CUresult (*info)(size_t *, size_t *) = lookup(h, gpa2, "cuMemGetInfo", "cuMemGetInfo_v2");
	CUresult (*alloc)(CUdeviceptr *, size_t) = lookup(h, gpa2, "cuMemAlloc", "cuMemAlloc_v2");
	if (!init || !get || !retain || !set || !info || !alloc)
		return 4;
	CUdevice dev;
	CUcontext ctx;
	if (init(0) || get(&dev, 0) || retain(&ctx, dev) || set(ctx))
		return 5;
	size_t fr, total;
	if (info(&fr, &total))
		return 6;
	int blocks = 0;
	CUdeviceptr p;
	CUresult rc;
	while ((rc = alloc(&p, 256u << 20)) == CUDA_SUCCESS && blocks < 1000)
		blocks++;
	printf("total=%zu blocks=%d rc=%d\n", total, blocks, rc);
	return 0;
}
