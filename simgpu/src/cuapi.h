/* SPDX-License-Identifier: Apache-2.0
 * Prototypes of every entry point the simulated libcuda.so.1 exports, with the
 * real driver's signatures (from NVIDIA's public documentation). */
#ifndef GPUSLICE_SIM_CUAPI_H
#define GPUSLICE_SIM_CUAPI_H

#include "gpuslice/cuda_abi.h"

#define A __attribute__((visibility("default")))
typedef unsigned int CUdeviceptr_v1;

/* init, version, errors, entry points */
A CUresult cuInit(unsigned int flags);
A CUresult cuDriverGetVersion(int *v);
A CUresult cuGetErrorString(CUresult e, const char **s);
A CUresult cuGetErrorName(CUresult e, const char **s);
A CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags);
A CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
			       CUdriverProcAddressQueryResult *status);
A CUresult cuGetExportTable(const void **table, const CUuuid *id);
A CUresult cuProfilerStart(void);
A CUresult cuProfilerStop(void);

/* devices */
A CUresult cuDeviceGet(CUdevice *d, int ordinal);
A CUresult cuDeviceGetCount(int *n);
A CUresult cuDeviceGetName(char *name, int len, CUdevice d);
A CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d);
A CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d);
A CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice d);
A CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d);
A CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d);
A CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice d);
A CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d);
A CUresult cuDeviceGetByPCIBusId(CUdevice *d, const char *id);
A CUresult cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice peer);
A CUresult cuDeviceGetP2PAttribute(int *v, CUdevice_P2PAttribute a, CUdevice s, CUdevice d);
A CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *p, CUdevice d);
A CUresult cuDeviceGetMemPool(CUmemoryPool *p, CUdevice d);
A CUresult cuDeviceSetMemPool(CUdevice d, CUmemoryPool p);

/* contexts */
A CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d);
A CUresult cuDevicePrimaryCtxRelease(CUdevice d);
A CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d);
A CUresult cuDevicePrimaryCtxSetFlags(CUdevice d, unsigned int f);
A CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned int f);
A CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *f, int *active);
A CUresult cuDevicePrimaryCtxReset(CUdevice d);
A CUresult cuDevicePrimaryCtxReset_v2(CUdevice d);
A CUresult cuCtxCreate(CUcontext *c, unsigned int f, CUdevice d);
A CUresult cuCtxCreate_v2(CUcontext *c, unsigned int f, CUdevice d);
A CUresult cuCtxCreate_v3(CUcontext *c, CUexecAffinityParam *p, int n, unsigned int f, CUdevice d);
A CUresult cuCtxCreate_v4(CUcontext *c, void *params, unsigned int f, CUdevice d);
A CUresult cuCtxDestroy(CUcontext c);
A CUresult cuCtxDestroy_v2(CUcontext c);
A CUresult cuCtxPushCurrent(CUcontext c);
A CUresult cuCtxPushCurrent_v2(CUcontext c);
A CUresult cuCtxPopCurrent(CUcontext *c);
A CUresult cuCtxPopCurrent_v2(CUcontext *c);
A CUresult cuCtxSetCurrent(CUcontext c);
A CUresult cuCtxGetCurrent(CUcontext *c);
A CUresult cuCtxGetDevice(CUdevice *d);
A CUresult cuCtxGetFlags(unsigned int *f);
A CUresult cuCtxSetFlags(unsigned int f);
A CUresult cuCtxGetId(CUcontext c, unsigned long long *id);
A CUresult cuCtxSynchronize(void);
A CUresult cuCtxGetApiVersion(CUcontext c, unsigned int *v);
A CUresult cuCtxGetLimit(size_t *v, CUlimit l);
A CUresult cuCtxSetLimit(CUlimit l, size_t v);
A CUresult cuCtxGetCacheConfig(CUfunc_cache *c);
A CUresult cuCtxSetCacheConfig(CUfunc_cache c);
A CUresult cuCtxGetSharedMemConfig(CUsharedconfig *c);
A CUresult cuCtxSetSharedMemConfig(CUsharedconfig c);
A CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest);

/* memory */
A CUresult cuMemGetInfo(unsigned int *free, unsigned int *total);
A CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
A CUresult cuMemAlloc(CUdeviceptr_v1 *p, unsigned int n);
A CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
A CUresult cuMemAllocPitch(CUdeviceptr_v1 *p, unsigned int *pitch, unsigned int w, unsigned int h, unsigned int elem);
A CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned int elem);
A CUresult cuMemFree(CUdeviceptr_v1 p);
A CUresult cuMemFree_v2(CUdeviceptr p);
A CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int flags);
A CUresult cuMemAdvise(CUdeviceptr p, size_t n, int advice, CUdevice dev);
A CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dst, CUstream s);
A CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice dst, CUstream s);
A CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, int advice, CUmemLocation loc);
A CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s);
A CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s);
A CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p);
A CUresult cuMemAllocHost_v2(void **p, size_t n);
A CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags);
A CUresult cuMemFreeHost(void *p);
A CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned int flags);
A CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags);
A CUresult cuMemHostUnregister(void *p);
A CUresult cuMemHostGetFlags(unsigned int *flags, void *p);
A CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p);
A CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s);
A CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s);
A CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s);
A CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s);
A CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s);
A CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s);
A CUresult cuMemPoolCreate(CUmemoryPool *p, const CUmemPoolProps *props);
A CUresult cuMemPoolDestroy(CUmemoryPool p);
A CUresult cuMemPoolTrimTo(CUmemoryPool p, size_t keep);
A CUresult cuMemPoolSetAttribute(CUmemoryPool p, CUmemPool_attribute a, void *v);
A CUresult cuMemPoolGetAttribute(CUmemoryPool p, CUmemPool_attribute a, void *v);

