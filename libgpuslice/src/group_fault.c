/* SPDX-License-Identifier: Apache-2.0
 *
 * A group file truncated under a member (by anyone who can write it) must not
 * crash the member: touching the mapping past the new end of file raises
 * SIGBUS. Our handler recognises a fault inside a group mapping (the
 * process's group's or a device group's), replaces the mapping with zeroed
 * private pages (the faulting access then completes harmlessly) and marks that
 * group broken: from then on every allocation on its GPUs is refused with one
 * line on stderr, as for a malformed file; the process's other groups go on
 * (its own group, index 0, included: a container's device groups go on when
 * the container's group file is truncated). Faults anywhere
 * else go to the handler that was there before (or the default action).
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>

#include "group.h"
#include "hot.h"
#include "log.h"

/* The guarded mappings, added by group.c under its locks (one at a time). */
static struct {
	char *_Atomic base[GS_MAX_CONTAINER_GROUPS];
	size_t len[GS_MAX_CONTAINER_GROUPS];
	int group[GS_MAX_CONTAINER_GROUPS]; /* the mapping's group index */
	char path[GS_MAX_CONTAINER_GROUPS][PATH_MAX];
	_Atomic int n;
	struct sigaction prev;
	_Atomic int said[GS_MAX_CONTAINER_GROUPS]; /* broken: a bit of gs_hot.group_broken */
} gf;

static void chain(int sig, siginfo_t *si, void *uc)
{
	const struct sigaction *p = &gf.prev;
	if (p->sa_flags & SA_SIGINFO) {
		if (p->sa_sigaction != NULL)
			p->sa_sigaction(sig, si, uc);
		return;
	}
	if (p->sa_handler == SIG_IGN)
		return;
	if (p->sa_handler == SIG_DFL) { /* the access faults again and the default action runs */
		struct sigaction dfl;
		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		(void)sigaction(sig, &dfl, NULL);
		return;
	}
	p->sa_handler(sig);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	char *a = si != NULL ? (char *)si->si_addr : NULL;
	for (int i = 0; i < atomic_load(&gf.n); i++) {
		char *base = atomic_load(&gf.base[i]);
		if (base == NULL || a < base || a >= base + gf.len[i])
			continue;
		int e = errno;
		void *m = mmap(base, gf.len[i], PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		errno = e;
		if (m != MAP_FAILED) {
			atomic_fetch_or(&gs_hot.group_broken, 1 << gf.group[i]);
			return;
		}
	}
	chain(sig, si, uc);
}

GS_HIDDEN void gs_group_fault_guard(void *base, size_t len, const char *path, int group)
{
	int i = atomic_load(&gf.n);
	if (i >= GS_MAX_CONTAINER_GROUPS || group < 0 || group >= GS_MAX_CONTAINER_GROUPS)
		return;
	size_t n = strnlen(path, sizeof(gf.path[i]) - 1);
	memcpy(gf.path[i], path, n);
	gf.path[i][n] = '\0';
	gf.len[i] = len;
	gf.group[i] = group;
	atomic_store(&gf.base[i], (char *)base);
	int e = errno;
	if (i == 0) {
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = on_sigbus;
		sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGBUS, &sa, &gf.prev) != 0) {
			errno = e;
			return;
		}
	}
	atomic_store(&gf.n, i + 1);
	errno = e;
}

GS_HIDDEN int gs_group_fault_broken(int group)
{
	if (GS_LIKELY(!(atomic_load_explicit(&gs_hot.group_broken, memory_order_relaxed) & (1 << group))))
		return 0;
	for (int i = 0; i < atomic_load(&gf.n); i++)
		if (gf.group[i] == group)
			gs_log_once(&gf.said[group],
				    "group file %s was truncated under this process; refusing GPU memory allocations",
				    gf.path[i]);
	return 1;
}
