/* SPDX-License-Identifier: Apache-2.0
 *
 * Context creation and module/library loads: the memory the driver takes
 * for them (a context's own, a module's globals) is charged to the group as
 * the driver reports it (drvmem.h), released with the context or at unload.
 * Past the limit the call is undone (the context destroyed, the module
 * unloaded) and fails with CUDA_ERROR_OUT_OF_MEMORY, so nothing is held.
 */
#include <errno.h>

#include "device.h"
#include "drvmem.h"
#include "memcore.h"

/* A call refused before the driver was asked: its handle NULL, as when the
 * driver's call is undone past the limit. */
static CUresult refused(void **out, CUresult rc)
{
	if (out != NULL)
		*out = NULL;
	return rc;
}

/* After a measured call that made key (ok: it did): rc once charged, or
 * CUDA_ERROR_OUT_OF_MEMORY once undo(key) took it back, past the limit. */
static CUresult charge_or_undo(struct gs_drv_probe *p, CUresult rc, int ok, enum gs_kind kind, uint64_t key,
			       uint64_t ctx, void (*undo)(uint64_t key))
{
	if (gs_drv_end(p, ok, kind, ok ? key : 0, ctx) == CUDA_SUCCESS || !ok)
		return rc;
	int e = errno;
	undo(key);
	errno = e;
	return CUDA_ERROR_OUT_OF_MEMORY;
}

static void ctx_undo(uint64_t key)
{
	gs_fn_cuCtxDestroy_v2 destroy = GS_REAL(cuCtxDestroy_v2);
	if (destroy != NULL)
		(void)destroy((CUcontext)(uintptr_t)key);
}

static void module_undo(uint64_t key)
{
	gs_fn_cuModuleUnload unload = GS_REAL(cuModuleUnload);
	if (unload != NULL)
		(void)unload((CUmodule)(uintptr_t)key);
}

static void library_undo(uint64_t key)
{
	gs_fn_cuLibraryUnload unload = GS_REAL(cuLibraryUnload);
	if (unload != NULL)
		(void)unload((CUlibrary)(uintptr_t)key);
}

/* After a measured context creation: charged, or undone. */
static CUresult ctx_made(struct gs_drv_probe *p, CUresult rc, CUcontext *pctx)
{
	int ok = rc == CUDA_SUCCESS && pctx != NULL;
	uint64_t ctx = ok ? (uint64_t)(uintptr_t)*pctx : 0;
	CUresult out = charge_or_undo(p, rc, ok, GS_KIND_CTXMEM, ctx, ctx, ctx_undo);
	if (out != rc)
		*pctx = NULL;
	return out;
}

#define CTX_CREATE(name, params, args, dev)                           \
	GS_EXPORT CUresult name params                                \
	{                                                             \
		GS_QUIET_WINDOW;                                      \
		gs_fn_##name fn = GS_REAL(name);                      \
		if (fn == NULL)                                       \
			return CUDA_ERROR_NOT_FOUND;                  \
		struct gs_drv_probe p;                                \
		CUresult rc_ = gs_drv_begin(dev, GS_DRV_CONTEXT, &p); \
		if (rc_ != CUDA_SUCCESS)                              \
			return refused((void **)pctx, rc_);           \
		return ctx_made(&p, fn args, pctx);                   \
	}

CTX_CREATE(cuCtxCreate, (CUcontext * pctx, unsigned int flags, CUdevice dev), (pctx, flags, dev), dev)
CTX_CREATE(cuCtxCreate_v2, (CUcontext * pctx, unsigned int flags, CUdevice dev), (pctx, flags, dev), dev)
CTX_CREATE(cuCtxCreate_v3,
	   (CUcontext * pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags, CUdevice dev),
	   (pctx, paramsArray, numParams, flags, dev), dev)
CTX_CREATE(cuCtxCreate_v4, (CUcontext * pctx, void *ctxCreateParams, unsigned int flags, CUdevice dev),
	   (pctx, ctxCreateParams, flags, dev), dev)

