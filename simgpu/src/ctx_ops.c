/* SPDX-License-Identifier: Apache-2.0
 * Context stack operations and per-context settings. */
#include "cuapi.h"
#include "sim.h"

#define ctx_stack_op sim_ctx_stack_op

SIM_API CUresult cuCtxPushCurrent(CUcontext c)
{
	return ctx_stack_op(0, (struct sim_ctx *)c, NULL);
}

SIM_API CUresult cuCtxPushCurrent_v2(CUcontext c)
{
	return ctx_stack_op(0, (struct sim_ctx *)c, NULL);
}

SIM_API CUresult cuCtxPopCurrent(CUcontext *c)
{
	return ctx_stack_op(1, NULL, (struct sim_ctx **)c);
}

SIM_API CUresult cuCtxPopCurrent_v2(CUcontext *c)
{
	return ctx_stack_op(1, NULL, (struct sim_ctx **)c);
}

SIM_API CUresult cuCtxSetCurrent(CUcontext c)
{
	return ctx_stack_op(2, (struct sim_ctx *)c, NULL);
}

SIM_API CUresult cuCtxGetCurrent(CUcontext *c)
{
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (c == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*c = (CUcontext)sim_current_ctx();
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetDevice(CUdevice *d)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (d == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*d = c->ordinal;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetFlags(unsigned int *f)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (f == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*f = c->flags;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetFlags(unsigned int f)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (f & ~(unsigned)CU_CTX_FLAGS_MASK)
		return CUDA_ERROR_INVALID_VALUE;
	c->flags = f;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetId(CUcontext h, unsigned long long *id)
{
	struct sim_ctx *c = (struct sim_ctx *)h;
	CUresult rc = CUDA_SUCCESS;

	if (c == NULL)
		rc = sim_ctx_get(&c);
	else if (sim_check_init() != CUDA_SUCCESS || !sim_ctx_valid(c))
		rc = CUDA_ERROR_INVALID_CONTEXT;
	if (rc != CUDA_SUCCESS)
		return rc;
	if (id == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*id = c->id;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSynchronize(void)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	sim_queue_wait(&c->q, sim_queue_tail(&c->q));
	sim_pool_sync();
	return sim_mps_check();
}

SIM_API CUresult cuCtxGetApiVersion(CUcontext h, unsigned int *v)
{
	struct sim_ctx *c = (struct sim_ctx *)h;
	CUresult rc = CUDA_SUCCESS;

	if (c == NULL)
		rc = sim_ctx_get(&c);
	else if (sim_check_init() != CUDA_SUCCESS || !sim_ctx_valid(c))
		rc = CUDA_ERROR_INVALID_CONTEXT;
	if (rc != CUDA_SUCCESS)
		return rc;
	if (v == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*v = 3020;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetCacheConfig(CUfunc_cache *cc)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);

	if (rc == CUDA_SUCCESS && cc == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		*cc = 0; /* CU_FUNC_CACHE_PREFER_NONE */
	return rc;
}

SIM_API CUresult cuCtxSetCacheConfig(CUfunc_cache cc)
{
	struct sim_ctx *c;

	(void)cc;
	return sim_ctx_get(&c);
}

SIM_API CUresult cuCtxGetSharedMemConfig(CUsharedconfig *sc)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);

	if (rc == CUDA_SUCCESS && sc == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		*sc = 1; /* FOUR_BYTE_BANK_SIZE */
	return rc;
}

SIM_API CUresult cuCtxSetSharedMemConfig(CUsharedconfig sc)
{
	struct sim_ctx *c;

	(void)sc;
	return sim_ctx_get(&c);
}

SIM_API CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (least != NULL)
		*least = 0;
	if (greatest != NULL)
		*greatest = -5;
	return CUDA_SUCCESS;
}
