/* SPDX-License-Identifier: Apache-2.0
 *
 * What this process allocated through the counted allocation paths (device
 * pointers, arrays, mipmapped arrays): (kind, key) -> (size, GPU slot,
 * context), so a release uncounts exactly what was counted, exactly once.
 * Without locks for what fits a fixed table (the hooks' fast path); the rest
 * goes to a locked table (ptrtab.h).
 */
#ifndef GS_PTRFAST_H
#define GS_PTRFAST_H

#include "ptrtab.h"

/* Records an allocation (a second record of a key the driver reused, whose
 * release was missed, is kept beside the first); -1 if out of host memory. */
GS_HIDDEN int gs_ptrs_insert(const struct gs_ptrent *e);
/* The same for an entry whose context (e->aux) has index ci in the context
 * map (ctxmap.h), known to the caller; ci < 0: looked up. */
GS_HIDDEN int gs_ptrs_insert_ci(const struct gs_ptrent *e, int ci);
/* Removes and returns an allocation: 1 if found, 0 if unknown. */
GS_HIDDEN int gs_ptrs_take(enum gs_kind kind, uint64_t key, struct gs_ptrent *out);
/* Removes every entry match() accepts, calling each(entry, arg) for it (each
 * must not use the table). match() looks at copies, maybe twice per entry,
 * while other threads use the table (it must only read its arguments);
 * entries it does not accept stay visible to them. Returns how many. */
GS_HIDDEN size_t gs_ptrs_drain(int (*match)(const struct gs_ptrent *, void *),
			       void (*each)(const struct gs_ptrent *, void *), void *arg);
GS_HIDDEN size_t gs_ptrs_count(void);
/* fork handling: the child starts with an empty table. */
GS_HIDDEN void gs_ptrs_fork_prepare(void);
GS_HIDDEN void gs_ptrs_fork_parent(void);
GS_HIDDEN void gs_ptrs_fork_child(void);

#endif /* GS_PTRFAST_H */
