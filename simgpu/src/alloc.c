/* SPDX-License-Identifier: Apache-2.0
 * The process-local allocation table and device-memory charging. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "alloc.h"
#include "mps.h"

#define VA_BASE 0x200000000000ull /* fake device addresses start at 32 TiB */

static struct {
	pthread_mutex_t mu;
	struct sim_alloc *v;
	size_t n, cap;
	CUdeviceptr next;
} tab = {.mu = PTHREAD_MUTEX_INITIALIZER, .next = VA_BASE};

CUresult sim_charge(int dev, size_t size)
{
	if (sim_g.slot < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	return sim_mem_reserve(sim_g.st, sim_g.slot, dev, size, sim_mps_limit(dev)) == 0 ? CUDA_SUCCESS
											 : CUDA_ERROR_OUT_OF_MEMORY;
}

void sim_uncharge(int dev, size_t size)
{
	sim_mem_release(sim_g.st, sim_g.slot, dev, size);
}

/* Charged per allocation (a pool's blocks are charged to the pool). */
static bool charged(const struct sim_alloc *a)
{
	return (a->kind == SIM_AK_DEVICE && a->pool == NULL) || a->kind == SIM_AK_MANAGED;
}

/* Index of the first entry with base > p. Called with tab.mu held. */
static size_t upper(CUdeviceptr p)
{
	size_t lo = 0, hi = tab.n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (tab.v[mid].base <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int insert_locked(const struct sim_alloc *a)
{
	size_t i;

	if (tab.n == tab.cap) {
		size_t cap = tab.cap ? tab.cap * 2 : 256;
		struct sim_alloc *v = realloc(tab.v, cap * sizeof(*v));
		if (v == NULL)
			return -1;
		tab.v = v;
		tab.cap = cap;
	}
	i = upper(a->base);
	memmove(&tab.v[i + 1], &tab.v[i], (tab.n - i) * sizeof(*tab.v));
	tab.v[i] = *a;
	tab.n++;
	return 0;
}

static CUdeviceptr assign_va(size_t size, size_t align)
{
	CUdeviceptr base;

	if (align < 512)
		align = size >= SIM_GRANULARITY ? SIM_GRANULARITY : 512;
	base = (tab.next + align - 1) & ~(CUdeviceptr)(align - 1);
	tab.next = base + ((size + 511) & ~(size_t)511);
	return base;
}

CUresult sim_alloc_add(struct sim_alloc *a, size_t align)
{
	CUresult rc = CUDA_SUCCESS;

	if (a->size == 0 || a->size > (1ull << 46))
		return a->size == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
	if (charged(a) && (rc = sim_charge(a->dev, a->size)) != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&tab.mu);
	if (a->kind == SIM_AK_DEVICE || a->kind == SIM_AK_RESERVED || a->kind == SIM_AK_GRAPH)
		a->base = assign_va(a->size, align);
	if (insert_locked(a) != 0)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&tab.mu);
	if (rc != CUDA_SUCCESS && charged(a))
		sim_uncharge(a->dev, a->size);
	return rc;
}

CUresult sim_alloc_remove(CUdeviceptr base, unsigned kinds_mask, struct sim_alloc *out)
{
	struct sim_alloc a;
	size_t i;

	pthread_mutex_lock(&tab.mu);
	i = upper(base);
	if (i == 0 || tab.v[i - 1].base != base || !(kinds_mask & (1u << tab.v[i - 1].kind))) {
		pthread_mutex_unlock(&tab.mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	a = tab.v[i - 1];
	memmove(&tab.v[i - 1], &tab.v[i], (tab.n - i) * sizeof(*tab.v));
	tab.n--;
	pthread_mutex_unlock(&tab.mu);
	if (charged(&a))
		sim_uncharge(a.dev, a.size - a.on_host);
	if (out != NULL)
		*out = a;
	return CUDA_SUCCESS;
}

CUresult sim_alloc_migrate(CUdeviceptr p, size_t n, bool to_host)
{
	CUresult rc = CUDA_SUCCESS;
	size_t i;

	pthread_mutex_lock(&tab.mu);
	i = upper(p);
	if (i == 0 || p - tab.v[i - 1].base >= tab.v[i - 1].size || tab.v[i - 1].kind != SIM_AK_MANAGED) {
		pthread_mutex_unlock(&tab.mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct sim_alloc *a = &tab.v[i - 1];
	if (to_host) {
		size_t m = n < a->size - a->on_host ? n : a->size - a->on_host;
		sim_uncharge(a->dev, m);
		a->on_host += m;
	} else {
		size_t m = n < a->on_host ? n : a->on_host;
		rc = sim_charge(a->dev, m);
		if (rc == CUDA_SUCCESS)
			a->on_host -= m;
	}
	pthread_mutex_unlock(&tab.mu);
	return rc;
}

bool sim_alloc_find(CUdeviceptr p, struct sim_alloc *out)
{
	bool ok = false;
	size_t i;

	pthread_mutex_lock(&tab.mu);
	i = upper(p);
	if (i > 0 && p - tab.v[i - 1].base < tab.v[i - 1].size) {
		*out = tab.v[i - 1];
		ok = true;
	}
	pthread_mutex_unlock(&tab.mu);
	return ok;
}

bool sim_mem_lookup(CUdeviceptr p, CUdeviceptr *base, size_t *size, int *dev, bool *managed, struct sim_ctx **ctx)
{
	struct sim_alloc a;

	if (!sim_alloc_find(p, &a))
		return false;
	*base = a.base;
	*size = a.size;
	*dev = a.dev;
	*managed = a.kind == SIM_AK_MANAGED;
	*ctx = a.ctx;
	return true;
}

/* Frees every charged allocation of a context being destroyed. */
void sim_mem_free_ctx(struct sim_ctx *c)
{
	size_t k = 0;

	pthread_mutex_lock(&tab.mu);
	for (size_t i = 0; i < tab.n; i++) {
		struct sim_alloc *a = &tab.v[i];
		if (a->ctx == c && a->pool != NULL && a->kind == SIM_AK_DEVICE) {
			sim_pool_dropped(a->pool, a->size);
			continue;
		}
		if (a->ctx != c || !charged(a)) {
			tab.v[k++] = *a;
			continue;
		}
		sim_uncharge(a->dev, a->size - a->on_host);
		if (a->kind == SIM_AK_MANAGED)
			munmap((void *)(uintptr_t)a->base, a->size);
	}
	tab.n = k;
	pthread_mutex_unlock(&tab.mu);
}
