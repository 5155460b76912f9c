/* SPDX-License-Identifier: Apache-2.0 */
#include "cuapi.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The CUDA version the apps ask cuGetProcAddress for (12.4). */
#define CUAPI_CUDA_VERSION 12040

typedef CUresult (*procaddr_v1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*procaddr_v2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static const char busy_ptx[] = ".version 7.0\n"
			       ".target sm_70\n"
			       ".address_size 64\n"
			       ".visible .entry gpuslice_sim_busy(.param .u64 p_us)\n"
			       "{\n"
			       "  .reg .pred %p<2>;\n"
			       "  .reg .b64 %rd<6>;\n"
			       "  ld.param.u64 %rd1, [p_us];\n"
			       "  mul.lo.s64 %rd2, %rd1, 1000;\n"
			       "  mov.u64 %rd3, %globaltimer;\n"
			       "LOOP:\n"
			       "  mov.u64 %rd4, %globaltimer;\n"
			       "  sub.s64 %rd5, %rd4, %rd3;\n"
			       "  setp.lt.u64 %p1, %rd5, %rd2;\n"
			       "  @%p1 bra LOOP;\n"
			       "  ret;\n"
			       "}\n";

int cuapi_parse_via(const char *s)
{
	if (strcmp(s, "dlsym") == 0)
		return CUAPI_DLSYM;
	if (strcmp(s, "procaddr") == 0)
		return CUAPI_PROCADDR;
	if (strcmp(s, "procaddr_v2") == 0)
		return CUAPI_PROCADDR_V2;
	return -1;
}

const char *cuapi_via_name(enum cuapi_via via)
{
	static const char *const names[] = {"dlsym", "procaddr", "procaddr_v2"};
	return names[via];
}

static void *resolve(void *lib, enum cuapi_via via, void *getproc, const char *sym, const char *base)
{
	void *fn = NULL;
	CUdriverProcAddressQueryResult status;

	switch (via) {
	case CUAPI_DLSYM:
		return dlsym(lib, sym);
	case CUAPI_PROCADDR:
		if (((procaddr_v1_fn)getproc)(base, &fn, CUAPI_CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT) !=
		    CUDA_SUCCESS)
			return NULL;
		return fn;
	case CUAPI_PROCADDR_V2:
		if (((procaddr_v2_fn)getproc)(base, &fn, CUAPI_CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
			    CUDA_SUCCESS ||
		    status != CU_GET_PROC_ADDRESS_SUCCESS)
			return NULL;
		return fn;
	}
	return NULL;
}

int cuapi_load(struct cuapi *api, enum cuapi_via via, char *err, size_t errlen)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	void *getproc = NULL;

	if (!lib) {
		snprintf(err, errlen, "cannot load libcuda.so.1: %s", dlerror());
		return -1;
	}
	if (via != CUAPI_DLSYM) {
		getproc = dlsym(lib, via == CUAPI_PROCADDR ? "cuGetProcAddress" : "cuGetProcAddress_v2");
		if (!getproc) {
			snprintf(err, errlen, "libcuda.so.1 has no cuGetProcAddress%s",
				 via == CUAPI_PROCADDR ? "" : "_v2");
			return -1;
		}
	}
#define CUAPI_LOAD(field, sym, base, params)                                                  \
	api->field = (CUresult(*) params)resolve(lib, via, getproc, sym, base);               \
	if (!api->field) {                                                                    \
		snprintf(err, errlen, "cannot resolve %s via %s", base, cuapi_via_name(via)); \
		return -1;                                                                    \
	}
	CUAPI_FUNCS(CUAPI_LOAD)
#undef CUAPI_LOAD
	return 0;
}

CUresult cuapi_open_device0(const struct cuapi *api, CUdevice *dev)
{
	CUcontext ctx;
	CUresult r = api->Init(0);

	if (r == CUDA_SUCCESS)
		r = api->DeviceGet(dev, 0);
	if (r == CUDA_SUCCESS)
		r = api->PrimaryCtxRetain(&ctx, *dev);
	if (r == CUDA_SUCCESS)
		r = api->CtxSetCurrent(ctx);
	return r;
}

CUresult cuapi_busy_kernel(const struct cuapi *api, CUfunction *fn)
{
	CUmodule mod;
	CUresult r = api->ModuleLoadData(&mod, busy_ptx);

	if (r != CUDA_SUCCESS)
		return r;
	return api->ModuleGetFunction(fn, mod, "gpuslice_sim_busy");
}

CUresult cuapi_launch_busy(const struct cuapi *api, CUfunction fn, unsigned long long us)
{
	void *params[] = {&us};

	return api->LaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
}

const char *cuapi_err(const struct cuapi *api, CUresult r)
{
	const char *name = NULL;

	if (api->GetErrorName && api->GetErrorName(r, &name) == CUDA_SUCCESS && name)
		return name;
	return "CUDA_ERROR_UNKNOWN";
}

size_t cuapi_parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	double mult = 1;

	if (end == s || v < 0)
		return 0;
	switch (*end) {
	case 'k':
	case 'K':
		mult = 1024.0;
		end++;
		break;
	case 'm':
	case 'M':
		mult = 1024.0 * 1024;
		end++;
		break;
	case 'g':
	case 'G':
		mult = 1024.0 * 1024 * 1024;
		end++;
		break;
	case '\0':
		break;
	default:
		return 0;
	}
	if (*end == 'i')
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end != '\0')
		return 0;
	return (size_t)(v * mult);
}
