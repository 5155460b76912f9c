/* SPDX-License-Identifier: Apache-2.0
 *
 * Symbol lookup hooks. dlsym/dlvsym: a hooked name whose real lookup yields
 * the driver's function gets our hook instead; every other lookup is a tail
 * call into libc's dlsym, so libc still sees the original caller (RTLD_NEXT
 * and RTLD_DEFAULT keep their meaning). cuGetProcAddress(_v2): the driver
 * answers, then its pointer is swapped for the hook that the name, version and
 * flags select (procaddr.c).
 */
#include <dlfcn.h>
#include <string.h>

#include "internal.h"

/* cu[A-Z]* or nvml[A-Z]*: the only names we may hook (no lookup otherwise). */
GS_NOSAN static int maybe_hooked(const char *n)
{
	if (n == NULL)
		return 0;
	if (n[0] == 'c' && n[1] == 'u')
		return n[2] >= 'A' && n[2] <= 'Z';
	return n[0] == 'n' && n[1] == 'v' && n[2] == 'm' && n[3] == 'l' && n[4] >= 'A' && n[4] <= 'Z';
}

static void *hooked_lookup(int id, void *handle, const char *name, const char *version)
{
	void *hook = gs_hook_addr((enum gs_id)id);
	if (handle == RTLD_NEXT) {
		/* Asking libc from here would search after us, not after the
		 * caller. The next definition of a driver symbol is the driver's,
		 * which callers reach through our hook. */
		return gs_real_peek((enum gs_id)id) != NULL ? hook : NULL;
	}
	void *p = version != NULL ? gs_libc_dlvsym()(handle, name, version) : gs_libc_dlsym()(handle, name);
	if (p == NULL || p == hook)
		return p;
	return p == gs_real_peek((enum gs_id)id) ? hook : p;
}

GS_NOSAN __attribute__((optimize("optimize-sibling-calls"))) GS_EXPORT void *dlsym(void *handle, const char *name)
{
	gs_dlsym_fn real = gs_libc_dlsym();
	int id;
	if (!maybe_hooked(name) || (id = gs_hook_id_by_name(name)) < 0)
		return real(handle, name);
	return hooked_lookup(id, handle, name, NULL);
}

GS_NOSAN __attribute__((optimize("optimize-sibling-calls"))) GS_EXPORT void *dlvsym(void *handle, const char *name,
										    const char *version)
{
	gs_dlvsym_fn real = gs_libc_dlvsym();
	int id;
	if (!maybe_hooked(name) || (id = gs_hook_id_by_name(name)) < 0)
		return real(handle, name, version);
	return hooked_lookup(id, handle, name, version);
}

/* The driver's pointer for symbol at another version (procaddr.c's cross-check). */
static void *ask_again(const char *symbol, int ver, cuuint64_t flags)
{
	void *p = NULL;
	gs_fn_cuGetProcAddress_v2 v2 = GS_REAL(cuGetProcAddress_v2);
	gs_fn_cuGetProcAddress v1 = GS_REAL(cuGetProcAddress);
	CUdriverProcAddressQueryResult st;
	if (v2 != NULL ? v2(symbol, &p, ver, flags, &st) != CUDA_SUCCESS
		       : v1 == NULL || v1(symbol, &p, ver, flags) != CUDA_SUCCESS)
		return NULL;
	return p;
}

static void map_result(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	*pfn = gs_procaddr_map(symbol, *pfn, cudaVersion, flags, ask_again);
	if (*pfn != NULL && symbol != NULL && strcmp(symbol, "cuGetProcAddress") == 0 &&
	    *pfn != (void *)cuGetProcAddress_v2 && *pfn != (void *)cuGetProcAddress) {
		/* Never hand out a lookup function that bypasses us. */
		*pfn = cudaVersion >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
	}
}

GS_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	gs_fn_cuGetProcAddress fn = GS_REAL(cuGetProcAddress);
	if (fn == NULL)
		return CUDA_ERROR_NOT_FOUND;
	CUresult rc = fn(symbol, pfn, cudaVersion, flags);
	if (rc == CUDA_SUCCESS && pfn != NULL)
		map_result(symbol, pfn, cudaVersion, flags);
	return rc;
}

GS_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
				       CUdriverProcAddressQueryResult *symbolStatus)
{
	gs_fn_cuGetProcAddress_v2 fn = GS_REAL(cuGetProcAddress_v2);
	if (fn == NULL)
		return CUDA_ERROR_NOT_FOUND;
	CUresult rc = fn(symbol, pfn, cudaVersion, flags, symbolStatus);
	if (rc == CUDA_SUCCESS && pfn != NULL)
		map_result(symbol, pfn, cudaVersion, flags);
	return rc;
}
