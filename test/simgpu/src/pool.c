/* SPDX-License-Identifier: Apache-2.0
 * Stream-ordered allocation (cuMemAllocAsync / FromPoolAsync / FreeAsync)
 * and memory pools. Allocations are made and freed at call time, charged like
 * cuMemAlloc; pools only keep statistics. Also cuPointerGetAttribute. */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "cuapi.h"

struct sim_pool {
	uint32_t magic;
	int dev;
	bool is_default;
	CUmemPoolProps props;
	_Atomic uint64_t used, high, threshold;
};

static struct {
	pthread_mutex_t mu;
	struct sim_pool *def[SIM_MAX_DEVICES];
	struct sim_pool *cur[SIM_MAX_DEVICES];
} pools = {.mu = PTHREAD_MUTEX_INITIALIZER};

void sim_pool_note(void *pool, int64_t delta)
{
	struct sim_pool *p = pool;
	uint64_t u = atomic_fetch_add(&p->used, (uint64_t)delta) + (uint64_t)delta;
	uint64_t h = atomic_load(&p->high);

	while (u > h && !atomic_compare_exchange_weak(&p->high, &h, u))
		;
}

static struct sim_pool *pool_new(int dev)
{
	struct sim_pool *p = calloc(1, sizeof(*p));

	if (p != NULL) {
		p->magic = SIM_MAGIC_POOL;
		p->dev = dev;
		p->props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
		p->props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	}
	return p;
}

/* The device's current pool (the default pool unless set). */
static struct sim_pool *current_pool(int dev, bool want_default)
{
	struct sim_pool *p;

	pthread_mutex_lock(&pools.mu);
	if (pools.def[dev] == NULL && (pools.def[dev] = pool_new(dev)) != NULL)
		pools.def[dev]->is_default = true;
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
	if (pool->dev != s->ctx->dev)
		return CUDA_ERROR_INVALID_VALUE;
	a.dev = pool->dev;
	a.ctx = s->ctx;
	a.pool = pool;
	rc = sim_alloc_add(&a, 0);
	if (rc == CUDA_SUCCESS) {
		sim_pool_note(pool, (int64_t)n);
		*dp = a.base;
	}
	return rc;
}

SIM_API CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s)
{
	return alloc_async(p, n, NULL, s);
}

SIM_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s)
{
	return alloc_async(p, n, NULL, s);
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
	return alloc_from_pool(p, n, pool, s);
}

static CUresult free_async(CUdeviceptr p, CUstream hs)
{
	struct sim_stream *s;
	struct sim_alloc a;
	CUresult rc = sim_stream_resolve(hs, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = sim_alloc_remove(p, 1u << SIM_AK_DEVICE, &a);
	if (rc == CUDA_SUCCESS && a.pool != NULL)
		sim_pool_note(a.pool, -(int64_t)a.size);
	return rc;
}

SIM_API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
	return free_async(p, s);
}

SIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
{
	return free_async(p, s);
}

SIM_API CUresult cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props)
{
	CUresult rc = sim_check_init();
	struct sim_pool *p;
	int dev;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (out == NULL || props == NULL || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	dev = sim_device(props->location.id);
	if (dev < 0)
		return CUDA_ERROR_INVALID_DEVICE;
	p = pool_new(dev);
	if (p == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p->props = *props;
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
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolTrimTo(CUmemoryPool h, size_t keep)
{
	struct sim_pool *p;

	(void)keep;
	return pool_get(h, &p);
}

SIM_API CUresult cuMemPoolSetAttribute(CUmemoryPool h, CUmemPool_attribute a, void *v)
{
	struct sim_pool *p;
	CUresult rc = pool_get(h, &p);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (v == NULL || a < CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES || a > CU_MEMPOOL_ATTR_USED_MEM_HIGH)
		return CUDA_ERROR_INVALID_VALUE;
	if (a == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
		atomic_store(&p->threshold, *(cuuint64_t *)v);
	else if (a == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH || a == CU_MEMPOOL_ATTR_USED_MEM_HIGH)
		atomic_store(&p->high, atomic_load(&p->used)); /* reset to current */
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
	if (a <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES)
		*(int *)v = 1;
	else if (a == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
		*(cuuint64_t *)v = atomic_load(&p->threshold);
	else if (a == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT || a == CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
		*(cuuint64_t *)v = atomic_load(&p->used);
	else
		*(cuuint64_t *)v = atomic_load(&p->high);
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