/* Loads measure on the current context's device (none: the driver answers,
 * uncounted). */
static CUresult load_begin(struct gs_drv_probe *p, uint64_t *ctx)
{
	CUdevice dev;
	CUcontext cur = NULL;
	gs_fn_cuCtxGetCurrent get = GS_REAL(cuCtxGetCurrent);
	int e = errno;
	if (get == NULL || get(&cur) != CUDA_SUCCESS)
		cur = NULL;
	*ctx = (uint64_t)(uintptr_t)cur;
	if (cur == NULL || gs_current_device(&dev) != 0)
		dev = -1;
	errno = e;
	return gs_drv_begin(dev, GS_DRV_LOAD, p);
}

static CUresult module_loaded(struct gs_drv_probe *p, uint64_t ctx, CUresult rc, CUmodule *m)
{
	int ok = rc == CUDA_SUCCESS && m != NULL;
	CUresult out = charge_or_undo(p, rc, ok, GS_KIND_MODULE, ok ? (uint64_t)(uintptr_t)*m : 0, ctx, module_undo);
	if (out != rc)
		*m = NULL;
	return out;
}

static CUresult library_loaded(struct gs_drv_probe *p, CUresult rc, CUlibrary *l)
{
	int ok = rc == CUDA_SUCCESS && l != NULL;
	CUresult out = charge_or_undo(p, rc, ok, GS_KIND_LIBRARY, ok ? (uint64_t)(uintptr_t)*l : 0, 0, library_undo);
	if (out != rc)
		*l = NULL;
	return out;
}

/* done: module_loaded / library_loaded around the driver's call (fn). */
#define LOAD(name, out, params, done)                      \
	GS_EXPORT CUresult name params                     \
	{                                                  \
		GS_QUIET_WINDOW;                           \
		gs_fn_##name fn = GS_REAL(name);           \
		if (fn == NULL)                            \
			return CUDA_ERROR_NOT_FOUND;       \
		struct gs_drv_probe p;                     \
		uint64_t ctx;                              \
		CUresult rc_ = load_begin(&p, &ctx);       \
		if (rc_ != CUDA_SUCCESS)                   \
			return refused((void **)out, rc_); \
		(void)ctx;                                 \
		return done;                               \
	}

LOAD(cuModuleLoad, module, (CUmodule * module, const char *fname), module_loaded(&p, ctx, fn(module, fname), module))
LOAD(cuModuleLoadData, module, (CUmodule * module, const void *image),
     module_loaded(&p, ctx, fn(module, image), module))
LOAD(cuModuleLoadDataEx, module,
     (CUmodule * module, const void *image, unsigned int numOptions, CUjit_option *options, void **optionValues),
     module_loaded(&p, ctx, fn(module, image, numOptions, options, optionValues), module))
LOAD(cuModuleLoadFatBinary, module, (CUmodule * module, const void *fatCubin),
     module_loaded(&p, ctx, fn(module, fatCubin), module))
LOAD(cuLibraryLoadData, library,
     (CUlibrary * library, const void *code, CUjit_option *jitOptions, void **jitOptionsValues,
      unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues,
      unsigned int numLibraryOptions),
     library_loaded(&p,
		    fn(library, code, jitOptions, jitOptionsValues, numJitOptions, libraryOptions, libraryOptionValues,
		       numLibraryOptions),
		    library))
LOAD(cuLibraryLoadFromFile, library,
     (CUlibrary * library, const char *fileName, CUjit_option *jitOptions, void **jitOptionsValues,
      unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues,
      unsigned int numLibraryOptions),
     library_loaded(&p,
		    fn(library, fileName, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
		       libraryOptionValues, numLibraryOptions),
		    library))

GS_EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
	GS_FREE_BODY(cuModuleUnload, GS_KIND_MODULE, (uintptr_t)hmod, (hmod));
}

GS_EXPORT CUresult cuLibraryUnload(CUlibrary library)
{
	GS_FREE_BODY(cuLibraryUnload, GS_KIND_LIBRARY, (uintptr_t)library, (library));
}
