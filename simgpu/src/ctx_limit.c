/* SPDX-License-Identifier: Apache-2.0
 * Context limits (cuCtxSetLimit / cuCtxGetLimit). Like the driver, a limit
 * that sizes a buffer holds device memory for the context: the in-kernel
 * malloc heap and the printf FIFO their size, the stack its size for every
 * thread the device can hold resident (multiprocessors x threads per
 * multiprocessor). A context starts with the driver's defaults, which cost
 * nothing here (contexts cost no memory); the bytes above them are charged
 * when the limit is set (the driver cannot hold them: CUDA_ERROR_OUT_OF_MEMORY,
 * limit unchanged), given back when it is lowered and with the context. */
#include <string.h>

#include "alloc.h"
#include "cuapi.h"
#include "sim.h"

/* Stack 1 KiB, printf FIFO 1 MiB, malloc heap 8 MiB, sync depth 2, 2048
 * pending launches, no L2 settings. */
const size_t sim_limit_defaults[SIM_LIMITS] = {1024, 1u << 20, 8u << 20, 2, 2048, 0, 0};

#define THREADS_PER_SM 2048u /* CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR (device.c) */

static size_t sat_add(size_t a, size_t b)
{
	size_t r;
	return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}

static size_t above(const size_t *lim, int l)
{
	return lim[l] > sim_limit_defaults[l] ? lim[l] - sim_limit_defaults[l] : 0;
}

/* Device bytes limits lim hold on device dev above the defaults (saturated). */
static size_t limits_bytes(const size_t *lim, int dev)
{
	size_t stack;
	size_t threads = (size_t)sim_g.st->dev[dev].sms * THREADS_PER_SM;

	if (__builtin_mul_overflow(above(lim, CU_LIMIT_STACK_SIZE), threads, &stack))
		stack = SIZE_MAX;
	return sat_add(stack, sat_add(above(lim, CU_LIMIT_PRINTF_FIFO_SIZE), above(lim, CU_LIMIT_MALLOC_HEAP_SIZE)));
}

SIM_API CUresult cuCtxGetLimit(size_t *v, CUlimit l)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (v == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (l < 0 || l >= SIM_LIMITS)
		return CUDA_ERROR_UNSUPPORTED_LIMIT;
	pthread_mutex_lock(&sim_g.mu);
	*v = c->limits[l];
	pthread_mutex_unlock(&sim_g.mu);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetLimit(CUlimit l, size_t v)
{
	struct sim_ctx *c;
	CUresult rc = sim_ctx_get(&c);
	size_t want[SIM_LIMITS], bytes;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (l < 0 || l >= SIM_LIMITS)
		return CUDA_ERROR_UNSUPPORTED_LIMIT;
	if (l == CU_LIMIT_STACK_SIZE) /* takes effect at once: waits for the work queued before */
		sim_queue_wait(&c->q, sim_queue_tail(&c->q));
	pthread_mutex_lock(&sim_g.mu);
	memcpy(want, c->limits, sizeof(want));
	want[l] = v;
	bytes = limits_bytes(want, c->dev);
	if (bytes > c->limits_charged)
		rc = sim_charge(c->dev, bytes - c->limits_charged);
	else if (bytes < c->limits_charged)
		sim_uncharge(c->dev, c->limits_charged - bytes);
	if (rc == CUDA_SUCCESS) {
		c->limits[l] = v;
		c->limits_charged = bytes;
	}
	pthread_mutex_unlock(&sim_g.mu);
	return rc;
}

void sim_ctx_limits_free(struct sim_ctx *c)
{
	if (c->limits_charged > 0)
		sim_uncharge(c->dev, c->limits_charged);
	c->limits_charged = 0;
	memcpy(c->limits, sim_limit_defaults, sizeof(c->limits));
}
