/* SPDX-License-Identifier: Apache-2.0
 * Kernel launches (asynchronous, through the context queue and the device
 * engine), function attributes and occupancy. */
#include <string.h>

#include "cuapi.h"
#include "sim.h"

#define MAX_SMEM_OPTIN 232448u

static CUresult func_get(CUfunction h, struct sim_func **out)
{
	struct sim_func *f = (struct sim_func *)h;

	if (f == NULL || f->magic != SIM_MAGIC_FUNC)
		return CUDA_ERROR_INVALID_HANDLE;
	*out = f;
	return CUDA_SUCCESS;
}

/* The busy kernel's single u64 parameter, from kernelParams or extra. */
static CUresult busy_param(void **params, void **extra, uint64_t *us)
{
	void *buf = NULL;
	size_t size = 0;

	if (params != NULL && params[0] != NULL) {
		memcpy(us, params[0], sizeof(*us));
		return CUDA_SUCCESS;
	}
	for (int i = 0; extra != NULL && extra[i] != CU_LAUNCH_PARAM_END && i < 64; i += 2) {
		if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
			buf = extra[i + 1];
		else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1] != NULL)
			memcpy(&size, extra[i + 1], sizeof(size));
		else
			return CUDA_ERROR_INVALID_VALUE;
	}
	if (buf == NULL || size < sizeof(*us))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(us, buf, sizeof(*us));
	return CUDA_SUCCESS;
}

static CUresult check_dims(const unsigned g[3], const unsigned b[3], unsigned smem)
{
	if (g[0] == 0 || g[1] == 0 || g[2] == 0 || b[0] == 0 || b[1] == 0 || b[2] == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (g[1] > 65535 || g[2] > 65535 || b[0] > 1024 || b[1] > 1024 || b[2] > 64 ||
	    (uint64_t)b[0] * b[1] * b[2] > 1024 || smem > MAX_SMEM_OPTIN)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

static CUresult launch(CUfunction h, const unsigned g[3], const unsigned b[3], unsigned smem, CUstream hs,
		       void **params, void **extra)
{
	struct sim_func *f;
	struct sim_stream *s;
	struct sim_item it = {.kind = SIM_ITEM_KERNEL};
	uint64_t us = 0;
	CUresult rc = sim_stream_resolve(hs, &s);

	if (rc == CUDA_SUCCESS)
		rc = func_get(h, &f);
	if (rc == CUDA_SUCCESS)
		rc = check_dims(g, b, smem);
	if (rc == CUDA_SUCCESS && f->busy)
		rc = busy_param(params, extra, &us);
	if (rc != CUDA_SUCCESS)
		return rc;
	it.busy_ns = (us > SIM_MAX_BUSY_US ? SIM_MAX_BUSY_US : us) * 1000ull;
	return sim_stream_submit(s, &it);
}

SIM_API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
				unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void **params,
				void **extra)
{
	const unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};

	return launch(f, g, b, smem, s, params, extra);
}

SIM_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
				     unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void **params,
				     void **extra)
{
	const unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};

	return launch(f, g, b, smem, SIM_PT(s), params, extra);
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra, bool ptsz)
{
	if (c == NULL || (c->numAttrs > 0 && c->attrs == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	const unsigned g[3] = {c->gridDimX, c->gridDimY, c->gridDimZ};
	const unsigned b[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
	return launch(f, g, b, c->sharedMemBytes, ptsz ? SIM_PT(c->hStream) : c->hStream, params, extra);
}

SIM_API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
	return launch_ex(c, f, params, extra, false);
}

SIM_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
	return launch_ex(c, f, params, extra, true);
}

SIM_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
					   unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
					   CUstream s, void **params)
{
	const unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};

	return launch(f, g, b, smem, s, params, NULL);
}

SIM_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
						unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
						CUstream s, void **params)
{
	const unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};

	return launch(f, g, b, smem, SIM_PT(s), params, NULL);
}

/* One launch per entry, each on its own stream (the driver's deprecated
 * multi-device form; the simulator's devices share one engine). */
