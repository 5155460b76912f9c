/* SPDX-License-Identifier: Apache-2.0
 * Device queries, CUDA/NVML agreement, CUDA_VISIBLE_DEVICES, cuGetProcAddress. */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "testutil.h"

static const char *uuid0 = "GPU-11111111-2222-3333-4444-555555555555";
static const char *uuid1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

static void write_config(void)
{
	static char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "/tmp/gpuslice-simtest-dev-%d.conf", (int)getpid());
	f = fopen(path, "w");
	MUST(f != NULL);
	fprintf(f, "# two devices\nname=\"Sim H100 A\" uuid=%s memory=80GiB sms=132\n\n", uuid0);
	fprintf(f, "name=SimB uuid=%s memory=23GiB sms=66\n", uuid1);
	fclose(f);
	setenv("GPUSLICE_SIM_CONFIG", path, 1);
}

static void test_queries(void)
{
	char name[128], ustr[64];
	CUuuid u;
	size_t total;
	int n, v, major, minor;
	const char *s;

	CHECK_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_EQ(cuInit(1), CUDA_ERROR_INVALID_VALUE);
	CU_MUST(cuInit(0));
	CU_OK(cuDriverGetVersion(&v));
	CHECK_EQ(v, 12060);
	CU_OK(cuDeviceGetCount(&n));
	CHECK_EQ(n, 2);
	CU_OK(cuDeviceGetName(name, sizeof(name), 0));
	CHECK(strcmp(name, "Sim H100 A") == 0);
	CU_OK(cuDeviceGetUuid_v2(&u, 1));
	sim_format_uuid((unsigned char *)u.bytes, ustr, sizeof(ustr));
	CHECK(strcmp(ustr, uuid1) == 0);
	CU_OK(cuDeviceTotalMem_v2(&total, 0));
	CHECK_EQ(total, 80ull << 30);
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 1));
	CHECK_EQ(v, 66);
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
	CHECK_EQ(v, 9);
	CU_OK(cuDeviceComputeCapability(&major, &minor, 0));
	CHECK(major == 9 && minor == 0);
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0));
	CHECK_EQ(v, 32);
	v = 7;
	CU_OK(cuDeviceGetAttribute(&v, (CUdevice_attribute)9999, 0)); /* unknown: 0, success */
	CHECK_EQ(v, 0);
	CHECK_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 2), CUDA_ERROR_INVALID_DEVICE);
	CHECK_EQ(cuDeviceGetName(name, sizeof(name), -1), CUDA_ERROR_INVALID_DEVICE);
	CU_OK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
	CHECK(strcmp(s, "CUDA_ERROR_OUT_OF_MEMORY") == 0);
	CU_OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
	CHECK(strcmp(s, "out of memory") == 0);
	CHECK_EQ(cuGetErrorString((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
	const void *tab = &v;
	CHECK_EQ(cuGetExportTable(&tab, &u), CUDA_ERROR_NOT_SUPPORTED);
}

static void test_nvml_agrees(void)
{
	unsigned n, idx;
	nvmlDevice_t h;
	char name[96], ustr[96];
	CUuuid u;
	CUdevice d;

	CHECK_EQ(nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
	MUST(nvmlInit_v2() == NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetCount_v2(&n), NVML_SUCCESS);
	CHECK_EQ(n, 2);
	for (unsigned i = 0; i < n; i++) {
		char want[64];
		CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(i, &h), NVML_SUCCESS);
		CHECK_EQ(nvmlDeviceGetUUID(h, ustr, sizeof(ustr)), NVML_SUCCESS);
		CU_OK(cuDeviceGet(&d, (int)i));
		CU_OK(cuDeviceGetUuid(&u, d));
		sim_format_uuid((unsigned char *)u.bytes, want, sizeof(want));
		CHECK(strcmp(ustr, want) == 0); /* same bytes, same order */
		CHECK_EQ(nvmlDeviceGetName(h, name, sizeof(name)), NVML_SUCCESS);
		CU_OK(cuDeviceGetName(ustr, sizeof(ustr), d));
		CHECK(strcmp(name, ustr) == 0);
		CHECK_EQ(nvmlDeviceGetIndex(h, &idx), NVML_SUCCESS);
		CHECK_EQ(idx, i);
	}
	CHECK_EQ(nvmlDeviceGetUUID(h, ustr, 10), NVML_ERROR_INSUFFICIENT_SIZE);
	CHECK_EQ(nvmlDeviceGetHandleByUUID(uuid1, &h), NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetIndex(h, &idx), NVML_SUCCESS);
	CHECK_EQ(idx, 1);
	CHECK_EQ(nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &h), NVML_ERROR_NOT_FOUND);
	CHECK_EQ(nvmlSystemGetDriverVersion(name, sizeof(name)), NVML_SUCCESS);
	CHECK(strncmp(name, "550.", 4) == 0);
	CHECK_EQ(nvmlShutdown(), NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
}

/* Child: CUDA_VISIBLE_DEVICES is set; arg = "<count> <uuid of ordinal 0 or ->". */
static int child_cvd(const char *arg)
{
	int want = atoi(arg), n = -1;
	const char *want_uuid = strchr(arg, ' ') + 1;
	unsigned nn = 0;
	CUresult rc = cuInit(0);

	if (want == 0)
		return rc == CUDA_ERROR_NO_DEVICE ? 0 : 10;
	if (rc != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS || n != want)
		return 11;
	CUuuid u;
	char s[64];
	cuDeviceGetUuid(&u, 0);
	sim_format_uuid((unsigned char *)u.bytes, s, sizeof(s));
	if (strcmp(s, want_uuid) != 0)
		return 12;
	/* NVML ignores CUDA_VISIBLE_DEVICES. */
	if (nvmlInit_v2() != NVML_SUCCESS || nvmlDeviceGetCount_v2(&nn) != NVML_SUCCESS || nn != 2)
		return 13;
	return 0;
}

static void cvd_case(const char *cvd, const char *expect)
{
	setenv("CUDA_VISIBLE_DEVICES", cvd, 1);
	int rc = t_run("cvd", expect);
	if (rc != 0)
		fprintf(stderr, "CUDA_VISIBLE_DEVICES=\"%s\": child exit %d\n", cvd, rc);
	CHECK_EQ(rc, 0);
	unsetenv("CUDA_VISIBLE_DEVICES");
}

static void test_visible_devices(void)
{
	char buf[128];

	snprintf(buf, sizeof(buf), "1 %s", uuid1);
	cvd_case("1", buf);
	cvd_case("GPU-aaaa", buf); /* UUID prefix */
	cvd_case(uuid1, buf);
	cvd_case("1,7,0", buf); /* stops at the first invalid entry */
	cvd_case("1,1", buf);   /* and at a repeated one */
	snprintf(buf, sizeof(buf), "2 %s", uuid1);
	cvd_case("1,0", buf);
	cvd_case("", "0 -");
	cvd_case("5", "0 -");
	cvd_case("GPU-", "0 -");
}

struct gpa_case {
	const char *sym;
	int ver;
	cuuint64_t flags;
	const char *want; /* exported name, or NULL for not found */
	CUresult rc;
	CUdriverProcAddressQueryResult st;
};

static const struct gpa_case gpa_cases[] = {
	{"cuMemAlloc", 12040, 0, "cuMemAlloc_v2", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuMemAlloc", 3020, 0, "cuMemAlloc_v2", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuMemAlloc", 3010, 0, "cuMemAlloc", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuGetProcAddress", 11080, 0, "cuGetProcAddress", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuCtxCreate", 12000, 0, "cuCtxCreate_v3", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuCtxCreate", 11000, 0, "cuCtxCreate_v2", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuLaunchKernel", 12000, 0, "cuLaunchKernel", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernel_ptsz", CUDA_SUCCESS,
	 CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuLaunchKernel", CUDA_SUCCESS,
	 CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyHtoD_v2_ptds", CUDA_SUCCESS,
	 CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuStreamBeginCapture", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuStreamBeginCapture_v2_ptsz",
	 CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuStreamBeginCapture", 10000, 0, "cuStreamBeginCapture", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuMemAlloc", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemAlloc_v2", CUDA_SUCCESS,
	 CU_GET_PROC_ADDRESS_SUCCESS}, /* no per-thread variant: the default one */
	{"cuGraphInstantiate", 12000, 0, "cuGraphInstantiateWithFlags", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuGraphInstantiate", 11000, 0, "cuGraphInstantiate_v2", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuStreamGetCaptureInfo", 12030, 0, "cuStreamGetCaptureInfo_v3", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuMemAllocAsync", 11010, 0, NULL, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
	{"cuNoSuchFunction", 12000, 0, NULL, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND},
	{"cuMemAlloc_v2", 12000, 0, NULL, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND},
	{"cuMemAlloc", 12070, 0, NULL, CUDA_ERROR_INVALID_VALUE, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND},
	/* CUDA 12.6 */
	{"cuMemAdvise", 12020, 0, "cuMemAdvise_v2", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuMemAdvise", 12010, 0, "cuMemAdvise", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuMemPrefetchAsync", 12060, 0, "cuMemPrefetchAsync_v2", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuMemPrefetchAsync", 12060, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemPrefetchAsync_v2_ptsz",
	 CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuMemPrefetchAsync", 12010, 0, "cuMemPrefetchAsync", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuCtxCreate", 12060, 0, "cuCtxCreate_v4", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuStreamGetCtx", 12050, 0, "cuStreamGetCtx_v2", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
	{"cuStreamGetCtx", 12040, 0, "cuStreamGetCtx", CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
};

/* The export a handed-out pointer leads to: the simulator hands out
 * trampolines (x86-64: jmp *disp32(%rip)), never its exports. */
static void *landing(void *p)
{
#if defined(__x86_64__)
	const unsigned char *b = p;
	int32_t disp;

	if (b != NULL && b[0] == 0xff && b[1] == 0x25) {
		memcpy(&disp, b + 2, sizeof(disp));
		return *(void *const *)(b + 6 + disp);
	}
#endif
	return p;
}

static void test_get_proc_address(void)
{
	for (size_t i = 0; i < sizeof(gpa_cases) / sizeof(gpa_cases[0]); i++) {
		const struct gpa_case *c = &gpa_cases[i];
		void *pfn = &pfn, *want = c->want ? dlsym(RTLD_DEFAULT, c->want) : NULL;
		CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
		CUresult rc = cuGetProcAddress_v2(c->sym, &pfn, c->ver, c->flags, &st);

#if defined(__x86_64__)
		if (pfn != NULL && pfn != &pfn && want != NULL)
			CHECK(pfn != want); /* a trampoline */
#endif
		if (rc != c->rc || st != c->st || (c->rc != CUDA_ERROR_INVALID_VALUE && landing(pfn) != want) ||
		    (c->want != NULL && want == NULL)) {
			fprintf(stderr, "cuGetProcAddress_v2(%s, %d, %llu): rc %d status %d, want %s\n", c->sym, c->ver,
				(unsigned long long)c->flags, rc, st, c->want ? c->want : "not found");
			t_failures++;
		}
		/* v1 (4 arguments) resolves the same way. */
		void *pfn1 = NULL;
		CHECK_EQ(cuGetProcAddress(c->sym, &pfn1, c->ver, c->flags), c->rc);
		if (c->rc == CUDA_SUCCESS)
			CHECK(landing(pfn1) == want);
	}
	CHECK_EQ(cuGetProcAddress_v2(NULL, NULL, 12000, 0, NULL), CUDA_ERROR_INVALID_VALUE);
	/* Internal symbols are hidden: only the driver API is exported. */
	CHECK(dlsym(RTLD_DEFAULT, "sim_check_init") == NULL);
	CHECK(dlsym(RTLD_DEFAULT, "sim_g") == NULL);
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "child") == 0)
		return child_cvd(argv[3]);
	t_private_state("device");
	write_config();
	test_queries();
	test_nvml_agrees();
	test_visible_devices();
	test_get_proc_address();
	unlink(getenv("GPUSLICE_SIM_CONFIG"));
	return t_done("device queries, NVML agreement, CUDA_VISIBLE_DEVICES, cuGetProcAddress");
}
