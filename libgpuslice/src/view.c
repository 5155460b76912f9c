/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "account.h"
#include "view.h"

GS_HIDDEN struct gs_memview gs_view(uint64_t limit, uint64_t group_used, uint64_t real_total, uint64_t real_free)
{
	struct gs_memview v = {
		.total = real_total, .free = real_free, .used = real_total > real_free ? real_total - real_free : 0};
	if (limit == 0)
		return v;
	v.total = limit < real_total ? limit : real_total;
	v.used = group_used < v.total ? group_used : v.total;
	v.free = v.total - v.used;
	if (v.free > real_free)
		v.free = real_free;
	return v;
}

GS_HIDDEN uint32_t gs_view_pid(const struct gs_shm_file *f, uint32_t host_pid, uint64_t my_pidns)
{
	if (host_pid == 0)
		return 0;
	for (int i = 0; i < GS_SHM_MAX_PROCS; i++) {
		const struct gs_shm_proc *p = &f->proc[i];
		if (gs_ld32(&p->state) != GS_PROC_LIVE ||
		    (uint32_t)__atomic_load_n(&p->host_pid, __ATOMIC_RELAXED) != host_pid)
			continue;
		if (my_pidns != 0 && my_pidns == f->hdr.host_pidns)
			return host_pid;
		if (my_pidns != 0 && p->pidns == my_pidns)
			return (uint32_t)p->pid;
		return 0;
	}
	return 0;
}

GS_HIDDEN unsigned int gs_filter_procs_at(const struct gs_shm_file *f, uint64_t my_pidns, void *infos, unsigned int n,
					  size_t elem, size_t off)
{
	unsigned char *base = infos;
	unsigned int kept = 0;
	for (unsigned int i = 0; i < n; i++) {
		unsigned char *e = base + (size_t)i * elem;
		unsigned int pid;
		memcpy(&pid, e + off, sizeof(pid));
		uint32_t shown = gs_view_pid(f, pid, my_pidns);
		if (shown == 0)
			continue;
		if (kept != i)
			memmove(base + (size_t)kept * elem, e, elem);
		memcpy(base + (size_t)kept * elem + off, &shown, sizeof(shown));
		kept++;
	}
	return kept;
}

GS_HIDDEN unsigned int gs_filter_procs(const struct gs_shm_file *f, uint64_t my_pidns, void *infos, unsigned int n,
				       size_t elem)
{
	return gs_filter_procs_at(f, my_pidns, infos, n, elem, 0);
}

GS_HIDDEN uint32_t gs_host_pid(const struct gs_shm_file *f, uint32_t shown_pid, uint64_t my_pidns)
{
	if (shown_pid == 0 || my_pidns == 0)
		return 0;
	for (int i = 0; i < GS_SHM_MAX_PROCS; i++) {
		const struct gs_shm_proc *p = &f->proc[i];
		if (gs_ld32(&p->state) != GS_PROC_LIVE)
			continue;
		uint32_t host = (uint32_t)__atomic_load_n(&p->host_pid, __ATOMIC_RELAXED);
		if (host == 0)
			continue;
		if (my_pidns == f->hdr.host_pidns ? host == shown_pid
						  : p->pidns == my_pidns && (uint32_t)p->pid == shown_pid)
			return host;
	}
	return 0;
}
