/* SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>
#include <string.h>

#include "account.h"
#include "log.h"

GS_HIDDEN enum gs_shm_status gs_shm_check(const struct gs_shm_header *h, uint64_t file_size, char *err, size_t errlen)
{
	if (file_size == 0)
		return GS_SHM_EMPTY;
	if (h == NULL || file_size < sizeof(*h)) {
		gs_fmt(err, errlen, "too small (%llu bytes) to be a gpuslice group file",
		       (unsigned long long)file_size);
		return GS_SHM_BAD;
	}
	uint64_t magic = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE);
	if (magic == 0 && file_size == GS_SHM_FILE_SIZE)
		return GS_SHM_EMPTY;
	if (magic != GS_SHM_MAGIC) {
		gs_fmt(err, errlen, "bad magic 0x%016llx (not a gpuslice group file)", (unsigned long long)magic);
		return GS_SHM_BAD;
	}
	if (h->version != GS_SHM_VERSION) {
		gs_fmt(err, errlen, "layout version %u, this library reads version %u", h->version, GS_SHM_VERSION);
		return GS_SHM_BAD;
	}
	if (h->header_size != sizeof(*h) || h->file_size != GS_SHM_FILE_SIZE || file_size != GS_SHM_FILE_SIZE ||
	    h->max_gpus != GS_SHM_MAX_GPUS || h->max_procs != GS_SHM_MAX_PROCS ||
	    h->gpu_size != sizeof(struct gs_shm_gpu) || h->proc_size != sizeof(struct gs_shm_proc) ||
	    h->gpu_offset != offsetof(struct gs_shm_file, gpu) ||
	    h->proc_offset != offsetof(struct gs_shm_file, proc)) {
		gs_fmt(err, errlen, "layout mismatch (file %llu bytes, header says %llu, expected %llu)",
		       (unsigned long long)file_size, (unsigned long long)h->file_size,
		       (unsigned long long)GS_SHM_FILE_SIZE);
		return GS_SHM_BAD;
	}
	return GS_SHM_OK;
}

GS_HIDDEN void gs_shm_init(struct gs_shm_file *f, uint64_t host_pidns, const char *group)
{
	memset(f, 0, sizeof(*f));
	struct gs_shm_header *h = &f->hdr;
	h->version = GS_SHM_VERSION;
	h->header_size = sizeof(*h);
	h->file_size = GS_SHM_FILE_SIZE;
	h->max_gpus = GS_SHM_MAX_GPUS;
	h->max_procs = GS_SHM_MAX_PROCS;
	h->gpu_size = sizeof(struct gs_shm_gpu);
	h->proc_size = sizeof(struct gs_shm_proc);
	h->gpu_offset = offsetof(struct gs_shm_file, gpu);
	h->proc_offset = offsetof(struct gs_shm_file, proc);
	h->host_pidns = host_pidns;
	if (group != NULL) {
		size_t n = strnlen(group, sizeof(h->group) - 1);
		memcpy(h->group, group, n);
	}
	__atomic_store_n(&h->magic, GS_SHM_MAGIC, __ATOMIC_RELEASE);
}

GS_HIDDEN uint64_t gs_group_limit(const struct gs_shm_header *h, uint64_t env_limit)
{
	if (__atomic_load_n(&h->limit_set, __ATOMIC_ACQUIRE) == 1)
		return __atomic_load_n(&h->limit, __ATOMIC_ACQUIRE);
	return env_limit;
}

GS_HIDDEN int gs_shm_find_gpu(const struct gs_shm_file *f, const char *uuid)
{
	for (int i = 0; i < GS_SHM_MAX_GPUS; i++) {
		uint32_t st = gs_ld32(&f->gpu[i].state);
		if (st == GS_SLOT_FREE)
			return -1; /* slots are claimed in order */
		if (st == GS_SLOT_READY && strncmp(f->gpu[i].uuid, uuid, GS_SHM_UUID_LEN) == 0)
			return i;
	}
	return -1;
}

