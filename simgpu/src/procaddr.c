/* SPDX-License-Identifier: Apache-2.0
 * cuGetProcAddress / cuGetProcAddress_v2: the one table of versioned entry
 * points. A lookup takes the base name ("cuMemAlloc") and the caller's CUDA
 * version, and returns the newest variant introduced at or before that
 * version ("cuMemAlloc_v2" from 3020); with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM the _ptds/_ptsz variant is
 * preferred where one exists. Versions follow cudaTypedefs.h (PFN_*_vNNNN),
 * up to CUDA 12.6. An unknown name, or one newer than the version asked,
 * returns CUDA_SUCCESS with NULL and its status, as CUDA 12 drivers do.
 *
 * As a driver may, the lookup hands out trampolines, not the exported symbols:
 * one per table row, a jump through a pointer to the export (x86-64 and
 * aarch64; elsewhere the exports themselves). Nothing may find a hook by
 * comparing the pointer with dlsym's. */
#include <string.h>

#include "cuapi.h"
#include "sim.h"

/* X(base name, version introduced, per-thread variant?, exported symbol) */
#define PROC_TABLE(X)                                                                                        \
	X(cuInit, 2000, 0, cuInit)                                                                           \
	X(cuDriverGetVersion, 2020, 0, cuDriverGetVersion)                                                   \
	X(cuGetErrorString, 6000, 0, cuGetErrorString)                                                       \
	X(cuGetErrorName, 6000, 0, cuGetErrorName)                                                           \
	X(cuGetProcAddress, 11030, 0, cuGetProcAddress)                                                      \
	X(cuGetProcAddress, 12000, 0, cuGetProcAddress_v2)                                                   \
	X(cuGetExportTable, 3000, 0, cuGetExportTable)                                                       \
	X(cuProfilerStart, 4000, 0, cuProfilerStart)                                                         \
	X(cuProfilerStop, 4000, 0, cuProfilerStop)                                                           \
	X(cuDeviceGet, 2000, 0, cuDeviceGet)                                                                 \
	X(cuDeviceGetCount, 2000, 0, cuDeviceGetCount)                                                       \
	X(cuDeviceGetName, 2000, 0, cuDeviceGetName)                                                         \
	X(cuDeviceGetUuid, 9020, 0, cuDeviceGetUuid)                                                         \
	X(cuDeviceGetUuid, 11040, 0, cuDeviceGetUuid_v2)                                                     \
	X(cuDeviceTotalMem, 2000, 0, cuDeviceTotalMem)                                                       \
	X(cuDeviceTotalMem, 3020, 0, cuDeviceTotalMem_v2)                                                    \
	X(cuDeviceGetAttribute, 2000, 0, cuDeviceGetAttribute)                                               \
	X(cuDeviceComputeCapability, 2000, 0, cuDeviceComputeCapability)                                     \
	X(cuDeviceGetPCIBusId, 4010, 0, cuDeviceGetPCIBusId)                                                 \
	X(cuDeviceGetByPCIBusId, 4010, 0, cuDeviceGetByPCIBusId)                                             \
	X(cuDeviceCanAccessPeer, 4000, 0, cuDeviceCanAccessPeer)                                             \
	X(cuDeviceGetP2PAttribute, 8000, 0, cuDeviceGetP2PAttribute)                                         \
	X(cuDeviceGetDefaultMemPool, 11020, 0, cuDeviceGetDefaultMemPool)                                    \
	X(cuDeviceGetMemPool, 11020, 0, cuDeviceGetMemPool)                                                  \
	X(cuDeviceSetMemPool, 11020, 0, cuDeviceSetMemPool)                                                  \
	X(cuDevicePrimaryCtxRetain, 7000, 0, cuDevicePrimaryCtxRetain)                                       \
	X(cuDevicePrimaryCtxRelease, 7000, 0, cuDevicePrimaryCtxRelease)                                     \
	X(cuDevicePrimaryCtxRelease, 11000, 0, cuDevicePrimaryCtxRelease_v2)                                 \
	X(cuDevicePrimaryCtxSetFlags, 7000, 0, cuDevicePrimaryCtxSetFlags)                                   \
	X(cuDevicePrimaryCtxSetFlags, 11000, 0, cuDevicePrimaryCtxSetFlags_v2)                               \
	X(cuDevicePrimaryCtxGetState, 7000, 0, cuDevicePrimaryCtxGetState)                                   \
	X(cuDevicePrimaryCtxReset, 7000, 0, cuDevicePrimaryCtxReset)                                         \
	X(cuDevicePrimaryCtxReset, 11000, 0, cuDevicePrimaryCtxReset_v2)                                     \
	X(cuCtxCreate, 2000, 0, cuCtxCreate)                                                                 \
	X(cuCtxCreate, 3020, 0, cuCtxCreate_v2)                                                              \
	X(cuCtxCreate, 11040, 0, cuCtxCreate_v3)                                                             \
	X(cuCtxCreate, 12050, 0, cuCtxCreate_v4)                                                             \
	X(cuCtxDestroy, 2000, 0, cuCtxDestroy)                                                               \
	X(cuCtxDestroy, 4000, 0, cuCtxDestroy_v2)                                                            \
	X(cuCtxPushCurrent, 2000, 0, cuCtxPushCurrent)                                                       \
	X(cuCtxPushCurrent, 4000, 0, cuCtxPushCurrent_v2)                                                    \
	X(cuCtxPopCurrent, 2000, 0, cuCtxPopCurrent)                                                         \
	X(cuCtxPopCurrent, 4000, 0, cuCtxPopCurrent_v2)                                                      \
	X(cuCtxSetCurrent, 4000, 0, cuCtxSetCurrent)                                                         \
	X(cuCtxGetCurrent, 4000, 0, cuCtxGetCurrent)                                                         \
	X(cuCtxGetDevice, 2000, 0, cuCtxGetDevice)                                                           \
	X(cuCtxGetFlags, 7000, 0, cuCtxGetFlags)                                                             \
	X(cuCtxSetFlags, 12010, 0, cuCtxSetFlags)                                                            \
	X(cuCtxGetId, 12000, 0, cuCtxGetId)                                                                  \
	X(cuCtxSynchronize, 2000, 0, cuCtxSynchronize)                                                       \
	X(cuCtxGetApiVersion, 3020, 0, cuCtxGetApiVersion)                                                   \
	X(cuCtxGetLimit, 3010, 0, cuCtxGetLimit)                                                             \
	X(cuCtxSetLimit, 3010, 0, cuCtxSetLimit)                                                             \
	X(cuCtxGetCacheConfig, 3020, 0, cuCtxGetCacheConfig)                                                 \
	X(cuCtxSetCacheConfig, 3020, 0, cuCtxSetCacheConfig)                                                 \
	X(cuCtxGetSharedMemConfig, 4020, 0, cuCtxGetSharedMemConfig)                                         \
	X(cuCtxSetSharedMemConfig, 4020, 0, cuCtxSetSharedMemConfig)                                         \
	X(cuCtxGetStreamPriorityRange, 5050, 0, cuCtxGetStreamPriorityRange)                                 \
	X(cuMemGetInfo, 2000, 0, cuMemGetInfo)                                                               \
	X(cuMemGetInfo, 3020, 0, cuMemGetInfo_v2)                                                            \
	X(cuMemAlloc, 2000, 0, cuMemAlloc)                                                                   \
	X(cuMemAlloc, 3020, 0, cuMemAlloc_v2)                                                                \
	X(cuMemAllocPitch, 2000, 0, cuMemAllocPitch)                                                         \
	X(cuMemAllocPitch, 3020, 0, cuMemAllocPitch_v2)                                                      \
	X(cuMemFree, 2000, 0, cuMemFree)                                                                     \
	X(cuMemFree, 3020, 0, cuMemFree_v2)                                                                  \
	X(cuMemAllocManaged, 6000, 0, cuMemAllocManaged)                                                     \
	X(cuMemAdvise, 8000, 0, cuMemAdvise)                                                                 \
	X(cuMemAdvise, 12020, 0, cuMemAdvise_v2)                                                             \
	X(cuMemPrefetchAsync, 8000, 0, cuMemPrefetchAsync)                                                   \
	X(cuMemPrefetchAsync, 8000, 1, cuMemPrefetchAsync_ptsz)                                              \
	X(cuMemPrefetchAsync, 12020, 0, cuMemPrefetchAsync_v2)                                               \
	X(cuMemPrefetchAsync, 12020, 1, cuMemPrefetchAsync_v2_ptsz)                                          \
	X(cuMemGetAddressRange, 3020, 0, cuMemGetAddressRange_v2)                                            \
	X(cuMemAllocHost, 3020, 0, cuMemAllocHost_v2)                                                        \
	X(cuMemHostAlloc, 2020, 0, cuMemHostAlloc)                                                           \
	X(cuMemFreeHost, 2000, 0, cuMemFreeHost)                                                             \
	X(cuMemHostGetDevicePointer, 3020, 0, cuMemHostGetDevicePointer_v2)                                  \
	X(cuMemHostRegister, 6050, 0, cuMemHostRegister_v2)                                                  \
	X(cuMemHostUnregister, 4000, 0, cuMemHostUnregister)                                                 \
	X(cuMemHostGetFlags, 2030, 0, cuMemHostGetFlags)                                                     \
	X(cuPointerGetAttribute, 4000, 0, cuPointerGetAttribute)                                             \
	X(cuMemAllocAsync, 11020, 0, cuMemAllocAsync)                                                        \
	X(cuMemAllocAsync, 11020, 1, cuMemAllocAsync_ptsz)                                                   \
	X(cuMemAllocFromPoolAsync, 11020, 0, cuMemAllocFromPoolAsync)                                        \
	X(cuMemAllocFromPoolAsync, 11020, 1, cuMemAllocFromPoolAsync_ptsz)                                   \
	X(cuMemFreeAsync, 11020, 0, cuMemFreeAsync)                                                          \
	X(cuMemFreeAsync, 11020, 1, cuMemFreeAsync_ptsz)                                                     \
	X(cuMemPoolCreate, 11020, 0, cuMemPoolCreate)                                                        \
	X(cuMemPoolDestroy, 11020, 0, cuMemPoolDestroy)                                                      \
	X(cuMemPoolTrimTo, 11020, 0, cuMemPoolTrimTo)                                                        \
	X(cuMemPoolSetAttribute, 11020, 0, cuMemPoolSetAttribute)                                            \
	X(cuMemPoolGetAttribute, 11020, 0, cuMemPoolGetAttribute)                                            \
	X(cuMemAddressReserve, 10020, 0, cuMemAddressReserve)                                                \
	X(cuMemAddressFree, 10020, 0, cuMemAddressFree)                                                      \
	X(cuMemCreate, 10020, 0, cuMemCreate)                                                                \
	X(cuMemRelease, 10020, 0, cuMemRelease)                                                              \
	X(cuMemMap, 10020, 0, cuMemMap)                                                                      \
	X(cuMemUnmap, 10020, 0, cuMemUnmap)                                                                  \
	X(cuMemSetAccess, 10020, 0, cuMemSetAccess)                                                          \
	X(cuMemGetAccess, 10020, 0, cuMemGetAccess)                                                          \
	X(cuMemGetAllocationGranularity, 10020, 0, cuMemGetAllocationGranularity)                            \
	X(cuMemGetAllocationPropertiesFromHandle, 10020, 0, cuMemGetAllocationPropertiesFromHandle)          \
	X(cuMemRetainAllocationHandle, 11000, 0, cuMemRetainAllocationHandle)                                \
	X(cuArrayCreate, 3020, 0, cuArrayCreate_v2)                                                          \
	X(cuArray3DCreate, 3020, 0, cuArray3DCreate_v2)                                                      \
	X(cuArrayGetDescriptor, 3020, 0, cuArrayGetDescriptor_v2)                                            \
	X(cuArray3DGetDescriptor, 3020, 0, cuArray3DGetDescriptor_v2)                                        \
	X(cuArrayDestroy, 2000, 0, cuArrayDestroy)                                                           \
	X(cuMemcpy, 4000, 0, cuMemcpy)                                                                       \
	X(cuMemcpy, 7000, 1, cuMemcpy_ptds)                                                                  \
	X(cuMemcpyAsync, 4000, 0, cuMemcpyAsync)                                                             \
	X(cuMemcpyAsync, 7000, 1, cuMemcpyAsync_ptsz)                                                        \
	X(cuMemcpyPeer, 4000, 0, cuMemcpyPeer)                                                               \
	X(cuMemcpyPeer, 7000, 1, cuMemcpyPeer_ptds)                                                          \
	X(cuMemcpyPeerAsync, 4000, 0, cuMemcpyPeerAsync)                                                     \
	X(cuMemcpyPeerAsync, 7000, 1, cuMemcpyPeerAsync_ptsz)                                                \
	X(cuMemcpyHtoD, 3020, 0, cuMemcpyHtoD_v2)                                                            \
	X(cuMemcpyHtoD, 7000, 1, cuMemcpyHtoD_v2_ptds)                                                       \
	X(cuMemcpyDtoH, 3020, 0, cuMemcpyDtoH_v2)                                                            \
	X(cuMemcpyDtoH, 7000, 1, cuMemcpyDtoH_v2_ptds)                                                       \
	X(cuMemcpyDtoD, 3020, 0, cuMemcpyDtoD_v2)                                                            \
	X(cuMemcpyDtoD, 7000, 1, cuMemcpyDtoD_v2_ptds)                                                       \
	X(cuMemcpyHtoDAsync, 3020, 0, cuMemcpyHtoDAsync_v2)                                                  \
	X(cuMemcpyHtoDAsync, 7000, 1, cuMemcpyHtoDAsync_v2_ptsz)                                             \
	X(cuMemcpyDtoHAsync, 3020, 0, cuMemcpyDtoHAsync_v2)                                                  \
	X(cuMemcpyDtoHAsync, 7000, 1, cuMemcpyDtoHAsync_v2_ptsz)                                             \
	X(cuMemcpyDtoDAsync, 3020, 0, cuMemcpyDtoDAsync_v2)                                                  \
	X(cuMemcpyDtoDAsync, 7000, 1, cuMemcpyDtoDAsync_v2_ptsz)                                             \
	X(cuMemcpy2D, 3020, 0, cuMemcpy2D_v2)                                                                \
	X(cuMemcpy2D, 7000, 1, cuMemcpy2D_v2_ptds)                                                           \
	X(cuMemcpy2DAsync, 3020, 0, cuMemcpy2DAsync_v2)                                                      \
	X(cuMemcpy2DAsync, 7000, 1, cuMemcpy2DAsync_v2_ptsz)                                                 \
	X(cuMemsetD8, 3020, 0, cuMemsetD8_v2)                                                                \
	X(cuMemsetD8, 7000, 1, cuMemsetD8_v2_ptds)                                                           \
	X(cuMemsetD16, 3020, 0, cuMemsetD16_v2)                                                              \
	X(cuMemsetD16, 7000, 1, cuMemsetD16_v2_ptds)                                                         \
	X(cuMemsetD32, 3020, 0, cuMemsetD32_v2)                                                              \
	X(cuMemsetD32, 7000, 1, cuMemsetD32_v2_ptds)                                                         \
	X(cuMemsetD8Async, 3020, 0, cuMemsetD8Async)                                                         \
	X(cuMemsetD8Async, 7000, 1, cuMemsetD8Async_ptsz)                                                    \
	X(cuMemsetD16Async, 3020, 0, cuMemsetD16Async)                                                       \
	X(cuMemsetD16Async, 7000, 1, cuMemsetD16Async_ptsz)                                                  \
	X(cuMemsetD32Async, 3020, 0, cuMemsetD32Async)                                                       \
	X(cuMemsetD32Async, 7000, 1, cuMemsetD32Async_ptsz)                                                  \
	X(cuMemsetD2D8, 3020, 0, cuMemsetD2D8_v2)                                                            \
	X(cuMemsetD2D8, 7000, 1, cuMemsetD2D8_v2_ptds)                                                       \
	X(cuMemsetD2D8Async, 3020, 0, cuMemsetD2D8Async)                                                     \
	X(cuMemsetD2D8Async, 7000, 1, cuMemsetD2D8Async_ptsz)                                                \
	X(cuModuleLoad, 2000, 0, cuModuleLoad)                                                               \
	X(cuModuleLoadData, 2000, 0, cuModuleLoadData)                                                       \
	X(cuModuleLoadDataEx, 2010, 0, cuModuleLoadDataEx)                                                   \
	X(cuModuleLoadFatBinary, 2000, 0, cuModuleLoadFatBinary)                                             \
	X(cuModuleUnload, 2000, 0, cuModuleUnload)                                                           \
	X(cuModuleGetFunction, 2000, 0, cuModuleGetFunction)                                                 \
	X(cuModuleGetGlobal, 3020, 0, cuModuleGetGlobal_v2)                                                  \
	X(cuModuleGetLoadingMode, 11070, 0, cuModuleGetLoadingMode)                                          \
	X(cuLibraryLoadData, 12000, 0, cuLibraryLoadData)                                                    \
	X(cuLibraryLoadFromFile, 12000, 0, cuLibraryLoadFromFile)                                            \
	X(cuLibraryUnload, 12000, 0, cuLibraryUnload)                                                        \
	X(cuLibraryGetKernel, 12000, 0, cuLibraryGetKernel)                                                  \
	X(cuLibraryGetModule, 12000, 0, cuLibraryGetModule)                                                  \
	X(cuLibraryGetGlobal, 12000, 0, cuLibraryGetGlobal)                                                  \
	X(cuKernelGetFunction, 12000, 0, cuKernelGetFunction)                                                \
	X(cuKernelGetAttribute, 12000, 0, cuKernelGetAttribute)                                              \
	X(cuKernelSetAttribute, 12000, 0, cuKernelSetAttribute)                                              \
	X(cuKernelSetCacheConfig, 12000, 0, cuKernelSetCacheConfig)                                          \
	X(cuKernelGetName, 12030, 0, cuKernelGetName)                                                        \
	X(cuFuncGetAttribute, 2020, 0, cuFuncGetAttribute)                                                   \
	X(cuFuncSetAttribute, 9000, 0, cuFuncSetAttribute)                                                   \
	X(cuFuncSetCacheConfig, 3000, 0, cuFuncSetCacheConfig)                                               \
	X(cuFuncGetModule, 11000, 0, cuFuncGetModule)                                                        \
	X(cuFuncGetName, 12030, 0, cuFuncGetName)                                                            \
	X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, 0, cuOccupancyMaxActiveBlocksPerMultiprocessor) \
	X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, 7000, 0,                                     \
	  cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)                                              \
	X(cuOccupancyMaxPotentialBlockSize, 6050, 0, cuOccupancyMaxPotentialBlockSize)                       \
	X(cuLaunchKernel, 4000, 0, cuLaunchKernel)                                                           \
	X(cuLaunchKernel, 7000, 1, cuLaunchKernel_ptsz)                                                      \
	X(cuLaunchKernelEx, 11060, 0, cuLaunchKernelEx)                                                      \
	X(cuLaunchKernelEx, 11060, 1, cuLaunchKernelEx_ptsz)                                                 \
	X(cuLaunchCooperativeKernel, 9000, 0, cuLaunchCooperativeKernel)                                     \
	X(cuLaunchCooperativeKernel, 9000, 1, cuLaunchCooperativeKernel_ptsz)                                \
	X(cuLaunchCooperativeKernelMultiDevice, 9000, 0, cuLaunchCooperativeKernelMultiDevice)               \
	X(cuLaunchHostFunc, 10000, 0, cuLaunchHostFunc)                                                      \
	X(cuLaunchHostFunc, 10000, 1, cuLaunchHostFunc_ptsz)                                                 \
	X(cuStreamCreate, 2000, 0, cuStreamCreate)                                                           \
	X(cuStreamCreateWithPriority, 5050, 0, cuStreamCreateWithPriority)                                   \
	X(cuStreamDestroy, 2000, 0, cuStreamDestroy)                                                         \
	X(cuStreamDestroy, 4000, 0, cuStreamDestroy_v2)                                                      \
	X(cuStreamQuery, 2000, 0, cuStreamQuery)                                                             \
	X(cuStreamQuery, 7000, 1, cuStreamQuery_ptsz)                                                        \
	X(cuStreamSynchronize, 2000, 0, cuStreamSynchronize)                                                 \
	X(cuStreamSynchronize, 7000, 1, cuStreamSynchronize_ptsz)                                            \
	X(cuStreamWaitEvent, 3020, 0, cuStreamWaitEvent)                                                     \
	X(cuStreamWaitEvent, 7000, 1, cuStreamWaitEvent_ptsz)                                                \
	X(cuStreamGetPriority, 5050, 0, cuStreamGetPriority)                                                 \
	X(cuStreamGetPriority, 7000, 1, cuStreamGetPriority_ptsz)                                            \
	X(cuStreamGetFlags, 5050, 0, cuStreamGetFlags)                                                       \
	X(cuStreamGetFlags, 7000, 1, cuStreamGetFlags_ptsz)                                                  \
	X(cuStreamGetCtx, 9020, 0, cuStreamGetCtx)                                                           \
	X(cuStreamGetCtx, 9020, 1, cuStreamGetCtx_ptsz)                                                      \
	X(cuStreamGetCtx, 12050, 0, cuStreamGetCtx_v2)                                                       \
	X(cuStreamGetCtx, 12050, 1, cuStreamGetCtx_v2_ptsz)                                                  \
	X(cuStreamGetId, 12000, 0, cuStreamGetId)                                                            \
	X(cuStreamGetId, 12000, 1, cuStreamGetId_ptsz)                                                       \
	X(cuStreamAddCallback, 5000, 0, cuStreamAddCallback)                                                 \
	X(cuStreamAddCallback, 7000, 1, cuStreamAddCallback_ptsz)                                            \
	X(cuStreamBeginCapture, 10000, 0, cuStreamBeginCapture)                                              \
	X(cuStreamBeginCapture, 10000, 1, cuStreamBeginCapture_ptsz)                                         \
	X(cuStreamBeginCapture, 10010, 0, cuStreamBeginCapture_v2)                                           \
	X(cuStreamBeginCapture, 10010, 1, cuStreamBeginCapture_v2_ptsz)                                      \
	X(cuStreamBeginCaptureToGraph, 12030, 0, cuStreamBeginCaptureToGraph)                                \
	X(cuStreamBeginCaptureToGraph, 12030, 1, cuStreamBeginCaptureToGraph_ptsz)                           \
	X(cuStreamEndCapture, 10000, 0, cuStreamEndCapture)                                                  \
	X(cuStreamEndCapture, 10000, 1, cuStreamEndCapture_ptsz)                                             \
	X(cuStreamIsCapturing, 10000, 0, cuStreamIsCapturing)                                                \
	X(cuStreamIsCapturing, 10000, 1, cuStreamIsCapturing_ptsz)                                           \
	X(cuStreamGetCaptureInfo, 10010, 0, cuStreamGetCaptureInfo)                                          \
	X(cuStreamGetCaptureInfo, 10010, 1, cuStreamGetCaptureInfo_ptsz)                                     \
	X(cuStreamGetCaptureInfo, 11030, 0, cuStreamGetCaptureInfo_v2)                                       \
	X(cuStreamGetCaptureInfo, 11030, 1, cuStreamGetCaptureInfo_v2_ptsz)                                  \
	X(cuStreamGetCaptureInfo, 12030, 0, cuStreamGetCaptureInfo_v3)                                       \
	X(cuStreamGetCaptureInfo, 12030, 1, cuStreamGetCaptureInfo_v3_ptsz)                                  \
	X(cuThreadExchangeStreamCaptureMode, 10010, 0, cuThreadExchangeStreamCaptureMode)                    \
	X(cuGraphCreate, 10000, 0, cuGraphCreate)                                                            \
	X(cuGraphDestroy, 10000, 0, cuGraphDestroy)                                                          \
	X(cuGraphGetNodes, 10000, 0, cuGraphGetNodes)                                                        \
	X(cuGraphInstantiate, 10000, 0, cuGraphInstantiate)                                                  \
	X(cuGraphInstantiate, 11000, 0, cuGraphInstantiate_v2)                                               \
	X(cuGraphInstantiate, 12000, 0, cuGraphInstantiateWithFlags)                                         \
	X(cuGraphInstantiateWithFlags, 11040, 0, cuGraphInstantiateWithFlags)                                \
	X(cuGraphInstantiateWithParams, 12000, 0, cuGraphInstantiateWithParams)                              \
	X(cuGraphInstantiateWithParams, 12000, 1, cuGraphInstantiateWithParams_ptsz)                         \
	X(cuGraphLaunch, 10000, 0, cuGraphLaunch)                                                            \
	X(cuGraphLaunch, 10000, 1, cuGraphLaunch_ptsz)                                                       \
	X(cuGraphUpload, 11010, 0, cuGraphUpload)                                                            \
	X(cuGraphUpload, 11010, 1, cuGraphUpload_ptsz)                                                       \
	X(cuGraphExecDestroy, 10000, 0, cuGraphExecDestroy)                                                  \
	X(cuGraphNodeGetType, 10000, 0, cuGraphNodeGetType)                                                  \
	X(cuGraphAddMemAllocNode, 11040, 0, cuGraphAddMemAllocNode)                                          \
	X(cuGraphAddMemFreeNode, 11040, 0, cuGraphAddMemFreeNode)                                            \
	X(cuGraphMemAllocNodeGetParams, 11040, 0, cuGraphMemAllocNodeGetParams)                              \
	X(cuGraphMemFreeNodeGetParams, 11040, 0, cuGraphMemFreeNodeGetParams)                                \
	X(cuDeviceGraphMemTrim, 11040, 0, cuDeviceGraphMemTrim)                                              \
	X(cuDeviceGetGraphMemAttribute, 11040, 0, cuDeviceGetGraphMemAttribute)                              \
	X(cuDeviceSetGraphMemAttribute, 11040, 0, cuDeviceSetGraphMemAttribute)                              \
	X(cuEventCreate, 2000, 0, cuEventCreate)                                                             \
	X(cuEventDestroy, 2000, 0, cuEventDestroy)                                                           \
	X(cuEventDestroy, 4000, 0, cuEventDestroy_v2)                                                        \
	X(cuEventRecord, 2000, 0, cuEventRecord)                                                             \
	X(cuEventRecord, 7000, 1, cuEventRecord_ptsz)                                                        \
	X(cuEventRecordWithFlags, 11010, 0, cuEventRecordWithFlags)                                          \
	X(cuEventRecordWithFlags, 11010, 1, cuEventRecordWithFlags_ptsz)                                     \
	X(cuEventQuery, 2000, 0, cuEventQuery)                                                               \
	X(cuEventSynchronize, 2000, 0, cuEventSynchronize)                                                   \
	X(cuEventElapsedTime, 2000, 0, cuEventElapsedTime)