/* virtual memory management */
A CUresult cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr, unsigned long long flags);
A CUresult cuMemAddressFree(CUdeviceptr p, size_t n);
A CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop,
		       unsigned long long flags);
A CUresult cuMemRelease(CUmemGenericAllocationHandle h);
A CUresult cuMemMap(CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long flags);
A CUresult cuMemUnmap(CUdeviceptr p, size_t n);
A CUresult cuMemSetAccess(CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t count);
A CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *loc, CUdeviceptr p);
A CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
					 CUmemAllocationGranularity_flags o);
A CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h);
A CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr);

/* arrays */
A CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d);
A CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d);
A CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *d, CUarray a);
A CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray a);
A CUresult cuArrayDestroy(CUarray a);

/* copies and sets (accepted; device memory has no host backing, reads return zeros) */
A CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n);
A CUresult cuMemcpy_ptds(CUdeviceptr d, CUdeviceptr s, size_t n);
A CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st);
A CUresult cuMemcpyAsync_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st);
A CUresult cuMemcpyPeer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n);
A CUresult cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st);
A CUresult cuMemcpyPeer_ptds(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n);
A CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st);
A CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n);
A CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *s, size_t n);
A CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n);
A CUresult cuMemcpyDtoH_v2_ptds(void *d, CUdeviceptr s, size_t n);
A CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n);
A CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n);
A CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st);
A CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream st);
A CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st);
A CUresult cuMemcpyDtoHAsync_v2_ptsz(void *d, CUdeviceptr s, size_t n, CUstream st);
A CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st);
A CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st);
A CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *c);
A CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *c);
A CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *c, CUstream st);
A CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *c, CUstream st);
A CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n);
A CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n);
A CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n);
A CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n);
A CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n);
A CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n);
A CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream st);
A CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream st);
A CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream st);
A CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream st);
A CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream st);
A CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream st);
A CUresult cuMemsetD2D8_v2(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h);
A CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h);
A CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, CUstream st);
A CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, CUstream st);

/* modules, libraries, functions */
A CUresult cuModuleLoad(CUmodule *m, const char *path);
A CUresult cuModuleLoadData(CUmodule *m, const void *image);
A CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n, CUjit_option *o, void **v);
A CUresult cuModuleLoadFatBinary(CUmodule *m, const void *fatbin);
A CUresult cuModuleUnload(CUmodule m);
A CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name);
A CUresult cuModuleGetGlobal_v2(CUdeviceptr *p, size_t *n, CUmodule m, const char *name);
A CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode);
A CUresult cuLibraryLoadData(CUlibrary *l, const void *code, CUjit_option *jo, void **jv, unsigned int jn,
			     CUlibraryOption *lo, void **lv, unsigned int ln);
A CUresult cuLibraryLoadFromFile(CUlibrary *l, const char *path, CUjit_option *jo, void **jv, unsigned int jn,
				 CUlibraryOption *lo, void **lv, unsigned int ln);
A CUresult cuLibraryUnload(CUlibrary l);
A CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary l, const char *name);
A CUresult cuLibraryGetModule(CUmodule *m, CUlibrary l);
A CUresult cuLibraryGetGlobal(CUdeviceptr *p, size_t *n, CUlibrary l, const char *name);
A CUresult cuKernelGetFunction(CUfunction *f, CUkernel k);
A CUresult cuKernelGetAttribute(int *v, CUfunction_attribute a, CUkernel k, CUdevice d);
A CUresult cuKernelSetAttribute(CUfunction_attribute a, int v, CUkernel k, CUdevice d);
A CUresult cuKernelSetCacheConfig(CUkernel k, CUfunc_cache c, CUdevice d);
A CUresult cuKernelGetName(const char **name, CUkernel k);
A CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f);
A CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v);
A CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache c);
A CUresult cuFuncGetModule(CUmodule *m, CUfunction f);
A CUresult cuFuncGetName(const char **name, CUfunction f);
A CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int block, size_t smem);
A CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, CUfunction f, int block, size_t smem,
								unsigned int flags);
