/* SPDX-License-Identifier: Apache-2.0
 * cuPointerGetAttribute and occupancy queries. */
#include "alloc.h"
#include "cuapi.h"

static CUresult pointer_attr(void *data, CUpointer_attribute attr, const struct sim_alloc *a, CUdeviceptr p)
{
	bool host_backed = a->kind == SIM_AK_MANAGED || a->kind == SIM_AK_HOST;

	switch (attr) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		*(CUcontext *)data = (CUcontext)a->ctx;
		break;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned *)data = a->kind == SIM_AK_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		*(CUdeviceptr *)data = p;
		break;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		if (!host_backed)
			return CUDA_ERROR_INVALID_VALUE;
		*(void **)data = (void *)(uintptr_t)p;
		break;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
		*(int *)data = a->kind == SIM_AK_MANAGED;
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = a->ctx != NULL ? a->ctx->ordinal : 0;
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(CUdeviceptr *)data = a->base;
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = a->size;
		break;
	case CU_POINTER_ATTRIBUTE_MAPPED:
		*(int *)data = 1;
		break;
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
		*(void **)data = a->pool;
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

SIM_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr p)
{
	struct sim_alloc a;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (data == NULL || !sim_alloc_find(p, &a))
		return CUDA_ERROR_INVALID_VALUE;
	return pointer_attr(data, attr, &a, p);
}

static CUresult occupancy(int *n, CUfunction f, int block)
{
	CUresult rc = sim_check_init();
	int per_sm;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (n == NULL || f == NULL || block <= 0 || block > 1024)
		return CUDA_ERROR_INVALID_VALUE;
	per_sm = 2048 / block;
	*n = per_sm > 32 ? 32 : per_sm;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int block, size_t smem)
{
	(void)smem;
	return occupancy(n, f, block);
}

SIM_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, CUfunction f, int block, size_t smem,
								      unsigned int flags)
{
	(void)smem;
	(void)flags;
	return occupancy(n, f, block);
}

SIM_API CUresult cuOccupancyMaxPotentialBlockSize(int *grid, int *block, CUfunction f, CUoccupancyB2DSize fn,
						  size_t smem, int limit)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);
	int b = limit > 0 && limit < 1024 ? limit : 1024;

	(void)fn;
	(void)smem;
	if (rc != CUDA_SUCCESS)
		return rc;
	if (grid == NULL || block == NULL || f == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*block = b;
	*grid = (int)sim_g.st->dev[c->dev].sms * (2048 / b > 32 ? 32 : 2048 / b);
	return CUDA_SUCCESS;
}
