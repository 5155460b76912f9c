/* SPDX-License-Identifier: Apache-2.0
 *
 * Allocation hooks: every path that takes device memory reserves it on the
 * group before calling the driver and records it for the matching release.
 * Device: the current context's. VMM: hooks_vmm.c.
 */
#include <errno.h>

#include "account.h"
#include "device.h"
#include "graphmem.h"
#include "memcore.h"
#include "pool.h"

/* Past an elastic spill group's guarantee, served as managed memory (elastic.h). */
static __attribute__((noinline, cold)) CUresult alloc_managed(gs_fn_cuMemAlloc_v2 fn, struct gs_resv *r,
							      CUdeviceptr *dptr, size_t bytesize)
{
	CUdevice dev;
	if (gs_current_device(&dev) == 0)
		return gs_elastic_alloc_managed(dptr, bytesize, dev, r->slot);
	return fn(dptr, bytesize);
}

static inline CUresult alloc_v2(gs_fn_cuMemAlloc_v2 fn, struct gs_resv *r, CUdeviceptr *dptr, size_t bytesize)
{
	if (GS_UNLIKELY(gs_resv_managed(r)))
		return alloc_managed(fn, r, dptr, bytesize);
	return fn(dptr, bytesize);
}

GS_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	GS_QUIET_WINDOW;
	gs_fn_cuMemAlloc_v2 fn = GS_REAL(cuMemAlloc_v2);
	if (fn == NULL)
		return CUDA_ERROR_NOT_FOUND;
	int e = errno;
	struct gs_resv r;
	CUresult rc = gs_resv_current(bytesize, &r);
	if (rc == CUDA_SUCCESS) {
		errno = e;
		rc = alloc_v2(fn, &r, dptr, bytesize);
		if (rc == CUDA_ERROR_OUT_OF_MEMORY && gs_resv_reclaim(&r))
			rc = alloc_v2(fn, &r, dptr, bytesize);
		e = errno;
		gs_resv_finish(&r, rc, GS_KIND_PTR, rc == CUDA_SUCCESS ? (uint64_t)*dptr : 0);
	}
	errno = e;
	return rc;
}

GS_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	GS_ALLOC_BODY(cuMemAllocManaged, gs_resv_current(bytesize, &r_), GS_KIND_PTR, *dptr, (dptr, bytesize, flags));
}

/* Stream-ordered allocations: what the pool keeps is taken first (pool.h).
 * On a capturing stream: an allocation node, counted with its exec (graphmem.h). */
#define GS_POOL_ALLOC_BODY(name, pool, cur, st, args)                                          \
	GS_QUIET_WINDOW;                                                                       \
	gs_fn_##name fn_ = GS_REAL(name);                                                      \
	if (fn_ == NULL)                                                                       \
		return CUDA_ERROR_NOT_FOUND;                                                   \
	int errno_ = errno;                                                                    \
	if (gs_graph_capturing(st)) {                                                          \
		errno = errno_;                                                                \
		return fn_ args;                                                               \
	}                                                                                      \
	struct gs_pool_op op_;                                                                 \
	CUresult rc_ = gs_pool_alloc_begin((pool), (cur), bytesize, &op_);                     \
	if (rc_ == CUDA_SUCCESS) {                                                             \
		errno = errno_;                                                                \
		rc_ = fn_ args;                                                                \
		if (rc_ == CUDA_ERROR_OUT_OF_MEMORY && gs_resv_reclaim(&op_.r))                \
			rc_ = fn_ args;                                                        \
		errno_ = errno;                                                                \
		gs_pool_alloc_end(&op_, rc_, rc_ == CUDA_SUCCESS && dptr != NULL ? *dptr : 0); \
	}                                                                                      \
	errno = errno_;                                                                        \
	return rc_

GS_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	GS_POOL_ALLOC_BODY(cuMemAllocAsync, NULL, 1, hStream, (dptr, bytesize, hStream));
}

GS_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	GS_POOL_ALLOC_BODY(cuMemAllocAsync_ptsz, NULL, 1, GS_PT(hStream), (dptr, bytesize, hStream));
}

GS_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
	GS_POOL_ALLOC_BODY(cuMemAllocFromPoolAsync, pool, 0, hStream, (dptr, bytesize, pool, hStream));
}

GS_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
	GS_POOL_ALLOC_BODY(cuMemAllocFromPoolAsync_ptsz, pool, 0, GS_PT(hStream), (dptr, bytesize, pool, hStream));
}

