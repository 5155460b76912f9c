/* SPDX-License-Identifier: Apache-2.0
 * Device, managed and host memory entry points. Device memory is charged
 * against the shared per-device capacity; an allocation over it fails with
 * CUDA_ERROR_OUT_OF_MEMORY like the real card. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "alloc.h"
#include "cuapi.h"

static CUresult mem_info(size_t *free_, size_t *total)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (free_ == NULL || total == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	sim_reap(sim_g.st);
	uint64_t t = sim_g.st->dev[c->dev].total, u = atomic_load(&sim_g.st->dev[c->dev].used);
	*total = (size_t)t;
	*free_ = (size_t)(u > t ? 0 : t - u);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetInfo_v2(size_t *free_, size_t *total)
{
	return mem_info(free_, total);
}

SIM_API CUresult cuMemGetInfo(unsigned int *free_, unsigned int *total)
{
	size_t f, t;
	CUresult rc = mem_info(&f, &t);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (free_ == NULL || total == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*free_ = f > 0xffffffffu ? 0xffffffffu : (unsigned)f;
	*total = t > 0xffffffffu ? 0xffffffffu : (unsigned)t;
	return CUDA_SUCCESS;
}

static CUresult dev_alloc(CUdeviceptr *p, size_t n, struct sim_ctx *c, void *pool)
{
	struct sim_alloc a = {.size = n, .dev = c->dev, .kind = SIM_AK_DEVICE, .ctx = c, .pool = pool};
	CUresult rc;

	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_alloc_add(&a, 0);
	if (rc == CUDA_SUCCESS)
		*p = a.base;
	return rc;
}

SIM_API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);

	if (rc == CUDA_SUCCESS)
		sim_latency();
	return rc == CUDA_SUCCESS ? dev_alloc(p, n, c, NULL) : rc;
}

SIM_API CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned int elem)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);
	size_t pt;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (pitch == NULL || w == 0 || h == 0 || (elem != 4 && elem != 8 && elem != 16))
		return CUDA_ERROR_INVALID_VALUE;
	pt = (w + 511) & ~(size_t)511;
	if (pt < w || h > SIZE_MAX / pt)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = dev_alloc(p, pt * h, c, NULL);
	if (rc == CUDA_SUCCESS)
		*pitch = pt;
	return rc;
}

/* The 32-bit pointer ABI of CUDA < 3.2 cannot address this device. */
SIM_API CUresult cuMemAlloc(CUdeviceptr_v1 *p, unsigned int n)
{
	(void)p;
	(void)n;
	return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_API CUresult cuMemAllocPitch(CUdeviceptr_v1 *p, unsigned int *pitch, unsigned int w, unsigned int h,
				 unsigned int elem)
{
	(void)p, (void)pitch, (void)w, (void)h, (void)elem;
	return CUDA_ERROR_NOT_SUPPORTED;
}

SIM_API CUresult cuMemFree(CUdeviceptr_v1 p)
{
	(void)p;
	return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult mem_free(CUdeviceptr p)
{
	struct sim_alloc a;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (p == 0)
		return CUDA_SUCCESS; /* like the real driver */
	if (sim_gmem_free(p, &rc)) {
		if (rc == CUDA_SUCCESS)
			sim_pool_sync(); /* cuMemFree synchronises */
		return rc;
	}
	rc = sim_alloc_remove(p, 1u << SIM_AK_DEVICE | 1u << SIM_AK_MANAGED, &a);
	if (rc == CUDA_SUCCESS && a.kind == SIM_AK_MANAGED)
		munmap((void *)(uintptr_t)a.base, a.size);
	if (rc == CUDA_SUCCESS && a.pool != NULL) {
		sim_pool_freed(a.pool, a.size);
		sim_pool_sync(); /* cuMemFree synchronises */
	}
	return rc;
}

SIM_API CUresult cuMemFree_v2(CUdeviceptr p)
{
	return mem_free(p);
}

SIM_API CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int flags)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);
	struct sim_alloc a = {.size = n, .kind = SIM_AK_MANAGED, .flags = flags};
	void *host;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (p == NULL || n == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
		return CUDA_ERROR_INVALID_VALUE;
	if (n > sim_g.st->dev[c->dev].total)
		return CUDA_ERROR_OUT_OF_MEMORY;
	int saved = errno;
	host = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	errno = saved;
	if (host == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a.base = (CUdeviceptr)(uintptr_t)host;
	a.dev = c->dev;
	a.ctx = c;
	rc = sim_alloc_add(&a, 0);
	if (rc != CUDA_SUCCESS)
		munmap(host, n);
	else
		*p = a.base;
	return rc;
}

/* Managed memory: advice is accepted (where pages prefer to live does not
 * change the simulator's charge); prefetch to the host moves the bytes off the
 * device's charge, prefetch to the device charges them again. The data always
 * stays in the host mapping, as the real driver keeps it intact across
 * migrations. */
SIM_API CUresult cuMemAdvise(CUdeviceptr p, size_t n, int advice, CUdevice dev)
{
	struct sim_alloc a;

	if (n == 0 || !sim_alloc_find(p, &a) || a.kind != SIM_AK_MANAGED || p - a.base + n > a.size)
		return CUDA_ERROR_INVALID_VALUE;
	if (advice < 1 || advice > 6 || (dev != CU_DEVICE_CPU && sim_device(dev) < 0))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dst, CUstream s)
{
	struct sim_alloc a;
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (n == 0 || !sim_alloc_find(p, &a) || a.kind != SIM_AK_MANAGED || p - a.base + n > a.size)
		return CUDA_ERROR_INVALID_VALUE;
	if (dst != CU_DEVICE_CPU && dst != a.dev)
		return CUDA_ERROR_INVALID_DEVICE;
	rc = sim_copy_engine(s, n); /* the migration occupies the engine, in stream order */
	return rc != CUDA_SUCCESS ? rc : sim_alloc_migrate(p, n, dst == CU_DEVICE_CPU);
}

SIM_API CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice dst, CUstream s)
{
	return cuMemPrefetchAsync(p, n, dst, SIM_PT(s));
}

