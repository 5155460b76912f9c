/* SPDX-License-Identifier: Apache-2.0
 *
 * Pure accounting logic on a mapped group file (no syscalls): header checks,
 * GPU slots, process entries, and the lock-free reservation. Unit-tested on a
 * plain in-memory struct gs_shm_file.
 */
#ifndef GS_ACCOUNT_H
#define GS_ACCOUNT_H

#include <stddef.h>
#include <stdint.h>

#include <gpuslice/shm.h>

#include "internal.h"

enum gs_shm_status { GS_SHM_OK = 0, GS_SHM_EMPTY = 1, GS_SHM_BAD = -1 };

/* Classifies a file of file_size bytes whose first bytes are h (h may be NULL
 * when file_size < sizeof(*h)). GS_SHM_EMPTY: size 0, or exactly the expected
 * size with magic 0 (creation interrupted): safe to initialise. GS_SHM_BAD
 * comes with a one-line reason in err. */
GS_HIDDEN enum gs_shm_status gs_shm_check(const struct gs_shm_header *h, uint64_t file_size, char *err, size_t errlen);
/* Fills a zeroed file; magic is stored last (release). */
GS_HIDDEN void gs_shm_init(struct gs_shm_file *f, uint64_t host_pidns, const char *group);

/* The limit a new GPU slot takes: the group's (the header's, once a manager
 * wrote it), else the member's own (env_limit). */
GS_HIDDEN uint64_t gs_group_limit(const struct gs_shm_header *h, uint64_t env_limit);
/* Lock-free lookup of a published GPU slot by UUID: index or -1. */
GS_HIDDEN int gs_shm_find_gpu(const struct gs_shm_file *f, const char *uuid);
/* Under the file lock: existing slot, or a new one with this limit; -1 if full. */
GS_HIDDEN int gs_shm_claim_gpu(struct gs_shm_file *f, const char *uuid, uint64_t limit);

/* Under the file lock: frees entries with the same identity as *who (a former
 * image of this process, before exec), then claims a free entry filled from
 * *who. NULL if the table is full. */
GS_HIDDEN struct gs_shm_proc *gs_shm_claim_proc(struct gs_shm_file *f, const struct gs_shm_proc *who);
/* Under the file's read lock (held shared by every claimer, so that no one
 * holding the write lock sees an entry half filled in): frees entries with the
 * same identity as *who, then takes a free entry by a CAS of its state from
 * GS_PROC_FREE to GS_PROC_CLAIMING, starting at an index spread by pid; a lost
 * CAS moves on to the next entry. Fills it from *who, calls mid (a test's
 * pause; NULL) and stores GS_PROC_LIVE last. NULL after GS_CLAIM_TRIES lost
 * CASes or without a free entry: the caller claims under the write lock. */
#define GS_CLAIM_TRIES 8
GS_HIDDEN struct gs_shm_proc *gs_shm_claim_proc_shared(struct gs_shm_file *f, const struct gs_shm_proc *who,
						       void (*mid)(void));
/* Under the write lock: frees the entries left GS_PROC_CLAIMING (their
 * claimer died mid-claim: a live one holds the read lock); how many. */
GS_HIDDEN int gs_shm_free_orphans(struct gs_shm_file *f);
/* Releases everything a (dead) entry holds and frees it. */
GS_HIDDEN void gs_shm_reap_proc(struct gs_shm_file *f, struct gs_shm_proc *p);

/* The reservation (inline: every allocation and release runs it).
 * gs_acct_reserve reserves size bytes on gpu: 0, or -1 if that would exceed
 * its limit (0 = no limit) or overflow. Atomic across threads and processes.
 * gs_acct_release returns size bytes; saturates at 0 (never wraps). */
static inline void gs_raise_peak(uint64_t *peak, uint64_t v)
{
	uint64_t old = __atomic_load_n(peak, __ATOMIC_RELAXED);
	while (old < v && !__atomic_compare_exchange_n(peak, &old, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

static inline int gs_acct_reserve(struct gs_shm_gpu *gpu, uint64_t size)
{
	uint64_t limit = __atomic_load_n(&gpu->limit, __ATOMIC_ACQUIRE);
	uint64_t old = __atomic_load_n(&gpu->used, __ATOMIC_RELAXED);
	uint64_t next;
	do {
		if (limit != 0 && (size > limit || old > limit - size))
			return -1;
		if (old > UINT64_MAX - size)
			return -1;
		next = old + size;
	} while (!__atomic_compare_exchange_n(&gpu->used, &old, next, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
	gs_raise_peak(&gpu->peak, next);
	return 0;
}

static inline void gs_sub_saturating(uint64_t *v, uint64_t size)
{
	uint64_t old = __atomic_load_n(v, __ATOMIC_RELAXED);
	uint64_t next;
	do {
		next = old > size ? old - size : 0;
	} while (!__atomic_compare_exchange_n(v, &old, next, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
}

static inline void gs_acct_release(struct gs_shm_gpu *gpu, uint64_t size)
{
	gs_sub_saturating(&gpu->used, size);
}

/* slot: a process slot (group.h); p's entry is in that slot's group, at its
 * GPU slot slot % GS_SHM_MAX_GPUS. */
static inline void gs_acct_proc_add(struct gs_shm_proc *p, int slot, uint64_t size)
{
	__atomic_fetch_add(&p->used[slot % GS_SHM_MAX_GPUS], size, __ATOMIC_ACQ_REL);
}

static inline void gs_acct_proc_sub(struct gs_shm_proc *p, int slot, uint64_t size)
{
	gs_sub_saturating(&p->used[slot % GS_SHM_MAX_GPUS], size);
}

/* Byte sizes of CUDA arrays (saturating; unknown formats count 4 bytes per
 * channel, an upper bound). */
GS_HIDDEN uint64_t gs_array_bytes(size_t w, size_t h, size_t d, int format, unsigned int channels);
GS_HIDDEN uint64_t gs_mipmap_bytes(size_t w, size_t h, size_t d, int format, unsigned int channels,
				   unsigned int levels);

static inline uint64_t gs_ld64(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline uint32_t gs_ld32(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

#endif /* GS_ACCOUNT_H */
