/* SPDX-License-Identifier: Apache-2.0
 *
 * Memory pools: what a pool keeps after a free stays counted until the
 * driver releases it (pool.h). One record per pool this process allocated
 * from: kept bytes (counted, not allocated), live allocations. A pool past
 * GS_POOL_RECS is untracked: its blocks are counted like cuMemAlloc's.
 * A pool made by cuMemPoolCreate is charged where it lives: its device,
 * whatever the current context's; a host pool holds no device memory and is
 * not counted. A pool whose location the library did not see created (a
 * default pool) is the current device's, as the driver serves it.
 */
#include <errno.h>
#include <string.h>

#include "device.h"
#include "hot.h"
#include "pool.h"

struct pool_rec {
	uint64_t handle; /* 0: free record */
	uint64_t kept;   /* counted bytes the pool keeps */
	_Atomic uint32_t live;
	int slot;
	int dead; /* destroyed with allocations outstanding */
	int loc;  /* GS_POOL_LOC_* or the device ordinal it lives on */
};

enum { GS_POOL_LOC_CURRENT = -1, GS_POOL_LOC_HOST = -2 };

static struct {
	pthread_mutex_t mu; /* recursive: a refused reservation checks the pools under it */
	struct pool_rec r[GS_POOL_RECS];
	/* what they keep in all, counted: gs_hot.pool_kept (read by every free) */
} P = {.mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP};

/* Under P.mu: the pool's record (made if new), -1 if the table is full. */
static int rec_get(CUmemoryPool pool)
{
	uint64_t h = (uint64_t)(uintptr_t)pool;
	int spare = -1;
	for (int i = 0; i < GS_POOL_RECS; i++) {
		struct pool_rec *x = &P.r[i];
		if (x->handle == h && !x->dead)
			return i;
		if (spare < 0 && (x->handle == 0 || (x->dead && atomic_load(&x->live) == 0)))
			spare = i;
	}
	if (spare >= 0) {
		P.r[spare] = (struct pool_rec){.handle = h, .slot = -1, .loc = GS_POOL_LOC_CURRENT};
	}
	return spare;
}

/* Under P.mu: d bytes x kept are no longer on the device. */
static void rec_drop(struct pool_rec *x, uint64_t d)
{
	if (d == 0)
		return;
	x->kept -= d;
	atomic_fetch_sub(&gs_hot.pool_kept, d);
	gs_uncount(x->slot, d);
}

/* Under P.mu: uncounts what each pool keeps beyond the free memory the
 * driver says it still has. gone: a pool the driver refuses to describe
 * keeps nothing (its context was torn down), else it stays counted. */
