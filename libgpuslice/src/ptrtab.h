/* SPDX-License-Identifier: Apache-2.0
 *
 * A locked table of what this process allocated through a counted path:
 * (kind, key) -> (size, GPU slot), so a release uncounts exactly what was
 * counted, exactly once. Open addressing, grows on demand. The allocation
 * hooks use it through ptrfast.h; the VMM hooks directly.
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
	GS_KIND_VHANDLE = 5,  /* VMM handle -> physical id (aux), refs = releases owed */
	GS_KIND_PHYS = 6,     /* VMM physical memory by id: counted size, refs = handles + mappings */
	GS_KIND_VMAP = 7,     /* VMM mapping at a VA (key): size mapped, physical id (aux) */
	GS_KIND_CTXMEM = 8,   /* what a context itself holds (key and aux: the CUcontext; drvmem.h) */
	GS_KIND_MODULE = 9,   /* a CUmodule's globals (aux: its context) */
	GS_KIND_LIBRARY = 10, /* a CUlibrary's globals (aux: 0, no context) */
	GS_KIND_DEAD = 0xff,  /* tombstone */
};

struct gs_ptrent {
	uint64_t key;
	uint64_t size;
	uint64_t aux;  /* PTR/ARRAY/MIPMAP/CTXMEM/MODULE: the CUcontext it was made in; VMM kinds: a physical id */
	uint32_t refs; /* VMM kinds only */
	uint8_t kind;
	uint8_t slot;
};

struct gs_ptrtab {
	pthread_mutex_t mu;
	struct gs_ptrent *ent;
	size_t cap;  /* power of two, 0 before first insert */
	size_t used; /* live + tombstones */
	size_t live;
};

#define GS_PTRTAB_INIT                          \
	{                                       \
		.mu = PTHREAD_MUTEX_INITIALIZER \
	}

/* Records an allocation; -1 if out of host memory (then nothing changed). */
GS_HIDDEN int gs_ptrtab_put(struct gs_ptrtab *t, enum gs_kind kind, uint64_t key, uint64_t size, int slot);
/* Records (or replaces) a whole entry; -1 if out of host memory. */
GS_HIDDEN int gs_ptrtab_insert(struct gs_ptrtab *t, const struct gs_ptrent *e);
/* Copies an entry without removing it: 1 if found, 0 if unknown. */
GS_HIDDEN int gs_ptrtab_get(struct gs_ptrtab *t, enum gs_kind kind, uint64_t key, struct gs_ptrent *out);
/* Removes every entry match() accepts, calling each(entry, arg) for it under
 * the table's lock (each must not use the table). Returns how many. */
GS_HIDDEN size_t gs_ptrtab_drain(struct gs_ptrtab *t, int (*match)(const struct gs_ptrent *, void *),
				 void (*each)(const struct gs_ptrent *, void *), void *arg);
/* Adds delta to an entry's refs: -1 if unknown, else the new count (the
 * entry, copied to out, is removed when that is 0). */
GS_HIDDEN int gs_ptrtab_ref(struct gs_ptrtab *t, enum gs_kind kind, uint64_t key, int delta, struct gs_ptrent *out);
/* Removes and returns an allocation: 1 if found, 0 if unknown. */
GS_HIDDEN int gs_ptrtab_take(struct gs_ptrtab *t, enum gs_kind kind, uint64_t key, struct gs_ptrent *out);
GS_HIDDEN size_t gs_ptrtab_count(struct gs_ptrtab *t);
GS_HIDDEN void gs_ptrtab_free(struct gs_ptrtab *t);

/* The process-wide table of the VMM handles / physical memory / mappings
 * (allocations: ptrfast.h). */
GS_HIDDEN struct gs_ptrtab *gs_ptrtab_vmm(void);
/* Serialises the VMM hooks (a lookup, the driver call and the update are one step). */
GS_HIDDEN void gs_vmm_lock(void);
GS_HIDDEN void gs_vmm_unlock(void);
/* fork handling: the child starts with an empty table. */
GS_HIDDEN void gs_ptrtab_fork_prepare(void);
GS_HIDDEN void gs_ptrtab_fork_parent(void);
GS_HIDDEN void gs_ptrtab_fork_child(void);

#endif /* GS_PTRTAB_H */
