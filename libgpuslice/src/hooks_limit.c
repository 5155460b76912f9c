/* SPDX-License-Identifier: Apache-2.0
 *
 * cuCtxSetLimit (what cudaDeviceSetLimit calls): three limits make the driver
 * hold device memory for the context: CU_LIMIT_MALLOC_HEAP_SIZE (the heap of
 * in-kernel malloc), CU_LIMIT_PRINTF_FIFO_SIZE, and CU_LIMIT_STACK_SIZE, held
 * for every thread the device can keep resident (multiprocessors x threads
 * per multiprocessor, from cuDeviceGetAttribute). What a context starts with
 * is context overhead, not counted: the first time a limit of a context is
 * set, the driver's value then (cuCtxGetLimit) is that context's base, and
 * the bytes above it are counted. The increase is reserved before the
 * driver's call (refused at the group's limit: CUDA_ERROR_OUT_OF_MEMORY and
 * the usual line), settled after it on the value the driver reports (it may
 * round; what the limit cannot take sets the driver back), uncounted when a
 * lower value is set and when the context goes (gs_ctxlim_gone). Not a hot
 * path: one lock serialises these calls and the table of contexts.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "ctxlimit.h"
#include "memcore.h"

#define NLIM 3 /* CU_LIMIT_STACK_SIZE, CU_LIMIT_PRINTF_FIFO_SIZE, CU_LIMIT_MALLOC_HEAP_SIZE */

struct lim {
	uint64_t ctx;
	int slot;      /* the GPU slot counted on; -1 while nothing is */
	unsigned seen; /* bit l: base[l] is known */
	size_t base[NLIM];
	uint64_t counted[NLIM];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	struct lim *v;
	size_t n, cap;
} tab;

/* Called with mu held. NULL: not known (add == 0) or no host memory. */
static struct lim *find(uint64_t ctx, int add)
{
	for (size_t i = 0; i < tab.n; i++)
		if (tab.v[i].ctx == ctx)
			return &tab.v[i];
	if (!add)
		return NULL;
	if (tab.n == tab.cap) {
		size_t cap = tab.cap == 0 ? 8 : tab.cap * 2;
		struct lim *v = realloc(tab.v, cap * sizeof(*v));
		if (v == NULL)
			return NULL;
		tab.v = v;
		tab.cap = cap;
	}
	tab.v[tab.n] = (struct lim){.ctx = ctx, .slot = -1};
	return &tab.v[tab.n++];
}

/* Device bytes of a limit's value above its base (saturated). */
static uint64_t above(size_t value, size_t base, uint64_t per)
{
	uint64_t b;
	if (value <= base)
		return 0;
	return __builtin_mul_overflow((uint64_t)(value - base), per, &b) ? UINT64_MAX : b;
}

/* Threads the device keeps resident: what one byte of stack costs. */
static CUresult resident_threads(CUdevice dev, uint64_t *out)
{
	gs_fn_cuDeviceGetAttribute attr = GS_REAL(cuDeviceGetAttribute);
	int sms = 0, threads = 0;
	if (attr == NULL)
		return CUDA_ERROR_NOT_FOUND;
	CUresult rc = attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
	if (rc == CUDA_SUCCESS)
		rc = attr(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev);
	if (rc == CUDA_SUCCESS && (sms <= 0 || threads <= 0))
		rc = CUDA_ERROR_INVALID_VALUE;
	*out = rc == CUDA_SUCCESS ? (uint64_t)sms * (uint64_t)threads : 0;
	return rc;
}

struct call {
	gs_fn_cuCtxSetLimit set;
	gs_fn_cuCtxGetLimit get;
	CUlimit l;
	CUdevice dev;
	uint64_t per; /* device bytes per unit of the limit */
	int err;      /* errno as the driver's call left it */
};

static CUresult driver_set(struct call *c, size_t value)
{
	errno = c->err;
	CUresult rc = c->set(c->l, value);
	c->err = errno;
	return rc;
}

/* After the driver's call (rc; value asked for): the count goes from held to
 * what the value the driver reports holds. More than reserved (rounding) is reserved now, or
 * the driver is set back to prev and the call refused. Returns rc. */
