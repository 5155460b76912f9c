/* SPDX-License-Identifier: Apache-2.0
 *
 * Reservation protocol shared by every allocation hook:
 *   begin (reserve on the group, refuse at the limit) -> real call ->
 *   finish (record in the pointer table, or roll back if the call failed);
 *   release: take from the pointer table -> real call -> uncount on success
 *   (put back on failure), so each allocation is counted and uncounted once.
 */
#ifndef GS_MEMCORE_H
#define GS_MEMCORE_H

#include "account.h"
#include "ctxmap.h"
#include "group.h"
#include "internal.h"
#include "elastic.h"
#include "ptrfast.h"
#include "quiet.h"

struct gs_resv {
	struct gs_group *g;
	struct gs_shm_proc *self;
	int slot;
	int active; /* 0: nothing reserved (uncounted pass-through) */
	uint64_t size;
	uint64_t ctx;  /* the current CUcontext (gs_resv_current), recorded with the allocation */
	uint32_t pool; /* a pool's block: its record + 1 (pool.h), recorded as the entry's refs */
	int ci;        /* ctx's index in the context map (ctxmap.h); -1: not known */
};

/* CUresult returned when the group state cannot be used (message printed). */
#define GS_BROKEN_RC CUDA_ERROR_OPERATING_SYSTEM

/* Reserve size bytes on dev / on the current context's device. CUDA_SUCCESS
 * (r->active tells whether anything was reserved) or the error to return
 * without calling the driver. errno may change (the hooks restore it). */
GS_HIDDEN CUresult gs_resv_dev(CUdevice dev, uint64_t size, struct gs_resv *r);
GS_INLINE CUresult gs_resv_current(uint64_t size, struct gs_resv *r);
/* After the real call: keep (rc == CUDA_SUCCESS, key recorded) or roll back. */
GS_HIDDEN void gs_resv_finish(struct gs_resv *r, CUresult rc, enum gs_kind kind, uint64_t key);
/* Grow (or shrink) an active reservation by delta bytes: 0 or -1 (refused,
 * message printed, reservation unchanged). */
GS_HIDDEN int gs_resv_adjust(struct gs_resv *r, uint64_t new_size);
/* After the device refused an active reservation (out of memory): if it is
 * within an elastic guarantee, asks the daemon to make room; 1: try again. */
GS_HIDDEN int gs_resv_reclaim(struct gs_resv *r);
/* Whether the reservation should be served as managed memory (a spill group
 * past its guarantee). */
GS_HIDDEN int gs_resv_managed_slow(const struct gs_resv *r);
static inline int gs_resv_managed(const struct gs_resv *r)
{
	return r->active &&
	       (__atomic_load_n(&gs_group_slot(r->slot)->elastic, __ATOMIC_ACQUIRE) & GS_ELASTIC_SPILL) != 0 &&
	       gs_resv_managed_slow(r);
}
/* Uncount an entry taken from the pointer table. */
static inline void gs_release_entry(const struct gs_ptrent *e);
/* Uncount size bytes this process holds on a GPU slot (slot < 0: nothing). */
GS_HIDDEN void gs_uncount_slow(int slot, uint64_t size);
static inline void gs_uncount(int slot, uint64_t size)
{
	struct gs_shm_proc *self = GS_LIKELY(slot >= 0) ? gs_group_attached(slot) : NULL;
	if (GS_UNLIKELY(self == NULL)) {
		gs_uncount_slow(slot, size);
		return;
	}
	gs_acct_proc_sub(self, slot, size);
	gs_acct_release(gs_group_slot(slot), size);
}
static inline void gs_release_entry(const struct gs_ptrent *e)
{
	gs_uncount(e->slot, e->size);
}
/* Uncount every allocation made in context ctx (it was destroyed): their
 * memory went with it. */
GS_HIDDEN void gs_release_ctx(uint64_t ctx);
/* A context's teardown in two steps around the driver's call. Take (before
 * it) removes the context's allocations from the pointer table, still
 * counted, so that an address the driver frees with the context and hands to
 * another thread at once is never confused with one of them; settle (after
 * it) uncounts them if the context went (gone), or puts them back. */
struct gs_ctx_taken {
	struct gs_ptrent *e;
	size_t n, cap;
};
GS_HIDDEN void gs_ctx_take(uint64_t ctx, struct gs_ctx_taken *t);
GS_HIDDEN void gs_ctx_settle(struct gs_ctx_taken *t, int gone);

/* Past the limit at a first try (gs_resv_take): reaps dead members, checks
 * the pools, borrows (elastic), else refuses (message once). */
