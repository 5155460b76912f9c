/* SPDX-License-Identifier: Apache-2.0
 *
 * Stream-ordered memory pools (pool.c): a block freed into a pool stays on
 * the device, reserved by the pool, until a synchronisation releases what is
 * above the pool's release threshold, cuMemPoolTrimTo releases it, or the pool
 * is destroyed; the pool's next allocations reuse it first. So a freed block
 * stays counted ("kept" by its pool) and is uncounted only when the driver
 * says it let it go: after each of those calls the library asks the driver what
 * the pool still has free (reserved minus used) and uncounts what it kept
 * beyond that. An allocation from a pool takes what the pool keeps first and
 * reserves only the rest on the group.
 *
 * A pool's allocations and frees, and these checks, are serialised per
 * process by one lock (the driver serialises a pool's operations too), so
 * the count is exact whenever no pool call is in flight.
 */
#ifndef GS_POOL_H
#define GS_POOL_H

#include <errno.h>

#include "memcore.h"

/* Pools tracked per process (records); a block's entry names its record + 1. */
#define GS_POOL_RECS 256

struct gs_pool_op {
	struct gs_resv r;
	int idx;       /* the pool's record, -1: untracked (counted like cuMemAlloc) */
	uint64_t n;    /* bytes asked for */
	uint64_t take; /* of them, taken from what the pool keeps */
};

/* Before an allocation of n bytes from pool (current: the current device's
 * current pool). CUDA_SUCCESS: call the driver, then gs_pool_alloc_end; else
 * the error to return without calling it. */
GS_HIDDEN CUresult gs_pool_alloc_begin(CUmemoryPool pool, int current, uint64_t n, struct gs_pool_op *op);
GS_HIDDEN void gs_pool_alloc_end(struct gs_pool_op *op, CUresult rc, CUdeviceptr p);
/* A pool the driver made (cuMemPoolCreate succeeded): where it lives. */
GS_HIDDEN void gs_pool_created(CUmemoryPool pool, const CUmemPoolProps *props);

/* The driver's free of a device pointer (cuMemFree_v2: sync, else
 * cuMemFreeAsync(_ptsz) on stream s). */
struct gs_free_call {
	gs_fn_cuMemFree_v2 sync;
	gs_fn_cuMemFreeAsync async;
	CUstream s;
};

/* After a synchronisation or a trim: uncount what pools no longer keep. One
 * relaxed load when no pool keeps anything. */
GS_HIDDEN void gs_pool_sync_slow(void);
static inline void gs_pool_sync(void)
{
	if (GS_UNLIKELY(atomic_load_explicit(&gs_hot.pool_kept, memory_order_relaxed) != 0))
		gs_pool_sync_slow();
}

/* gs_ptr_free for a pool's block (taken from the table into ent; e: the
 * caller's errno): the pool's record is updated under the pools' lock. */
GS_HIDDEN CUresult gs_ptr_free_pooled(CUdeviceptr p, const struct gs_free_call *call, struct gs_ptrent *ent, int e);

/* Frees p through call and uncounts it (a pool's block: kept by its pool).
 * Inline: cuMemFree_v2's whole path. */
GS_INLINE CUresult gs_ptr_free(CUdeviceptr p, const struct gs_free_call *call)
{
	int e = errno;
	struct gs_ptrent ent;
	int had = gs_ptrs_take(GS_KIND_PTR, (uint64_t)p, &ent);
	if (GS_UNLIKELY(had && ent.refs != 0 && ent.refs <= GS_POOL_RECS))
		return gs_ptr_free_pooled(p, call, &ent, e);
	errno = e;
	CUresult rc = call->sync != NULL ? call->sync(p) : call->async(p, call->s);
	e = errno;
	if (had && GS_LIKELY(rc == CUDA_SUCCESS)) {
		gs_release_entry(&ent);
		gs_elastic_freed(p);
	} else if (had) {
		(void)gs_ptrs_insert(&ent);
	}
	if (rc == CUDA_SUCCESS && call->sync != NULL)
		gs_pool_sync(); /* cuMemFree synchronises */
	errno = e;
	return rc;
}
/* After a context's teardown: the same, and pools the driver no longer knows
 * keep nothing. */
GS_HIDDEN void gs_pool_teardown(void);
/* A pool allocation freed with its context (entry taken from the table). */
GS_HIDDEN void gs_pool_dropped(const struct gs_ptrent *e);
/* After a successful cuMemPoolDestroy: what it kept is released. */
GS_HIDDEN void gs_pool_destroyed(CUmemoryPool pool);

#endif /* GS_POOL_H */
