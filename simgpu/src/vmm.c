/* SPDX-License-Identifier: Apache-2.0
 * Virtual memory management (cuMemAddressReserve / cuMemCreate / cuMemMap /
 * cuMemRelease) and arrays. Physical handles are charged at cuMemCreate and
 * uncharged when released and unmapped everywhere, like the real driver. */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "cuapi.h"

struct phys {
	struct phys *next; /* registry: handles are validated without dereferencing */
	uint32_t magic;
	int dev;
	size_t size;
	int refs;    /* handles + mappings */
	int handles; /* releases owed: 1 at create, +1 per cuMemRetainAllocationHandle */
	CUmemAllocationProp prop;
};

struct mapping {
	CUdeviceptr ptr;
	size_t size;
	struct phys *ph;
	struct mapping *next;
};

#define PHYS_MAGIC 0x50485953u

static struct {
	pthread_mutex_t mu;
	struct mapping *maps;
	struct phys *handles;
} vmm = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Called with vmm.mu held. */
static void phys_put(struct phys *p)
{
	if (--p->refs == 0) {
		for (struct phys **pp = &vmm.handles; *pp != NULL; pp = &(*pp)->next)
			if (*pp == p) {
				*pp = p->next;
				break;
			}
		sim_uncharge(p->dev, p->size);
		p->magic = 0;
		free(p);
	}
}

