/* SPDX-License-Identifier: Apache-2.0
 * Memory: capacity shared across processes, OOM at capacity, frees reclaim,
 * a dead process's memory is reclaimed, every allocation path is charged. */
#include "testutil.h"

#define GiB (1ull << 30)
#define MiB (1ull << 20)

static size_t free_mem(void)
{
	size_t f = 0, t = 0;

	CU_OK(cuMemGetInfo_v2(&f, &t));
	CHECK_EQ(t, 4 * GiB);
	return f;
}

static void test_capacity(void)
{
	CUdeviceptr p[5];

	CHECK_EQ(free_mem(), 4 * GiB);
	for (int i = 0; i < 4; i++)
		CU_OK(cuMemAlloc_v2(&p[i], GiB));
	CHECK_EQ(free_mem(), 0);
	CHECK_EQ(cuMemAlloc_v2(&p[4], 1), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuMemFree_v2(p[2]));
	CHECK_EQ(free_mem(), GiB);
	CU_OK(cuMemAlloc_v2(&p[2], GiB)); /* freed memory is reusable */
	for (int i = 0; i < 4; i++)
		CU_OK(cuMemFree_v2(p[i]));
	CHECK_EQ(free_mem(), 4 * GiB);
	CHECK_EQ(cuMemFree_v2(p[0]), CUDA_ERROR_INVALID_VALUE);     /* double free */
	CHECK_EQ(cuMemFree_v2(p[0] + 8), CUDA_ERROR_INVALID_VALUE); /* not a base */
	CHECK_EQ(cuMemAlloc_v2(&p[0], 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuMemAlloc_v2(&p[0], 5 * GiB), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(free_mem(), 4 * GiB);
}

/* Child: allocate arg bytes; exit 0 on success, 2 on OOM. "hold" mode also
 * reports readiness on stdout and waits to be killed. */
static int child_alloc(const char *mode, const char *arg)
{
	CUdeviceptr p;
	CUresult rc;

	t_primary(0);
	rc = cuMemAlloc_v2(&p, strtoull(arg, NULL, 10));
	if (strcmp(mode, "hold") == 0 && rc == CUDA_SUCCESS) {
		if (write(1, "R", 1) != 1)
			return 3;
		for (;;)
			pause();
	}
	return rc == CUDA_SUCCESS ? 0 : (rc == CUDA_ERROR_OUT_OF_MEMORY ? 2 : 1);
}

static void test_two_processes(void)
{
	char arg[32];
	CUdeviceptr p;

	CU_OK(cuMemAlloc_v2(&p, 3 * GiB));
	snprintf(arg, sizeof(arg), "%llu", 2 * GiB);
	CHECK_EQ(t_run("alloc", arg), 2); /* 3 + 2 > 4: the other process is refused */
	snprintf(arg, sizeof(arg), "%llu", GiB);
	CHECK_EQ(t_run("alloc", arg), 0); /* exactly the rest fits */
	CHECK_EQ(free_mem(), GiB);        /* and it was given back at the child's exit */
	CU_OK(cuMemFree_v2(p));
}

static pid_t spawn_holder(unsigned long long bytes)
{
	int fds[2];
	char arg[32], c;
	pid_t pid;

	MUST(pipe(fds) == 0);
	snprintf(arg, sizeof(arg), "%llu", bytes);
	pid = fork();
	MUST(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], 1);
		setenv("SIM_TEST_CHILD", "1", 1);
		execl("/proc/self/exe", "simtest-child", "child", "hold", arg, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	MUST(read(fds[0], &c, 1) == 1 && c == 'R');
	close(fds[0]);
	return pid;
}

static void test_dead_process_reclaim(void)
{
	pid_t pid = spawn_holder(3 * GiB);
	CUdeviceptr p;

	CHECK_EQ(free_mem(), GiB);
	CHECK_EQ(cuMemAlloc_v2(&p, 2 * GiB), CUDA_ERROR_OUT_OF_MEMORY);
	kill(pid, SIGKILL); /* no exit handler runs: the simulator must reap it */
	CHECK_EQ(t_wait(pid), 128 + SIGKILL);
	CU_OK(cuMemAlloc_v2(&p, 4 * GiB)); /* OOM path reaps the dead process */
	CU_OK(cuMemFree_v2(p));
}

/* Like the driver: a pool keeps up to its release threshold across
 * synchronisations, reuses what it keeps, and gives it back on trim. */
static void test_pool_threshold(CUmemoryPool pool)
{
	CUdeviceptr p, q;
	cuuint64_t v = 256 * MiB;

	CU_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v));
	CU_OK(cuMemAllocAsync(&p, 512 * MiB, NULL));
	CU_OK(cuMemFreeAsync(p, NULL));
	CU_OK(cuCtxSynchronize());
	CHECK_EQ(free_mem(), 4 * GiB - 256 * MiB); /* kept up to the threshold */
	CU_OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v));
	CHECK_EQ(v, 256 * MiB);
	CU_OK(cuMemAllocAsync(&q, 128 * MiB, NULL)); /* reuses what the pool keeps */
	CHECK_EQ(free_mem(), 4 * GiB - 256 * MiB);
	CU_OK(cuMemAllocAsync(&p, 256 * MiB, NULL)); /* 128 MiB kept + 128 MiB more */
	CHECK_EQ(free_mem(), 4 * GiB - 384 * MiB);
	CU_OK(cuMemFreeAsync(p, NULL));
	CU_OK(cuMemPoolTrimTo(pool, 0)); /* down to what is allocated */
	CHECK_EQ(free_mem(), 4 * GiB - 128 * MiB);
	CU_OK(cuMemFree_v2(q)); /* returns to the pool, then synchronises: kept */
	CHECK_EQ(free_mem(), 4 * GiB - 128 * MiB);
	v = 0;
	CU_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v));
	CU_OK(cuStreamSynchronize(NULL));
	CHECK_EQ(free_mem(), 4 * GiB);
}

