/* SPDX-License-Identifier: Apache-2.0
 * Graph memory nodes, modelled on the driver's graph memory pool (one per
 * device and process, separate from the stream-ordered pools):
 *  - an allocation node (cuGraphAddMemAllocNode, or cuMemAllocAsync on a
 *    capturing stream) gets a fixed virtual address at creation and charges
 *    nothing; a free node (cuGraphAddMemFreeNode, captured cuMemFreeAsync)
 *    names one;
 *  - launching or uploading an exec binds the bytes of its allocation nodes
 *    to it: taken from what the device's graph pool has free, the rest
 *    charged (CUDA_ERROR_OUT_OF_MEMORY if the device is full); they stay
 *    bound between launches;
 *  - an allocation the graph does not free stays live after the launch until
 *    cuMemFree / cuMemFreeAsync / another graph's free node;
 *  - destroying an exec, or cuDeviceGraphMemTrim while it is idle, unbinds
 *    its bytes (its live allocations stay in use); the pool keeps what is
 *    unbound (still charged) until cuDeviceGraphMemTrim releases it;
 *  - cuDeviceGetGraphMemAttribute reports USED (bound + live) and RESERVED
 *    (charged) bytes and their high-water marks.
 * Difference: an exec's allocation nodes must all be on one device.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "cuapi.h"

struct live {
	CUdeviceptr ptr;
	uint64_t size;
	int dev;
	struct sim_graph *exec; /* bound exec that allocated it; NULL: held on its own */
};

static struct {
	pthread_mutex_t mu;
	uint64_t reserved[SIM_MAX_DEVICES], used[SIM_MAX_DEVICES];
	uint64_t rhigh[SIM_MAX_DEVICES], uhigh[SIM_MAX_DEVICES];
	struct sim_graph *execs;
	struct live *live;
	size_t nlive, caplive;
} gm = {.mu = PTHREAD_MUTEX_INITIALIZER};

CUresult sim_gmem_alloc_node(struct sim_node *n, int ordinal, uint64_t size)
{
	int dev = sim_device(ordinal);
	struct sim_alloc a = {.size = size, .dev = dev, .kind = SIM_AK_GRAPH};
	CUresult rc;

	if (dev < 0)
		return CUDA_ERROR_INVALID_DEVICE;
	if (size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_alloc_add(&a, 0); /* a virtual address only */
	if (rc != CUDA_SUCCESS)
		return rc;
	*n = (struct sim_node){.magic = SIM_MAGIC_NODE,
			       .mem = SIM_NODE_ALLOC,
			       .kind = SIM_ITEM_NOP,
			       .ptr = a.base,
			       .size = size,
			       .dev = dev,
			       .ordinal = ordinal};
	return CUDA_SUCCESS;
}

/* At instantiation: what the exec's allocation nodes need, which escape. */
CUresult sim_gmem_exec_new(struct sim_graph *e)
{
	for (size_t i = 0; i < e->n; i++) {
		struct sim_node *a = &e->nodes[i];
		if (a->mem == SIM_NODE_FREE)
			e->gmem = true;
		if (a->mem != SIM_NODE_ALLOC)
			continue;
		if (e->gneed > 0 && a->dev != e->gdev)
			return CUDA_ERROR_NOT_SUPPORTED;
		e->gmem = true;
		e->gdev = a->dev;
		e->gneed += a->size;
		a->escapes = true;
		for (size_t j = 0; j < e->n; j++)
			if (e->nodes[j].mem == SIM_NODE_FREE && e->nodes[j].ptr == a->ptr)
				a->escapes = false;
	}
	if (e->gmem) {
		pthread_mutex_lock(&gm.mu);
		e->gnext = gm.execs;
		gm.execs = e;
		pthread_mutex_unlock(&gm.mu);
	}
	return CUDA_SUCCESS;
}

static void marks(int d)
{
	gm.rhigh[d] = gm.reserved[d] > gm.rhigh[d] ? gm.reserved[d] : gm.rhigh[d];
	gm.uhigh[d] = gm.used[d] > gm.uhigh[d] ? gm.used[d] : gm.uhigh[d];
}

CUresult sim_gmem_bind(struct sim_graph *e)
{
	CUresult rc = CUDA_SUCCESS;

	if (e->gneed == 0)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&gm.mu);
	if (!e->gbound) {
		int d = e->gdev;
		uint64_t free_ = gm.reserved[d] - gm.used[d], more = e->gneed > free_ ? e->gneed - free_ : 0;
		if (more > 0 && (rc = sim_charge(d, more)) == CUDA_SUCCESS)
			gm.reserved[d] += more;
		if (rc == CUDA_SUCCESS) {
			gm.used[d] += e->gneed;
			e->gbound = true;
			marks(d);
		}
	}
	pthread_mutex_unlock(&gm.mu);
	return rc;
}

/* Under gm.mu. */
static struct live *live_find(CUdeviceptr p)
{
	for (size_t i = 0; i < gm.nlive; i++)
		if (gm.live[i].ptr == p)
			return &gm.live[i];
	return NULL;
}

/* Under gm.mu: the live allocation x is freed. */
static void live_drop(struct live *x)
{
	if (x->exec == NULL)
		gm.used[x->dev] -= x->size;
	*x = gm.live[--gm.nlive];
}

