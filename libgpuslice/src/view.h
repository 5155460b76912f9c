/* SPDX-License-Identifier: Apache-2.0
 * Pure arithmetic of the virtualized memory view and the NVML process list. */
#ifndef GS_VIEW_H
#define GS_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include <gpuslice/shm.h>

#include "internal.h"

struct gs_memview {
	uint64_t total, used, free;
};

/* The view of a GPU with a limit (0 = none: the real numbers unchanged):
 * total = min(limit, real total), used = group usage (at most total),
 * free = min(total - used, real free). */
GS_HIDDEN struct gs_memview gs_view(uint64_t limit, uint64_t group_used, uint64_t real_total, uint64_t real_free);

/* The pid to show a caller in pid namespace my_pidns for a driver (host)
 * pid, or 0 if it is not a live member of the group visible from there. */
GS_HIDDEN uint32_t gs_view_pid(const struct gs_shm_file *f, uint32_t host_pid, uint64_t my_pidns);

/* Keeps the entries (elem bytes each, pid as the first unsigned int) of
 * group members, with pids translated; returns the new count. */
GS_HIDDEN unsigned int gs_filter_procs(const struct gs_shm_file *f, uint64_t my_pidns, void *infos, unsigned int n,
				       size_t elem);
/* The same with the pid at byte offset off of each entry. */
GS_HIDDEN unsigned int gs_filter_procs_at(const struct gs_shm_file *f, uint64_t my_pidns, void *infos, unsigned int n,
					  size_t elem, size_t off);
/* The driver (host) pid of the live member a caller in my_pidns calls
 * shown_pid, or 0 if there is none. */
GS_HIDDEN uint32_t gs_host_pid(const struct gs_shm_file *f, uint32_t shown_pid, uint64_t my_pidns);

#endif /* GS_VIEW_H */