GS_HIDDEN int gs_shm_claim_gpu(struct gs_shm_file *f, const char *uuid, uint64_t limit)
{
	int i = gs_shm_find_gpu(f, uuid);
	if (i >= 0)
		return i;
	for (i = 0; i < GS_SHM_MAX_GPUS; i++) {
		struct gs_shm_gpu *g = &f->gpu[i];
		if (gs_ld32(&g->state) != GS_SLOT_FREE)
			continue;
		memset(g->uuid, 0, sizeof(g->uuid));
		memcpy(g->uuid, uuid, strnlen(uuid, sizeof(g->uuid) - 1));
		__atomic_store_n(&g->limit, limit, __ATOMIC_RELAXED);
		__atomic_store_n(&g->used, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&g->peak, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&g->state, GS_SLOT_READY, __ATOMIC_RELEASE);
		return i;
	}
	return -1;
}

static int same_process(const struct gs_shm_proc *a, const struct gs_shm_proc *b)
{
	return a->pid == b->pid && a->pidns == b->pidns && a->start_time == b->start_time;
}

/* Fills an entry this process claims (GS_PROC_CLAIMING, its pid already in
 * the claim word) from *who; the state is stored by the caller. */
static void fill_proc(struct gs_shm_proc *free_entry, const struct gs_shm_proc *who)
{
	free_entry->host_pid = who->host_pid;
	free_entry->start_time = who->start_time;
	free_entry->pidns = who->pidns;
	__atomic_store_n(&free_entry->guessing, 0, __ATOMIC_RELAXED);
	for (int g = 0; g < GS_SHM_MAX_GPUS; g++)
		__atomic_store_n(&free_entry->used[g], 0, __ATOMIC_RELAXED);
}

/* Frees the live entries of *who's identity (a former image, before exec). */
static void reap_same(struct gs_shm_file *f, const struct gs_shm_proc *who)
{
	for (int i = 0; i < GS_SHM_MAX_PROCS; i++) {
		struct gs_shm_proc *p = &f->proc[i];
		if (gs_ld32(&p->state) == GS_PROC_LIVE && same_process(p, who))
			gs_shm_reap_proc(f, p);
	}
}

/* An entry's claim word: its state and, beside it, the pid of whoever holds
 * or claims it, read and swapped as one 64-bit word. A claim names its
 * claimer (free -> {claiming, pid} -> {live, pid}), so a claimer whose entry
 * was freed under it and taken by another (its read lock dropped: the
 * process closed another descriptor of the file) cannot turn the other's
 * claim live as its own. */
_Static_assert(offsetof(struct gs_shm_proc, state) == 0 && offsetof(struct gs_shm_proc, pid) == 4,
	       "the claim word is state then pid");
_Static_assert(sizeof(struct gs_shm_proc) % 8 == 0 && offsetof(struct gs_shm_file, proc) % 8 == 0,
	       "claim words are 8-byte aligned");

static uint64_t *claim_word(struct gs_shm_proc *p)
{
	return (uint64_t *)(void *)p;
}

static uint64_t word_of(uint32_t state, int32_t pid)
{
	struct {
		uint32_t state;
		int32_t pid;
	} w = {state, pid};
	uint64_t v;
	memcpy(&v, &w, sizeof v);
	return v;
}

static uint32_t word_state(uint64_t v)
{
	uint32_t s;
	memcpy(&s, &v, sizeof s);
	return s;
}

/* Takes p for who if it is free: {free, any} -> {claiming, who's pid},
 * filled, then {claiming, who's pid} -> {live, who's pid}. 0: not taken
 * (lost to another claimer, or freed and taken under us). */