static CUresult check_prop(const CUmemAllocationProp *prop, int *dev)
{
	if (prop == NULL || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	*dev = sim_device(prop->location.id);
	return *dev < 0 ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
					       CUmemAllocationGranularity_flags o)
{
	int dev;
	CUresult rc = sim_check_init();

	if (rc == CUDA_SUCCESS)
		rc = check_prop(prop, &dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (g == NULL || (o != CU_MEM_ALLOC_GRANULARITY_MINIMUM && o != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	*g = SIM_GRANULARITY;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr, unsigned long long flags)
{
	struct sim_alloc a = {.size = n, .dev = -1, .kind = SIM_AK_RESERVED};
	CUresult rc = sim_check_init();

	(void)addr; /* a hint only */
	if (rc != CUDA_SUCCESS)
		return rc;
	if (p == NULL || n == 0 || n % SIM_GRANULARITY != 0 || flags != 0 || (align & (align - 1)) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_alloc_add(&a, align > SIM_GRANULARITY ? align : SIM_GRANULARITY);
	if (rc == CUDA_SUCCESS)
		*p = a.base;
	return rc;
}

SIM_API CUresult cuMemAddressFree(CUdeviceptr p, size_t n)
{
	struct sim_alloc a;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!sim_alloc_find(p, &a) || a.kind != SIM_AK_RESERVED || a.base != p || a.size != n)
		return CUDA_ERROR_INVALID_VALUE;
	return sim_alloc_remove(p, 1u << SIM_AK_RESERVED, NULL);
}

SIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop,
			     unsigned long long flags)
{
	struct phys *p;
	int dev;
	CUresult rc = sim_check_init();

	if (rc == CUDA_SUCCESS)
		rc = check_prop(prop, &dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (h == NULL || n == 0 || n % SIM_GRANULARITY != 0 || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (sim_g.slot < 0 && sim_register_process(dev) != CUDA_SUCCESS)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = sim_charge(dev, n);
	if (rc != CUDA_SUCCESS) {
		free(p);
		return rc;
	}
	pthread_mutex_lock(&vmm.mu);
	*p = (struct phys){.next = vmm.handles,
			   .magic = PHYS_MAGIC,
			   .dev = dev,
			   .size = n,
			   .refs = 1,
			   .handles = 1,
			   .prop = *prop};
	vmm.handles = p;
	pthread_mutex_unlock(&vmm.mu);
	*h = (CUmemGenericAllocationHandle)(uintptr_t)p;
	return CUDA_SUCCESS;
}

/* Called with vmm.mu held: a handle not released as often as retained, or NULL. */
static struct phys *phys_get(CUmemGenericAllocationHandle h)
{
	for (struct phys *p = vmm.handles; p != NULL; p = p->next)
		if ((CUmemGenericAllocationHandle)(uintptr_t)p == h)
			return p->handles > 0 ? p : NULL;
	return NULL;
}

SIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
	struct phys *p;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&vmm.mu);
	p = phys_get(h);
	if (p != NULL) {
		p->handles--;
		phys_put(p);
	}
	pthread_mutex_unlock(&vmm.mu);
	return p != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static bool overlaps(CUdeviceptr a, size_t an, CUdeviceptr b, size_t bn)
{
	return a < b + bn && b < a + an;
}

SIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t n, size_t off, CUmemGenericAllocationHandle h,
			  unsigned long long flags)
{
	struct sim_alloc r;
	struct mapping *m;
	struct phys *p;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (n == 0 || flags != 0 || !sim_alloc_find(ptr, &r) || r.kind != SIM_AK_RESERVED || ptr + n > r.base + r.size)
		return CUDA_ERROR_INVALID_VALUE;
	if ((m = calloc(1, sizeof(*m))) == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&vmm.mu);
	p = phys_get(h);
	if (p == NULL || off > p->size || n > p->size - off)
		rc = CUDA_ERROR_INVALID_VALUE;
	for (struct mapping *x = vmm.maps; rc == CUDA_SUCCESS && x != NULL; x = x->next)
		if (overlaps(x->ptr, x->size, ptr, n))
			rc = CUDA_ERROR_ALREADY_MAPPED;
	if (rc == CUDA_SUCCESS) {
		*m = (struct mapping){ptr, n, p, vmm.maps};
		vmm.maps = m;
		p->refs++;
	}
	pthread_mutex_unlock(&vmm.mu);
	if (rc != CUDA_SUCCESS)
		free(m);
	return rc;
}

SIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t n)
{
	CUresult rc = sim_check_init();
	int found = 0;

	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&vmm.mu);
	for (struct mapping **pp = &vmm.maps; *pp != NULL;) {
		struct mapping *m = *pp;
		if (m->ptr >= ptr && m->ptr + m->size <= ptr + n) {
			*pp = m->next;
			phys_put(m->ph);
			free(m);
			found++;
		} else {
			pp = &m->next;
		}
	}
	pthread_mutex_unlock(&vmm.mu);
	return found > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Called with vmm.mu held: the mapping containing p, or NULL. */
static struct mapping *mapping_at(CUdeviceptr p)
{
	for (struct mapping *m = vmm.maps; m != NULL; m = m->next)
		if (p >= m->ptr && p - m->ptr < m->size)
			return m;
	return NULL;
}

/* Is [ptr, ptr+n) entirely mapped (possibly by several mappings)? With ph,
 * retains and returns the handle mapped at ptr. */
static bool mapped(CUdeviceptr ptr, size_t n, struct phys **ph)
{
	CUdeviceptr cur = ptr, end = ptr + n;
	struct mapping *m = NULL;

	pthread_mutex_lock(&vmm.mu);
	while (cur < end && (m = mapping_at(cur)) != NULL)
		cur = m->ptr + m->size;
	if (cur >= end && ph != NULL && (m = mapping_at(ptr)) != NULL) {
		*ph = m->ph;
		m->ph->refs++;
		m->ph->handles++;
	}
	pthread_mutex_unlock(&vmm.mu);
	return n > 0 && cur >= end;
}

SIM_API CUresult cuMemSetAccess(CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t count)
{
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (d == NULL || count == 0 || !mapped(p, n, NULL))
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++)
		if (d[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || sim_device(d[i].location.id) < 0)
			return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *loc, CUdeviceptr p)
{
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (flags == NULL || loc == NULL || !mapped(p, 1, NULL))
		return CUDA_ERROR_INVALID_VALUE;
	*flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h)
{
	struct phys *p;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (prop == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&vmm.mu);
	p = phys_get(h);
	if (p != NULL)
		*prop = p->prop;
	pthread_mutex_unlock(&vmm.mu);
	return p != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
	struct phys *p = NULL;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (h == NULL || !mapped((CUdeviceptr)(uintptr_t)addr, 1, &p))
		return CUDA_ERROR_INVALID_VALUE;
	*h = (CUmemGenericAllocationHandle)(uintptr_t)p;
	return CUDA_SUCCESS;
}
