/* SPDX-License-Identifier: Apache-2.0
 *
 * Virtual memory management: physical memory from cuMemCreate stays on the
 * device until every handle to it is released AND every mapping of it is
 * unmapped, like the driver. It is counted at create and uncounted when the
 * last of those references goes (the VMM samples map, then release the handle
 * at once: the memory stays counted until cuMemUnmap). Only device-located
 * allocations take GPU memory; handles we did not count (another location,
 * or imported from another process) are not tracked.
 *
 * The VMM table holds three kinds of entries: a physical allocation (by an id
 * of ours: counted size, refs = handles + mappings), a handle (-> physical id,
 * refs = releases owed: cuMemRetainAllocationHandle adds one), a mapping (by
 * VA -> physical id). These calls are rare: one lock makes a lookup, the
 * driver call and the update one step.
 */
#include <errno.h>

#include "log.h"
#include "memcore.h"

static uint64_t last_phys; /* under gs_vmm_lock */

/* Drops one reference to a physical allocation; the last one uncounts it. */
static void phys_put(uint64_t id)
{
	struct gs_ptrent p;
	if (gs_ptrtab_ref(gs_ptrtab_vmm(), GS_KIND_PHYS, id, -1, &p) == 0)
		gs_release_entry(&p);
}

static void phys_get(uint64_t id)
{
	struct gs_ptrent p;
	(void)gs_ptrtab_ref(gs_ptrtab_vmm(), GS_KIND_PHYS, id, 1, &p);
}

static void track_failed(void)
{
	static _Atomic int said;
	gs_log_once(&said, "out of host memory tracking allocations; some GPU memory stays counted");
}

static CUresult resv_create(const CUmemAllocationProp *prop, uint64_t size, struct gs_resv *r)
{
	if (prop != NULL && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
		return gs_resv_dev(prop->location.id, size, r);
	r->active = 0;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
			       unsigned long long flags)
{
	GS_QUIET_WINDOW;
	gs_fn_cuMemCreate fn = GS_REAL(cuMemCreate);
	if (fn == NULL)
		return CUDA_ERROR_NOT_FOUND;
	int e = errno;
	struct gs_resv r;
	CUresult rc = resv_create(prop, size, &r);
	if (rc != CUDA_SUCCESS)
		goto out;
	errno = e;
	rc = fn(handle, size, prop, flags);
	e = errno;
	if (rc != CUDA_SUCCESS || !r.active) {
		gs_resv_finish(&r, rc, GS_KIND_NONE, 0); /* rolls back */
		goto out;
	}
	gs_vmm_lock();
	uint64_t id = ++last_phys;
	struct gs_ptrent ph = {.key = id, .size = r.size, .refs = 1, .kind = GS_KIND_PHYS, .slot = (uint8_t)r.slot};
	struct gs_ptrent hd = {.key = (uint64_t)*handle, .aux = id, .refs = 1, .kind = GS_KIND_VHANDLE};
	if (gs_ptrtab_insert(gs_ptrtab_vmm(), &ph) != 0 || gs_ptrtab_insert(gs_ptrtab_vmm(), &hd) != 0)
		track_failed();
	gs_vmm_unlock();
out:
	errno = e;
	return rc;
}

GS_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	GS_QUIET_WINDOW;
	gs_fn_cuMemRelease fn = GS_REAL(cuMemRelease);
	if (fn == NULL)
		return CUDA_ERROR_NOT_FOUND;
	gs_vmm_lock();
	CUresult rc = fn(handle);
	int e = errno;
	struct gs_ptrent hd;
	if (rc == CUDA_SUCCESS && gs_ptrtab_ref(gs_ptrtab_vmm(), GS_KIND_VHANDLE, (uint64_t)handle, -1, &hd) >= 0)
		phys_put(hd.aux);
	gs_vmm_unlock();
	errno = e;
	return rc;
}

