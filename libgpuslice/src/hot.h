/* SPDX-License-Identifier: Apache-2.0
 *
 * The few words every allocation and release reads, whichever module owns
 * them, kept in one cache line: each call then misses on one line of ours
 * instead of one per module (the driver's own work between two calls evicts
 * them). Each field belongs to the module named beside it; no other module
 * touches it.
 */
#ifndef GS_HOT_H
#define GS_HOT_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

struct gs_group;
struct gs_shm_file;
struct gs_shm_proc;

struct gs_hot {
	struct gs_group *group;                 /* group.c: the usable group (NULL: none), final once group_done */
	struct gs_shm_file *group_file;         /* group.c: its mapped file, set with group */
	struct gs_shm_proc *_Atomic group_self; /* group.c: our process entry once attached (NULL: not yet) */
	_Atomic int group_done;                 /* group.c: the group was opened (or failed to) */
	_Atomic int group_broken;               /* group_fault.c: bit i: group i's file was truncated under us */
	_Atomic int elastic_managed;            /* elastic.c: managed allocations recorded */
	_Atomic int ptrs_touched;               /* ptrfast.c: the lock-free table was used */
	_Atomic size_t ptrs_spilled;            /* ptrfast.c: entries in the locked table */
	_Atomic uint64_t pool_kept;             /* pool.c: bytes the driver's pools keep, counted */
	_Atomic int graph_execs;                /* graphmem.c: execs with allocation nodes (records) */
	_Atomic int graph_capture;              /* graphmem.c: a stream capture has begun (sticky) */
} __attribute__((aligned(64)));
_Static_assert(sizeof(struct gs_hot) == 64, "gs_hot is one cache line");

GS_HIDDEN extern struct gs_hot gs_hot;

#endif /* GS_HOT_H */