static void live_add(const struct sim_node *a, struct sim_graph *e)
{
	struct live *x = live_find(a->ptr);

	if (x == NULL && gm.nlive == gm.caplive) {
		size_t cap = gm.caplive ? gm.caplive * 2 : 16;
		struct live *v = realloc(gm.live, cap * sizeof(*v));
		if (v == NULL)
			return; /* not tracked: freed with its exec */
		gm.live = v;
		gm.caplive = cap;
	}
	if (x == NULL)
		x = &gm.live[gm.nlive++];
	*x = (struct live){.ptr = a->ptr, .size = a->size, .dev = a->dev, .exec = e};
}

void sim_gmem_launched(struct sim_graph *e, struct sim_stream *s)
{
	if (!e->gmem)
		return;
	pthread_mutex_lock(&gm.mu);
	for (size_t i = 0; i < e->n; i++) {
		struct sim_node *n = &e->nodes[i];
		struct live *x = n->mem == SIM_NODE_FREE ? live_find(n->ptr) : NULL;
		if (n->mem == SIM_NODE_ALLOC && n->escapes)
			live_add(n, e);
		else if (x != NULL)
			live_drop(x);
	}
	e->gq = &s->ctx->q;
	e->gseq = atomic_load(&s->last);
	pthread_mutex_unlock(&gm.mu);
}

/* Under gm.mu: e's bytes go back to the pool; its live allocations stay used. */
static void unbind(struct sim_graph *e)
{
	uint64_t keep = 0;

	if (!e->gbound)
		return;
	for (size_t i = 0; i < gm.nlive; i++) {
		if (gm.live[i].exec == e) {
			gm.live[i].exec = NULL;
			keep += gm.live[i].size;
		}
	}
	gm.used[e->gdev] -= e->gneed - keep;
	e->gbound = false;
}

void sim_gmem_exec_destroy(struct sim_graph *e)
{
	if (!e->gmem)
		return;
	pthread_mutex_lock(&gm.mu);
	unbind(e);
	for (struct sim_graph **p = &gm.execs; *p != NULL; p = &(*p)->gnext) {
		if (*p == e) {
			*p = e->gnext;
			break;
		}
	}
	pthread_mutex_unlock(&gm.mu);
}

bool sim_gmem_free(CUdeviceptr p, CUresult *rc)
{
	struct sim_alloc a;
	struct live *x;

	if (!sim_alloc_find(p, &a) || a.kind != SIM_AK_GRAPH || a.base != p)
		return false;
	pthread_mutex_lock(&gm.mu);
	x = live_find(p);
	if (x != NULL)
		live_drop(x);
	pthread_mutex_unlock(&gm.mu);
	*rc = x != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	return true;
}

/* Under gm.mu: releases the pool's unused bytes on d; idle execs (or all:
 * the context is gone) are unbound first. */
static void trim(int d, bool all)
{
	for (struct sim_graph *e = gm.execs; e != NULL; e = e->gnext) {
		bool idle = e->gq == NULL || atomic_load(&e->gq->done) >= e->gseq;
		if (e->gdev == d && (idle || all))
			unbind(e);
	}
	for (size_t i = 0; all && i < gm.nlive;) {
		if (gm.live[i].dev == d)
			live_drop(&gm.live[i]);
		else
			i++;
	}
	sim_uncharge(d, gm.reserved[d] - gm.used[d]);
	gm.reserved[d] = gm.used[d];
}

void sim_gmem_teardown(int dev)
{
	pthread_mutex_lock(&gm.mu);
	trim(dev, true);
	pthread_mutex_unlock(&gm.mu);
}

SIM_API CUresult cuDeviceGraphMemTrim(CUdevice d)
{
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (sim_device(d) < 0)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&gm.mu);
	trim(sim_device(d), false);
	pthread_mutex_unlock(&gm.mu);
	return CUDA_SUCCESS;
}

static CUresult graph_mem_attr(CUdevice d, CUgraphMem_attribute a, void *v, bool set)
{
	CUresult rc = sim_check_init();
	int dev = sim_device(d);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (dev < 0)
		return CUDA_ERROR_INVALID_DEVICE;
	if (v == NULL || a < CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT || a > CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
		return CUDA_ERROR_INVALID_VALUE;
	if (set && (a == CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT || a == CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT ||
		    *(cuuint64_t *)v != 0))
		return CUDA_ERROR_INVALID_VALUE; /* only the high-water marks, only to 0 */
	pthread_mutex_lock(&gm.mu);
	uint64_t *vals[] = {[CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT] = &gm.used[dev],
			    [CU_GRAPH_MEM_ATTR_USED_MEM_HIGH] = &gm.uhigh[dev],
			    [CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT] = &gm.reserved[dev],
			    [CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH] = &gm.rhigh[dev]};
	if (set)
		*vals[a] = 0;
	else
		*(cuuint64_t *)v = *vals[a];
	pthread_mutex_unlock(&gm.mu);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetGraphMemAttribute(CUdevice d, CUgraphMem_attribute a, void *v)
{
	return graph_mem_attr(d, a, v, false);
}

SIM_API CUresult cuDeviceSetGraphMemAttribute(CUdevice d, CUgraphMem_attribute a, void *v)
{
	return graph_mem_attr(d, a, v, true);
}
