/* SPDX-License-Identifier: Apache-2.0
 * Pools are charged where they live (issue 26): a pool cuMemPoolCreate puts
 * on GPU 1 is charged to GPU 1's slot while the current context is on GPU 0,
 * and refused at GPU 1's limit; a host pool holds no device memory and is
 * not counted at all.
 */
#include "../src/internal.h"
#include "hooktest.h"

static const char *const uuid0 = "GPU-5e1ac0de-6770-7573-6c69-636500000000";
static const char *const uuid1 = "GPU-5e1ac0de-6770-7573-6c69-636500000001";

/* What the group holds on the GPU with uuid (0 if it has no slot there). */
static uint64_t used_on(const struct gs_shm_file *f, const char *uuid)
{
	for (int i = 0; i < GS_SHM_MAX_GPUS; i++)
		if (strcmp(f->gpu[i].uuid, uuid) == 0)
			return __atomic_load_n(&f->gpu[i].used, __ATOMIC_ACQUIRE);
	return 0;
}

static CUmemoryPool make_pool(CUmemLocationType type, int id)
{
	CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = {.type = type, .id = id}};
	CUmemoryPool pool = NULL;
	CHECK_EQ(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
	return pool;
}

static int by_location(void *arg)
{
	(void)arg;
	const char *path = ht_group("pools", "1073741824");
	struct drv d;
	CUcontext ctx;
	drv_open(&d, &ctx); /* current context: GPU 0 */
	CUstream s;
	CHECK_EQ(d.cuStreamCreate(&s, 0), CUDA_SUCCESS);
	CUmemoryPool on1 = make_pool(CU_MEM_LOCATION_TYPE_DEVICE, 1);
	CUdeviceptr a, b, h;
	CHECK_EQ(cuMemAllocFromPoolAsync(&a, 256 * MiB, on1, s), CUDA_SUCCESS);
	const struct gs_shm_file *f = ht_map(path);
	CHECK(f != NULL);
	CHECK_EQ(used_on(f, uuid1), 256 * MiB);
	CHECK_EQ(used_on(f, uuid0), 0);
	/* GPU 1's limit refuses it, though GPU 0 has room */
	CHECK_EQ(cuMemAllocFromPoolAsync(&b, 800 * MiB, on1, s), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(used_on(f, uuid1), 256 * MiB);
	CUmemoryPool host = make_pool(CU_MEM_LOCATION_TYPE_HOST, 0);
	CHECK_EQ(cuMemAllocFromPoolAsync(&h, 2 * GiB, host, s), CUDA_SUCCESS); /* past the limit: host memory */
	CHECK(used_on(f, uuid0) == 0 && used_on(f, uuid1) == 256 * MiB);
	CHECK_EQ(cuMemFreeAsync(h, s), CUDA_SUCCESS);
	CHECK_EQ(cuMemFreeAsync(a, s), CUDA_SUCCESS);
	CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
	CHECK(used_on(f, uuid0) == 0 && used_on(f, uuid1) == 0);
	CHECK_EQ(cuMemPoolDestroy(host), CUDA_SUCCESS);
	CHECK_EQ(cuMemPoolDestroy(on1), CUDA_SUCCESS);
	return 0;
}

int main(void)
{
	ht_setup();
	char p[300];
	snprintf(p, sizeof(p), "%s/sim-state-2gpus", ht_dir);
	setenv("GPUSLICE_SIM_STATE", p, 1);
	setenv("GPUSLICE_SIM_GPUS", "2", 1);
	HT_RUN(by_location, NULL);
	ht_teardown();
	fprintf(stderr, "hooks_pool_test: ok\n");
	return 0;
}
