/* SPDX-License-Identifier: Apache-2.0
 *
 * The CUDA contexts this process allocated in, by a small index, with the
 * device of each: the allocation hooks ask the driver for the current context
 * only (its device the first time), and the pointer table names a context in 8 bits. Append-only (a
 * context's pointer keeps its index); a destroyed context's device is
 * forgotten, in case the driver hands its address out again.
 */
#ifndef GS_CTXMAP_H
#define GS_CTXMAP_H

#include <stdint.h>

#include <gpuslice/shm.h>

#include "internal.h"

#define GS_CTXMAP_MAX 255

/* The index (1..GS_CTXMAP_MAX) of ctx, added if new; 0 for no context
 * (ctx 0), -1 if the map is full. */
GS_HIDDEN int gs_ctx_index(uint64_t ctx);
/* The context at an index from gs_ctx_index (0 for index 0). */
GS_HIDDEN uint64_t gs_ctx_at(int index);
/* The device learnt for the context at index: 0, or -1 if not known yet. */
GS_HIDDEN int gs_ctx_device(int index, CUdevice *dev);
/* Records the device of the context at index (asked of the driver). */
GS_HIDDEN void gs_ctx_learn(int index, CUdevice dev);
/* The group's GPU slot learnt for the context at index (gs_ctx_learn_slot),
 * or -1 if not known yet. */
GS_HIDDEN int gs_ctx_slot(int index);
GS_HIDDEN void gs_ctx_learn_slot(int index, int slot);
/* After a context was destroyed: its device is asked again next time. */
GS_HIDDEN void gs_ctx_forget(uint64_t ctx);

#endif /* GS_CTXMAP_H */
