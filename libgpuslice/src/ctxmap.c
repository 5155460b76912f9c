/* SPDX-License-Identifier: Apache-2.0 */
#include "ctxmap.h"

/* A context with its device and the group's GPU slot of that device (each + 1;
 * 0: not known), side by side: a call reads one line. */
static struct {
	_Atomic uint64_t ctx;
	_Atomic int dev;
	_Atomic int slot;
} cm[GS_CTXMAP_MAX] __attribute__((aligned(64)));

GS_HIDDEN int gs_ctx_index(uint64_t ctx)
{
	if (ctx == 0)
		return 0;
	for (int i = 0; i < GS_CTXMAP_MAX; i++) {
		uint64_t c = atomic_load_explicit(&cm[i].ctx, memory_order_acquire);
		if (c == 0 && atomic_compare_exchange_strong(&cm[i].ctx, &c, ctx))
			return i + 1;
		if (c == ctx)
			return i + 1;
	}
	return -1;
}

GS_HIDDEN uint64_t gs_ctx_at(int index)
{
	return index > 0 && index <= GS_CTXMAP_MAX ? atomic_load_explicit(&cm[index - 1].ctx, memory_order_relaxed) : 0;
}

GS_HIDDEN int gs_ctx_device(int index, CUdevice *dev)
{
	int d = index > 0 && index <= GS_CTXMAP_MAX ? atomic_load_explicit(&cm[index - 1].dev, memory_order_relaxed)
						    : 0;
	if (d <= 0)
		return -1;
	*dev = d - 1;
	return 0;
}

GS_HIDDEN void gs_ctx_learn(int index, CUdevice dev)
{
	if (index > 0 && index <= GS_CTXMAP_MAX && dev >= 0 && dev < 0x7fffffff)
		atomic_store_explicit(&cm[index - 1].dev, dev + 1, memory_order_relaxed);
}

GS_HIDDEN int gs_ctx_slot(int index)
{
	return (index > 0 && index <= GS_CTXMAP_MAX ? atomic_load_explicit(&cm[index - 1].slot, memory_order_relaxed)
						    : 0) -
	       1;
}

GS_HIDDEN void gs_ctx_learn_slot(int index, int slot)
{
	if (index > 0 && index <= GS_CTXMAP_MAX && slot >= 0 && slot < GS_MAX_CONTAINER_GROUPS * GS_SHM_MAX_GPUS)
		atomic_store_explicit(&cm[index - 1].slot, slot + 1, memory_order_relaxed);
}

GS_HIDDEN void gs_ctx_forget(uint64_t ctx)
{
	for (int i = 0; ctx != 0 && i < GS_CTXMAP_MAX; i++) {
		uint64_t c = atomic_load_explicit(&cm[i].ctx, memory_order_acquire);
		if (c == 0)
			return;
		if (c == ctx) {
			atomic_store_explicit(&cm[i].slot, 0, memory_order_relaxed);
			atomic_store_explicit(&cm[i].dev, 0, memory_order_relaxed);
		}
	}
}