static void reconcile(int gone)
{
	gs_fn_cuMemPoolGetAttribute get = GS_REAL(cuMemPoolGetAttribute);
	if (get == NULL || atomic_load_explicit(&gs_hot.pool_kept, memory_order_relaxed) == 0)
		return;
	for (int i = 0; i < GS_POOL_RECS; i++) {
		struct pool_rec *x = &P.r[i];
		if (x->handle == 0 || x->dead || x->kept == 0)
			continue;
		cuuint64_t res = 0, used = 0;
		CUmemoryPool pool = (CUmemoryPool)(uintptr_t)x->handle;
		if (get(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res) != CUDA_SUCCESS ||
		    get(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS) {
			if (gone)
				rec_drop(x, x->kept);
			continue;
		}
		uint64_t free_ = res > used ? res - used : 0;
		if (x->kept > free_)
			rec_drop(x, x->kept - free_);
	}
}

static void check_pools(int gone)
{
	if (atomic_load_explicit(&gs_hot.pool_kept, memory_order_relaxed) == 0)
		return;
	int e = errno;
	pthread_mutex_lock(&P.mu);
	reconcile(gone);
	pthread_mutex_unlock(&P.mu);
	errno = e;
}

GS_HIDDEN void gs_pool_sync_slow(void)
{
	check_pools(0);
}

GS_HIDDEN void gs_pool_teardown(void)
{
	check_pools(1);
}

/* Under P.mu: gives back what an allocation took from the pool's keep. */
static void untake(struct gs_pool_op *op)
{
	if (op->idx < 0 || op->take == 0)
		return;
	P.r[op->idx].kept += op->take;
	atomic_fetch_add(&gs_hot.pool_kept, op->take);
	op->take = 0;
}

static void fork_prepare(void);
static void fork_parent(void);
static void fork_child(void);

/* Registered once the group is set up (its own handlers first), so that at a
 * fork this lock is taken before the group's, the order an allocation takes them. */
static void at_fork(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

GS_HIDDEN CUresult gs_pool_alloc_begin(CUmemoryPool pool, int current, uint64_t n, struct gs_pool_op *op)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	memset(op, 0, sizeof(*op));
	op->idx = -1;
	op->n = n;
	gs_fn_cuDeviceGetMemPool cur = GS_REAL(cuDeviceGetMemPool);
	CUdevice dev;
	if (current && (cur == NULL || gs_current_device(&dev) != 0 || cur(&pool, dev) != CUDA_SUCCESS))
		pool = NULL;
	pthread_mutex_lock(&P.mu);
	if (pool != NULL)
		op->idx = rec_get(pool);
	int loc = op->idx >= 0 ? P.r[op->idx].loc : GS_POOL_LOC_CURRENT;
	if (loc == GS_POOL_LOC_HOST) {
		op->idx = -1; /* host memory: nothing reserved, the call passes (P.mu stays held) */
		return CUDA_SUCCESS;
	}
	if (op->idx >= 0) {
		struct pool_rec *x = &P.r[op->idx];
		op->take = x->kept < n ? x->kept : n;
		x->kept -= op->take;
		atomic_fetch_sub(&gs_hot.pool_kept, op->take);
	}
	CUresult rc;
	if (loc >= 0) {
		rc = gs_resv_dev((CUdevice)loc, n - op->take, &op->r);
		gs_fn_cuCtxGetCurrent cc = GS_REAL(cuCtxGetCurrent);
		CUcontext ctx = NULL;
		if (rc == CUDA_SUCCESS && cc != NULL && cc(&ctx) == CUDA_SUCCESS)
			op->r.ctx = (uint64_t)(uintptr_t)ctx; /* it goes with the context, as a pool block does */
	} else {
		rc = gs_resv_current(n - op->take, &op->r);
	}
	pthread_once(&once, at_fork);
	if (rc != CUDA_SUCCESS || !op->r.active) {
		/* What it took goes back to the keep; a synchronisation elsewhere
		 * may have let it go meanwhile, and skipped its own check while
		 * the keep looked empty: check it now. */
		int took = op->take > 0;
		untake(op);
		if (took)
			reconcile(0);
		op->idx = -1;
	} else if (op->idx >= 0 && P.r[op->idx].slot < 0) {
		P.r[op->idx].slot = op->r.slot;
	}
	if (rc != CUDA_SUCCESS)
		pthread_mutex_unlock(&P.mu);
	return rc;
}

GS_HIDDEN void gs_pool_alloc_end(struct gs_pool_op *op, CUresult rc, CUdeviceptr p)
{
	if (rc == CUDA_SUCCESS && op->r.active) {
		op->r.size = op->n; /* what it took from the pool's keep was counted already */
		if (op->idx >= 0) {
			op->r.pool = (uint32_t)op->idx + 1;
			atomic_fetch_add(&P.r[op->idx].live, 1);
		}
		gs_resv_finish(&op->r, rc, GS_KIND_PTR, (uint64_t)p);
	} else {
		gs_resv_finish(&op->r, rc, GS_KIND_PTR, 0); /* rolls back what was reserved */
		if (op->take > 0) {
			untake(op);
			reconcile(0);
		}
	}
	pthread_mutex_unlock(&P.mu);
}

GS_HIDDEN void gs_pool_created(CUmemoryPool pool, const CUmemPoolProps *props)
{
	int loc = GS_POOL_LOC_CURRENT;
	if (props->location.type == CU_MEM_LOCATION_TYPE_DEVICE && props->location.id >= 0)
		loc = props->location.id;
	else if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		loc = GS_POOL_LOC_HOST; /* HOST, HOST_NUMA, HOST_NUMA_CURRENT */
	pthread_mutex_lock(&P.mu);
	int idx = rec_get(pool);
	if (idx >= 0)
		P.r[idx].loc = loc; /* table full: counted on the current device (never less than held) */
	pthread_mutex_unlock(&P.mu);
}

/* Under P.mu: a pool block freed: the pool keeps it (a destroyed pool lets it go). */
static void freed(const struct gs_ptrent *e)
{
	struct pool_rec *x = &P.r[e->refs - 1];
	atomic_fetch_sub(&x->live, 1);
	if (x->dead) {
		gs_release_entry(e);
		if (atomic_load(&x->live) == 0)
			x->handle = 0;
		return;
	}
	x->kept += e->size;
	atomic_fetch_add(&gs_hot.pool_kept, e->size);
}

GS_HIDDEN CUresult gs_ptr_free_pooled(CUdeviceptr p, const struct gs_free_call *call, struct gs_ptrent *ent, int e)
{
	pthread_mutex_lock(&P.mu);
	errno = e;
	CUresult rc = call->sync != NULL ? call->sync(p) : call->async(p, call->s);
	e = errno;
	if (rc == CUDA_SUCCESS) {
		freed(ent);
		gs_elastic_freed(p);
	} else {
		(void)gs_ptrs_insert(ent);
	}
	pthread_mutex_unlock(&P.mu);
	if (rc == CUDA_SUCCESS && call->sync != NULL)
		gs_pool_sync(); /* cuMemFree synchronises */
	errno = e;
	return rc;
}

GS_HIDDEN void gs_pool_dropped(const struct gs_ptrent *e)
{
	if (e->refs <= GS_POOL_RECS)
		atomic_fetch_sub(&P.r[e->refs - 1].live, 1);
	gs_release_entry(e);
}

GS_HIDDEN void gs_pool_destroyed(CUmemoryPool pool)
{
	uint64_t h = (uint64_t)(uintptr_t)pool;
	pthread_mutex_lock(&P.mu);
	for (int i = 0; i < GS_POOL_RECS; i++) {
		struct pool_rec *x = &P.r[i];
		if (x->handle != h || x->dead)
			continue;
		rec_drop(x, x->kept);
		if (atomic_load(&x->live) == 0)
			x->handle = 0;
		else
			x->dead = 1;
	}
	pthread_mutex_unlock(&P.mu);
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&P.mu);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&P.mu);
}

/* The child holds no driver state of its parent's: it keeps nothing. */
static void fork_child(void)
{
	memset(P.r, 0, sizeof(P.r));
	atomic_store(&gs_hot.pool_kept, 0);
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&P.mu, &a);
	pthread_mutexattr_destroy(&a);
}