/* The pitch is known only after the call: reserve the worst case first (rows
 * padded to the driver's pitch alignment, 512 bytes), then settle on pitch *
 * Height, so concurrent calls never take the device past the limit. A pitch
 * beyond that bound is settled too, or freed and refused. */
#define GS_PITCH_ALIGN 512u

static uint64_t pitch_bound(size_t width, size_t height)
{
	uint64_t w = width > UINT64_MAX - GS_PITCH_ALIGN
			     ? UINT64_MAX
			     : ((uint64_t)width + GS_PITCH_ALIGN - 1) / GS_PITCH_ALIGN * GS_PITCH_ALIGN;
	return gs_array_bytes(w, height, 1, CU_AD_FORMAT_UNSIGNED_INT8, 1);
}

GS_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
				      unsigned int ElementSizeBytes)
{
	GS_QUIET_WINDOW;
	gs_fn_cuMemAllocPitch_v2 fn = GS_REAL(cuMemAllocPitch_v2);
	if (fn == NULL)
		return CUDA_ERROR_NOT_FOUND;
	int e = errno;
	struct gs_resv r;
	CUresult rc = gs_resv_current(pitch_bound(WidthInBytes, Height), &r);
	if (rc == CUDA_SUCCESS) {
		errno = e;
		rc = fn(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
		e = errno;
		if (rc == CUDA_SUCCESS && r.active &&
		    gs_resv_adjust(&r, gs_array_bytes(*pPitch, Height, 1, CU_AD_FORMAT_UNSIGNED_INT8, 1)) != 0) {
			gs_fn_cuMemFree_v2 free_fn = GS_REAL(cuMemFree_v2);
			if (free_fn != NULL)
				(void)free_fn(*dptr);
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		}
		gs_resv_finish(&r, rc, GS_KIND_PTR, rc == CUDA_SUCCESS ? *dptr : 0);
	}
	errno = e;
	return rc;
}

GS_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	GS_QUIET_WINDOW;
	struct gs_free_call c = {.sync = GS_REAL(cuMemFree_v2)};
	return c.sync == NULL ? CUDA_ERROR_NOT_FOUND : gs_ptr_free(dptr, &c);
}

/* On a capturing stream: a free node, nothing freed now. */
static CUresult free_async(struct gs_free_call *c, CUdeviceptr dptr)
{
	if (c->async == NULL)
		return CUDA_ERROR_NOT_FOUND;
	int e = errno;
	if (gs_graph_capturing(c->s)) {
		errno = e;
		return c->async(dptr, c->s);
	}
	errno = e;
	return gs_ptr_free(dptr, c);
}

GS_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	GS_QUIET_WINDOW;
	struct gs_free_call c = {.async = GS_REAL(cuMemFreeAsync), .s = hStream};
	return free_async(&c, dptr);
}

GS_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	GS_QUIET_WINDOW;
	struct gs_free_call c = {.async = GS_REAL(cuMemFreeAsync_ptsz), .s = GS_PT(hStream)};
	return free_async(&c, dptr);
}

static uint64_t array2d_bytes(const CUDA_ARRAY_DESCRIPTOR *d)
{
	return d ? gs_array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels) : 0;
}

static uint64_t array3d_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	return d ? gs_array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels) : 0;
}

GS_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
	GS_ALLOC_BODY(cuArrayCreate_v2, gs_resv_current(array2d_bytes(pAllocateArray), &r_), GS_KIND_ARRAY,
		      (uintptr_t)*pHandle, (pHandle, pAllocateArray));
}

GS_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
	GS_ALLOC_BODY(cuArray3DCreate_v2, gs_resv_current(array3d_bytes(pAllocateArray), &r_), GS_KIND_ARRAY,
		      (uintptr_t)*pHandle, (pHandle, pAllocateArray));
}

GS_EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
	GS_FREE_BODY(cuArrayDestroy, GS_KIND_ARRAY, (uintptr_t)hArray, (hArray));
}

static uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels)
{
	return d ? gs_mipmap_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, levels) : 0;
}

GS_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
					  unsigned int numMipmapLevels)
{
	GS_ALLOC_BODY(cuMipmappedArrayCreate, gs_resv_current(mipmap_bytes(pMipmappedArrayDesc, numMipmapLevels), &r_),
		      GS_KIND_MIPMAP, (uintptr_t)*pHandle, (pHandle, pMipmappedArrayDesc, numMipmapLevels));
}

GS_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
	GS_FREE_BODY(cuMipmappedArrayDestroy, GS_KIND_MIPMAP, (uintptr_t)hMipmappedArray, (hMipmappedArray));
}
