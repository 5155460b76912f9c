/* SPDX-License-Identifier: Apache-2.0
 * Driver entry points the hook tests need besides the hooked ones, looked up
 * from libcuda.so.1 / libnvidia-ml.so.1 (the simulated GPU in the tests, the
 * real driver otherwise). */
#ifndef GS_TEST_DRV_H
#define GS_TEST_DRV_H

#include <dlfcn.h>

#include <gpuslice/cuda_abi.h>
#include <gpuslice/nvml_abi.h>

#include "check.h"

struct drv {
	void *cuda, *nvml;
	CUresult (*cuInit)(unsigned int);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuStreamCreate)(CUstream *, unsigned int);
	CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
	CUresult (*cuModuleLoadData)(CUmodule *, const void *);
	CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
	nvmlReturn_t (*nvmlInit_v2)(void);
	nvmlReturn_t (*nvmlDeviceGetHandleByIndex_v2)(unsigned int, nvmlDevice_t *);
};

static inline void *drv_sym(void *h, const char *name)
{
	void *p = dlsym(h, name);
	if (p == NULL)
		fprintf(stderr, "driver lacks %s\n", name);
	CHECK(p != NULL);
	return p;
}

/* Loads the driver, creates the primary context of device 0 and makes it current. */
static inline void drv_open(struct drv *d, CUcontext *ctx)
{
	d->cuda = dlopen("libcuda.so.1", RTLD_NOW);
	CHECK(d->cuda != NULL);
	*(void **)&d->cuInit = drv_sym(d->cuda, "cuInit");
	*(void **)&d->cuDeviceGet = drv_sym(d->cuda, "cuDeviceGet");
	*(void **)&d->cuDevicePrimaryCtxRetain = drv_sym(d->cuda, "cuDevicePrimaryCtxRetain");
	*(void **)&d->cuCtxSetCurrent = drv_sym(d->cuda, "cuCtxSetCurrent");
	*(void **)&d->cuCtxSynchronize = drv_sym(d->cuda, "cuCtxSynchronize");
	*(void **)&d->cuStreamCreate = drv_sym(d->cuda, "cuStreamCreate");
	*(void **)&d->cuDeviceGetDefaultMemPool = drv_sym(d->cuda, "cuDeviceGetDefaultMemPool");
	*(void **)&d->cuModuleLoadData = drv_sym(d->cuda, "cuModuleLoadData");
	*(void **)&d->cuModuleGetFunction = drv_sym(d->cuda, "cuModuleGetFunction");
	CHECK_EQ(d->cuInit(0), CUDA_SUCCESS);
	CUdevice dev;
	CHECK_EQ(d->cuDeviceGet(&dev, 0), CUDA_SUCCESS);
	CHECK_EQ(d->cuDevicePrimaryCtxRetain(ctx, dev), CUDA_SUCCESS);
	CHECK_EQ(d->cuCtxSetCurrent(*ctx), CUDA_SUCCESS);
}

static inline nvmlDevice_t drv_nvml(struct drv *d)
{
	d->nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	CHECK(d->nvml != NULL);
	*(void **)&d->nvmlInit_v2 = drv_sym(d->nvml, "nvmlInit_v2");
	*(void **)&d->nvmlDeviceGetHandleByIndex_v2 = drv_sym(d->nvml, "nvmlDeviceGetHandleByIndex_v2");
	CHECK_EQ(d->nvmlInit_v2(), NVML_SUCCESS);
	nvmlDevice_t dev;
	CHECK_EQ(d->nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_SUCCESS);
	return dev;
}

#endif /* GS_TEST_DRV_H */