SIM_API CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int n, unsigned int flags)
{
	(void)flags;
	if (list == NULL || n == 0)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned int i = 0; i < n; i++) {
		const CUDA_LAUNCH_PARAMS *p = &list[i];
		const unsigned g[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
		const unsigned b[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
		CUresult rc = launch(p->function, g, b, p->sharedMemBytes, p->hStream, p->kernelParams, NULL);
		if (rc != CUDA_SUCCESS)
			return rc;
	}
	return CUDA_SUCCESS;
}

static CUresult func_attr(struct sim_func *f, CUfunction_attribute a, int *v)
{
	switch (a) {
	case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
		*v = 1024;
		break;
	case CU_FUNC_ATTRIBUTE_NUM_REGS:
		*v = 32;
		break;
	case CU_FUNC_ATTRIBUTE_PTX_VERSION:
		*v = 90;
		break;
	case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
		*v = 90;
		break;
	case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
		*v = f->max_dyn_smem;
		break;
	default:
		if (a < 0 || a > 20)
			return CUDA_ERROR_INVALID_VALUE;
		*v = 0;
	}
	return CUDA_SUCCESS;
}

SIM_API CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction h)
{
	struct sim_func *f;
	CUresult rc = sim_check_init();

	if (rc == CUDA_SUCCESS)
		rc = func_get(h, &f);
	if (rc != CUDA_SUCCESS)
		return rc;
	return v == NULL ? CUDA_ERROR_INVALID_VALUE : func_attr(f, a, v);
}

static CUresult func_set(CUfunction h, CUfunction_attribute a, int v)
{
	struct sim_func *f;
	CUresult rc = sim_check_init();

	if (rc == CUDA_SUCCESS)
		rc = func_get(h, &f);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
		if (v < 0 || (unsigned)v > MAX_SMEM_OPTIN)
			return CUDA_ERROR_INVALID_VALUE;
		f->max_dyn_smem = v;
	}
	return CUDA_SUCCESS;
}

SIM_API CUresult cuFuncSetAttribute(CUfunction h, CUfunction_attribute a, int v)
{
	return func_set(h, a, v);
}

SIM_API CUresult cuFuncSetCacheConfig(CUfunction h, CUfunc_cache c)
{
	struct sim_func *f;
	CUresult rc = sim_check_init();

	(void)c;
	return rc == CUDA_SUCCESS ? func_get(h, &f) : rc;
}

SIM_API CUresult cuFuncGetModule(CUmodule *m, CUfunction h)
{
	struct sim_func *f;
	CUresult rc = sim_check_init();

	if (rc == CUDA_SUCCESS)
		rc = func_get(h, &f);
	if (rc == CUDA_SUCCESS && m == NULL)
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		*m = (CUmodule)f->owner;
	return rc;
}

SIM_API CUresult cuFuncGetName(const char **name, CUfunction h)
{
	struct sim_func *f;
	CUresult rc = sim_check_init();

	if (rc == CUDA_SUCCESS)
		rc = func_get(h, &f);
	if (rc == CUDA_SUCCESS && name == NULL)
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		*name = f->name;
	return rc;
}

SIM_API CUresult cuKernelGetFunction(CUfunction *out, CUkernel k)
{
	struct sim_func *f;
	CUresult rc = sim_check_init();

	if (rc == CUDA_SUCCESS)
		rc = func_get((CUfunction)k, &f);
	if (rc == CUDA_SUCCESS && out == NULL)
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		*out = (CUfunction)f;
	return rc;
}

SIM_API CUresult cuKernelGetAttribute(int *v, CUfunction_attribute a, CUkernel k, CUdevice d)
{
	struct sim_func *f;
	CUresult rc = sim_check_init();

	if (rc == CUDA_SUCCESS && sim_device(d) < 0)
		rc = CUDA_ERROR_INVALID_DEVICE;
	if (rc == CUDA_SUCCESS)
		rc = func_get((CUfunction)k, &f);
	if (rc != CUDA_SUCCESS)
		return rc;
	return v == NULL ? CUDA_ERROR_INVALID_VALUE : func_attr(f, a, v);
}

SIM_API CUresult cuKernelSetAttribute(CUfunction_attribute a, int v, CUkernel k, CUdevice d)
{
	CUresult rc = sim_check_init();

	if (rc == CUDA_SUCCESS && sim_device(d) < 0)
		rc = CUDA_ERROR_INVALID_DEVICE;
	return rc == CUDA_SUCCESS ? func_set((CUfunction)k, a, v) : rc;
}

SIM_API CUresult cuKernelSetCacheConfig(CUkernel k, CUfunc_cache c, CUdevice d)
{
	struct sim_func *f;
	CUresult rc = sim_check_init();

	(void)c;
	if (rc == CUDA_SUCCESS && sim_device(d) < 0)
		rc = CUDA_ERROR_INVALID_DEVICE;
	return rc == CUDA_SUCCESS ? func_get((CUfunction)k, &f) : rc;
}

SIM_API CUresult cuKernelGetName(const char **name, CUkernel k)
{
	struct sim_func *f;
	CUresult rc = sim_check_init();

	if (rc == CUDA_SUCCESS)
		rc = func_get((CUfunction)k, &f);
	if (rc == CUDA_SUCCESS && name == NULL)
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		*name = f->name;
	return rc;
}
