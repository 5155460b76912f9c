/* SPDX-License-Identifier: Apache-2.0
 * Process-local table of device address ranges (fake addresses, no host
 * backing except managed and host memory), sorted by base address. */
#ifndef GPUSLICE_SIM_ALLOC_H
#define GPUSLICE_SIM_ALLOC_H

#include "sim.h"

enum sim_alloc_kind {
	SIM_AK_DEVICE,   /* cuMemAlloc*, pitch, async: charged */
	SIM_AK_MANAGED,  /* host-backed (mmap NORESERVE): charged */
	SIM_AK_HOST,     /* pinned host memory: not charged */
	SIM_AK_RESERVED, /* cuMemAddressReserve VA range: not charged */
	SIM_AK_GRAPH,    /* a graph allocation's VA (graph_mem.c): not charged */
};

struct sim_alloc {
	CUdeviceptr base;
	size_t size;
	int dev; /* simulator device, -1 for host */
	enum sim_alloc_kind kind;
	struct sim_ctx *ctx;
	void *pool;
	unsigned flags;
	size_t on_host; /* managed: bytes prefetched to the host (not charged on dev) */
};

/* Charges size on dev (unless host/reserved), assigns an address (or uses
 * a->base for host-backed kinds) and records it. */
SIM_HIDDEN CUresult sim_alloc_add(struct sim_alloc *a, size_t align);
/* Removes the allocation starting exactly at base, if its kind is in
 * kinds_mask (1 << kind); releases the charge. *out gets the record. */
SIM_HIDDEN CUresult sim_alloc_remove(CUdeviceptr base, unsigned kinds_mask, struct sim_alloc *out);
/* Finds the allocation containing p. */
SIM_HIDDEN bool sim_alloc_find(CUdeviceptr p, struct sim_alloc *out);
/* Managed memory containing p: moves up to n bytes to the host (to_host)
 * or back to its device (charged; CUDA_ERROR_OUT_OF_MEMORY if full). */
SIM_HIDDEN CUresult sim_alloc_migrate(CUdeviceptr p, size_t n, bool to_host);
/* Charges / uncharges without an address (VMM handles, arrays). */
SIM_HIDDEN CUresult sim_charge(int dev, size_t size);
SIM_HIDDEN void sim_uncharge(int dev, size_t size);

/* Pools (pool.c). A pool allocation of n bytes freed (it stays reserved in
 * its pool until a synchronisation or trim releases it), or freed with its
 * context (released at once). */
SIM_HIDDEN void sim_pool_freed(void *pool, size_t n);
SIM_HIDDEN void sim_pool_dropped(void *pool, size_t n);

#endif
