/* SPDX-License-Identifier: Apache-2.0
 *
 * How the gpuslice apps reach the CUDA driver: dlopen("libcuda.so.1") and then
 * either dlsym of each versioned symbol, or cuGetProcAddress / cuGetProcAddress_v2
 * of the base names (as the CUDA 12 runtime does). One X-macro list, one table.
 * The same programs run on the simulated GPU and on a real NVIDIA driver.
 */
#ifndef GPUSLICE_APPS_CUAPI_H
#define GPUSLICE_APPS_CUAPI_H

#include <stddef.h>
#include "gpuslice/cuda_abi.h"

/* X(field, versioned symbol for dlsym, base name for cuGetProcAddress, parameter list); all return CUresult */
#define CUAPI_FUNCS(X)                                                                                             \
	X(Init, "cuInit", "cuInit", (unsigned int))                                                                \
	X(DeviceGet, "cuDeviceGet", "cuDeviceGet", (CUdevice *, int))                                              \
	X(DeviceGetCount, "cuDeviceGetCount", "cuDeviceGetCount", (int *))                                         \
	X(DeviceGetName, "cuDeviceGetName", "cuDeviceGetName", (char *, int, CUdevice))                            \
	X(DeviceTotalMem, "cuDeviceTotalMem_v2", "cuDeviceTotalMem", (size_t *, CUdevice))                         \
	X(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", (CUcontext *, CUdevice))       \
	X(CtxSetCurrent, "cuCtxSetCurrent", "cuCtxSetCurrent", (CUcontext))                                        \
	X(CtxSynchronize, "cuCtxSynchronize", "cuCtxSynchronize", (void))                                          \
	X(MemGetInfo, "cuMemGetInfo_v2", "cuMemGetInfo", (size_t *, size_t *))                                     \
	X(MemAlloc, "cuMemAlloc_v2", "cuMemAlloc", (CUdeviceptr *, size_t))                                        \
	X(MemAllocPitch, "cuMemAllocPitch_v2", "cuMemAllocPitch",                                                  \
	  (CUdeviceptr *, size_t *, size_t, size_t, unsigned int))                                                 \
	X(MemAllocManaged, "cuMemAllocManaged", "cuMemAllocManaged", (CUdeviceptr *, size_t, unsigned int))        \
	X(MemAllocAsync, "cuMemAllocAsync", "cuMemAllocAsync", (CUdeviceptr *, size_t, CUstream))                  \
	X(MemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync",                             \
	  (CUdeviceptr *, size_t, CUmemoryPool, CUstream))                                                         \
	X(DeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", "cuDeviceGetDefaultMemPool",                       \
	  (CUmemoryPool *, CUdevice))                                                                              \
	X(MemFree, "cuMemFree_v2", "cuMemFree", (CUdeviceptr))                                                     \
	X(MemcpyHtoD, "cuMemcpyHtoD_v2", "cuMemcpyHtoD", (CUdeviceptr, const void *, size_t))                      \
	X(MemcpyDtoH, "cuMemcpyDtoH_v2", "cuMemcpyDtoH", (void *, CUdeviceptr, size_t))                            \
	X(MemCreate, "cuMemCreate", "cuMemCreate",                                                                 \
	  (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long))               \
	X(MemRelease, "cuMemRelease", "cuMemRelease", (CUmemGenericAllocationHandle))                              \
	X(MemGetAllocationGranularity, "cuMemGetAllocationGranularity", "cuMemGetAllocationGranularity",           \
	  (size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags))                               \
	X(ArrayCreate, "cuArrayCreate_v2", "cuArrayCreate", (CUarray *, const CUDA_ARRAY_DESCRIPTOR *))            \
	X(ModuleLoadData, "cuModuleLoadData", "cuModuleLoadData", (CUmodule *, const void *))                      \
	X(ModuleGetFunction, "cuModuleGetFunction", "cuModuleGetFunction", (CUfunction *, CUmodule, const char *)) \
	X(LaunchKernel, "cuLaunchKernel", "cuLaunchKernel",                                                        \
	  (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,         \
	   unsigned int, CUstream, void **, void **))                                                              \
	X(GetErrorName, "cuGetErrorName", "cuGetErrorName", (CUresult, const char **))

struct cuapi {
#define CUAPI_FIELD(field, sym, base, params) CUresult(*field) params;
	CUAPI_FUNCS(CUAPI_FIELD)
#undef CUAPI_FIELD
};

enum cuapi_via { CUAPI_DLSYM, CUAPI_PROCADDR, CUAPI_PROCADDR_V2 };

/* Parses "dlsym", "procaddr" or "procaddr_v2"; returns -1 if unknown. */
int cuapi_parse_via(const char *s);
const char *cuapi_via_name(enum cuapi_via via);

/* Loads libcuda.so.1 and fills api. Returns 0, or -1 with a message in err. */
int cuapi_load(struct cuapi *api, enum cuapi_via via, char *err, size_t errlen);

/* Initializes the driver, makes device 0's primary context current. */
CUresult cuapi_open_device0(const struct cuapi *api, CUdevice *dev);

/* Loads the busy kernel (PTX spin on %globaltimer; the simulator accepts any image). */
CUresult cuapi_busy_kernel(const struct cuapi *api, CUfunction *fn);

/* Launches the busy kernel for us microseconds on the default stream. */
CUresult cuapi_launch_busy(const struct cuapi *api, CUfunction fn, unsigned long long us);

const char *cuapi_err(const struct cuapi *api, CUresult r);

/* Parses a size like "256MiB" (binary units K/M/G, optional "iB"/"B"); 0 on error. */
size_t cuapi_parse_size(const char *s);

#endif