/* CUDA 12.2: the target is a CUmemLocation (a device, or the host). */
static CUresult location_device(CUmemLocation loc, CUdevice *dev)
{
	if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE)
		*dev = loc.id;
	else if (loc.type == CU_MEM_LOCATION_TYPE_HOST || loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
		 loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
		*dev = CU_DEVICE_CPU;
	else
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, int advice, CUmemLocation loc)
{
	CUdevice dev;
	CUresult rc = location_device(loc, &dev);

	return rc != CUDA_SUCCESS ? rc : cuMemAdvise(p, n, advice, dev);
}

SIM_API CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s)
{
	CUdevice dev;
	CUresult rc = flags != 0 ? CUDA_ERROR_INVALID_VALUE : location_device(loc, &dev);

	return rc != CUDA_SUCCESS ? rc : cuMemPrefetchAsync(p, n, dev, s);
}

SIM_API CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s)
{
	return cuMemPrefetchAsync_v2(p, n, loc, flags, SIM_PT(s));
}

SIM_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
	struct sim_alloc a;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!sim_alloc_find(p, &a) || a.kind == SIM_AK_HOST)
		return CUDA_ERROR_NOT_FOUND;
	if (base != NULL)
		*base = a.base;
	if (size != NULL)
		*size = a.size;
	return CUDA_SUCCESS;
}

static CUresult host_alloc(void **p, size_t n, unsigned flags)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);
	struct sim_alloc a = {.size = n, .dev = -1, .kind = SIM_AK_HOST, .flags = flags};
	void *host = NULL;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (p == NULL || n == 0 || flags > 7)
		return CUDA_ERROR_INVALID_VALUE;
	if (posix_memalign(&host, 4096, n) != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a.base = (CUdeviceptr)(uintptr_t)host;
	a.ctx = c;
	rc = sim_alloc_add(&a, 0);
	if (rc != CUDA_SUCCESS)
		free(host);
	else
		*p = host;
	return rc;
}

SIM_API CUresult cuMemAllocHost_v2(void **p, size_t n)
{
	return host_alloc(p, n, 0);
}

SIM_API CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags)
{
	return host_alloc(p, n, flags);
}

SIM_API CUresult cuMemFreeHost(void *p)
{
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = sim_alloc_remove((CUdeviceptr)(uintptr_t)p, 1u << SIM_AK_HOST, NULL);
	if (rc == CUDA_SUCCESS)
		free(p);
	return rc;
}

SIM_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned int flags)
{
	struct sim_alloc a;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (d == NULL || flags != 0 || !sim_alloc_find((CUdeviceptr)(uintptr_t)p, &a) || a.kind != SIM_AK_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	*d = (CUdeviceptr)(uintptr_t)p; /* unified addressing */
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemHostGetFlags(unsigned int *flags, void *p)
{
	struct sim_alloc a;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (flags == NULL || !sim_alloc_find((CUdeviceptr)(uintptr_t)p, &a) || a.kind != SIM_AK_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = a.flags;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);
	struct sim_alloc a = {.base = (CUdeviceptr)(uintptr_t)p, .size = n, .dev = -1, .kind = SIM_AK_HOST};

	if (rc != CUDA_SUCCESS)
		return rc;
	if (p == NULL || n == 0 || flags > 0xf)
		return CUDA_ERROR_INVALID_VALUE;
	a.ctx = c;
	a.flags = flags | 0x80000000u; /* registered, not ours to free */
	return sim_alloc_add(&a, 0);
}

SIM_API CUresult cuMemHostUnregister(void *p)
{
	struct sim_alloc a;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!sim_alloc_find((CUdeviceptr)(uintptr_t)p, &a) || a.base != (CUdeviceptr)(uintptr_t)p ||
	    !(a.flags & 0x80000000u))
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	return sim_alloc_remove(a.base, 1u << SIM_AK_HOST, NULL);
}
