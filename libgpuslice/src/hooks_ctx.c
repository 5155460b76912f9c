/* SPDX-License-Identifier: Apache-2.0
 *
 * Context teardown: cuCtxDestroy, cuDevicePrimaryCtxReset and the last
 * cuDevicePrimaryCtxRelease free every allocation of that context (device
 * memory, arrays), so they are uncounted then (cudaDeviceReset, then
 * allocating again, works). VMM physical memory is not bound to a context.
 * The primary context of each device is learnt from cuDevicePrimaryCtxRetain.
 */
#include <errno.h>

#include "ctxmap.h"
#include "memcore.h"

#define PRIMARY_DEVS 64

static _Atomic uint64_t primary[PRIMARY_DEVS];

static uint64_t primary_of(CUdevice dev)
{
	return dev >= 0 && dev < PRIMARY_DEVS ? atomic_load(&primary[dev]) : 0;
}

GS_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	gs_fn_cuDevicePrimaryCtxRetain fn = GS_REAL(cuDevicePrimaryCtxRetain);
	if (fn == NULL)
		return CUDA_ERROR_NOT_FOUND;
	CUresult rc = fn(pctx, dev);
	if (rc == CUDA_SUCCESS && pctx != NULL && dev >= 0 && dev < PRIMARY_DEVS)
		atomic_store(&primary[dev], (uint64_t)(uintptr_t)*pctx);
	return rc;
}

/* After a successful release: uncount if that was the last reference. */
static void released(CUdevice dev)
{
	gs_fn_cuDevicePrimaryCtxGetState st = GS_REAL(cuDevicePrimaryCtxGetState);
	unsigned int flags;
	int active = 1;
	if (st != NULL && st(dev, &flags, &active) == CUDA_SUCCESS && !active)
		gs_release_ctx(primary_of(dev));
}

#define CTX_HOOK(name, params, args, after) GS_AFTER_HOOK(name, params, args, if (rc == CUDA_SUCCESS) after)

CTX_HOOK(cuDevicePrimaryCtxRelease, (CUdevice dev), (dev), released(dev))
CTX_HOOK(cuDevicePrimaryCtxRelease_v2, (CUdevice dev), (dev), released(dev))
CTX_HOOK(cuDevicePrimaryCtxReset, (CUdevice dev), (dev), gs_release_ctx(primary_of(dev)))
CTX_HOOK(cuDevicePrimaryCtxReset_v2, (CUdevice dev), (dev), gs_release_ctx(primary_of(dev)))
static void destroyed(CUcontext ctx)
{
	gs_ctx_forget((uint64_t)(uintptr_t)ctx);
	gs_release_ctx((uint64_t)(uintptr_t)ctx);
}

CTX_HOOK(cuCtxDestroy, (CUcontext ctx), (ctx), destroyed(ctx))
CTX_HOOK(cuCtxDestroy_v2, (CUcontext ctx), (ctx), destroyed(ctx))
