/* SPDX-License-Identifier: Apache-2.0
 * The group's count is what the driver really holds: VMM physical memory
 * stays counted until released AND unmapped everywhere (NVIDIA's VMM samples
 * map, then release the handle at once); destroying a context, resetting or
 * finally releasing the primary context uncounts that context's allocations;
 * cuMemAllocPitch never asks the driver for more than the limit leaves; a
 * memory pool's freed blocks stay counted while the pool keeps them (release
 * threshold, until a synchronisation, a trim or the pool's destruction); a
 * context limit's memory (malloc heap, printf FIFO, stack) counts above the
 * context's defaults from cuCtxSetLimit until lowered or the context goes.
 * After every step the group's count equals what the simulated GPU says the
 * group's processes hold. The limit is the group's (its file's header), not a
 * member's environment.
 */
#include <errno.h>
#include <signal.h>

#include "../src/internal.h"
#include "simview.h"

static const struct gs_shm_file *grp;
static const struct sim_state *sim;

/* The group holds exactly n bytes, and so does the simulated GPU. */
#define HOLDS(n)                                        \
	do {                                            \
		CHECK_EQ(ht_used(grp), (n));            \
		CHECK_EQ(sv_group_held(sim, grp), (n)); \
	} while (0)

typedef CUresult (*reserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*ctx_create_fn)(CUcontext *, unsigned int, CUdevice);

static struct drv d;
static CUcontext primary;

static void open_group(const char *name)
{
	sv_open_group(name, &d, &primary, &grp, &sim);
}

static int vmm_sample_pattern(void *arg)
{
	(void)arg;
	open_group("vmm");
	reserve_fn reserve = (reserve_fn)drv_sym(d.cuda, "cuMemAddressReserve");
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	CUmemGenericAllocationHandle h[3];
	CUdeviceptr va[3];
	for (int i = 0; i < 2; i++) { /* the samples' pattern: map, then release the handle at once */
		CHECK_EQ(cuMemCreate(&h[i], 512 * MiB, &prop, 0), CUDA_SUCCESS);
		CHECK_EQ(reserve(&va[i], 512 * MiB, 0, 0, 0), CUDA_SUCCESS);
		CHECK_EQ(cuMemMap(va[i], 512 * MiB, 0, h[i], 0), CUDA_SUCCESS);
		CHECK_EQ(cuMemRelease(h[i]), CUDA_SUCCESS);
		HOLDS((uint64_t)(i + 1) * 512 * MiB);
	}
	CHECK_EQ(cuMemCreate(&h[2], 512 * MiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY); /* 1.5 GiB > 1 GiB */
	HOLDS(1 * GiB);
	CHECK_EQ(cuMemUnmap(va[0], 512 * MiB), CUDA_SUCCESS);
	HOLDS(512 * MiB);
	/* A retained handle keeps the memory after the last unmap, until released. */
	CUmemGenericAllocationHandle r;
	CHECK_EQ(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)va[1]), CUDA_SUCCESS);
	CHECK_EQ(cuMemUnmap(va[1], 512 * MiB), CUDA_SUCCESS);
	HOLDS(512 * MiB);
	CHECK_EQ(cuMemRelease(r), CUDA_SUCCESS);
	HOLDS(0);
	/* Two mappings of one handle: freed with the last of handle and mappings. */
	CHECK_EQ(cuMemCreate(&h[0], 256 * MiB, &prop, 0), CUDA_SUCCESS);
	CHECK_EQ(cuMemMap(va[0], 256 * MiB, 0, h[0], 0), CUDA_SUCCESS);
	CHECK_EQ(cuMemMap(va[1], 256 * MiB, 0, h[0], 0), CUDA_SUCCESS);
	CHECK_EQ(cuMemUnmap(va[0], 256 * MiB), CUDA_SUCCESS);
	CHECK_EQ(cuMemRelease(h[0]), CUDA_SUCCESS);
	HOLDS(256 * MiB);
	CHECK(cuMemRelease(h[0]) != CUDA_SUCCESS); /* released already: nothing changes */
	CHECK(cuMemUnmap(va[0], 256 * MiB) != CUDA_SUCCESS);
	HOLDS(256 * MiB);
	CHECK_EQ(cuMemUnmap(va[1], 256 * MiB), CUDA_SUCCESS);
	HOLDS(0);
	return 0;
}

