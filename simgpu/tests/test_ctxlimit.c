/* SPDX-License-Identifier: Apache-2.0
 * Context limits: the malloc heap, the printf FIFO and the stack (for every
 * resident thread) hold device memory above the defaults, from cuCtxSetLimit
 * until lowered or the context goes; over capacity the set is refused. */
#include "testutil.h"

#define GiB (1ull << 30)
#define MiB (1ull << 20)
#define SMS 8ull
#define PER_STACK_BYTE (SMS * 2048ull) /* threads the device holds resident */

static size_t free_mem(void)
{
	size_t f = 0, t = 0;

	CU_OK(cuMemGetInfo_v2(&f, &t));
	return f;
}

static size_t limit(CUlimit l)
{
	size_t v = 0;

	CU_OK(cuCtxGetLimit(&v, l));
	return v;
}

static void test_defaults(void)
{
	CHECK_EQ(limit(CU_LIMIT_STACK_SIZE), 1024);
	CHECK_EQ(limit(CU_LIMIT_PRINTF_FIFO_SIZE), MiB);
	CHECK_EQ(limit(CU_LIMIT_MALLOC_HEAP_SIZE), 8 * MiB);
	CHECK_EQ(free_mem(), 4 * GiB); /* the defaults cost nothing */
	CHECK_EQ(cuCtxSetLimit(7, 1), CUDA_ERROR_UNSUPPORTED_LIMIT);
	size_t v;
	CHECK_EQ(cuCtxGetLimit(&v, 7), CUDA_ERROR_UNSUPPORTED_LIMIT);
	CU_OK(cuCtxSetLimit(CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 4096));
	CU_OK(cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 1 << 20));
	CHECK_EQ(free_mem(), 4 * GiB); /* not device memory here */
}

static void test_heap_fifo(void)
{
	CU_OK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 2 * GiB));
	CHECK_EQ(free_mem(), 4 * GiB - (2 * GiB - 8 * MiB));
	CHECK_EQ(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 5 * GiB), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, SIZE_MAX), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(limit(CU_LIMIT_MALLOC_HEAP_SIZE), 2 * GiB); /* unchanged by a refusal */
	CHECK_EQ(free_mem(), 4 * GiB - (2 * GiB - 8 * MiB));
	CHECK_EQ(t_run("alloc", "3221225472"), 2);            /* another process sees the heap: 3 GiB does not fit */
	CU_OK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, GiB)); /* lowered: given back */
	CHECK_EQ(free_mem(), 4 * GiB - (GiB - 8 * MiB));
	CU_OK(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 65 * MiB));
	CHECK_EQ(free_mem(), 4 * GiB - (GiB - 8 * MiB) - 64 * MiB);
	CU_OK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, MiB)); /* below the default: nothing held */
	CU_OK(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, MiB));
	CHECK_EQ(free_mem(), 4 * GiB);
}

static void test_stack(void)
{
	CU_OK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 64 * 1024));
	CHECK_EQ(free_mem(), 4 * GiB - (64 * 1024 - 1024) * PER_STACK_BYTE);
	CHECK_EQ(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 1 << 20), CUDA_ERROR_OUT_OF_MEMORY); /* ~16 GiB */
	CHECK_EQ(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, SIZE_MAX), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(limit(CU_LIMIT_STACK_SIZE), 64 * 1024);
	CU_OK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 0)); /* lowering gives it back */
	CHECK_EQ(free_mem(), 4 * GiB);
}

static void test_teardown(CUcontext primary)
{
	CUcontext c;

	CU_OK(cuCtxCreate_v2(&c, 0, 0));
	CU_OK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, GiB + 8 * MiB));
	CU_OK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 2048));
	CHECK_EQ(free_mem(), 3 * GiB - 1024 * PER_STACK_BYTE);
	CU_OK(cuCtxDestroy_v2(c)); /* the context's limits go with it */
	CU_OK(cuCtxSetCurrent(primary));
	CHECK_EQ(free_mem(), 4 * GiB);

	CU_OK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 2 * GiB));
	CU_OK(cuDevicePrimaryCtxReset(0)); /* cudaDeviceReset */
	CU_OK(cuDevicePrimaryCtxRetain(&c, 0));
	CU_OK(cuCtxSetCurrent(c));
	CHECK_EQ(free_mem(), 4 * GiB);
	CHECK_EQ(limit(CU_LIMIT_MALLOC_HEAP_SIZE), 8 * MiB); /* a new context starts with the defaults */
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "child") == 0) {
		CUdeviceptr p;
		t_primary(0);
		return cuMemAlloc_v2(&p, strtoull(argv[3], NULL, 10)) == CUDA_ERROR_OUT_OF_MEMORY ? 2 : 0;
	}
	t_private_state("ctxlimit");
	setenv("GPUSLICE_SIM_MEMORY", "4GiB", 1);
	setenv("GPUSLICE_SIM_SMS", "8", 1);
	t_no_context_memory();
	CUcontext primary = t_primary(0);
	test_defaults();
	test_heap_fifo();
	test_stack();
	test_teardown(primary);
	return t_done("context limits: heap, printf FIFO and stack charged above the defaults, refused, released");
}
