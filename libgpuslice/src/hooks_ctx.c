/* SPDX-License-Identifier: Apache-2.0
 *
 * Context teardown: cuCtxDestroy, cuDevicePrimaryCtxReset and the last
 * cuDevicePrimaryCtxRelease free every allocation of that context (device
 * memory, arrays), so they are uncounted then (cudaDeviceReset, then
 * allocating again, works). VMM physical memory is not bound to a context.
 * Graph execs made in the context go with it, and so does their memory, and
 * what its limits held (ctxlimit.h).
 * The primary context of each device is learnt from cuDevicePrimaryCtxRetain;
 * the retain that creates it is charged what the context takes (drvmem.h).
 */
#include <errno.h>

#include "ctxlimit.h"
#include "ctxmap.h"
#include "drvmem.h"
#include "graphmem.h"
#include "memcore.h"

#define PRIMARY_DEVS 64

static _Atomic uint64_t primary[PRIMARY_DEVS];

static uint64_t primary_of(CUdevice dev)
{
	return dev >= 0 && dev < PRIMARY_DEVS ? atomic_load(&primary[dev]) : 0;
}

static int primary_active(CUdevice dev)
{
	gs_fn_cuDevicePrimaryCtxGetState st = GS_REAL(cuDevicePrimaryCtxGetState);
	unsigned int flags;
	int active = 0, e = errno;
	int known = st != NULL && st(dev, &flags, &active) == CUDA_SUCCESS;
	errno = e;
	return known && active;
}

static CUresult retained(CUresult rc, CUcontext *pctx, CUdevice dev)
{
	if (rc == CUDA_SUCCESS && pctx != NULL && dev >= 0 && dev < PRIMARY_DEVS)
		atomic_store(&primary[dev], (uint64_t)(uintptr_t)*pctx);
	return rc;
}

GS_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	GS_QUIET_WINDOW;
	gs_fn_cuDevicePrimaryCtxRetain fn = GS_REAL(cuDevicePrimaryCtxRetain);
	if (fn == NULL)
		return CUDA_ERROR_NOT_FOUND;
	if (primary_active(dev))
		return retained(fn(pctx, dev), pctx, dev);
	/* The first retain creates the context: what it takes is charged
	 * (drvmem.h); past the limit the retain is undone. */
	struct gs_drv_probe p;
	CUresult rc = gs_drv_begin(dev, GS_DRV_CONTEXT, &p);
	if (rc != CUDA_SUCCESS) { /* its estimate does not fit: the driver is not asked */
		if (pctx != NULL)
			*pctx = NULL;
		return rc;
	}
	rc = fn(pctx, dev);
	int ok = rc == CUDA_SUCCESS && pctx != NULL;
	uint64_t ctx = ok ? (uint64_t)(uintptr_t)*pctx : 0;
	if (gs_drv_end(&p, ok, GS_KIND_CTXMEM, ctx, ctx) == CUDA_SUCCESS || !ok)
		return retained(rc, pctx, dev);
	int e = errno;
	gs_fn_cuDevicePrimaryCtxRelease_v2 release = GS_REAL(cuDevicePrimaryCtxRelease_v2);
	if (release != NULL)
		(void)release(dev);
	*pctx = NULL;
	errno = e;
	return CUDA_ERROR_OUT_OF_MEMORY;
}

/* After a successful release: uncount if that was the last reference. */
static void released(CUdevice dev)
{
	gs_fn_cuDevicePrimaryCtxGetState st = GS_REAL(cuDevicePrimaryCtxGetState);
	unsigned int flags;
	int active = 1;
	if (st != NULL && st(dev, &flags, &active) == CUDA_SUCCESS && !active) {
		gs_release_ctx(primary_of(dev));
		gs_ctxlim_gone(primary_of(dev));
		gs_graph_teardown(primary_of(dev));
	}
}

#define CTX_HOOK(name, params, args, after) GS_AFTER_HOOK(name, params, args, if (rc == CUDA_SUCCESS) after)

CTX_HOOK(cuDevicePrimaryCtxRelease, (CUdevice dev), (dev), released(dev))
CTX_HOOK(cuDevicePrimaryCtxRelease_v2, (CUdevice dev), (dev), released(dev))
/* Reset and destroy free the context's allocations: taken from the pointer
 * table before the driver's call, uncounted after it (memcore.h). */
static CUresult reset(gs_fn_cuDevicePrimaryCtxReset fn, CUdevice dev)
{
	if (fn == NULL)
		return CUDA_ERROR_NOT_FOUND;
	struct gs_ctx_taken t;
	gs_ctx_take(primary_of(dev), &t);
	CUresult rc = fn(dev);
	int e = errno;
	gs_ctx_settle(&t, rc == CUDA_SUCCESS);
	if (rc == CUDA_SUCCESS) {
		gs_ctxlim_gone(primary_of(dev));
		gs_graph_teardown(primary_of(dev));
	}
	errno = e;
	return rc;
}

GS_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
	GS_QUIET_WINDOW;
	return reset(GS_REAL(cuDevicePrimaryCtxReset), dev);
}

GS_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	GS_QUIET_WINDOW;
	return reset(GS_REAL(cuDevicePrimaryCtxReset_v2), dev);
}

static CUresult destroy(gs_fn_cuCtxDestroy fn, CUcontext ctx)
{
	if (fn == NULL)
		return CUDA_ERROR_NOT_FOUND;
	struct gs_ctx_taken t;
	gs_ctx_take((uint64_t)(uintptr_t)ctx, &t);
	CUresult rc = fn(ctx);
	int e = errno;
	if (rc == CUDA_SUCCESS)
		gs_ctx_forget((uint64_t)(uintptr_t)ctx);
	gs_ctx_settle(&t, rc == CUDA_SUCCESS);
	if (rc == CUDA_SUCCESS) {
		gs_ctxlim_gone((uint64_t)(uintptr_t)ctx);
		gs_graph_teardown((uint64_t)(uintptr_t)ctx);
	}
	errno = e;
	return rc;
}

GS_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
	GS_QUIET_WINDOW;
	return destroy(GS_REAL(cuCtxDestroy), ctx);
}

GS_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	GS_QUIET_WINDOW;
	return destroy(GS_REAL(cuCtxDestroy_v2), ctx);
}