#define TRAMP(base, ver, pt) sim_tramp_##base##_##ver##_##pt
#if defined(__x86_64__) || defined(__aarch64__)
#define DECL(base, ver, pt, sym) __attribute__((visibility("hidden"))) void TRAMP(base, ver, pt)(void);
PROC_TABLE(DECL)
#undef DECL
#define TNAME(base, ver, pt) "sim_tramp_" #base "_" #ver "_" #pt
/* clang-format off */
#if defined(__x86_64__)
#define JUMP(b, v, p) "\tjmp *" TNAME(b, v, p) "_to(%rip)\n"
#else
#define JUMP(b, v, p) "\tadrp x16, " TNAME(b, v, p) "_to\n\tldr x16, [x16, :lo12:" TNAME(b, v, p) "_to]\n\tbr x16\n"
#endif
#define TRAMP_ASM(b, v, p, sym) \
	".text\n.globl " TNAME(b, v, p) "\n.hidden " TNAME(b, v, p) "\n.type " TNAME(b, v, p) ", %function\n" \
	TNAME(b, v, p) ":\n" JUMP(b, v, p) \
	".section .data.rel.ro\n.balign 8\n" TNAME(b, v, p) "_to:\n\t.quad " #sym "\n"
/* clang-format on */
__asm__(PROC_TABLE(TRAMP_ASM) ".text\n");
#undef TRAMP_ASM
#define HANDED_OUT(base, ver, pt, sym) (void *)TRAMP(base, ver, pt)
#else
#define HANDED_OUT(base, ver, pt, sym) (void *)sym
#endif