static void alloc_array(CUarray *a)
{
	CUDA_ARRAY_DESCRIPTOR ad = {.Width = 1024, .Height = 1024, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
	CHECK_EQ(cuArrayCreate_v2(a, &ad), CUDA_SUCCESS); /* 16 MiB */
}

static int ctx_destroy(void *arg)
{
	(void)arg;
	open_group("ctx");
	ctx_create_fn create = (ctx_create_fn)drv_sym(d.cuda, "cuCtxCreate_v2");
	CUcontext c;
	CUdeviceptr p, q;
	CUarray a;
	CHECK_EQ(create(&c, 0, 0), CUDA_SUCCESS);
	CHECK_EQ(cuMemAlloc_v2(&p, 600 * MiB), CUDA_SUCCESS);
	alloc_array(&a);
	HOLDS(616 * MiB);
	CHECK_EQ(cuCtxDestroy_v2(c), CUDA_SUCCESS); /* frees both */
	HOLDS(0);
	CHECK_EQ(d.cuCtxSetCurrent(primary), CUDA_SUCCESS);
	CHECK_EQ(cuMemAlloc_v2(&q, 600 * MiB), CUDA_SUCCESS); /* no false out-of-memory */
	HOLDS(600 * MiB);
	CHECK(cuMemFree_v2(p) != CUDA_SUCCESS); /* gone with its context: nothing changes */
	HOLDS(600 * MiB);
	CHECK_EQ(cuMemFree_v2(q), CUDA_SUCCESS);
	HOLDS(0);
	return 0;
}

/* cudaDeviceReset, then allocating again. */
static int primary_reset(void *arg)
{
	(void)arg;
	open_group("reset");
	CUdeviceptr p;
	CUarray a;
	CHECK_EQ(cuMemAlloc_v2(&p, 600 * MiB), CUDA_SUCCESS);
	alloc_array(&a);
	HOLDS(616 * MiB);
	CHECK_EQ(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
	HOLDS(0);
	CHECK_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
	CHECK_EQ(d.cuCtxSetCurrent(primary), CUDA_SUCCESS);
	CHECK_EQ(cuMemAlloc_v2(&p, 900 * MiB), CUDA_SUCCESS);
	HOLDS(900 * MiB);
	CHECK_EQ(cuDevicePrimaryCtxReset(0), CUDA_SUCCESS); /* the unversioned export too */
	HOLDS(0);
	return 0;
}

static int primary_last_release(void *arg)
{
	(void)arg;
	open_group("release");
	CUdeviceptr p;
	CUcontext again;
	CHECK_EQ(cuMemAlloc_v2(&p, 600 * MiB), CUDA_SUCCESS);
	CHECK_EQ(cuDevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
	CHECK_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS); /* not the last: still held */
	HOLDS(600 * MiB);
	CHECK_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS); /* the last: the context goes */
	HOLDS(0);
	CHECK_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
	CHECK_EQ(d.cuCtxSetCurrent(primary), CUDA_SUCCESS);
	CHECK_EQ(cuMemAlloc_v2(&p, 900 * MiB), CUDA_SUCCESS);
	HOLDS(900 * MiB);
	return 0;
}

/* Context limits that hold device memory (cudaDeviceSetLimit): the malloc
 * heap and the printf FIFO their size, the stack its size for every resident
 * thread (108 SMs x 2048 here), above what the context started with. */
#define STACK_BYTE (108ull * 2048)
typedef CUresult (*get_limit_fn)(size_t *, CUlimit);

static int ctx_limits(void *arg)
{
	(void)arg;
	open_group("limits");
	ht_capture_stderr("limits");
	get_limit_fn get = (get_limit_fn)drv_sym(d.cuda, "cuCtxGetLimit");
	ctx_create_fn create = (ctx_create_fn)drv_sym(d.cuda, "cuCtxCreate_v2");
	size_t v = 0;
	/* A 2 GiB heap under a 1 GiB limit: refused, the driver never asked. */
	CHECK_EQ(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 2 * GiB), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(get(&v, CU_LIMIT_MALLOC_HEAP_SIZE), CUDA_SUCCESS);
	CHECK_EQ(v, 8 * MiB);
	HOLDS(0);
	char buf[4096];
	CHECK(strstr(ht_stderr(buf, sizeof(buf)), "refused") != NULL);
	CHECK_EQ(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 520 * MiB), CUDA_SUCCESS); /* the default is overhead */
	HOLDS(512 * MiB);
	CHECK_EQ(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 776 * MiB), CUDA_SUCCESS); /* raised: the increase */
	HOLDS(768 * MiB);
	CHECK_EQ(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 264 * MiB), CUDA_SUCCESS); /* lowered: given back */
	HOLDS(256 * MiB);
	CHECK_EQ(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 65 * MiB), CUDA_SUCCESS);
	HOLDS(320 * MiB);
	CHECK_EQ(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096), CUDA_SUCCESS); /* 3 KiB more per resident thread */
	HOLDS(320 * MiB + 3072 * STACK_BYTE);
	CHECK_EQ(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 5120), CUDA_ERROR_OUT_OF_MEMORY); /* 1184 MiB */
	CHECK_EQ(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, SIZE_MAX), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(get(&v, CU_LIMIT_STACK_SIZE), CUDA_SUCCESS);
	CHECK_EQ(v, 4096);
	CUdeviceptr p;
	CHECK_EQ(cuMemAlloc_v2(&p, 100 * MiB), CUDA_ERROR_OUT_OF_MEMORY); /* the limits count for allocations */
	HOLDS(320 * MiB + 3072 * STACK_BYTE);
	CHECK_EQ(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 0), CUDA_SUCCESS);
	HOLDS(320 * MiB);
	CHECK_EQ(cuCtxSetLimit(CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 4096), CUDA_SUCCESS); /* not counted */
	HOLDS(320 * MiB);
	/* A context's limits go with it. */
	CUcontext c;
	CHECK_EQ(create(&c, 0, 0), CUDA_SUCCESS);
	CHECK_EQ(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 712 * MiB), CUDA_SUCCESS);
	HOLDS(1 * GiB);
	CHECK_EQ(cuCtxDestroy_v2(c), CUDA_SUCCESS);
	HOLDS(320 * MiB);
	CHECK_EQ(d.cuCtxSetCurrent(primary), CUDA_SUCCESS);
	CHECK_EQ(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS); /* cudaDeviceReset */
	HOLDS(0);
	CHECK_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
	CHECK_EQ(d.cuCtxSetCurrent(primary), CUDA_SUCCESS);
	CHECK_EQ(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 1 * GiB + 8 * MiB), CUDA_SUCCESS); /* exactly the limit */
	HOLDS(1 * GiB);
	CHECK_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS); /* the last reference */
	HOLDS(0);
	CHECK(__atomic_load_n(&grp->gpu[0].peak, __ATOMIC_ACQUIRE) <= 1 * GiB);
	return 0;
}