A CUresult cuOccupancyMaxPotentialBlockSize(int *grid, int *block, CUfunction f, CUoccupancyB2DSize fn, size_t smem,
					    int limit);

/* launches */
A CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
			  unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void **params, void **extra);
A CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
			       unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void **params,
			       void **extra);
A CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra);
A CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra);
A CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
				     unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void **params);
A CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
					  unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
					  CUstream s, void **params);
A CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int n, unsigned int flags);
A CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *arg);
A CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *arg);

/* streams */
A CUresult cuStreamCreate(CUstream *s, unsigned int flags);
A CUresult cuStreamCreateWithPriority(CUstream *s, unsigned int flags, int prio);
A CUresult cuStreamDestroy(CUstream s);
A CUresult cuStreamDestroy_v2(CUstream s);
A CUresult cuStreamQuery(CUstream s);
A CUresult cuStreamQuery_ptsz(CUstream s);
A CUresult cuStreamSynchronize(CUstream s);
A CUresult cuStreamSynchronize_ptsz(CUstream s);
A CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags);
A CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags);
A CUresult cuStreamGetPriority(CUstream s, int *p);
A CUresult cuStreamGetPriority_ptsz(CUstream s, int *p);
A CUresult cuStreamGetFlags(CUstream s, unsigned int *f);
A CUresult cuStreamGetFlags_ptsz(CUstream s, unsigned int *f);
A CUresult cuStreamGetCtx(CUstream s, CUcontext *c);
A CUresult cuStreamGetCtx_ptsz(CUstream s, CUcontext *c);
A CUresult cuStreamGetCtx_v2(CUstream s, CUcontext *c, void **green);
A CUresult cuStreamGetCtx_v2_ptsz(CUstream s, CUcontext *c, void **green);
A CUresult cuStreamGetId(CUstream s, unsigned long long *id);
A CUresult cuStreamGetId_ptsz(CUstream s, unsigned long long *id);
A CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *arg, unsigned int flags);
A CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void *arg, unsigned int flags);

/* stream capture and graphs */
A CUresult cuStreamBeginCapture(CUstream s);
A CUresult cuStreamBeginCapture_ptsz(CUstream s);
A CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m);
A CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m);
A CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges,
				       size_t n, CUstreamCaptureMode m);
A CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps,
					    const CUgraphEdgeData *edges, size_t n, CUstreamCaptureMode m);
A CUresult cuStreamEndCapture(CUstream s, CUgraph *g);
A CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g);
A CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st);
A CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *st);
A CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id);
A CUresult cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id);
A CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
				     const CUgraphNode **deps, size_t *ndeps);
A CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
					  const CUgraphNode **deps, size_t *ndeps);
A CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
				     const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps);
A CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
					  const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps);
A CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *m);
A CUresult cuGraphCreate(CUgraph *g, unsigned int flags);
A CUresult cuGraphDestroy(CUgraph g);
A CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *n);
A CUresult cuGraphInstantiate(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log, size_t len);
A CUresult cuGraphInstantiate_v2(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log, size_t len);
A CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags);
A CUresult cuGraphInstantiateWithParams(CUgraphExec *e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p);
A CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p);
A CUresult cuGraphLaunch(CUgraphExec e, CUstream s);
A CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s);
A CUresult cuGraphUpload(CUgraphExec e, CUstream s);
A CUresult cuGraphUpload_ptsz(CUgraphExec e, CUstream s);
A CUresult cuGraphExecDestroy(CUgraphExec e);
A CUresult cuGraphNodeGetType(CUgraphNode n, CUgraphNodeType *t);
A CUresult cuGraphAddMemAllocNode(CUgraphNode *n, CUgraph g, const CUgraphNode *deps, size_t ndeps,
				  CUDA_MEM_ALLOC_NODE_PARAMS *p);
A CUresult cuGraphAddMemFreeNode(CUgraphNode *n, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUdeviceptr p);
A CUresult cuGraphMemAllocNodeGetParams(CUgraphNode n, CUDA_MEM_ALLOC_NODE_PARAMS *p);
A CUresult cuGraphMemFreeNodeGetParams(CUgraphNode n, CUdeviceptr *p);
A CUresult cuDeviceGraphMemTrim(CUdevice d);
A CUresult cuDeviceGetGraphMemAttribute(CUdevice d, CUgraphMem_attribute a, void *v);
A CUresult cuDeviceSetGraphMemAttribute(CUdevice d, CUgraphMem_attribute a, void *v);

/* events */
A CUresult cuEventCreate(CUevent *e, unsigned int flags);
A CUresult cuEventDestroy(CUevent e);
A CUresult cuEventDestroy_v2(CUevent e);
A CUresult cuEventRecord(CUevent e, CUstream s);
A CUresult cuEventRecord_ptsz(CUevent e, CUstream s);
A CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags);
A CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int flags);
A CUresult cuEventQuery(CUevent e);
A CUresult cuEventSynchronize(CUevent e);
A CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end);

#undef A
#endif
