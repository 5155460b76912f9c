/* SPDX-License-Identifier: Apache-2.0
 *
 * nvmlDeviceGet{,MPS}ComputeRunningProcesses{,_v2,_v3}: only the group's
 * processes, pids translated to the caller's pid namespace, with NVML's size
 * protocol (a short buffer gets NVML_ERROR_INSUFFICIENT_SIZE and the needed
 * count). On a real driver MPS clients are not in the compute list (their
 * server is): the compute list also takes the MPS list's entries (once per
 * pid), so a group of MPS clients sees its own processes there too, and the
 * server, in no group, is not shown.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "group.h"
#include "view.h"

typedef nvmlReturn_t (*procs_fn)(nvmlDevice_t, unsigned int *, void *);

/* All of the driver's entries, in a malloc'd buffer. */
static nvmlReturn_t fetch_all(procs_fn fn, nvmlDevice_t dev, size_t elem, void **out, unsigned int *n)
{
	unsigned int cap = 32;
	for (int attempt = 0; attempt < 8; attempt++) {
		void *buf = calloc(cap, elem);
		if (buf == NULL)
			return NVML_ERROR_MEMORY;
		unsigned int count = cap;
		nvmlReturn_t rc = fn(dev, &count, buf);
		if (rc == NVML_SUCCESS) {
			*out = buf;
			*n = count < cap ? count : cap;
			return rc;
		}
		free(buf);
		if (rc != NVML_ERROR_INSUFFICIENT_SIZE)
			return rc;
		cap = count > cap ? count + 16 : cap * 2; /* processes may start meanwhile */
	}
	return NVML_ERROR_INSUFFICIENT_SIZE;
}

static int has_pid(const unsigned char *base, unsigned int n, size_t elem, const unsigned char *e)
{
	for (unsigned int i = 0; i < n; i++)
		if (memcmp(base + (size_t)i * elem, e, sizeof(unsigned int)) == 0)
			return 1;
	return 0;
}

/* The compute list and, when mps is a driver function that answers, the MPS
 * list's entries not already in it (by pid), in one malloc'd buffer. */
static nvmlReturn_t fetch_merged(procs_fn fn, procs_fn mps, nvmlDevice_t dev, size_t elem, void **out, unsigned int *n)
{
	nvmlReturn_t rc = fetch_all(fn, dev, elem, out, n);
	void *more = NULL;
	unsigned int m = 0;
	if (rc != NVML_SUCCESS || mps == NULL || fetch_all(mps, dev, elem, &more, &m) != NVML_SUCCESS || m == 0) {
		free(more);
		return rc; /* no MPS list (older driver, MPS off): the compute list alone */
	}
	unsigned char *both = realloc(*out, ((size_t)*n + m) * elem);
	if (both == NULL) {
		free(more);
		return NVML_ERROR_MEMORY;
	}
	unsigned int k = *n;
	for (unsigned int i = 0; i < m; i++) {
		const unsigned char *e = (const unsigned char *)more + (size_t)i * elem;
		if (!has_pid(both, k, elem, e))
			memcpy(both + (size_t)k++ * elem, e, elem);
	}
	free(more);
	*out = both;
	*n = k;
	return NVML_SUCCESS;
}

/* mps_id: the MPS list merged into this one, or id itself for none. */
static nvmlReturn_t group_procs(enum gs_id id, enum gs_id mps_id, nvmlDevice_t dev, unsigned int *count, void *infos,
				size_t elem)
{
	procs_fn fn = (procs_fn)gs_real_ptr(id);
	if (fn == NULL)
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	struct gs_group *g = gs_group_get();
	if (g == NULL)
		return NVML_ERROR_UNKNOWN;
	if (!gs_group_shared(g))
		return fn(dev, count, infos); /* no group file: nothing to filter by */
	if (count == NULL || (*count != 0 && infos == NULL))
		return NVML_ERROR_INVALID_ARGUMENT;
	procs_fn mps = mps_id == id ? NULL : (procs_fn)gs_real_ptr(mps_id);
	void *all = NULL;
	unsigned int n = 0;
	int e = errno;
	nvmlReturn_t rc = fetch_merged(fn, mps, dev, elem, &all, &n);
	if (rc == NVML_SUCCESS) {
		gs_group_reap(g, 0);
		unsigned int kept = gs_filter_procs(gs_group_file(g), gs_group_pidns(g), all, n, elem);
		if (*count < kept) {
			rc = NVML_ERROR_INSUFFICIENT_SIZE;
		} else if (kept > 0) {
			memcpy(infos, all, (size_t)kept * elem);
		}
		*count = kept;
	}
	free(all);
	errno = e;
	return rc;
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
							    nvmlProcessInfo_v1_t *infos)
{
	return group_procs(GS_ID_nvmlDeviceGetComputeRunningProcesses, GS_ID_nvmlDeviceGetMPSComputeRunningProcesses,
			   device, infoCount, infos, sizeof(*infos));
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
							       nvmlProcessInfo_v2_t *infos)
{
	return group_procs(GS_ID_nvmlDeviceGetComputeRunningProcesses_v2,
			   GS_ID_nvmlDeviceGetMPSComputeRunningProcesses_v2, device, infoCount, infos, sizeof(*infos));
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
							       nvmlProcessInfo_t *infos)
{
	return group_procs(GS_ID_nvmlDeviceGetComputeRunningProcesses_v3,
			   GS_ID_nvmlDeviceGetMPSComputeRunningProcesses_v3, device, infoCount, infos, sizeof(*infos));
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
							       nvmlProcessInfo_v1_t *infos)
{
	return group_procs(GS_ID_nvmlDeviceGetMPSComputeRunningProcesses, GS_ID_nvmlDeviceGetMPSComputeRunningProcesses,
			   device, infoCount, infos, sizeof(*infos));
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
								  nvmlProcessInfo_v2_t *infos)
{
	return group_procs(GS_ID_nvmlDeviceGetMPSComputeRunningProcesses_v2,
			   GS_ID_nvmlDeviceGetMPSComputeRunningProcesses_v2, device, infoCount, infos, sizeof(*infos));
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
								  nvmlProcessInfo_t *infos)
{
	return group_procs(GS_ID_nvmlDeviceGetMPSComputeRunningProcesses_v3,
			   GS_ID_nvmlDeviceGetMPSComputeRunningProcesses_v3, device, infoCount, infos, sizeof(*infos));
}