GS_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
			    unsigned long long flags)
{
	GS_QUIET_WINDOW;
	gs_fn_cuMemMap fn = GS_REAL(cuMemMap);
	if (fn == NULL)
		return CUDA_ERROR_NOT_FOUND;
	gs_vmm_lock();
	CUresult rc = fn(ptr, size, offset, handle, flags);
	int e = errno;
	struct gs_ptrent hd;
	if (rc == CUDA_SUCCESS && gs_ptrtab_get(gs_ptrtab_vmm(), GS_KIND_VHANDLE, (uint64_t)handle, &hd)) {
		struct gs_ptrent m = {.key = (uint64_t)ptr, .size = size, .aux = hd.aux, .kind = GS_KIND_VMAP};
		if (gs_ptrtab_insert(gs_ptrtab_vmm(), &m) == 0)
			phys_get(hd.aux);
		else
			track_failed();
	}
	gs_vmm_unlock();
	errno = e;
	return rc;
}

/* Mappings inside [lo, hi), collected a batch at a time. */
struct span {
	uint64_t lo, hi;
	uint64_t ids[64];
	size_t n;
	int take; /* 0: only find the mapping containing lo (ids[0]) */
};

static int in_span(const struct gs_ptrent *e, void *arg)
{
	struct span *s = arg;
	if (e->kind != GS_KIND_VMAP)
		return 0;
	if (!s->take) {
		if (s->n == 0 && e->key <= s->lo && s->lo - e->key < e->size)
			s->ids[s->n++] = e->aux;
		return 0;
	}
	return s->n < 64 && e->key >= s->lo && e->key < s->hi;
}

static void collect(const struct gs_ptrent *e, void *arg)
{
	struct span *s = arg;
	s->ids[s->n++] = e->aux;
}

GS_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	GS_QUIET_WINDOW;
	gs_fn_cuMemUnmap fn = GS_REAL(cuMemUnmap);
	if (fn == NULL)
		return CUDA_ERROR_NOT_FOUND;
	gs_vmm_lock();
	CUresult rc = fn(ptr, size);
	int e = errno;
	if (rc == CUDA_SUCCESS) {
		struct span s = {.lo = (uint64_t)ptr, .hi = (uint64_t)ptr + size, .take = 1};
		do {
			s.n = 0;
			(void)gs_ptrtab_drain(gs_ptrtab_vmm(), in_span, collect, &s);
			for (size_t i = 0; i < s.n; i++)
				phys_put(s.ids[i]);
		} while (s.n == 64);
	}
	gs_vmm_unlock();
	errno = e;
	return rc;
}

/* One more handle to the physical memory mapped at addr: one more release owed. */
GS_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	GS_QUIET_WINDOW;
	gs_fn_cuMemRetainAllocationHandle fn = GS_REAL(cuMemRetainAllocationHandle);
	if (fn == NULL)
		return CUDA_ERROR_NOT_FOUND;
	gs_vmm_lock();
	CUresult rc = fn(handle, addr);
	int e = errno;
	struct span s = {.lo = (uint64_t)(uintptr_t)addr};
	if (rc == CUDA_SUCCESS && handle != NULL)
		(void)gs_ptrtab_drain(gs_ptrtab_vmm(), in_span, collect, &s);
	if (s.n == 1) {
		struct gs_ptrent hd;
		if (gs_ptrtab_ref(gs_ptrtab_vmm(), GS_KIND_VHANDLE, (uint64_t)*handle, 1, &hd) < 0) {
			hd = (struct gs_ptrent){
				.key = (uint64_t)*handle, .aux = s.ids[0], .refs = 1, .kind = GS_KIND_VHANDLE};
			if (gs_ptrtab_insert(gs_ptrtab_vmm(), &hd) != 0)
				track_failed();
		}
		phys_get(s.ids[0]);
	}
	gs_vmm_unlock();
	errno = e;
	return rc;
}
