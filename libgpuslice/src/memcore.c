/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "account.h"
#include "ctxmap.h"
#include "device.h"
#include "elastic.h"
#include "log.h"
#include "memcore.h"
#include "pool.h"

static CUresult refuse(struct gs_group *g, int slot, uint64_t size)
{
	static _Atomic int said;
	struct gs_shm_gpu *gpu = gs_group_slot(slot);
	__atomic_fetch_add(&gpu->refused, 1, __ATOMIC_RELAXED);
	if (atomic_load_explicit(&said, memory_order_relaxed) ||
	    (__atomic_load_n(&gpu->elastic, __ATOMIC_ACQUIRE) & GS_ELASTIC_ON) != 0) /* the borrow said why */
		return CUDA_ERROR_OUT_OF_MEMORY;
	char want[32], used[32], limit[32], who[GS_SHM_NAME_LEN + 16];
	const char *name = gs_group_name(g);
	gs_fmt_size(want, sizeof(want), size);
	gs_fmt_size(used, sizeof(used), gs_ld64(&gpu->used));
	gs_fmt_size(limit, sizeof(limit), gs_ld64(&gpu->limit));
	if (name[0] != '\0')
		gs_fmt(who, sizeof(who), "group \"%s\"", name);
	else
		gs_fmt(who, sizeof(who), "the group");
	gs_log_once(&said, "allocation of %s refused on %s: %s uses %s of its %s limit", want, gpu->uuid, who, used,
		    limit);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

/* Elastic slots past their allowance: borrow, then reserve (another member
 * may take what was lent first: ask again, a few times). 0 or -1. */
static int borrow(struct gs_shm_gpu *gpu, uint64_t size)
{
	if ((__atomic_load_n(&gpu->elastic, __ATOMIC_ACQUIRE) & GS_ELASTIC_ON) == 0)
		return -1;
	for (int i = 0; i < 3; i++) {
		if (gs_elastic_borrow(gpu, size, 0) != 0)
			return -1;
		if (gs_acct_reserve(gpu, size) == 0)
			return 0;
	}
	return -1;
}

GS_HIDDEN CUresult gs_resv_retry(struct gs_resv *r, uint64_t size)
{
	struct gs_shm_gpu *gpu = gs_group_slot(r->slot);
	gs_group_reap(r->g, 1); /* a dead member may hold what we need */
	gs_pool_sync();         /* or a pool's keep the driver let go of unseen */
	if (gs_acct_reserve(gpu, size) != 0 && borrow(gpu, size) != 0)
		return refuse(r->g, r->slot, size);
	return CUDA_SUCCESS;
}

GS_HIDDEN CUresult gs_resv_dev(CUdevice dev, uint64_t size, struct gs_resv *r)
{
	memset(r, 0, sizeof(*r));
	r->ci = -1;
	r->g = gs_group_get();
	if (r->g == NULL)
		return GS_BROKEN_RC;
	r->slot = gs_slot_cuda(r->g, dev);
	if (r->slot == GS_SLOT_UNKNOWN_DEVICE)
		return CUDA_SUCCESS; /* not a device: the driver answers */
	if (r->slot < 0 || gs_slot_broken(r->slot))
		return GS_BROKEN_RC;
	r->g = gs_group_of(r->slot);
	r->self = gs_group_self(r->g);
	if (r->self == NULL)
		return GS_BROKEN_RC;
	CUresult rc = gs_resv_take(r, size);
	if (rc == CUDA_SUCCESS) {
		r->active = 1;
		r->size = size;
	}
	return rc;
}

GS_HIDDEN CUresult gs_resv_learn(CUcontext ctx, int ci, uint64_t size, struct gs_resv *r)
{
	CUdevice dev;
	if (gs_ctx_device(ci, &dev) != 0) {
		gs_fn_cuCtxGetDevice get_dev = GS_REAL(cuCtxGetDevice);
		if (get_dev == NULL || get_dev(&dev) != CUDA_SUCCESS) {
			memset(r, 0, sizeof(*r)); /* no context: the driver fails the call */
			return CUDA_SUCCESS;
		}
		gs_ctx_learn(ci, dev);
	}
	CUresult rc = gs_resv_dev(dev, size, r);
	if (rc == CUDA_SUCCESS && r->active) {
		r->ctx = (uint64_t)(uintptr_t)ctx;
		r->ci = ci;
		gs_ctx_learn_slot(ci, r->slot);
	}
	return rc;
}

static void unreserve(struct gs_shm_proc *self, int slot, uint64_t size)
{
	gs_acct_proc_sub(self, slot, size);
	gs_acct_release(gs_group_slot(slot), size);
}

GS_HIDDEN void gs_resv_finish(struct gs_resv *r, CUresult rc, enum gs_kind kind, uint64_t key)
{
	if (!r->active)
		return;
	if (rc != CUDA_SUCCESS) {
		unreserve(r->self, r->slot, r->size);
		return;
	}
	struct gs_ptrent e = {.key = key,
			      .size = r->size,
			      .aux = r->ctx,
			      .refs = r->pool,
			      .kind = (uint8_t)kind,
			      .slot = (uint8_t)r->slot};
	if (gs_ptrs_insert_ci(&e, r->ci) != 0) {
		static _Atomic int said;
		gs_log_once(&said, "out of host memory tracking allocations; some GPU memory stays counted");
	}
}

GS_HIDDEN int gs_resv_adjust(struct gs_resv *r, uint64_t new_size)
{
	if (!r->active || new_size == r->size)
		return 0;
	if (new_size < r->size) {
		unreserve(r->self, r->slot, r->size - new_size);
	} else if (gs_resv_take(r, new_size - r->size) != CUDA_SUCCESS) {
		return -1;
	}
	r->size = new_size;
	return 0;
}

GS_HIDDEN int gs_resv_reclaim(struct gs_resv *r)
{
	if (!r->active)
		return 0;
	struct gs_shm_gpu *gpu = gs_group_slot(r->slot);
	if ((__atomic_load_n(&gpu->elastic, __ATOMIC_ACQUIRE) & GS_ELASTIC_ON) == 0 ||
	    gs_ld64(&gpu->used) - gs_ld64(&gpu->spilled) > gs_ld64(&gpu->min))
		return 0; /* not within the guarantee: the device's answer stands */
	return gs_elastic_borrow(gpu, r->size, 1) == 0;
}

GS_HIDDEN int gs_resv_managed_slow(const struct gs_resv *r)
{
	const struct gs_shm_gpu *gpu = gs_group_slot(r->slot);
	return gs_elastic_wants_managed(gpu, gs_ld64(&gpu->used));
}

GS_HIDDEN void gs_uncount_slow(int slot, uint64_t size)
{
	if (slot < 0)
		return;
	struct gs_group *g = gs_group_get() != NULL ? gs_group_of(slot) : NULL;
	struct gs_shm_proc *self = g != NULL ? gs_group_self(g) : NULL;
	if (self != NULL)
		unreserve(self, slot, size);
}

static int in_ctx(const struct gs_ptrent *e, void *arg)
{
	return e->aux == *(const uint64_t *)arg &&
	       (e->kind == GS_KIND_PTR || e->kind == GS_KIND_ARRAY || e->kind == GS_KIND_MIPMAP ||
		e->kind == GS_KIND_CTXMEM || e->kind == GS_KIND_MODULE);
}

static void release_one(const struct gs_ptrent *e, void *arg)
{
	(void)arg;
	if (e->kind == GS_KIND_PTR && e->refs != 0)
		gs_pool_dropped(e);
	else
		gs_release_entry(e);
}

GS_HIDDEN void gs_release_ctx(uint64_t ctx)
{
	if (ctx != 0)
		(void)gs_ptrs_drain(in_ctx, release_one, &ctx);
	gs_pool_teardown(); /* the driver releases what its pools kept */
}

struct take_arg {
	uint64_t ctx;
	struct gs_ctx_taken *t;
};

static int in_taken_ctx(const struct gs_ptrent *e, void *arg)
{
	return in_ctx(e, &((struct take_arg *)arg)->ctx);
}

/* Keeps a taken entry; one that cannot be kept (no host memory) is uncounted
 * at once, before the context goes. */
static void keep_one(const struct gs_ptrent *e, void *arg)
{
	struct gs_ctx_taken *t = ((struct take_arg *)arg)->t;
	if (t->n == t->cap) {
		size_t cap = t->cap == 0 ? 16 : t->cap * 2;
		struct gs_ptrent *grown = realloc(t->e, cap * sizeof(*grown));
		if (grown == NULL) {
			release_one(e, NULL);
			return;
		}
		t->e = grown;
		t->cap = cap;
	}
	t->e[t->n++] = *e;
}

GS_HIDDEN void gs_ctx_take(uint64_t ctx, struct gs_ctx_taken *t)
{
	*t = (struct gs_ctx_taken){0};
	struct take_arg a = {.ctx = ctx, .t = t};
	if (ctx != 0)
		(void)gs_ptrs_drain(in_taken_ctx, keep_one, &a);
}

GS_HIDDEN void gs_ctx_settle(struct gs_ctx_taken *t, int gone)
{
	for (size_t i = 0; i < t->n; i++) {
		if (gone)
			release_one(&t->e[i], NULL);
		else if (gs_ptrs_insert(&t->e[i]) != 0)
			release_one(&t->e[i], NULL); /* cannot be tracked: its free would not uncount it */
	}
	free(t->e);
	*t = (struct gs_ctx_taken){0};
	if (gone)
		gs_pool_teardown(); /* the driver releases what its pools kept */
}
