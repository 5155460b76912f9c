/* SPDX-License-Identifier: Apache-2.0
 * The release build (bin/sim) as a CUDA program uses it: dlopen libcuda.so.1,
 * find the entry points through cuGetProcAddress_v2, fill the device; and its
 * export lists contain only the driver API. */
#include <dlfcn.h>

#include "config.h"
#include "testutil.h"

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void *sym(void *lib, gpa_fn gpa, const char *name)
{
	void *p = NULL;
	CUdriverProcAddressQueryResult st;

	CHECK_EQ(gpa(name, &p, 12040, 0, &st), CUDA_SUCCESS);
	CHECK_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
	(void)lib;
	MUST(p != NULL);
	return p;
}

static void test_release_library(const char *dir)
{
	char path[4096];
	void *lib;
	gpa_fn gpa;

	snprintf(path, sizeof(path), "%s/libcuda.so.1", dir);
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	MUST(lib != NULL);
	gpa = (gpa_fn)dlsym(lib, "cuGetProcAddress_v2");
	MUST(gpa != NULL);
	CHECK(dlsym(lib, "sim_check_init") == NULL && dlsym(lib, "sim_g") == NULL);

	CUresult (*init)(unsigned) = (CUresult(*)(unsigned))sym(lib, gpa, "cuInit");
	CUresult (*retain)(CUcontext *, CUdevice) =
		(CUresult(*)(CUcontext *, CUdevice))sym(lib, gpa, "cuDevicePrimaryCtxRetain");
	CUresult (*setcur)(CUcontext) = (CUresult(*)(CUcontext))sym(lib, gpa, "cuCtxSetCurrent");
	CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))sym(lib, gpa, "cuMemAlloc");
	CUresult (*info)(size_t *, size_t *) = (CUresult(*)(size_t *, size_t *))sym(lib, gpa, "cuMemGetInfo");
	/* A trampoline, not the export (as a driver may hand out): it still calls cuMemAlloc_v2 (below). */
	CHECK(alloc != NULL && (void *)alloc != dlsym(lib, "cuMemAlloc_v2"));

	CUcontext c;
	CUdeviceptr p;
	size_t f, t;
	int n = 0;
	CU_MUST(init(0));
	CU_MUST(retain(&c, 0));
	CU_MUST(setcur(c));
	/* The context takes the default (GPUSLICE_SIM_CONTEXT_MEMORY unset), like a real card's. */
	const unsigned long long piece = 256ull << 20, room = (23ull << 30) - SIM_DEFAULT_CONTEXT_MEMORY;
	CU_OK(info(&f, &t));
	CHECK_EQ(f, room);
	CHECK_EQ(t, 23ull << 30);
	while (alloc(&p, piece) == CUDA_SUCCESS)
		n++;
	CHECK_EQ(n, room / piece); /* what is left beside the context, in 256 MiB pieces */
	CHECK_EQ(alloc(&p, piece), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(info(&f, &t));
	CHECK_EQ(f, room % piece);
	CHECK_EQ(t, 23ull << 30);
	/* Not dlclose'd: like the real driver, the library is not meant to unload with live contexts. */
}

static void test_exports(const char *dir)
{
	char cmd[4200];

	snprintf(cmd, sizeof(cmd),
		 "nm -D --defined-only %s/libcuda.so.1 | awk '{print $3}' | grep -v '^cu' | grep -q . && exit 1;"
		 "nm -D --defined-only %s/libnvidia-ml.so.1 | awk '{print $3}' | grep -v '^nvml' | grep -q . && exit 1;"
		 "exit 0",
		 dir, dir);
	CHECK_EQ(system(cmd), 0);
}

int main(void)
{
	const char *dir = getenv("SIM_RELEASE_LIB_DIR");

	if (dir == NULL) {
		printf("skip test_dlopen: SIM_RELEASE_LIB_DIR not set (run through make test-sim)\n");
		return 0;
	}
	t_private_state("dlopen");
	setenv("GPUSLICE_SIM_MEMORY", "23GiB", 1);
	unsetenv("GPUSLICE_SIM_CONTEXT_MEMORY");
	test_release_library(dir);
	test_exports(dir);
	return t_done("release libcuda.so.1 through dlopen + cuGetProcAddress_v2, export lists");
}