GS_HIDDEN CUresult gs_resv_retry(struct gs_resv *r, uint64_t size);
/* Not attached yet, a context not seen before, or no group: the whole way
 * (gs_resv_dev). The context's device and its slot are learnt for the next calls. */
GS_HIDDEN CUresult gs_resv_learn(CUcontext ctx, int ci, uint64_t size, struct gs_resv *r);

/* Reserves size bytes on r's slot for r's process (r->g, r->self, r->slot set). */
static inline CUresult gs_resv_take(struct gs_resv *r, uint64_t size)
{
	if (GS_UNLIKELY(gs_acct_reserve(gs_group_slot(r->slot), size) != 0)) {
		CUresult rc = gs_resv_retry(r, size);
		if (rc != CUDA_SUCCESS)
			return rc;
	}
	gs_acct_proc_add(r->self, r->slot, size);
	if (GS_UNLIKELY(gs_group_fault_broken(gs_slot_group(r->slot))))
		return GS_BROKEN_RC; /* the file went away under this very reservation */
	return CUDA_SUCCESS;
}

/* One driver call: the current context. Once this process is attached, a
 * known context's GPU slot comes from the context map (ctxmap.h), and the
 * reservation reads the hot line, the map's line and the group file's two
 * lines. The hooks restore errno after it: no saving here. */
GS_INLINE CUresult gs_resv_current(uint64_t size, struct gs_resv *r)
{
	gs_fn_cuCtxGetCurrent cur = GS_REAL(cuCtxGetCurrent);
	CUcontext ctx = NULL;
	if (cur == NULL || cur(&ctx) != CUDA_SUCCESS)
		ctx = NULL;
	int ci = gs_ctx_index((uint64_t)(uintptr_t)ctx);
	int slot = gs_ctx_slot(ci);
	struct gs_shm_proc *self = GS_LIKELY(slot >= 0) ? gs_group_attached(slot) : NULL;
	if (GS_UNLIKELY(self == NULL))
		return gs_resv_learn(ctx, ci, size, r);
	*r = (struct gs_resv){.g = GS_LIKELY(slot < GS_SHM_MAX_GPUS) ? gs_hot.group : gs_group_of(slot),
			      .self = self,
			      .slot = slot,
			      .ci = ci};
	CUresult rc = gs_resv_take(r, size);
	if (GS_LIKELY(rc == CUDA_SUCCESS)) {
		r->active = 1;
		r->size = size;
		r->ctx = (uint64_t)(uintptr_t)ctx;
	}
	return rc;
}

/* Bodies of the simple allocation / release hooks. */
#define GS_ALLOC_BODY(name, resv_expr, kind, key_expr, args)                                    \
	GS_QUIET_WINDOW;                                                                        \
	gs_fn_##name fn_ = GS_REAL(name);                                                       \
	if (fn_ == NULL)                                                                        \
		return CUDA_ERROR_NOT_FOUND;                                                    \
	int errno_ = errno;                                                                     \
	struct gs_resv r_;                                                                      \
	CUresult rc_ = (resv_expr);                                                             \
	if (rc_ == CUDA_SUCCESS) {                                                              \
		errno = errno_;                                                                 \
		rc_ = fn_ args;                                                                 \
		if (rc_ == CUDA_ERROR_OUT_OF_MEMORY && gs_resv_reclaim(&r_))                    \
			rc_ = fn_ args;                                                         \
		errno_ = errno;                                                                 \
		gs_resv_finish(&r_, rc_, kind, rc_ == CUDA_SUCCESS ? (uint64_t)(key_expr) : 0); \
	}                                                                                       \
	errno = errno_;                                                                         \
	return rc_

#define GS_FREE_BODY(name, kind, key_arg, args)                   \
	GS_QUIET_WINDOW;                                          \
	gs_fn_##name fn_ = GS_REAL(name);                         \
	if (fn_ == NULL)                                          \
		return CUDA_ERROR_NOT_FOUND;                      \
	int errno_ = errno;                                       \
	struct gs_ptrent e_;                                      \
	int had_ = gs_ptrs_take(kind, (uint64_t)(key_arg), &e_);  \
	errno = errno_;                                           \
	CUresult rc_ = fn_ args;                                  \
	errno_ = errno;                                           \
	if (had_ && rc_ == CUDA_SUCCESS) {                        \
		gs_release_entry(&e_);                            \
		if (kind == GS_KIND_PTR)                          \
			gs_elastic_freed((CUdeviceptr)(key_arg)); \
	} else if (had_)                                          \
		(void)gs_ptrs_insert(&e_);                        \
	errno = errno_;                                           \
	return rc_

#endif /* GS_MEMCORE_H */