/* A pitch allocation the limit cannot hold once its rows are padded is
 * refused before the driver is asked: the simulator's address space (a bump
 * allocator) shows whether it ever handed out the padded block. */
static int pitch_worst_case(void *arg)
{
	(void)arg;
	open_group("pitch");
	CUdeviceptr a, b, p;
	size_t pitch;
	CHECK_EQ(cuMemAlloc_v2(&a, 1 * MiB), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocPitch_v2(&p, &pitch, 1, 4 * MiB, 4),
		 CUDA_ERROR_OUT_OF_MEMORY); /* 4 MiB wide, 2 GiB padded */
	CHECK_EQ(cuMemAlloc_v2(&b, 1 * MiB), CUDA_SUCCESS);
	CHECK(b - a < 4 * MiB);
	HOLDS(2 * MiB);
	CHECK_EQ(cuMemAllocPitch_v2(&p, &pitch, 1000, 1000, 4), CUDA_SUCCESS);
	CHECK_EQ(pitch, 1024);
	HOLDS(2 * MiB + 1024 * 1000);
	return 0;
}

typedef CUresult (*pool_create_fn)(CUmemoryPool *, const CUmemPoolProps *);
typedef CUresult (*pool_attr_fn)(CUmemoryPool, CUmemPool_attribute, void *);

