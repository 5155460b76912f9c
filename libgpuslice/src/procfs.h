/* SPDX-License-Identifier: Apache-2.0
 * Process identity from /proc: start time (detects pid reuse), liveness, pid
 * namespace. The parser is pure and fuzzed. */
#ifndef GS_PROCFS_H
#define GS_PROCFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "internal.h"

/* Parses the content of /proc/<pid>/stat: state (field 3) and starttime
 * (field 22). Returns 0, or -1 if malformed. */
GS_HIDDEN int gs_parse_stat(const char *buf, size_t len, char *state, uint64_t *start);

enum gs_liveness { GS_DEAD = 0, GS_ALIVE = 1, GS_UNKNOWN = -1 };
/* Dead: no such pid, a zombie, or a different start time (pid reused). */
GS_HIDDEN enum gs_liveness gs_proc_liveness(pid_t pid, uint64_t start);
/* Start time of pid, 0 if unknown. */
GS_HIDDEN uint64_t gs_proc_start(pid_t pid);
/* 1 if thread tid of this process is running or waiting for a CPU (state R),
 * else 0 (also when it cannot be read). */
GS_HIDDEN int gs_thread_runnable(pid_t tid);
/* Parses the content of /proc/<pid>/task/<tid>/schedstat: "<ns on a CPU>
 * <ns waiting for a CPU> <timeslices>". Returns 0 with the first two fields,
 * or -1 if malformed. */
GS_HIDDEN int gs_parse_schedstat(const char *buf, size_t len, uint64_t *exec, uint64_t *run_delay);
/* The time thread tid of this process has run on a CPU so far (ns; the kernel
 * brings a running thread's figure up to date at each tick) and its run delay
 * (ns runnable but waiting for a CPU, added when the wait ends): 0, or -1 when
 * they cannot be read (no such thread, a kernel without schedstat). errno
 * preserved. */
GS_HIDDEN int gs_thread_schedstat(pid_t tid, uint64_t *exec, uint64_t *run_delay);
/* Whether a thread that launched nothing for elapsed_ns is starved of CPU
 * rather than without GPU work: it is runnable now and ran for less than half
 * of that time (its run time went from exec0 to exec1). A thread that ran
 * (CPU work between launches) or sleeps is not. */
GS_HIDDEN int gs_starved(int runnable, uint64_t exec0, uint64_t exec1, uint64_t elapsed_ns);
/* Inode of /proc/self/ns/pid, 0 if unknown. */
GS_HIDDEN uint64_t gs_pidns_self(void);

/* Parses the content of /proc/self/timens_offsets (time_namespaces(7)): the
 * line "monotonic <seconds> <nanoseconds>" (the clock may be named by its id,
 * 1); other clocks' lines are skipped. Returns 0 with the offset, or -1 if
 * malformed or absent. Go's monoclock.ParseMonotonicOffset reads the same. */
GS_HIDDEN int gs_parse_timens_monotonic(const char *buf, size_t len, int64_t *sec, int64_t *nsec);
/* 1 if this process's CLOCK_MONOTONIC is the host's (its time namespace has no
 * monotonic offset, or the kernel has no time namespaces), else 0 (an offset,
 * or unknown). Not for hot paths: reads /proc. errno preserved. */
GS_HIDDEN int gs_clock_shared(void);

#endif /* GS_PROCFS_H */
