/* SPDX-License-Identifier: Apache-2.0
 *
 * The calls after which a memory pool may have released what it kept
 * (pool.h): synchronisations (stream, event, context), cuMemPoolTrimTo and
 * cuMemPoolDestroy. Each forwards to the driver, then uncounts what the pools
 * no longer keep (one relaxed load when they keep nothing).
 */
#include <errno.h>

#include "pool.h"
#include "quiet.h"

GS_AFTER_HOOK(cuStreamSynchronize, (CUstream hStream), (hStream), gs_pool_sync())
GS_AFTER_HOOK(cuStreamSynchronize_ptsz, (CUstream hStream), (hStream), gs_pool_sync())
GS_AFTER_HOOK(cuEventSynchronize, (CUevent hEvent), (hEvent), gs_pool_sync())
GS_AFTER_HOOK(cuCtxSynchronize, (void), (), gs_pool_sync())
GS_AFTER_HOOK(cuMemPoolCreate, (CUmemoryPool * pool, const CUmemPoolProps *poolProps), (pool, poolProps),
	      if (rc == CUDA_SUCCESS && pool != NULL && poolProps != NULL) gs_pool_created(*pool, poolProps))
GS_AFTER_HOOK(cuMemPoolTrimTo, (CUmemoryPool pool, size_t minBytesToKeep), (pool, minBytesToKeep), gs_pool_sync())
GS_AFTER_HOOK(cuMemPoolDestroy, (CUmemoryPool pool), (pool), if (rc == CUDA_SUCCESS) gs_pool_destroyed(pool))
