/* SPDX-License-Identifier: Apache-2.0
 *
 * The calls after which a memory pool may have released what it kept
 * (pool.h): synchronisations (stream, event, context), cuMemPoolTrimTo and
 * cuMemPoolDestroy. Each forwards to the driver, then uncounts what the pools
 * no longer keep (one relaxed load when they keep nothing).
 */
#include <errno.h>

#include "pool.h"

#define AFTER_HOOK(name, params, args, after)        \
	GS_EXPORT CUresult name params               \
	{                                            \
		gs_fn_##name fn = GS_REAL(name);     \
		if (fn == NULL)                      \
			return CUDA_ERROR_NOT_FOUND; \
		CUresult rc = fn args;               \
		int e = errno;                       \
		after;                               \
		errno = e;                           \
		return rc;                           \
	}

AFTER_HOOK(cuStreamSynchronize, (CUstream hStream), (hStream), gs_pool_sync())
AFTER_HOOK(cuStreamSynchronize_ptsz, (CUstream hStream), (hStream), gs_pool_sync())
AFTER_HOOK(cuEventSynchronize, (CUevent hEvent), (hEvent), gs_pool_sync())
AFTER_HOOK(cuCtxSynchronize, (void), (), gs_pool_sync())
AFTER_HOOK(cuMemPoolTrimTo, (CUmemoryPool pool, size_t minBytesToKeep), (pool, minBytesToKeep), gs_pool_sync())
AFTER_HOOK(cuMemPoolDestroy, (CUmemoryPool pool), (pool), if (rc == CUDA_SUCCESS) gs_pool_destroyed(pool))