static int claim_entry(struct gs_shm_proc *p, const struct gs_shm_proc *who, void (*mid)(void), int *lost)
{
	uint64_t *w = claim_word(p);
	uint64_t cur = __atomic_load_n(w, __ATOMIC_ACQUIRE);
	if (word_state(cur) != GS_PROC_FREE)
		return 0;
	uint64_t mine = word_of(GS_PROC_CLAIMING, who->pid);
	if (!__atomic_compare_exchange_n(w, &cur, mine, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		++*lost;
		return 0;
	}
	fill_proc(p, who);
	if (mid != NULL)
		mid();
	if (__atomic_compare_exchange_n(w, &mine, word_of(GS_PROC_LIVE, who->pid), 0, __ATOMIC_RELEASE,
					__ATOMIC_RELAXED))
		return 1;
	++*lost;
	return 0;
}

GS_HIDDEN struct gs_shm_proc *gs_shm_claim_proc(struct gs_shm_file *f, const struct gs_shm_proc *who)
{
	reap_same(f, who);
	int lost = 0;
	for (int i = 0; i < GS_SHM_MAX_PROCS; i++) {
		/* A claim word even under the write lock: should taking it have
		 * failed, claimers holding the read lock are not kept out. */
		if (claim_entry(&f->proc[i], who, NULL, &lost))
			return &f->proc[i];
	}
	return NULL;
}

GS_HIDDEN struct gs_shm_proc *gs_shm_claim_proc_shared(struct gs_shm_file *f, const struct gs_shm_proc *who,
						       void (*mid)(void))
{
	reap_same(f, who);
	int lost = 0;
	unsigned start = ((unsigned)who->pid * 2654435761u) % GS_SHM_MAX_PROCS;
	for (int n = 0; n < GS_SHM_MAX_PROCS && lost < GS_CLAIM_TRIES; n++) {
		struct gs_shm_proc *p = &f->proc[(start + (unsigned)n) % GS_SHM_MAX_PROCS];
		if (claim_entry(p, who, mid, &lost))
			return p;
	}
	return NULL;
}

GS_HIDDEN int gs_shm_free_orphans(struct gs_shm_file *f)
{
	int n = 0;
	for (int i = 0; i < GS_SHM_MAX_PROCS; i++) {
		struct gs_shm_proc *p = &f->proc[i];
		if (gs_ld32(&p->state) == GS_PROC_CLAIMING) {
			gs_shm_reap_proc(f, p);
			n++;
		}
	}
	return n;
}

GS_HIDDEN void gs_shm_reap_proc(struct gs_shm_file *f, struct gs_shm_proc *p)
{
	for (int g = 0; g < GS_SHM_MAX_GPUS; g++) {
		uint64_t held = __atomic_exchange_n(&p->used[g], 0, __ATOMIC_ACQ_REL);
		if (held != 0)
			gs_acct_release(&f->gpu[g], held);
	}
	__atomic_store_n(&p->state, GS_PROC_FREE, __ATOMIC_RELEASE);
}

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
	if (a != 0 && b > UINT64_MAX / a)
		return UINT64_MAX;
	return a * b;
}

static uint64_t format_bytes(int format)
{
	switch (format) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		return 2;
	default:
		return 4; /* 32-bit formats; an upper bound for the packed/compressed ones */
	}
}

GS_HIDDEN uint64_t gs_array_bytes(size_t w, size_t h, size_t d, int format, unsigned int channels)
{
	uint64_t v = mul_sat(w, h ? h : 1);
	v = mul_sat(v, d ? d : 1);
	v = mul_sat(v, channels ? channels : 1);
	return mul_sat(v, format_bytes(format));
}

GS_HIDDEN uint64_t gs_mipmap_bytes(size_t w, size_t h, size_t d, int format, unsigned int channels, unsigned int levels)
{
	uint64_t total = 0;
	for (unsigned int l = 0; l < (levels ? levels : 1) && l < 64; l++) {
		uint64_t b = gs_array_bytes(w, h, d, format, channels);
		total = total > UINT64_MAX - b ? UINT64_MAX : total + b;
		w = w > 1 ? w / 2 : w;
		h = h > 1 ? h / 2 : h;
		d = d > 1 ? d / 2 : d;
	}
	return total;
}
