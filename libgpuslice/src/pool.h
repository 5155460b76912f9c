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

#include "memcore.h"

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

/* The driver's free of a device pointer (cuMemFree_v2: sync, else
 * cuMemFreeAsync(_ptsz) on stream s). */
struct gs_free_call {
	gs_fn_cuMemFree_v2 sync;
	gs_fn_cuMemFreeAsync async;
	CUstream s;
};
/* Frees p through call and uncounts it (a pool's block: kept by its pool). */
GS_HIDDEN CUresult gs_ptr_free(CUdeviceptr p, const struct gs_free_call *call);

/* After a synchronisation or a trim: uncount what pools no longer keep. One
 * relaxed load when no pool keeps anything. */
GS_HIDDEN void gs_pool_sync(void);
/* After a context's teardown: the same, and pools the driver no longer knows
 * keep nothing. */
GS_HIDDEN void gs_pool_teardown(void);
/* A pool allocation freed with its context (entry taken from the table). */
GS_HIDDEN void gs_pool_dropped(const struct gs_ptrent *e);
/* After a successful cuMemPoolDestroy: what it kept is released. */
GS_HIDDEN void gs_pool_destroyed(CUmemoryPool pool);

#endif /* GS_POOL_H */
