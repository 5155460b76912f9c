/* SPDX-License-Identifier: Apache-2.0
 * Stream-ordered allocation (cuMemAllocAsync / FromPoolAsync / FreeAsync)
 * and memory pools, modelled on the driver: a pool reserves device memory
 * (charged) and hands it out; a freed block stays reserved in the pool
 * (still charged) and is reused by the pool's next allocations; a
 * synchronisation (stream, event, context, cuMemFree) releases the pool's free
 * memory above its release threshold (default 0: all of it), cuMemPoolTrimTo
 * down to the bytes asked for. Destroying a pool releases its free memory;
 * blocks still allocated from it are released when freed. A destroyed
 * context's pool allocations go with it. A pool lives where cuMemPoolCreate
 * puts it: a device (any device's stream may allocate from it: the simulated
 * devices are peers), or host memory (CU_MEM_LOCATION_TYPE_HOST*), which holds
 * no device memory. Also cuPointerGetAttribute. */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "cuapi.h"

struct sim_pool {
	uint32_t magic;
	int dev;
	bool is_default;
	bool dead; /* destroyed, blocks still allocated from it */
	CUmemPoolProps props;
	pthread_mutex_t mu;
	uint64_t reserved, used, rhigh, uhigh, threshold; /* under mu */
	struct sim_pool *next;                            /* pools.all, under pools.mu */
};

static struct {
	pthread_mutex_t mu;
	struct sim_pool *def[SIM_MAX_DEVICES];
	struct sim_pool *cur[SIM_MAX_DEVICES];
	struct sim_pool *all;
} pools = {.mu = PTHREAD_MUTEX_INITIALIZER};

static struct sim_pool *pool_new(int dev)
{
	struct sim_pool *p = calloc(1, sizeof(*p));

	if (p != NULL) {
		p->magic = SIM_MAGIC_POOL;
		p->dev = dev;
		p->props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
		p->props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		pthread_mutex_init(&p->mu, NULL);
	}
	return p;
}

/* Under pools.mu: every pool is on pools.all (pools are never freed). */
static void pool_link(struct sim_pool *p)
{
	p->next = pools.all;
	pools.all = p;
}

/* Under p->mu: releases free memory until at most keep bytes stay reserved. */
static void release_to(struct sim_pool *p, uint64_t keep)
{
	uint64_t target = keep < p->reserved ? keep : p->reserved;

	if (target < p->used)
		target = p->used;
	if (p->reserved > target) {
		if (p->dev >= 0)
			sim_uncharge(p->dev, p->reserved - target);
		p->reserved = target;
	}
}

/* Takes n bytes from the pool: its free memory first, the rest charged. */
static CUresult pool_take(struct sim_pool *p, uint64_t n)
{
	CUresult rc = CUDA_SUCCESS;

	pthread_mutex_lock(&p->mu);
	uint64_t free_ = p->reserved - p->used, more = n > free_ ? n - free_ : 0;
	if (more > 0 && (p->dev < 0 || (rc = sim_charge(p->dev, more)) == CUDA_SUCCESS))
		p->reserved += more;
	if (rc == CUDA_SUCCESS) {
		p->used += n;
		p->uhigh = p->used > p->uhigh ? p->used : p->uhigh;
		p->rhigh = p->reserved > p->rhigh ? p->reserved : p->rhigh;
	}
	pthread_mutex_unlock(&p->mu);
	return rc;
}

void sim_pool_freed(void *pool, size_t n)
{
	struct sim_pool *p = pool;

	pthread_mutex_lock(&p->mu);
	p->used -= n;
	if (p->dead)
		release_to(p, 0);
	pthread_mutex_unlock(&p->mu);
}

void sim_pool_dropped(void *pool, size_t n)
{
	struct sim_pool *p = pool;

	pthread_mutex_lock(&p->mu);
	p->used -= n;
	p->reserved -= n;
	if (p->dev >= 0)
		sim_uncharge(p->dev, n);
	pthread_mutex_unlock(&p->mu);
}

/* Every pool (dev < 0) or dev's: releases free memory above the threshold,
 * or all of it (trim_all). */
static void release_pools(int dev, bool trim_all)
{
	pthread_mutex_lock(&pools.mu);
	for (struct sim_pool *p = pools.all; p != NULL; p = p->next) {
		if (dev >= 0 && p->dev != dev)
			continue;
		pthread_mutex_lock(&p->mu);
		release_to(p, trim_all || p->dead ? 0 : p->threshold);
		pthread_mutex_unlock(&p->mu);
	}
	pthread_mutex_unlock(&pools.mu);
}

