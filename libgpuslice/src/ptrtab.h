/* SPDX-License-Identifier: Apache-2.0
 *
 * Per-process table of what this process allocated through a counted path:
 * (kind, key) -> (size, GPU slot), so a release uncounts exactly what was
 * counted, exactly once. Open addressing, grows on demand.
 */
#ifndef GS_PTRTAB_H
#define GS_PTRTAB_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

enum gs_kind {
	GS_KIND_NONE = 0,
	GS_KIND_PTR = 1,      /* CUdeviceptr (cuMemAlloc*, cuMemAllocAsync*, ...) */
	GS_KIND_HANDLE = 2,   /* CUmemGenericAllocationHandle (cuMemCreate) */
	GS_KIND_ARRAY = 3,    /* CUarray */
	GS_KIND_MIPMAP = 4,   /* CUmipmappedArray */
	GS_KIND_DEAD = 0xff,  /* tombstone */
};

struct gs_ptrent {
	uint64_t key;
	uint64_t size;
	uint8_t kind;
	uint8_t slot;
};

struct gs_ptrtab {
	pthread_mutex_t mu;
	struct gs_ptrent *ent;
	size_t cap;   /* power of two, 0 before first insert */
	size_t used;  /* live + tombstones */
	size_t live;
};

#define GS_PTRTAB_INIT {.mu = PTHREAD_MUTEX_INITIALIZER}

/* Records an allocation; -1 if out of host memory (then nothing changed). */
GS_HIDDEN int gs_ptrtab_put(struct gs_ptrtab *t, enum gs_kind kind, uint64_t key, uint64_t size, int slot);
/* Removes and returns an allocation: 1 if found, 0 if unknown. */
GS_HIDDEN int gs_ptrtab_take(struct gs_ptrtab *t, enum gs_kind kind, uint64_t key, struct gs_ptrent *out);
GS_HIDDEN size_t gs_ptrtab_count(struct gs_ptrtab *t);
GS_HIDDEN void gs_ptrtab_free(struct gs_ptrtab *t);

/* The process-wide table used by the hooks. */
GS_HIDDEN struct gs_ptrtab *gs_ptrtab_proc(void);
/* fork handling: the child starts with an empty table. */
GS_HIDDEN void gs_ptrtab_fork_prepare(void);
GS_HIDDEN void gs_ptrtab_fork_parent(void);
GS_HIDDEN void gs_ptrtab_fork_child(void);

#endif /* GS_PTRTAB_H */
