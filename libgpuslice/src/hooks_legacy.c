/* SPDX-License-Identifier: Apache-2.0
 *
 * Legacy entry points the library neither counts nor gates: the CUDA < 3.2
 * allocations with 32-bit sizes (cuMemAlloc, cuMemAllocPitch, cuArrayCreate,
 * cuArray3DCreate without _v2) and the pre-4.0 launches (cuLaunch,
 * cuLaunchGrid, cuLaunchGridAsync). Programs built since CUDA 4.0 call the
 * _v2 allocations and cuLaunchKernel; a program that looks the old names up
 * (dlsym, cuGetProcAddress with an old version) would take memory past the
 * group's limit or run past its time slice, so each is refused with
 * CUDA_ERROR_NOT_SUPPORTED and one line, and the driver is never called.
 */
#include <errno.h>

#include "internal.h"
#include "log.h"

static CUresult refuse(const char *name)
{
	static _Atomic int said;
	int e = errno;
	gs_log_once(&said, "%s (a legacy entry point) refused: use its _v2 or cuLaunchKernel form", name);
	errno = e;
	return CUDA_ERROR_NOT_SUPPORTED;
}

GS_EXPORT CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize)
{
	(void)dptr, (void)bytesize;
	return refuse("cuMemAlloc");
}

GS_EXPORT CUresult cuMemAllocPitch(unsigned int *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
				   unsigned int Height, unsigned int ElementSizeBytes)
{
	(void)dptr, (void)pPitch, (void)WidthInBytes, (void)Height, (void)ElementSizeBytes;
	return refuse("cuMemAllocPitch");
}

GS_EXPORT CUresult cuArrayCreate(CUarray *pHandle, const void *pAllocateArray)
{
	(void)pHandle, (void)pAllocateArray;
	return refuse("cuArrayCreate");
}

GS_EXPORT CUresult cuArray3DCreate(CUarray *pHandle, const void *pAllocateArray)
{
	(void)pHandle, (void)pAllocateArray;
	return refuse("cuArray3DCreate");
}

GS_EXPORT CUresult cuLaunch(CUfunction f)
{
	(void)f;
	return refuse("cuLaunch");
}

GS_EXPORT CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height)
{
	(void)f, (void)grid_width, (void)grid_height;
	return refuse("cuLaunchGrid");
}

GS_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream)
{
	(void)f, (void)grid_width, (void)grid_height, (void)hStream;
	return refuse("cuLaunchGridAsync");
}