static CUresult settle(struct call *c, struct lim *t, uint64_t held, size_t value, size_t prev, CUresult rc)
{
	const int l = (int)c->l;
	size_t now = value;
	if (rc == CUDA_SUCCESS)
		(void)c->get(&now, c->l); /* unreadable: counted as asked */
	uint64_t want = rc == CUDA_SUCCESS ? above(now, t->base[l], c->per) : t->counted[l];
	if (want > held) {
		struct gs_resv x;
		CUresult xr = gs_resv_dev(c->dev, want - held, &x);
		if (xr == CUDA_SUCCESS && x.active) {
			held += x.size;
			t->slot = x.slot;
		} else if (xr != CUDA_SUCCESS) {
			(void)driver_set(c, prev);
			rc = xr;
			want = c->get(&now, c->l) == CUDA_SUCCESS ? above(now, t->base[l], c->per) : held;
		}
	}
	if (want < held && t->slot >= 0) {
		gs_uncount(t->slot, held - want);
		held = want;
	}
	t->counted[l] = held;
	return rc;
}

/* Called with mu held. */
static CUresult set_locked(struct call *c, uint64_t ctx, size_t value)
{
	const int l = (int)c->l;
	size_t prev;
	struct lim *t = find(ctx, 1);
	if (t == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY; /* no host memory to track it */
	if (c->get(&prev, c->l) != CUDA_SUCCESS)
		return driver_set(c, value); /* the driver answers */
	if ((t->seen & (1u << l)) == 0) {
		t->base[l] = prev; /* what the context started with: overhead */
		t->seen |= 1u << l;
	}
	uint64_t want = above(value, t->base[l], c->per);
	struct gs_resv r = {.active = 0};
	if (want > t->counted[l]) {
		CUresult rc = gs_resv_dev(c->dev, want - t->counted[l], &r);
		if (rc != CUDA_SUCCESS)
			return rc;
		if (r.active)
			t->slot = r.slot;
	}
	uint64_t held = t->counted[l] + (r.active ? r.size : 0);
	CUresult rc = driver_set(c, value);
	if (rc != CUDA_SUCCESS && r.active) {
		gs_uncount(r.slot, r.size);
		held -= r.size;
	}
	return settle(c, t, held, value, prev, rc);
}

GS_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
	GS_QUIET_WINDOW;
	struct call c = {.set = GS_REAL(cuCtxSetLimit), .get = GS_REAL(cuCtxGetLimit), .l = limit, .per = 1};
	if (c.set == NULL)
		return CUDA_ERROR_NOT_FOUND;
	if (limit < 0 || limit >= NLIM || c.get == NULL)
		return c.set(limit, value); /* holds no device memory (or cannot be read back) */
	c.err = errno;
	gs_fn_cuCtxGetCurrent cur = GS_REAL(cuCtxGetCurrent);
	gs_fn_cuCtxGetDevice get_dev = GS_REAL(cuCtxGetDevice);
	CUcontext ctx = NULL;
	CUresult rc;
	if (cur == NULL || get_dev == NULL || cur(&ctx) != CUDA_SUCCESS || ctx == NULL ||
	    get_dev(&c.dev) != CUDA_SUCCESS) {
		rc = driver_set(&c, value); /* no context: the driver answers */
	} else if (limit == CU_LIMIT_STACK_SIZE && (rc = resident_threads(c.dev, &c.per)) != CUDA_SUCCESS) {
		/* the device cannot say what a stack costs: refused as the driver refused the query */
	} else {
		pthread_mutex_lock(&mu);
		rc = set_locked(&c, (uint64_t)(uintptr_t)ctx, value);
		pthread_mutex_unlock(&mu);
	}
	errno = c.err;
	return rc;
}

GS_HIDDEN void gs_ctxlim_gone(uint64_t ctx)
{
	if (ctx == 0)
		return;
	pthread_mutex_lock(&mu);
	struct lim *t = find(ctx, 0);
	if (t != NULL) {
		uint64_t held = 0;
		for (int l = 0; l < NLIM; l++)
			held += t->counted[l];
		if (held > 0)
			gs_uncount(t->slot, held);
		*t = tab.v[--tab.n];
	}
	pthread_mutex_unlock(&mu);
}
