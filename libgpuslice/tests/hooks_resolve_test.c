/* SPDX-License-Identifier: Apache-2.0
 * Hook tests: every way of reaching the driver lands in our hooks (direct
 * symbols, dlsym, cuGetProcAddress and cuGetProcAddress_v2, versioned and
 * per-thread variants), everything else passes through untouched, launches
 * forward, errno is preserved. Runs against libcuda.so.1 from
 * LD_LIBRARY_PATH (the simulated GPU in `make test-lib`).
 */
#include <errno.h>

#include "../src/internal.h"
#include "hooktest.h"

static int from_libgpuslice(const void *fn)
{
	Dl_info info;
	return fn != NULL && dladdr(fn, &info) != 0 && strstr(info.dli_fname, "libgpuslice") != NULL;
}

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);

/* Allocates 256 MiB blocks until refused: how many fit. */
static int fill(alloc_fn a, free_fn f)
{
	CUdeviceptr p[16];
	int n = 0;
	CUresult rc;
	while (n < 16 && (rc = a(&p[n], 256 * MiB)) == CUDA_SUCCESS)
		n++;
	CHECK_EQ(rc, CUDA_ERROR_OUT_OF_MEMORY);
	for (int i = 0; i < n; i++)
		CHECK_EQ(f(p[i]), CUDA_SUCCESS);
	return n;
}