static void test_paths(void)
{
	CUdeviceptr p, q;
	size_t pitch;
	CUmemoryPool pool;
	cuuint64_t used;

	CU_OK(cuMemAllocPitch_v2(&p, &pitch, 1000, 1024, 4));
	CHECK_EQ(pitch, 1024);
	CHECK_EQ(free_mem(), 4 * GiB - MiB);
	CU_OK(cuMemFree_v2(p));
	CHECK_EQ(cuMemAllocPitch_v2(&p, &pitch, 1000, 10, 3), CUDA_ERROR_INVALID_VALUE);

	CU_OK(cuMemAllocManaged(&p, 64 * MiB, CU_MEM_ATTACH_GLOBAL));
	memset((void *)(uintptr_t)p, 0x5a, 64 * MiB); /* managed memory is host accessible */
	CHECK_EQ(free_mem(), 4 * GiB - 64 * MiB);
	unsigned char back[16] = {0};
	CU_OK(cuMemcpyDtoH_v2(back, p + 100, sizeof(back)));
	CHECK_EQ(back[15], 0x5a);
	CU_OK(cuMemFree_v2(p));

	CU_OK(cuMemAllocAsync(&p, 256 * MiB, NULL));
	CU_OK(cuDeviceGetDefaultMemPool(&pool, 0));
	CU_OK(cuMemAllocFromPoolAsync(&q, 256 * MiB, pool, NULL));
	CU_OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
	CHECK_EQ(used, 512 * MiB);
	CHECK_EQ(free_mem(), 4 * GiB - 512 * MiB);
	CHECK_EQ(cuMemAllocAsync(&p, 4 * GiB, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuMemFreeAsync(p, NULL));
	CU_OK(cuMemFreeAsync(q, NULL));
	CU_OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
	CHECK_EQ(used, 0);
	CHECK_EQ(free_mem(), 4 * GiB - 512 * MiB); /* freed blocks stay in the pool until a synchronisation */
	CU_OK(cuCtxSynchronize());
	CHECK_EQ(free_mem(), 4 * GiB); /* release threshold 0: all of it released */
	test_pool_threshold(pool);

	CUarray a;
	CUDA_ARRAY_DESCRIPTOR d = {.Width = 1024, .Height = 1024, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
	CU_OK(cuArrayCreate_v2(&a, &d));
	CHECK_EQ(free_mem(), 4 * GiB - 16 * MiB);
	CU_OK(cuArrayDestroy(a));
	CHECK_EQ(free_mem(), 4 * GiB);
}

static void test_vmm(void)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED};
	CUmemAccessDesc acc = {.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUmemGenericAllocationHandle h1, h2;
	CUdeviceptr va;
	size_t g;

	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location = prop.location;
	CU_OK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CHECK_EQ(g, 2 * MiB);
	CU_OK(cuMemAddressReserve(&va, 2 * GiB, 0, 0, 0));
	CHECK_EQ(free_mem(), 4 * GiB); /* reserving address space is free */
	CU_OK(cuMemCreate(&h1, GiB, &prop, 0));
	CU_OK(cuMemCreate(&h2, GiB, &prop, 0));
	CHECK_EQ(free_mem(), 2 * GiB);
	CHECK_EQ(cuMemCreate(&h1, 3 * GiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuMemCreate(&h1, MiB, &prop, 0), CUDA_ERROR_INVALID_VALUE); /* not granular */
	CU_OK(cuMemMap(va, GiB, 0, h1, 0));
	CU_OK(cuMemMap(va + GiB, GiB, 0, h2, 0));
	CHECK_EQ(cuMemMap(va, GiB, 0, h2, 0), CUDA_ERROR_ALREADY_MAPPED);
	CU_OK(cuMemSetAccess(va, 2 * GiB, &acc, 1));
	CU_OK(cuMemsetD32_v2(va + GiB - 4, 7, 2)); /* spans both mappings: one reserved range */
	CU_OK(cuMemRelease(h1));
	CU_OK(cuMemRelease(h2));
	CHECK_EQ(free_mem(), 2 * GiB); /* still mapped */
	CU_OK(cuMemUnmap(va, 2 * GiB));
	CHECK_EQ(free_mem(), 4 * GiB);
	CHECK_EQ(cuMemRelease(h1), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemAddressFree(va, 2 * GiB));
}

static void test_copies(void)
{
	CUdeviceptr p;
	unsigned char host[64];

	CU_OK(cuMemAlloc_v2(&p, 4096));
	memset(host, 0xff, sizeof(host));
	CU_OK(cuMemcpyHtoD_v2(p, host, sizeof(host)));
	CU_OK(cuMemcpyDtoH_v2(host, p, sizeof(host)));
	CHECK_EQ(host[0], 0); /* device memory has no backing: reads are zeros */
	CU_OK(cuMemsetD8_v2(p, 1, 4096));
	CHECK_EQ(cuMemsetD8_v2(p, 1, 4097), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuMemcpyDtoH_v2(host, p + 4090, 8), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuMemcpyDtoH_v2(host, 0x1234, 8), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemcpyDtoD_v2(p + 8, p, 64));
	CU_OK(cuMemcpyHtoDAsync_v2(p, host, 64, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	CU_OK(cuMemFree_v2(p));
}

static void test_context_destroy_frees(void)
{
	CUcontext c, cur;
	CUdeviceptr p;

	CU_OK(cuCtxCreate_v2(&c, 0, 0));
	CU_OK(cuMemAlloc_v2(&p, 2 * GiB));
	CHECK_EQ(free_mem(), 2 * GiB);
	CU_OK(cuCtxDestroy_v2(c)); /* like the real driver, frees the context's memory */
	CU_OK(cuCtxGetCurrent(&cur));
	CHECK(cur != c);
	CHECK_EQ(free_mem(), 4 * GiB);
	CHECK_EQ(cuCtxDestroy_v2(c), CUDA_ERROR_INVALID_CONTEXT);
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "child") == 0)
		return child_alloc(argv[2], argv[3]);
	t_private_state("memory");
	setenv("GPUSLICE_SIM_MEMORY", "4GiB", 1);
	t_no_context_memory();
	t_primary(0);
	test_capacity();
	test_two_processes();
	test_dead_process_reclaim();
	test_paths();
	test_vmm();
	test_copies();
	test_context_destroy_frees();
	return t_done("memory capacity, OOM, reclaim across processes, allocation paths");
}
