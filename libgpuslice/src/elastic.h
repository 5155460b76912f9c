/* SPDX-License-Identifier: Apache-2.0
 *
 * Elastic memory (docs/elastic-memory.md). A GPU slot marked elastic by the
 * time-slice daemon (or by GPUSLICE_MEMORY_ELASTIC at its creation) has a guarantee
 * (slot->min) and an allowance (slot->limit: min plus what the daemon lent).
 * Up to the allowance nothing changes; past it the library asks the daemon
 * for a borrow on a connection of its own (one request at a time, answered
 * through a reader thread that also takes spill orders). In a spill group,
 * cuMemAlloc past the guarantee is served as managed memory preferring the
 * device; a spill order moves part of it to host memory (advise + prefetch).
 */
#ifndef GS_ELASTIC_H
#define GS_ELASTIC_H

#include <stdint.h>

#include <gpuslice/shm.h>

#include "hot.h"
#include "internal.h"

/* Asks the daemon to lend size more bytes on slot (reclaim != 0: room for an
 * allocation within the guarantee that the device refused). 0: granted (the
 * new allowance is in the slot); -1: refused, one line printed. */
GS_HIDDEN int gs_elastic_borrow(struct gs_shm_gpu *gpu, uint64_t size, int reclaim);
/* Whether an allocation that took the slot's usage to used_after should be
 * managed memory (a spill group past its guarantee). */
GS_HIDDEN int gs_elastic_wants_managed(const struct gs_shm_gpu *gpu, uint64_t used_after);
/* Allocates size bytes of managed memory preferring dev, recorded as
 * spillable on slot. */
GS_HIDDEN CUresult gs_elastic_alloc_managed(CUdeviceptr *dptr, size_t size, CUdevice dev, int slot);
/* What the group's view reports as the card's size on slot: its allowance,
 * or for an elastic slot what it could hold now (guarantee plus what it
 * could borrow, asked of the daemon at most every 100 ms). */
GS_HIDDEN uint64_t gs_elastic_view_limit(struct gs_shm_gpu *gpu, int slot);
/* A pointer freed: if it was managed memory, drop it (and its counts). */
GS_HIDDEN void gs_elastic_freed_slow(CUdeviceptr ptr);
static inline void gs_elastic_freed(CUdeviceptr ptr)
{
	if (GS_UNLIKELY(atomic_load_explicit(&gs_hot.elastic_managed, memory_order_relaxed) != 0))
		gs_elastic_freed_slow(ptr);
}

#endif /* GS_ELASTIC_H */