struct proc_entry {
	const char *base;
	int version;
	bool per_thread;
	void *fn;
};

#define ENTRY(base, ver, pt, sym) {#base, ver, pt, HANDED_OUT(base, ver, pt, sym)},
static const struct proc_entry table[] = {PROC_TABLE(ENTRY)};
#undef ENTRY

/* Newest entry for base with version <= ver and the given per-thread kind. */
static const struct proc_entry *best(const char *base, int ver, bool pt, bool *name_known)
{
	const struct proc_entry *b = NULL;

	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		if (strcmp(table[i].base, base) != 0)
			continue;
		*name_known = true;
		if (table[i].per_thread == pt && table[i].version <= ver &&
		    (b == NULL || table[i].version > b->version))
			b = &table[i];
	}
	return b;
}

static CUresult lookup(const char *sym, void **pfn, int ver, cuuint64_t flags, CUdriverProcAddressQueryResult *st)
{
	const struct proc_entry *e = NULL;
	bool known = false;

	if (st != NULL)
		*st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	if (sym == NULL || pfn == NULL || ver <= 0 || ver > SIM_DRIVER_VERSION ||
	    (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)))
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
		e = best(sym, ver, true, &known);
	if (e == NULL)
		e = best(sym, ver, false, &known);
	if (e == NULL) {
		if (st != NULL && known)
			*st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
		return CUDA_SUCCESS; /* NULL, and the status says why */
	}
	*pfn = e->fn;
	if (st != NULL)
		*st = CU_GET_PROC_ADDRESS_SUCCESS;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
	return lookup(sym, pfn, ver, flags, NULL);
}

SIM_API CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
				     CUdriverProcAddressQueryResult *status)
{
	return lookup(sym, pfn, ver, flags, status);
}