static int direct_symbols(void *arg)
{
	const char *path = ht_group("direct", "1073741824");
	struct drv d;
	CUcontext ctx;
	drv_open(&d, &ctx);
	(void)arg;
	CUdeviceptr p[4];
	for (int i = 0; i < 4; i++)
		CHECK_EQ(cuMemAlloc_v2(&p[i], 256 * MiB), CUDA_SUCCESS);
	CUdeviceptr extra;
	CHECK_EQ(cuMemAlloc_v2(&extra, 1), CUDA_ERROR_OUT_OF_MEMORY);
	size_t fr = 1, tot = 0, bytes = 0;
	CHECK_EQ(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
	CHECK_EQ(tot, 1 * GiB);
	CHECK_EQ(fr, 0);
	CHECK_EQ(cuDeviceTotalMem_v2(&bytes, 0), CUDA_SUCCESS);
	CHECK_EQ(bytes, 1 * GiB);
	const struct gs_shm_file *f = ht_map(path);
	CHECK(f != NULL);
	CHECK_EQ(ht_used(f), 1 * GiB);
	CHECK_EQ(cuMemFree_v2(p[0]), CUDA_SUCCESS);
	CHECK_EQ(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
	CHECK_EQ(fr, 256 * MiB);
	CHECK_EQ(ht_used(f), 768 * MiB);
	for (int i = 1; i < 4; i++)
		CHECK_EQ(cuMemFree_v2(p[i]), CUDA_SUCCESS);
	CHECK_EQ(ht_used(f), 0);
	CHECK_EQ(fill(cuMemAlloc_v2, cuMemFree_v2), 4);
	return 0;
}

static int via_dlsym(void *arg)
{
	(void)arg;
	ht_group("dlsym", "1073741824");
	struct drv d;
	CUcontext ctx;
	drv_open(&d, &ctx);
	void *a = dlsym(d.cuda, "cuMemAlloc_v2");
	void *f = dlsym(d.cuda, "cuMemFree_v2");
	CHECK(a == (void *)cuMemAlloc_v2 && f == (void *)cuMemFree_v2);
	CHECK(from_libgpuslice(a));
	CHECK_EQ(fill((alloc_fn)a, (free_fn)f), 4);
	/* Not hooked: the driver's own function, untouched. */
	void *init = dlsym(d.cuda, "cuInit");
	CHECK(init != NULL && !from_libgpuslice(init));
	CHECK(dlsym(d.cuda, "cuNoSuchFunction") == NULL);
	CHECK(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") == (void *)cuMemAlloc_v2);
	CHECK(dlsym(RTLD_NEXT, "cuMemAlloc_v2") == (void *)cuMemAlloc_v2);
	CHECK(dlsym(d.cuda, "cuLaunchKernel_ptsz") == (void *)cuLaunchKernel_ptsz);
	/* dlvsym: the driver's symbols carry no version; the same mapping applies. */
	void *va = dlvsym(d.cuda, "cuMemAlloc_v2", "GPUSLICE_NO_SUCH_VERSION");
	CHECK(va == NULL || va == (void *)cuMemAlloc_v2);
	return 0;
}

static int via_procaddress(void *arg)
{
	(void)arg;
	ht_group("procaddr", "1073741824");
	struct drv d;
	CUcontext ctx;
	drv_open(&d, &ctx);
	gs_fn_cuGetProcAddress_v2 gpa2 = (gs_fn_cuGetProcAddress_v2)dlsym(d.cuda, "cuGetProcAddress_v2");
	gs_fn_cuGetProcAddress gpa1 = (gs_fn_cuGetProcAddress)dlsym(d.cuda, "cuGetProcAddress");
	CHECK((void *)gpa2 == (void *)cuGetProcAddress_v2 && (void *)gpa1 == (void *)cuGetProcAddress);
	void *pfn = NULL;
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
	CHECK_EQ(gpa2("cuMemAlloc", &pfn, 12040, 0, &st), CUDA_SUCCESS);
	CHECK(pfn == (void *)cuMemAlloc_v2 && st == CU_GET_PROC_ADDRESS_SUCCESS);
	void *pfree = NULL;
	CHECK_EQ(gpa2("cuMemFree", &pfree, 12040, 0, &st), CUDA_SUCCESS);
	CHECK(pfree == (void *)cuMemFree_v2);
	CHECK_EQ(fill((alloc_fn)pfn, (free_fn)pfree), 4);
	/* Lookups of the lookup function itself come back to us. */
	CHECK_EQ(gpa2("cuGetProcAddress", &pfn, 12040, 0, &st), CUDA_SUCCESS);
	CHECK(pfn == (void *)cuGetProcAddress_v2);
	CHECK_EQ(gpa2("cuGetProcAddress", &pfn, 11030, 0, &st), CUDA_SUCCESS);
	CHECK(pfn == (void *)cuGetProcAddress);
	/* Per-thread default stream variants. */
	cuuint64_t ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	CHECK_EQ(gpa2("cuLaunchKernel", &pfn, 12040, ptds, &st), CUDA_SUCCESS);
	CHECK(pfn == (void *)cuLaunchKernel_ptsz);
	CHECK_EQ(gpa2("cuMemAllocAsync", &pfn, 12040, ptds, &st), CUDA_SUCCESS);
	CHECK(pfn == (void *)cuMemAllocAsync_ptsz);
	CHECK_EQ(gpa2("cuLaunchKernel", &pfn, 12040, 0, &st), CUDA_SUCCESS);
	CHECK(pfn == (void *)cuLaunchKernel);
	/* Unhooked and unknown names: exactly what the driver says. */
	CHECK_EQ(gpa2("cuInit", &pfn, 12040, 0, &st), CUDA_SUCCESS);
	CHECK(pfn != NULL && !from_libgpuslice(pfn));
	pfn = &st; /* CUDA 12: an unknown name is CUDA_SUCCESS with NULL and its status */
	CHECK_EQ(gpa2("cuNoSuchFunction", &pfn, 12040, 0, &st), CUDA_SUCCESS);
	CHECK(pfn == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	/* By version: cuMemAlloc at 2000 is the legacy 32-bit export (refused), at 3020 the _v2 hook;
	 * the driver hands out trampolines, not its exports, and the name decides. */
	CHECK_EQ(gpa2("cuMemAlloc", &pfn, 2000, 0, &st), CUDA_SUCCESS);
	CHECK(pfn == (void *)cuMemAlloc);
	CHECK_EQ(gpa2("cuMemAlloc", &pfn, 3020, 0, &st), CUDA_SUCCESS);
	CHECK(pfn == (void *)cuMemAlloc_v2);
	CHECK_EQ(gpa2("cuGraphInstantiate", &pfn, 12040, 0, &st), CUDA_SUCCESS);
	CHECK(pfn == (void *)cuGraphInstantiateWithFlags);
	CHECK_EQ(gpa2("cuStreamBeginCapture", &pfn, 12040, ptds, &st), CUDA_SUCCESS);
	CHECK(pfn == (void *)cuStreamBeginCapture_v2_ptsz);
	CHECK_EQ(gpa2("cuStreamBeginCaptureToGraph", &pfn, 12060, 0, &st), CUDA_SUCCESS);
	CHECK(pfn == (void *)cuStreamBeginCaptureToGraph);
	CHECK_EQ(gpa2("cuStreamBeginCaptureToGraph", &pfn, 12060, ptds, &st), CUDA_SUCCESS);
	CHECK(pfn == (void *)cuStreamBeginCaptureToGraph_ptsz);
	CHECK_EQ(gpa2("cuDevicePrimaryCtxRelease", &pfn, 10020, 0, &st), CUDA_SUCCESS);
	CHECK(pfn == (void *)cuDevicePrimaryCtxRelease);
	/* Unhooked exports at 12.6: the driver's pointer (not ours). */
	CHECK_EQ(gpa2("cuMemAdvise", &pfn, 12060, 0, &st), CUDA_SUCCESS);
	CHECK(pfn != NULL && !from_libgpuslice(pfn) && st == CU_GET_PROC_ADDRESS_SUCCESS);
	CHECK_EQ(gpa2("cuCtxCreate", &pfn, 12060, 0, &st), CUDA_SUCCESS);
	CHECK(pfn != NULL);
	/* The CUDA 11 ABI (4 arguments). */
	CHECK_EQ(gpa1("cuMemAlloc", &pfn, 11030, 0), CUDA_SUCCESS);
	CHECK(pfn == (void *)cuMemAlloc_v2);
	CHECK_EQ(gpa1("cuMemFree", &pfree, 11030, 0), CUDA_SUCCESS);
	CHECK_EQ(fill((alloc_fn)pfn, (free_fn)pfree), 4);
	return 0;
}

static int launches(void *arg)
{
	(void)arg;
	ht_group("launch", NULL);
	struct drv d;
	CUcontext ctx;
	drv_open(&d, &ctx);
	CUmodule mod;
	CUfunction fn;
	CHECK_EQ(d.cuModuleLoadData(&mod, "any image"), CUDA_SUCCESS);
	CHECK_EQ(d.cuModuleGetFunction(&fn, mod, "gpuslice_sim_busy"), CUDA_SUCCESS);
	unsigned long long us = 100;
	void *params[] = {&us};
	CHECK_EQ(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuLaunchKernel_ptsz(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuLaunchCooperativeKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params), CUDA_SUCCESS);
	CHECK_EQ(cuLaunchCooperativeKernel_ptsz(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params), CUDA_SUCCESS);
	CUlaunchConfig cfg = {
		.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1, .blockDimZ = 1};
	CHECK_EQ(cuLaunchKernelEx(&cfg, fn, params, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuLaunchKernelEx_ptsz(&cfg, fn, params, NULL), CUDA_SUCCESS);
	CUDA_LAUNCH_PARAMS multi = {.function = fn,
				    .gridDimX = 1,
				    .gridDimY = 1,
				    .gridDimZ = 1,
				    .blockDimX = 1,
				    .blockDimY = 1,
				    .blockDimZ = 1,
				    .kernelParams = params};
	CHECK_EQ(cuLaunchCooperativeKernelMultiDevice(&multi, 1, 0), CUDA_SUCCESS);
	CHECK(dlsym(RTLD_DEFAULT, "cuLaunchCooperativeKernelMultiDevice") ==
	      (void *)cuLaunchCooperativeKernelMultiDevice);
	CHECK_EQ(d.cuCtxSynchronize(), CUDA_SUCCESS);
	/* Errors come back unchanged. */
	CHECK(cuGraphLaunch(NULL, NULL) != CUDA_SUCCESS);
	CHECK(cuLaunchKernelEx(NULL, fn, params, NULL) != CUDA_SUCCESS);
	return 0;
}

/* The legacy entry points the library neither counts nor gates are refused,
 * whichever way they are reached, without calling the driver. */
static int legacy(void *arg)
{
	(void)arg;
	ht_group("legacy", "1073741824");
	ht_capture_stderr("legacy");
	struct drv d;
	CUcontext ctx;
	drv_open(&d, &ctx);
	unsigned int p32 = 0, pitch = 0;
	CUarray a = NULL;
	errno = 4242;
	CHECK_EQ(cuMemAlloc(&p32, 512u * MiB), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ(errno, 4242);
	CHECK_EQ(cuMemAllocPitch(&p32, &pitch, 4096, 4096, 4), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ(cuArrayCreate(&a, &(int[4]){0}), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ(cuArray3DCreate(&a, &(int[8]){0}), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ(cuLaunch(NULL), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ(cuLaunchGrid(NULL, 1, 1), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ(cuLaunchGridAsync(NULL, 1, 1, NULL), CUDA_ERROR_NOT_SUPPORTED);
	CHECK(p32 == 0 && a == NULL);
	CUdeviceptr whole; /* nothing was counted: the whole limit is still there */
	CHECK_EQ(cuMemAlloc_v2(&whole, 1024 * MiB), CUDA_SUCCESS);
	CHECK_EQ(cuMemFree_v2(whole), CUDA_SUCCESS);
	typedef CUresult (*alloc32_fn)(unsigned int *, unsigned int);
	alloc32_fn viadl = (alloc32_fn)dlsym(RTLD_DEFAULT, "cuMemAlloc");
	CHECK(viadl == cuMemAlloc && from_libgpuslice((void *)viadl));
	CHECK_EQ(viadl(&p32, 64u * MiB), CUDA_ERROR_NOT_SUPPORTED);
	char buf[512];
	ht_stderr(buf, sizeof(buf));
	CHECK(strstr(buf, "cuMemAlloc (a legacy entry point) refused") != NULL);
	CHECK(strstr(buf, "cuLaunch ") == NULL); /* one line, not one per call */
	return 0;
}

static int errno_kept(void *arg)
{
	(void)arg;
	ht_group("errno", "1073741824");
	struct drv d;
	CUcontext ctx;
	drv_open(&d, &ctx);
	CUdeviceptr p, q;
	errno = 4242; /* the first allocation opens, locks, maps and reads /proc */
	CHECK_EQ(cuMemAlloc_v2(&p, 768 * MiB), CUDA_SUCCESS);
	CHECK_EQ(errno, 4242);
	errno = 4343; /* refused: reaps through /proc, prints a message */
	CHECK_EQ(cuMemAlloc_v2(&q, 512 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(errno, 4343);
	size_t fr, tot;
	errno = 4444;
	CHECK_EQ(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
	CHECK_EQ(errno, 4444);
	errno = 4545;
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
	CHECK_EQ(errno, 4545);
	return 0;
}

static int no_limit(void *arg)
{
	(void)arg;
	const char *path = ht_group("nolimit", NULL);
	struct drv d;
	CUcontext ctx;
	drv_open(&d, &ctx);
	size_t fr, tot, bytes;
	CHECK_EQ(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
	CHECK_EQ(tot, 24 * GiB);
	CHECK_EQ(cuDeviceTotalMem_v2(&bytes, 0), CUDA_SUCCESS);
	CHECK_EQ(bytes, 24 * GiB);
	CUdeviceptr p;
	CHECK_EQ(cuMemAlloc_v2(&p, 3 * GiB), CUDA_SUCCESS);
	const struct gs_shm_file *f = ht_map(path);
	CHECK(f != NULL);
	CHECK_EQ(ht_used(f), 3 * GiB); /* still accounted */
	CHECK_EQ(f->gpu[0].limit, 0);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
	CHECK_EQ(ht_used(f), 0);
	return 0;
}

static int private_group(void *arg)
{
	(void)arg;
	ht_group("private", "1073741824");
	unsetenv("GPUSLICE_GROUP_FILE");
	struct drv d;
	CUcontext ctx;
	drv_open(&d, &ctx);
	CHECK_EQ(fill(cuMemAlloc_v2, cuMemFree_v2), 4);
	size_t fr, tot;
	CHECK_EQ(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
	CHECK_EQ(tot, 1 * GiB);
	return 0;
}

int main(void)
{
	ht_setup();
	HT_RUN(direct_symbols, NULL);
	HT_RUN(via_dlsym, NULL);
	HT_RUN(via_procaddress, NULL);
	HT_RUN(launches, NULL);
	HT_RUN(legacy, NULL);
	HT_RUN(errno_kept, NULL);
	HT_RUN(no_limit, NULL);
	HT_RUN(private_group, NULL);
	ht_teardown();
	fprintf(stderr, "hooks_resolve_test: ok\n");
	return 0;
}
