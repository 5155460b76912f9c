/* SPDX-License-Identifier: Apache-2.0
 * Contexts: primary (retain/release per device) and explicit, a per-thread
 * context stack, one work queue and worker thread per active context. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuapi.h"
#include "alloc.h"
#include "sim.h"

static _Thread_local struct {
	struct sim_ctx *v[SIM_CTX_STACK];
	int n;
} tls;

struct sim_ctx *sim_current_ctx(void)
{
	return tls.n > 0 ? tls.v[tls.n - 1] : NULL;
}

CUresult sim_ctx_get(struct sim_ctx **out)
{
	CUresult rc = sim_check_init();
	struct sim_ctx *c;

	if (rc != CUDA_SUCCESS)
		return rc;
	c = sim_current_ctx();
	if (c == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!c->active)
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	*out = c;
	return CUDA_SUCCESS;
}

bool sim_ctx_valid(struct sim_ctx *c)
{
	bool ok = false;

	pthread_mutex_lock(&sim_g.mu);
	for (struct sim_ctx *p = sim_g.ctxs; p != NULL && !ok; p = p->next)
		ok = p == c;
	pthread_mutex_unlock(&sim_g.mu);
	return ok && c->active;
}

CUresult sim_register_process(int dev)
{
	int slot = sim_proc_register(sim_g.st, sim_g.pid, sim_g.start, dev, sim_dev_ci(dev));

	if (slot < 0)
		return CUDA_ERROR_OUT_OF_MEMORY; /* process table full */
	sim_g.slot = slot;
	atomic_store(&sim_g.st->proc[slot].mps_server, sim_mps_server());
	const char *gfx = getenv("GPUSLICE_SIM_GRAPHICS");
	if (gfx != NULL && strcmp(gfx, "1") == 0)
		atomic_fetch_or(&sim_g.st->proc[slot].flags, SIM_PROC_GRAPHICS);
	return CUDA_SUCCESS;
}

/* Called with sim_g.mu held. */
static CUresult ctx_activate(struct sim_ctx *c)
{
	CUresult rc = sim_mps_attach();

	if (rc == CUDA_SUCCESS)
		rc = sim_register_process(c->dev);
	if (rc == CUDA_SUCCESS && sim_g.ctx_mem > 0 && (rc = sim_charge(c->dev, sim_g.ctx_mem)) == CUDA_SUCCESS)
		c->own_charged = sim_g.ctx_mem; /* what the driver sets aside for a context */
	if (rc != CUDA_SUCCESS)
		return rc;
	if (sim_queue_start(&c->q, c->dev) != 0) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	} else if ((c->def = sim_stream_new(c, 0, 0)) == NULL) {
		sim_queue_stop(&c->q);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (rc != CUDA_SUCCESS) {
		sim_uncharge(c->dev, c->own_charged);
		c->own_charged = 0;
		return rc;
	}
	c->gen = atomic_fetch_add(&sim_g.next_id, 1) + 1;
	c->active = true;
	return CUDA_SUCCESS;
}

/* Called with sim_g.mu held: drains the queue, frees the context's memory. */
static void ctx_deactivate(struct sim_ctx *c)
{
	if (!c->active)
		return;
	c->active = false;
	sim_queue_stop(&c->q);
	sim_mem_free_ctx(c);
	sim_pool_trim_dev(c->dev);
	if (c->primary)
		sim_gmem_teardown(c->dev); /* the graph pool belongs to the device's primary context */
	sim_array_free_ctx(c);
	sim_modules_ctx_gone(c);
	sim_ctx_limits_free(c);
	sim_stream_free(c->def);
	c->def = NULL;
	sim_stream_free_pt(c);
	if (c->own_charged > 0)
		sim_uncharge(c->dev, c->own_charged);
	c->own_charged = 0;
}

static struct sim_ctx *ctx_new(int ordinal, unsigned flags, bool primary)
{
	struct sim_ctx *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->magic = SIM_MAGIC_CTX;
	c->dev = sim_device(ordinal);
	c->ordinal = ordinal;
	c->flags = flags;
	c->primary = primary;
	c->id = atomic_fetch_add(&sim_g.next_id, 1) + 1;
	memcpy(c->limits, sim_limit_defaults, sizeof(c->limits));
	c->next = sim_g.ctxs;
	sim_g.ctxs = c;
	return c;
}

static void ctx_unlink(struct sim_ctx *c)
{
	for (struct sim_ctx **p = &sim_g.ctxs; *p != NULL; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			return;
		}
}

static CUresult check_dev(CUdevice d)
{
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	return sim_device(d) < 0 ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *out, CUdevice d)
{
	CUresult rc = check_dev(d);
	struct sim_ctx *c;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_g.mu);
	c = sim_g.primary[sim_device(d)];
	if (c == NULL)
		c = sim_g.primary[sim_device(d)] = ctx_new(d, 0, true);
	if (c == NULL)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	else if (!c->active)
		rc = ctx_activate(c);
	if (rc == CUDA_SUCCESS) {
		c->refs++;
		*out = (CUcontext)c;
	}
	pthread_mutex_unlock(&sim_g.mu);
	return rc;
}

static CUresult primary_release(CUdevice d, bool reset)
{
	CUresult rc = check_dev(d);
	struct sim_ctx *c;

	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&sim_g.mu);
	c = sim_g.primary[sim_device(d)];
	if (reset) {
		if (c != NULL) {
			c->refs = 0;
			ctx_deactivate(c);
		}
	} else if (c == NULL || c->refs == 0) {
		rc = CUDA_ERROR_INVALID_CONTEXT;
	} else if (--c->refs == 0) {
		ctx_deactivate(c);
	}
	pthread_mutex_unlock(&sim_g.mu);
	return rc;
}

SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice d)
{
	return primary_release(d, false);
}

SIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
	return primary_release(d, false);
}

SIM_API CUresult cuDevicePrimaryCtxReset(CUdevice d)
{
	return primary_release(d, true);
}

SIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice d)
{
	return primary_release(d, true);
}

static CUresult primary_set_flags(CUdevice d, unsigned f, bool fail_if_active)
{
	CUresult rc = check_dev(d);
	struct sim_ctx *c;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (f & ~(unsigned)CU_CTX_FLAGS_MASK)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_g.mu);
	c = sim_g.primary[sim_device(d)];
	if (c == NULL)
		c = sim_g.primary[sim_device(d)] = ctx_new(d, f, true);
	if (c == NULL)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	else if (fail_if_active && c->active)
		rc = CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE;
	else
		c->flags = f;
	pthread_mutex_unlock(&sim_g.mu);
	return rc;
}

SIM_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice d, unsigned int f)
{
	return primary_set_flags(d, f, true);
}

SIM_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned int f)
{
	return primary_set_flags(d, f, false);
}

SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *f, int *active)
{
	CUresult rc = check_dev(d);
	struct sim_ctx *c;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (f == NULL || active == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_g.mu);
	c = sim_g.primary[sim_device(d)];
	*f = c != NULL ? c->flags : 0;
	*active = c != NULL && c->active;
	pthread_mutex_unlock(&sim_g.mu);
	return CUDA_SUCCESS;
}

void sim_latency(void)
{
	int e = errno;
	struct timespec ts = {.tv_sec = (time_t)(sim_g.latency_ns / 1000000000ull),
			      .tv_nsec = (long)(sim_g.latency_ns % 1000000000ull)};
	while (sim_g.latency_ns > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
	errno = e;
}

static CUresult ctx_create(CUcontext *out, unsigned f, CUdevice d)
{
	CUresult rc = check_dev(d);
	struct sim_ctx *c;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (out == NULL || (f & ~(unsigned)CU_CTX_FLAGS_MASK))
		return CUDA_ERROR_INVALID_VALUE;
	if (tls.n == SIM_CTX_STACK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	sim_latency();
	pthread_mutex_lock(&sim_g.mu);
	c = ctx_new(d, f, false);
	rc = c == NULL ? CUDA_ERROR_OUT_OF_MEMORY : ctx_activate(c);
	if (c != NULL && rc != CUDA_SUCCESS) {
		ctx_unlink(c);
		free(c);
	}
	pthread_mutex_unlock(&sim_g.mu);
	if (rc == CUDA_SUCCESS) {
		tls.v[tls.n++] = c;
		*out = (CUcontext)c;
	}
	return rc;
}

SIM_API CUresult cuCtxCreate(CUcontext *c, unsigned int f, CUdevice d)
{
	return ctx_create(c, f, d);
}

SIM_API CUresult cuCtxCreate_v2(CUcontext *c, unsigned int f, CUdevice d)
{
	return ctx_create(c, f, d);
}

SIM_API CUresult cuCtxCreate_v3(CUcontext *c, CUexecAffinityParam *p, int n, unsigned int f, CUdevice d)
{
	if (n < 0 || (n > 0 && p == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	return ctx_create(c, f, d);
}

/* CUDA 12.5: params (execution affinity, CIG) may be NULL; the simulator uses none. */
SIM_API CUresult cuCtxCreate_v4(CUcontext *c, void *params, unsigned int f, CUdevice d)
{
	(void)params;
	return ctx_create(c, f, d);
}

static CUresult ctx_destroy(CUcontext h)
{
	struct sim_ctx *c = (struct sim_ctx *)h;
	CUresult rc = sim_check_init();
	bool found = false;

	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&sim_g.mu);
	for (struct sim_ctx *p = sim_g.ctxs; p != NULL; p = p->next)
		found = found || p == c;
	if (found && !c->primary) {
		ctx_unlink(c);
		ctx_deactivate(c);
	}
	pthread_mutex_unlock(&sim_g.mu);
	if (!found || c->primary)
		return CUDA_ERROR_INVALID_CONTEXT;
	int k = 0;
	for (int i = 0; i < tls.n; i++)
		if (tls.v[i] != c)
			tls.v[k++] = tls.v[i];
	tls.n = k;
	c->magic = 0;
	free(c);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxDestroy(CUcontext c)
{
	return ctx_destroy(c);
}

SIM_API CUresult cuCtxDestroy_v2(CUcontext c)
{
	return ctx_destroy(c);
}

CUresult sim_ctx_stack_op(int op, struct sim_ctx *in, struct sim_ctx **out)
{
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (op == 1) { /* pop */
		if (tls.n == 0)
			return CUDA_ERROR_INVALID_CONTEXT;
		tls.n--;
		if (out != NULL)
			*out = tls.v[tls.n];
		return CUDA_SUCCESS;
	}
	if (in == NULL && op == 2) { /* set current NULL: pop if any */
		if (tls.n > 0)
			tls.n--;
		return CUDA_SUCCESS;
	}
	if (in == NULL || !sim_ctx_valid(in))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (op == 2 && tls.n > 0) {
		tls.v[tls.n - 1] = in;
		return CUDA_SUCCESS;
	}
	if (tls.n == SIM_CTX_STACK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	tls.v[tls.n++] = in;
	return CUDA_SUCCESS;
}
