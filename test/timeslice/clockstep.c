/* SPDX-License-Identifier: Apache-2.0
 *
 * clockstep.so: a test interposer that steps the wall clock as seen by
 * libgpuslice. Preloaded before libgpuslice.so, it answers
 * clock_gettime(CLOCK_REALTIME) for calls made from libgpuslice with the real
 * time plus one hour once the file named by GS_CLOCKSTEP_FILE exists: to a
 * deadline computed before, that is the wall clock stepping back by an hour
 * (what NTP or an operator does during an outage). Other callers (the test
 * program's own clock) and every other clock see the real time.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uintptr_t lo, hi; /* libgpuslice's mapped segments */

static int find(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	if (info->dlpi_name == NULL || strstr(info->dlpi_name, "libgpuslice") == NULL)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t a = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type != PT_LOAD)
			continue;
		if (lo == 0 || a < lo)
			lo = a;
		if (a + ph->p_memsz > hi)
			hi = a + ph->p_memsz;
	}
	return 1;
}

__attribute__((visibility("default"))) int clock_gettime(clockid_t id, struct timespec *ts)
{
	uintptr_t from = (uintptr_t)__builtin_return_address(0);
	long rc = syscall(SYS_clock_gettime, id, ts);
	const char *f = getenv("GS_CLOCKSTEP_FILE");
	if (rc != 0 || id != CLOCK_REALTIME || f == NULL)
		return (int)rc;
	if (hi == 0)
		dl_iterate_phdr(find, NULL);
	if (from >= lo && from < hi && access(f, F_OK) == 0)
		ts->tv_sec += 3600;
	return 0;
}