static CUmemoryPool keeping_pool(cuuint64_t threshold)
{
	pool_create_fn create = (pool_create_fn)drv_sym(d.cuda, "cuMemPoolCreate");
	pool_attr_fn set = (pool_attr_fn)drv_sym(d.cuda, "cuMemPoolSetAttribute");
	CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
				.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	CUmemoryPool pool;
	CHECK_EQ(create(&pool, &props), CUDA_SUCCESS);
	CHECK_EQ(set(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), CUDA_SUCCESS);
	return pool;
}

typedef CUresult (*stream_fn)(CUstream);
typedef CUresult (*trim_fn)(CUmemoryPool, size_t);
typedef CUresult (*pool_fn)(CUmemoryPool);

/* What a pool keeps is held by the driver: counted until it is released.
 * The calls after which it may be are looked up like the CUDA runtime does. */
static int pool_keeps(void *arg)
{
	(void)arg;
	open_group("pool");
	pool_attr_fn set = (pool_attr_fn)drv_sym(d.cuda, "cuMemPoolSetAttribute");
	stream_fn stream_sync = (stream_fn)drv_sym(d.cuda, "cuStreamSynchronize");
	stream_fn stream_sync_ptsz = (stream_fn)drv_sym(d.cuda, "cuStreamSynchronize_ptsz");
	trim_fn trim = (trim_fn)drv_sym(d.cuda, "cuMemPoolTrimTo");
	pool_fn destroy = (pool_fn)drv_sym(d.cuda, "cuMemPoolDestroy");
	CUmemoryPool pool = keeping_pool(UINT64_MAX); /* keep everything */
	CUdeviceptr p, q;
	CHECK_EQ(cuMemAllocFromPoolAsync(&p, 600 * MiB, pool, NULL), CUDA_SUCCESS);
	HOLDS(600 * MiB);
	CHECK_EQ(cuMemFreeAsync(p, NULL), CUDA_SUCCESS);
	CHECK_EQ(stream_sync(NULL), CUDA_SUCCESS);
	HOLDS(600 * MiB);                                                           /* kept by the pool */
	CHECK_EQ(cuMemAlloc_v2(&q, 600 * MiB), CUDA_ERROR_OUT_OF_MEMORY);           /* 1.2 GiB > 1 GiB */
	CHECK_EQ(cuMemAllocFromPoolAsync(&p, 500 * MiB, pool, NULL), CUDA_SUCCESS); /* reused */
	HOLDS(600 * MiB);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
	HOLDS(600 * MiB);
	CHECK_EQ(trim(pool, 256 * MiB), CUDA_SUCCESS);
	HOLDS(256 * MiB);
	cuuint64_t zero = 0;
	CHECK_EQ(set(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero), CUDA_SUCCESS);
	HOLDS(256 * MiB); /* released at the next synchronisation */
	CHECK_EQ(d.cuCtxSynchronize(), CUDA_SUCCESS);
	HOLDS(0);
	/* The default pool (threshold 0): held from the free to the synchronisation. */
	CHECK_EQ(cuMemAllocAsync(&p, 300 * MiB, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuMemFreeAsync(p, NULL), CUDA_SUCCESS);
	HOLDS(300 * MiB);
	CHECK_EQ(stream_sync_ptsz(NULL), CUDA_SUCCESS);
	HOLDS(0);
	/* Destroyed: what it keeps goes at once, an outstanding block when freed. */
	CHECK_EQ(set(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &(cuuint64_t){UINT64_MAX}), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocFromPoolAsync(&p, 200 * MiB, pool, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocFromPoolAsync(&q, 100 * MiB, pool, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuMemFreeAsync(p, NULL), CUDA_SUCCESS);
	HOLDS(300 * MiB);
	CHECK_EQ(destroy(pool), CUDA_SUCCESS);
	HOLDS(100 * MiB);
	CHECK_EQ(cuMemFreeAsync(q, NULL), CUDA_SUCCESS);
	HOLDS(0);
	/* cudaDeviceReset: the pools release what they keep. */
	pool = keeping_pool(UINT64_MAX);
	CHECK_EQ(cuMemAllocFromPoolAsync(&p, 400 * MiB, pool, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuMemFreeAsync(p, NULL), CUDA_SUCCESS);
	HOLDS(400 * MiB);
	CHECK_EQ(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
	HOLDS(0);
	return 0;
}

/* Every member is held to the group's limit, whatever its own variable says. */
static int member_with_env(void *env_limit)
{
	if (env_limit != NULL)
		setenv("GPUSLICE_MEMORY_LIMIT", env_limit, 1);
	drv_open(&d, &primary);
	CUdeviceptr p;
	CHECK_EQ(cuMemAlloc_v2(&p, 600 * MiB), CUDA_SUCCESS);
	CHECK_EQ(cuMemAlloc_v2(&p, 600 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
	return 0;
}

static void group_limit_wins(void)
{
	ht_managed_group("owned", 1 * GiB);
	HT_RUN(member_with_env, NULL);         /* no limit of its own: not unlimited */
	HT_RUN(member_with_env, "8589934592"); /* 8 GiB of its own: still 1 GiB */
}

/* A member whose group file is truncated under it (by anyone who can write
 * it) refuses from then on, with one line, instead of dying of SIGBUS. */
static int truncated_file(void *arg)
{
	off_t to = (off_t)(intptr_t)arg;
	const char *path = ht_group(to == 0 ? "trunc0" : "trunchalf", "1073741824");
	drv_open(&d, &primary);
	ht_capture_stderr(to == 0 ? "trunc0" : "trunchalf");
	CUdeviceptr p, q;
	CHECK_EQ(cuMemAlloc_v2(&p, 1 * MiB), CUDA_SUCCESS);
	CHECK(truncate(path, to) == 0);
	CHECK_EQ(cuMemAlloc_v2(&q, 1 * MiB), CUDA_ERROR_OPERATING_SYSTEM);
	CHECK_EQ(cuMemAlloc_v2(&q, 1 * MiB), CUDA_ERROR_OPERATING_SYSTEM);
	size_t fr, tot;
	CHECK_EQ(cuMemGetInfo_v2(&fr, &tot), CUDA_ERROR_OPERATING_SYSTEM);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS); /* the driver's memory is still freed */
	char buf[1024];
	ht_stderr(buf, sizeof(buf));
	CHECK_EQ(ht_count_lines(buf), 1);
	CHECK(strstr(buf, "was truncated") != NULL && strstr(buf, path) != NULL);
	return 0;
}

/* A fault outside the group file is not ours: the process dies of it as before. */
static int foreign_sigbus(void *arg)
{
	(void)arg;
	ht_group("foreign", "1073741824");
	drv_open(&d, &primary);
	ht_capture_stderr("foreign");
	CUdeviceptr p;
	CHECK_EQ(cuMemAlloc_v2(&p, 1 * MiB), CUDA_SUCCESS); /* the guard is installed */
	char path[320];
	snprintf(path, sizeof(path), "%s/other", ht_dir);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0 && ftruncate(fd, 8192) == 0);
	volatile char *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(m != MAP_FAILED && ftruncate(fd, 0) == 0);
	m[4096] = 1; /* SIGBUS */
	return 0;
}

/* Dies of the signal, or under ASan of its report (its handler was there first). */
static void foreign_dies(void)
{
	fprintf(stderr, "--- foreign_sigbus\n");
	int rc = ht_wait(ht_spawn(foreign_sigbus, NULL));
	char p[320], buf[4096] = {0};
	snprintf(p, sizeof(p), "%s/foreign.stderr", ht_dir);
	int fd = open(p, O_RDONLY);
	CHECK(fd >= 0 && read(fd, buf, sizeof(buf) - 1) >= 0);
	close(fd);
	CHECK(rc == 128 + SIGBUS || (rc == 1 && strstr(buf, "AddressSanitizer") != NULL && strstr(buf, "BUS") != NULL));
}

int main(void)
{
	ht_setup();
	HT_RUN(vmm_sample_pattern, NULL);
	HT_RUN(ctx_destroy, NULL);
	HT_RUN(primary_reset, NULL);
	HT_RUN(primary_last_release, NULL);
	HT_RUN(ctx_limits, NULL);
	HT_RUN(pitch_worst_case, NULL);
	HT_RUN(pool_keeps, NULL);
	group_limit_wins();
	HT_RUN(truncated_file, (void *)(intptr_t)0);
	foreign_dies();
	ht_teardown();
	fprintf(stderr, "reliability_mem_test: ok\n");
	return 0;
}
