/* SPDX-License-Identifier: Apache-2.0
 *
 * This process's view of its group: the mapped group file (or a private
 * anonymous one when GPUSLICE_GROUP_FILE is unset), its entry in the process
 * table, GPU slots by UUID, and reaping of dead members. All of it is lazy
 * (first use) and thread-safe; forked children attach on their own.
 */
#ifndef GS_GROUP_H
#define GS_GROUP_H

#include <gpuslice/shm.h>

#include "hot.h"
#include "internal.h"

struct gs_group;

/* The group, opened once. Returns NULL if it cannot be used (bad file, bad
 * GPUSLICE_MEMORY_LIMIT, ...): a one-line reason was printed once. Its file
 * truncated later breaks its GPUs' slots only (gs_slot_broken): a container's
 * device groups go on. */
GS_HIDDEN struct gs_group *gs_group_get(void);
GS_HIDDEN struct gs_shm_file *gs_group_file(struct gs_group *g);
/* 1 if backed by GPUSLICE_GROUP_FILE (shared with other processes). */
GS_HIDDEN int gs_group_shared(struct gs_group *g);
/* The group's name for messages ("" if none). */
GS_HIDDEN const char *gs_group_name(struct gs_group *g);
/* Our pid namespace inode. */
GS_HIDDEN uint64_t gs_group_pidns(struct gs_group *g);

/* A process slot names a GPU slot of one of this process's groups: the
 * group's index in the process's table (0: its group, GPUSLICE_GROUP_FILE or
 * the container's; 1..: a container's device groups,
 * GS_CONTAINER_DEVICE_GROUPS) x GS_SHM_MAX_GPUS + the GPU's slot in that
 * group's file. Every table of the library keyed by GPU slot holds process
 * slots. */
#define GS_PROC_SLOTS (GS_MAX_CONTAINER_GROUPS * GS_SHM_MAX_GPUS)
static inline int gs_slot_group(int slot)
{
	return slot / GS_SHM_MAX_GPUS;
}
static inline int gs_slot_gpu(int slot)
{
	return slot % GS_SHM_MAX_GPUS;
}

/* The device groups' files and our entries in them (index 0 is unused: the
 * group's own are in gs_hot), each published before a slot of it is handed
 * out. Written by group.c only. */
struct gs_groups_hot {
	struct gs_shm_file *_Atomic file[GS_MAX_CONTAINER_GROUPS];
	struct gs_shm_proc *_Atomic self[GS_MAX_CONTAINER_GROUPS];
} __attribute__((aligned(64)));
GS_HIDDEN extern struct gs_groups_hot gs_ghot;

/* Our process entry in the group of a process slot if this process is
 * attached there and the groups are usable, else NULL (then gs_group_get and
 * gs_group_self say why): the allocation hooks' fast path, which reads the
 * hot line only for the process's own group. */
static inline struct gs_shm_proc *gs_group_attached(int slot)
{
	struct gs_shm_proc *self = atomic_load_explicit(
		GS_LIKELY(slot < GS_SHM_MAX_GPUS) ? &gs_hot.group_self : &gs_ghot.self[gs_slot_group(slot)],
		memory_order_acquire);
	int broken = atomic_load_explicit(&gs_hot.group_broken, memory_order_relaxed);
	return GS_UNLIKELY(broken & (1 << gs_slot_group(slot))) ? NULL : self;
}
/* The GPU slot of a process slot (handed out by gs_group_gpu). */
static inline struct gs_shm_gpu *gs_group_slot(int slot)
{
	struct gs_shm_file *f =
		GS_LIKELY(slot < GS_SHM_MAX_GPUS)
			? gs_hot.group_file
			: atomic_load_explicit(&gs_ghot.file[gs_slot_group(slot)], memory_order_acquire);
	return &f->gpu[gs_slot_gpu(slot)];
}
/* The group of a process slot (handed out by gs_group_gpu). */
GS_HIDDEN struct gs_group *gs_group_of(int slot);
/* 1 in a pod container (the node mounted GS_CONTAINER_GROUP_FILE): its GPUs
 * may be in device groups. */
GS_HIDDEN int gs_group_in_container(void);

/* Our process entry, attached on first use (reaps dead members first).
 * NULL if the process table is full (a message was printed once). */
GS_HIDDEN struct gs_shm_proc *gs_group_self(struct gs_group *g);
/* The process slot for a UUID: in the device group the container's node
 * mounted for it (GS_CONTAINER_DEVICE_GROUPS/<UUID>), else in g (the
 * process's group); claimed with GPUSLICE_MEMORY_LIMIT if new. -1 if the GPU
 * table is full or the device's group cannot be used (message printed once). */
GS_HIDDEN int gs_group_gpu(struct gs_group *g, const char *uuid);
/* Releases the memory of dead members in our pid namespace. Unless force,
 * at most every 100 ms. */
GS_HIDDEN void gs_group_reap(struct gs_group *g, int force);

/* Guards the mapping of a shared group file (group index group) against
 * truncation (SIGBUS): a fault inside it turns that group broken instead of
 * killing the process (group_fault.c); the process's other groups go on. */
GS_HIDDEN void gs_group_fault_guard(void *base, size_t len, const char *path, int group);
/* 1 once group index group's file was truncated under us (says so once per
 * group); its GPUs' allocations and views are refused, the other groups' go on. */
GS_HIDDEN int gs_group_fault_broken(int group);
/* gs_group_fault_broken for group g, and for the group of process slot slot
 * (< 0: no slot, not broken). */
GS_HIDDEN int gs_group_broken(struct gs_group *g);
static inline int gs_slot_broken(int slot)
{
	return slot >= 0 && gs_group_fault_broken(gs_slot_group(slot));
}

/* group_mount.c: whether uuid is usable as a name in one directory (letters,
 * digits, dashes); whether dir is a mount of the node's: read-only and the
 * root of a mount (a container cannot mount: a directory it made, or one its
 * image brought on a read-only root, is no mount root; where the kernel does
 * not say, before 5.8, on another filesystem than the root). */
GS_HIDDEN int gs_uuid_name_ok(const char *uuid);
GS_HIDDEN int gs_node_mount(const char *dir);

/* Pure: is a rate-limited action due at now_ns (last_ns = 0: never ran)? */
GS_HIDDEN int gs_due(uint64_t last_ns, uint64_t now_ns, uint64_t interval_ns);

#endif /* GS_GROUP_H */