void sim_pool_sync(void)
{
	release_pools(-1, false);
}

void sim_pool_trim_dev(int dev)
{
	release_pools(dev, true);
}

/* The device's current pool (the default pool unless set). */
static struct sim_pool *current_pool(int dev, bool want_default)
{
	struct sim_pool *p;

	pthread_mutex_lock(&pools.mu);
	if (pools.def[dev] == NULL && (pools.def[dev] = pool_new(dev)) != NULL) {
		pools.def[dev]->is_default = true;
		pool_link(pools.def[dev]);
	}
	p = want_default || pools.cur[dev] == NULL ? pools.def[dev] : pools.cur[dev];
	pthread_mutex_unlock(&pools.mu);
	return p;
}

static CUresult pool_get(CUmemoryPool h, struct sim_pool **out)
{
	struct sim_pool *p = (struct sim_pool *)h;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (p == NULL || p->magic != SIM_MAGIC_POOL)
		return CUDA_ERROR_INVALID_VALUE;
	*out = p;
	return CUDA_SUCCESS;
}

static CUresult capture_alloc(CUdeviceptr *dp, size_t n, struct sim_stream *s)
{
	struct sim_node node;
	CUresult rc = sim_gmem_alloc_node(&node, s->ctx->ordinal, n);

	if (rc == CUDA_SUCCESS && !sim_capture_node(s, &node, &rc))
		rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED; /* the capture ended meanwhile */
	if (rc == CUDA_SUCCESS)
		*dp = node.ptr;
	return rc;
}

static CUresult alloc_async(CUdeviceptr *dp, size_t n, struct sim_pool *pool, CUstream hs)
{
	struct sim_stream *s;
	CUresult rc = sim_stream_resolve(hs, &s);
	struct sim_alloc a = {.size = n, .kind = SIM_AK_DEVICE};

	if (rc != CUDA_SUCCESS)
		return rc;
	if (dp == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (pool == NULL && (pool = current_pool(s->ctx->dev, false)) == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (n == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (sim_stream_capturing(s)) /* an allocation node: the graph's pool serves it */
		return capture_alloc(dp, n, s);
	a.dev = pool->dev >= 0 ? pool->dev : s->ctx->dev; /* a host pool's block: host memory, never charged */
	a.ctx = s->ctx;
	a.pool = pool;
	if ((rc = pool_take(pool, n)) != CUDA_SUCCESS)
		return rc;
	rc = sim_alloc_add(&a, 0); /* not charged: the pool's reservation is */
	if (rc == CUDA_SUCCESS)
		*dp = a.base;
	else
		sim_pool_freed(pool, n);
	return rc;
}

SIM_API CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s)
{
	return alloc_async(p, n, NULL, s);
}

SIM_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s)
{
	return alloc_async(p, n, NULL, SIM_PT(s));
}

static CUresult alloc_from_pool(CUdeviceptr *p, size_t n, CUmemoryPool h, CUstream s)
{
	struct sim_pool *pool;
	CUresult rc = pool_get(h, &pool);

	return rc == CUDA_SUCCESS ? alloc_async(p, n, pool, s) : rc;
}

SIM_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
	return alloc_from_pool(p, n, pool, s);
}

SIM_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
	return alloc_from_pool(p, n, pool, SIM_PT(s));
}

static CUresult free_async(CUdeviceptr p, CUstream hs)
{
	struct sim_stream *s;
	struct sim_alloc a;
	CUresult rc = sim_stream_resolve(hs, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (sim_stream_capturing(s)) {
		struct sim_node node = {.mem = SIM_NODE_FREE, .kind = SIM_ITEM_NOP, .ptr = p};
		if (!sim_alloc_find(p, &a) || a.kind != SIM_AK_GRAPH || a.base != p)
			return CUDA_ERROR_NOT_SUPPORTED; /* a free node frees graph allocations only */
		if (!sim_capture_node(s, &node, &rc))
			rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
		return rc;
	}
	if (sim_gmem_free(p, &rc))
		return rc;
	rc = sim_alloc_remove(p, 1u << SIM_AK_DEVICE, &a);
	if (rc == CUDA_SUCCESS && a.pool != NULL)
		sim_pool_freed(a.pool, a.size);
	return rc;
}

SIM_API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
	return free_async(p, s);
}

SIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
{
	return free_async(p, SIM_PT(s));
}

SIM_API CUresult cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props)
{
	CUresult rc = sim_check_init();
	struct sim_pool *p;
	int dev;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (out == NULL || props == NULL || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	switch (props->location.type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		dev = sim_device(props->location.id);
		if (dev < 0)
			return CUDA_ERROR_INVALID_DEVICE;
		break;
	case CU_MEM_LOCATION_TYPE_HOST:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
		dev = -1; /* host memory */
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	p = pool_new(dev);
	if (p == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p->props = *props;
	pthread_mutex_lock(&pools.mu);
	pool_link(p);
	pthread_mutex_unlock(&pools.mu);
	*out = (CUmemoryPool)p;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolDestroy(CUmemoryPool h)
{
	struct sim_pool *p;
	CUresult rc = pool_get(h, &p);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (p->is_default)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&pools.mu);
	for (int d = 0; d < SIM_MAX_DEVICES; d++)
		if (pools.cur[d] == p)
			pools.cur[d] = NULL;
	pthread_mutex_unlock(&pools.mu);
	p->magic = 0; /* kept allocated: live allocations still point at it */
	pthread_mutex_lock(&p->mu);
	p->dead = true;
	release_to(p, 0);
	pthread_mutex_unlock(&p->mu);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolTrimTo(CUmemoryPool h, size_t keep)
{
	struct sim_pool *p;
	CUresult rc = pool_get(h, &p);

	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&p->mu);
	release_to(p, keep);
	pthread_mutex_unlock(&p->mu);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolSetAttribute(CUmemoryPool h, CUmemPool_attribute a, void *v)
{
	struct sim_pool *p;
	CUresult rc = pool_get(h, &p);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (v == NULL || a < CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES || a > CU_MEMPOOL_ATTR_USED_MEM_HIGH)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&p->mu);
	if (a == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
		p->threshold = *(cuuint64_t *)v;
	else if (a == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
		p->rhigh = p->reserved; /* reset to current */
	else if (a == CU_MEMPOOL_ATTR_USED_MEM_HIGH)
		p->uhigh = p->used;
	pthread_mutex_unlock(&p->mu);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolGetAttribute(CUmemoryPool h, CUmemPool_attribute a, void *v)
{
	struct sim_pool *p;
	CUresult rc = pool_get(h, &p);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (v == NULL || a < CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES || a > CU_MEMPOOL_ATTR_USED_MEM_HIGH)
		return CUDA_ERROR_INVALID_VALUE;
	if (a <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES) {
		*(int *)v = 1;
		return CUDA_SUCCESS;
	}
	pthread_mutex_lock(&p->mu);
	uint64_t vals[] = {[CU_MEMPOOL_ATTR_RELEASE_THRESHOLD] = p->threshold,
			   [CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT] = p->reserved,
			   [CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH] = p->rhigh,
			   [CU_MEMPOOL_ATTR_USED_MEM_CURRENT] = p->used,
			   [CU_MEMPOOL_ATTR_USED_MEM_HIGH] = p->uhigh};
	pthread_mutex_unlock(&p->mu);
	*(cuuint64_t *)v = vals[a];
	return CUDA_SUCCESS;
}

static CUresult dev_pool(CUmemoryPool *out, CUdevice d, bool want_default)
{
	CUresult rc = sim_check_init();
	struct sim_pool *p;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (sim_device(d) < 0)
		return CUDA_ERROR_INVALID_DEVICE;
	if (out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	p = current_pool(sim_device(d), want_default);
	if (p == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = (CUmemoryPool)p;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *p, CUdevice d)
{
	return dev_pool(p, d, true);
}

SIM_API CUresult cuDeviceGetMemPool(CUmemoryPool *p, CUdevice d)
{
	return dev_pool(p, d, false);
}

SIM_API CUresult cuDeviceSetMemPool(CUdevice d, CUmemoryPool h)
{
	struct sim_pool *p;
	CUresult rc = pool_get(h, &p);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (sim_device(d) < 0 || sim_device(d) != p->dev)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&pools.mu);
	pools.cur[p->dev] = p;
	pthread_mutex_unlock(&pools.mu);
	return CUDA_SUCCESS;
}
