/* SPDX-License-Identifier: Apache-2.0
 * Hook tests: every allocation path is counted once against the group,
 * refused at the limit without calling the driver, released exactly once
 * (double frees and failed calls change nothing), and a refusal prints one
 * clear line. A malformed group file gives a clear error, not a crash.
 */
#include <errno.h>

#include "../src/internal.h"
#include "hooktest.h"

static const struct gs_shm_file *grp;
static uint64_t base; /* bytes held for the whole test: a double uncount shows */

/* used must be base + extra. */
#define USED(extra) CHECK_EQ(ht_used(grp), base + (extra))

static void linear_paths(struct drv *d)
{
	CUdeviceptr p;
	CUstream s;
	CHECK_EQ(d->cuStreamCreate(&s, 0), CUDA_SUCCESS);
	CHECK_EQ(cuMemAlloc_v2(&p, 100 * MiB), CUDA_SUCCESS);
	USED(100 * MiB);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
	USED(0);
	CHECK(cuMemFree_v2(p) != CUDA_SUCCESS); /* double free: the driver says no, we change nothing */
	USED(0);
	CHECK_EQ(cuMemAllocManaged(&p, 64 * MiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
	USED(64 * MiB);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
	USED(0);
	CHECK_EQ(cuMemAllocAsync(&p, 32 * MiB, s), CUDA_SUCCESS);
	USED(32 * MiB);
	CHECK_EQ(cuMemFreeAsync(p, s), CUDA_SUCCESS);
	USED(32 * MiB); /* the pool holds it until a synchronisation */
	CHECK_EQ(cuMemAllocAsync_ptsz(&p, 16 * MiB, NULL), CUDA_SUCCESS);
	USED(32 * MiB); /* taken from what the pool holds */
	CHECK_EQ(cuMemFreeAsync_ptsz(p, NULL), CUDA_SUCCESS);
	USED(32 * MiB);
	CHECK_EQ(d->cuCtxSynchronize(), CUDA_SUCCESS);
	USED(0);
	CUmemoryPool pool;
	CHECK_EQ(d->cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocFromPoolAsync(&p, 8 * MiB, pool, s), CUDA_SUCCESS);
	USED(8 * MiB);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS); /* any release path releases */
	USED(0);
	CHECK_EQ(cuMemAllocFromPoolAsync_ptsz(&p, 4 * MiB, pool, NULL), CUDA_SUCCESS);
	USED(4 * MiB);
	CHECK_EQ(cuMemFreeAsync_ptsz(p, NULL), CUDA_SUCCESS);
	USED(4 * MiB);
	CHECK_EQ(d->cuCtxSynchronize(), CUDA_SUCCESS);
	USED(0);
	size_t pitch = 0;
	CHECK_EQ(cuMemAllocPitch_v2(&p, &pitch, 1000, 1000, 4), CUDA_SUCCESS);
	CHECK(pitch >= 1000);
	USED(pitch * 1000);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
	USED(0);
	CHECK_EQ(d->cuCtxSynchronize(), CUDA_SUCCESS);
}

static void vmm_and_array_paths(void)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	CUmemGenericAllocationHandle h;
	CHECK_EQ(cuMemCreate(&h, 64 * MiB, &prop, 0), CUDA_SUCCESS);
	USED(64 * MiB);
	CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
	USED(0);
	CHECK(cuMemRelease(h) != CUDA_SUCCESS);
	USED(0);
	CUarray a;
	CUDA_ARRAY_DESCRIPTOR ad = {.Width = 1024, .Height = 1024, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
	CHECK_EQ(cuArrayCreate_v2(&a, &ad), CUDA_SUCCESS);
	USED(16 * MiB);
	CHECK_EQ(cuArrayDestroy(a), CUDA_SUCCESS);
	USED(0);
	CUDA_ARRAY3D_DESCRIPTOR d3 = {
		.Width = 64, .Height = 64, .Depth = 64, .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
	CHECK_EQ(cuArray3DCreate_v2(&a, &d3), CUDA_SUCCESS);
	USED(256 * 1024);
	CHECK_EQ(cuArrayDestroy(a), CUDA_SUCCESS);
	USED(0);
	CUmipmappedArray m;
	CUresult rc = cuMipmappedArrayCreate(&m, &d3, 2);
	if (rc == CUDA_ERROR_NOT_FOUND) {
		printf("    (driver has no cuMipmappedArrayCreate: mipmap path not exercised)\n");
		USED(0); /* rolled back */
	} else {
		CHECK_EQ(rc, CUDA_SUCCESS);
		USED(256 * 1024 + 32 * 32 * 32);
		CHECK_EQ(cuMipmappedArrayDestroy(m), CUDA_SUCCESS);
		USED(0);
	}
}

/* A failing driver call rolls the reservation back. */
static void failed_calls(void)
{
	CUdeviceptr p;
	CHECK(cuMemAlloc_v2(&p, 0) != CUDA_SUCCESS);
	USED(0);
	CUmemAllocationProp bad = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				   .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 77}};
	CUmemGenericAllocationHandle h;
	CHECK(cuMemCreate(&h, 64 * MiB, &bad, 0) != CUDA_SUCCESS);
	USED(0);
	CUDA_ARRAY_DESCRIPTOR zero = {.Width = 0, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
	CUarray a;
	CHECK(cuArrayCreate_v2(&a, &zero) != CUDA_SUCCESS);
	USED(0);
}

/* Every path refuses what would pass the limit, and calls no driver. */
static void refused_everywhere(void)
{
	CUdeviceptr p;
	size_t pitch;
	CUmemGenericAllocationHandle h;
	CUarray a;
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	CUDA_ARRAY_DESCRIPTOR big = {.Width = 32768, .Height = 32768, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
	CUDA_ARRAY3D_DESCRIPTOR big3 = {
		.Width = 1024, .Height = 1024, .Depth = 1024, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
	CHECK_EQ(cuMemAlloc_v2(&p, 1 * GiB), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuMemAllocManaged(&p, 1 * GiB, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuMemAllocAsync(&p, 1 * GiB, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuMemAllocAsync_ptsz(&p, 1 * GiB, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuMemAllocFromPoolAsync(&p, 1 * GiB, NULL, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuMemAllocFromPoolAsync_ptsz(&p, 1 * GiB, NULL, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuMemAllocPitch_v2(&p, &pitch, 32768, 32768, 4), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuMemCreate(&h, 1 * GiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuArrayCreate_v2(&a, &big), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuArray3DCreate_v2(&a, &big3), CUDA_ERROR_OUT_OF_MEMORY);
	USED(0);
	CHECK_EQ(grp->gpu[0].refused, 10);
}

static int all_paths(void *arg)
{
	(void)arg;
	const char *path = ht_group("mem", "1073741824");
	struct drv d;
	CUcontext ctx;
	drv_open(&d, &ctx);
	ht_capture_stderr("mem");
	CUdeviceptr held;
	CHECK_EQ(cuMemAlloc_v2(&held, 50 * MiB), CUDA_SUCCESS);
	grp = ht_map(path);
	CHECK(grp != NULL);
	base = 50 * MiB;
	USED(0);
	linear_paths(&d);
	vmm_and_array_paths();
	failed_calls();
	refused_everywhere();
	char buf[2048];
	ht_stderr(buf, sizeof(buf));
	CHECK_EQ(ht_count_lines(buf), 1); /* once, however many refusals */
	if (strstr(buf, "gpuslice: allocation of 1.0 GiB refused on GPU-") != buf ||
	    strstr(buf, ": group \"mem\" uses 50.0 MiB of its 1.0 GiB limit\n") == NULL) {
		fprintf(stdout, "unexpected message: %s", buf);
		return 1;
	}
	CHECK_EQ(cuMemFree_v2(held), CUDA_SUCCESS);
	CHECK_EQ(ht_used(grp), 0);
	return 0;
}

static int malformed_file(void *arg)
{
	(void)arg;
	const char *path = ht_group("junk", "1073741824");
	static char junk[4096];
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = "not a gpuslice group file; it must stay as it is\n"[i % 50];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0 && write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk));
	close(fd);
	ht_capture_stderr("junk"); /* the context's creation already reads the group (drvmem.h) */
	struct drv d;
	CUcontext ctx;
	drv_open(&d, &ctx);
	CUdeviceptr p;
	CHECK_EQ(cuMemAlloc_v2(&p, 1 * MiB), CUDA_ERROR_OPERATING_SYSTEM);
	size_t fr, tot;
	CHECK_EQ(cuMemGetInfo_v2(&fr, &tot), CUDA_ERROR_OPERATING_SYSTEM);
	char buf[1024];
	ht_stderr(buf, sizeof(buf));
	CHECK_EQ(ht_count_lines(buf), 1);
	CHECK(strstr(buf, "bad magic") != NULL && strstr(buf, path) != NULL);
	char back[sizeof(junk) + 8];
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0 && read(fd, back, sizeof(back)) == (ssize_t)sizeof(junk));
	close(fd);
	CHECK(memcmp(back, junk, sizeof(junk)) == 0);
	return 0;
}

int main(void)
{
	ht_setup();
	HT_RUN(all_paths, NULL);
	HT_RUN(malformed_file, NULL);
	ht_teardown();
	fprintf(stderr, "hooks_mem_test: ok\n");
	return 0;
}
