/* SPDX-License-Identifier: Apache-2.0
 *
 * The virtualized view: with a limit, CUDA and NVML report the limit as the
 * total and the group's usage as used. NVML lists only the group's processes,
 * with the pids the caller sees.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "account.h"
#include "elastic.h"
#include "device.h"
#include "memcore.h"
#include "view.h"

/* The group's GPU slot of a CUDA device or NVML handle, with usage fresh
 * (dead members reaped). -1 when the view stays the real one. */
static struct gs_shm_gpu *view_gpu(int slot)
{
	if (slot < 0)
		return NULL;
	gs_group_reap(gs_group_of(slot), 0);
	return gs_group_slot(slot);
}

/* The current device's view (its process slot slot) in place of the
 * driver's free and total; the process joins the slot's group (a process
 * with a context is listed by NVML, in its device's group). */
static void view_current(struct gs_group *g, int slot, size_t *free, size_t *total)
{
	(void)gs_group_self(slot >= 0 ? gs_group_of(slot) : g);
	struct gs_shm_gpu *gpu = view_gpu(slot);
	if (gpu != NULL) {
		struct gs_memview v = gs_view(gs_elastic_view_limit(gpu, slot), gs_ld64(&gpu->used), *total, *free);
		*total = v.total;
		*free = v.free;
	}
}

GS_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	gs_fn_cuMemGetInfo_v2 fn = GS_REAL(cuMemGetInfo_v2);
	if (fn == NULL)
		return CUDA_ERROR_NOT_FOUND;
	CUresult rc = fn(free, total);
	if (rc != CUDA_SUCCESS || free == NULL || total == NULL)
		return rc;
	int e = errno;
	CUdevice dev;
	struct gs_group *g = gs_group_get();
	if (g == NULL) {
		rc = GS_BROKEN_RC;
	} else if (gs_current_device(&dev) == 0) {
		int slot = gs_slot_cuda(g, dev);
		if (gs_slot_broken(slot))
			rc = GS_BROKEN_RC;
		else
			view_current(g, slot, free, total);
	}
	errno = e;
	return rc;
}

GS_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	gs_fn_cuDeviceTotalMem_v2 fn = GS_REAL(cuDeviceTotalMem_v2);
	if (fn == NULL)
		return CUDA_ERROR_NOT_FOUND;
	CUresult rc = fn(bytes, dev);
	if (rc != CUDA_SUCCESS || bytes == NULL)
		return rc;
	int e = errno;
	struct gs_group *g = gs_group_get();
	if (g == NULL) {
		rc = GS_BROKEN_RC;
	} else {
		int slot = gs_slot_cuda(g, dev);
		if (gs_slot_broken(slot)) {
			rc = GS_BROKEN_RC;
		} else if (slot >= 0) {
			uint64_t limit = gs_elastic_view_limit(gs_group_slot(slot), slot);
			if (limit != 0 && limit < *bytes)
				*bytes = limit;
		}
	}
	errno = e;
	return rc;
}

static unsigned int sat32(size_t v)
{
	return v > 0xffffffffu ? 0xffffffffu : (unsigned int)v;
}

/* The 32-bit forms show the same view as the _v2 hooks above (the driver's
 * own v1 call would show the card), saturated as the driver saturates. Only
 * a driver without the _v2 export answers with its v1 call. */
GS_EXPORT CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
	if (GS_REAL(cuMemGetInfo_v2) == NULL) {
		gs_fn_cuMemGetInfo fn = GS_REAL(cuMemGetInfo);
		return fn != NULL ? fn(free, total) : CUDA_ERROR_NOT_FOUND;
	}
	if (free == NULL || total == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	size_t f = 0, t = 0;
	CUresult rc = cuMemGetInfo_v2(&f, &t);
	if (rc == CUDA_SUCCESS) {
		*free = sat32(f);
		*total = sat32(t);
	}
	return rc;
}

GS_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
	if (GS_REAL(cuDeviceTotalMem_v2) == NULL) {
		gs_fn_cuDeviceTotalMem fn = GS_REAL(cuDeviceTotalMem);
		return fn != NULL ? fn(bytes, dev) : CUDA_ERROR_NOT_FOUND;
	}
	if (bytes == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	size_t b = 0;
	CUresult rc = cuDeviceTotalMem_v2(&b, dev);
	if (rc == CUDA_SUCCESS)
		*bytes = sat32(b);
	return rc;
}

/* NVML: returns the view for device, or 0 (real numbers stay) / -1 (broken). */
static int nvml_view(nvmlDevice_t device, unsigned long long *total, unsigned long long *used, unsigned long long *free)
{
	struct gs_group *g = gs_group_get();
	if (g == NULL)
		return -1;
	int slot = gs_slot_nvml(g, device);
	if (gs_slot_broken(slot))
		return -1;
	struct gs_shm_gpu *gpu = view_gpu(slot);
	if (gpu == NULL || gs_ld64(&gpu->limit) == 0)
		return 0;
	struct gs_memview v = gs_view(gs_elastic_view_limit(gpu, slot), gs_ld64(&gpu->used), *total, *free);
	*total = v.total;
	*used = v.used;
	*free = v.total - v.used;
	return 1;
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	gs_fn_nvmlDeviceGetMemoryInfo fn = GS_REAL(nvmlDeviceGetMemoryInfo);
	if (fn == NULL)
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	nvmlReturn_t rc = fn(device, memory);
	if (rc != NVML_SUCCESS || memory == NULL)
		return rc;
	int e = errno;
	if (nvml_view(device, &memory->total, &memory->used, &memory->free) < 0)
		rc = NVML_ERROR_UNKNOWN;
	errno = e;
	return rc;
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	gs_fn_nvmlDeviceGetMemoryInfo_v2 fn = GS_REAL(nvmlDeviceGetMemoryInfo_v2);
	if (fn == NULL)
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	nvmlReturn_t rc = fn(device, memory);
	if (rc != NVML_SUCCESS || memory == NULL)
		return rc;
	int e = errno;
	int r = nvml_view(device, &memory->total, &memory->used, &memory->free);
	if (r < 0)
		rc = NVML_ERROR_UNKNOWN;
	else if (r > 0)
		memory->reserved = 0; /* inside the limit, nothing is set aside */
	errno = e;
	return rc;
}
