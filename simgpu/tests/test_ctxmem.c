/* SPDX-License-Identifier: Apache-2.0
 * Memory no call names: each context takes GPUSLICE_SIM_CONTEXT_MEMORY of
 * device memory from its creation to its destruction, and a PTX module or
 * library its .global variables from load to unload, as a driver does. */
#include "config.h"
#include "testutil.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define CTX (300 * MiB)

static const char ptx[] = "//\n.version 8.0\n.target sm_90\n.address_size 64\n"
			  ".global .align 8 .b8 buf[67108864];\n"
			  "\t.global .f32 grid[64][64];\n"
			  ".global .u32 count;\n"
			  ".visible .global .align 4 .b8 shown[4096];\n"
			  ".extern .global .b8 elsewhere[1048576];\n"
			  "// .global .b8 commented[1048576]; is not at a line's start\n"
			  ".visible .entry k()\n{\n\tret;\n}\n";
#define GLOBALS (64 * MiB + 64 * 64 * 4 + 4 + 4096) /* .extern: declared, defined elsewhere */

static size_t used(void)
{
	size_t f = 0, t = 0;

	CU_OK(cuMemGetInfo_v2(&f, &t));
	return t - f;
}

/* Child: the variable unset, a context takes the default, an H100-like figure;
 * NVML's per-process figure includes it, as nvidia-smi's does. */
static int child_default(void)
{
	unsetenv("GPUSLICE_SIM_CONTEXT_MEMORY");
	t_primary(0);
	CHECK(SIM_DEFAULT_CONTEXT_MEMORY >= 256 * MiB);
	CHECK_EQ(used(), SIM_DEFAULT_CONTEXT_MEMORY);
	nvmlDevice_t h;
	nvmlProcessInfo_t v[4];
	unsigned n = 4;
	CHECK_EQ(nvmlInit_v2(), NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(0, &h), NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, v), NVML_SUCCESS);
	CHECK_EQ(n, 1);
	CHECK_EQ(v[0].pid, getpid());
	CHECK_EQ(v[0].usedGpuMemory, SIM_DEFAULT_CONTEXT_MEMORY);
	nvmlShutdown();
	return t_failures == 0 ? 0 : 1;
}

/* Child: a malformed figure fails cuInit as a bad configuration does. */
static int child_bad(void)
{
	setenv("GPUSLICE_SIM_CONTEXT_MEMORY", "300 apples", 1);
	return cuInit(0) == CUDA_ERROR_NO_DEVICE ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "child") == 0)
		return strcmp(argv[2], "default") == 0 ? child_default() : child_bad();
	t_private_state("ctxmem");
	setenv("GPUSLICE_SIM_MEMORY", "4GiB", 1);
	CHECK_EQ(t_run("default", "-"), 0); /* before this process holds anything */
	CHECK_EQ(t_run("bad", "-"), 0);
	setenv("GPUSLICE_SIM_CONTEXT_MEMORY", "300MiB", 1);
	CUcontext primary = t_primary(0);
	CHECK_EQ(used(), CTX);
	CUmodule m;
	CU_OK(cuModuleLoadData(&m, ptx));
	CHECK_EQ(used(), CTX + GLOBALS);
	CUlibrary l;
	CU_OK(cuLibraryLoadData(&l, ptx, NULL, NULL, 0, NULL, NULL, 0));
	CHECK_EQ(used(), CTX + 2 * GLOBALS);
	CU_OK(cuLibraryUnload(l));
	CU_OK(cuModuleUnload(m));
	CHECK_EQ(used(), CTX);
	static const char cubin[] = "\x7f"
				    "ELF .global .b8 x[1048576];";
	CU_OK(cuModuleLoadData(&m, cubin)); /* not PTX: nothing read */
	CHECK_EQ(used(), CTX);
	CU_OK(cuModuleUnload(m));
	CUcontext c;
	CU_OK(cuCtxCreate_v2(&c, 0, 0));
	CHECK_EQ(used(), 2 * CTX);
	CU_OK(cuModuleLoadData(&m, ptx)); /* in c: its globals go with c */
	CHECK_EQ(used(), 2 * CTX + GLOBALS);
	CU_OK(cuCtxDestroy_v2(c));
	CU_OK(cuCtxSetCurrent(primary));
	CHECK_EQ(used(), CTX);
	CU_OK(cuModuleUnload(m)); /* unloaded with its context: nothing more to give back */
	CHECK_EQ(used(), CTX);
	CU_OK(cuCtxCreate_v2(&c, 0, 0));
	CU_OK(cuCtxDestroy_v2(c));
	CU_OK(cuCtxSetCurrent(primary));
	CHECK_EQ(used(), CTX);
	static const char huge[] = ".version 8.0\n.global .b8 big[8589934592];\n";
	CHECK_EQ(cuModuleLoadData(&m, huge), CUDA_ERROR_OUT_OF_MEMORY); /* its globals do not fit */
	CHECK_EQ(used(), CTX);
	return t_done("context memory and PTX globals charged from creation or load to destruction or unload");
}
