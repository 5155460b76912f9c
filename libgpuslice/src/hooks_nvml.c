/* SPDX-License-Identifier: Apache-2.0
 *
 * nvmlDeviceGet{,MPS}ComputeRunningProcesses{,_v2,_v3}: only the group's
 * processes, pids translated to the caller's pid namespace, with NVML's size
 * protocol (a short buffer gets NVML_ERROR_INSUFFICIENT_SIZE and the needed
 * count). On a real driver MPS clients are not in the compute list (their
 * server is): the compute list also takes the MPS list's entries (once per
 * pid), so a group of MPS clients sees its own processes there too, and the
 * server, in no group, is not shown.
 *
 * The same filter wherever NVML lists processes or per-process figures: the
 * graphics list, nvmlDeviceGetRunningProcessDetailList, the utilization
 * samples (nvmlDeviceGetProcessUtilization, ...ProcessesUtilizationInfo) and
 * accounting (nvmlDeviceGetAccountingPids; ...AccountingStats answers only
 * for a member, named by the caller's pid). With no group file nothing is
 * filtered.
 */
#include <stddef.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "group.h"
#include "view.h"

typedef nvmlReturn_t (*procs_fn)(nvmlDevice_t, unsigned int *, void *);

/* One call of a driver list with a buffer of *count entries (the size
 * protocol of the compute list); arg: the call's own arguments. */
typedef nvmlReturn_t (*list_call)(void *fn, nvmlDevice_t dev, const void *arg, unsigned int *count, void *buf);

static nvmlReturn_t call_procs(void *fn, nvmlDevice_t dev, const void *arg, unsigned int *count, void *buf)
{
	(void)arg;
	return ((procs_fn)fn)(dev, count, buf);
}

/* All of a driver list's entries, in a malloc'd buffer. */
static nvmlReturn_t fetch_list(list_call call, void *fn, const void *arg, nvmlDevice_t dev, size_t elem, void **out,
			       unsigned int *n)
{
	unsigned int cap = 32;
	for (int attempt = 0; attempt < 8; attempt++) {
		void *buf = calloc(cap, elem);
		if (buf == NULL)
			return NVML_ERROR_MEMORY;
		unsigned int count = cap;
		nvmlReturn_t rc = call(fn, dev, arg, &count, buf);
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

static nvmlReturn_t fetch_all(procs_fn fn, nvmlDevice_t dev, size_t elem, void **out, unsigned int *n)
{
	return fetch_list(call_procs, (void *)fn, NULL, dev, elem, out, n);
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
	g = gs_group_nvml(g, dev);
	if (gs_group_broken(g))
		return NVML_ERROR_UNKNOWN;
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

GS_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
							     nvmlProcessInfo_v1_t *infos)
{
	return group_procs(GS_ID_nvmlDeviceGetGraphicsRunningProcesses, GS_ID_nvmlDeviceGetGraphicsRunningProcesses,
			   device, infoCount, infos, sizeof(*infos));
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
								nvmlProcessInfo_v2_t *infos)
{
	return group_procs(GS_ID_nvmlDeviceGetGraphicsRunningProcesses_v2,
			   GS_ID_nvmlDeviceGetGraphicsRunningProcesses_v2, device, infoCount, infos, sizeof(*infos));
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
								nvmlProcessInfo_t *infos)
{
	return group_procs(GS_ID_nvmlDeviceGetGraphicsRunningProcesses_v3,
			   GS_ID_nvmlDeviceGetGraphicsRunningProcesses_v3, device, infoCount, infos, sizeof(*infos));
}

/* The group whose members a list is filtered to, or NULL: no group file
 * (the driver answers); *rc set when the group cannot be read. */
static struct gs_group *filtering(nvmlDevice_t dev, nvmlReturn_t *rc)
{
	struct gs_group *g = gs_group_get();
	if (g != NULL && gs_group_shared(g))
		g = gs_group_nvml(g, dev);
	*rc = g == NULL || gs_group_broken(g) ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
	return *rc == NVML_SUCCESS && gs_group_shared(g) ? g : NULL;
}

/* Fetches a driver list (call), keeps the members' entries (pid at off) and
 * hands them out with the size protocol: *count in = out's size, out = kept.
 * empty: what to return for no entry left (NOT_FOUND for samples). */
static nvmlReturn_t filtered(struct gs_group *g, list_call call, void *fn, const void *arg, nvmlDevice_t dev,
			     size_t elem, size_t off, unsigned int *count, void *out, nvmlReturn_t empty)
{
	void *all = NULL;
	unsigned int n = 0;
	int e = errno;
	nvmlReturn_t rc = fetch_list(call, fn, arg, dev, elem, &all, &n);
	if (rc == NVML_SUCCESS) {
		gs_group_reap(g, 0);
		unsigned int kept = gs_filter_procs_at(gs_group_file(g), gs_group_pidns(g), all, n, elem, off);
		if (kept == 0 && empty != NVML_SUCCESS)
			rc = empty;
		else if (*count < kept || (kept > 0 && out == NULL))
			rc = NVML_ERROR_INSUFFICIENT_SIZE;
		else if (kept > 0)
			memcpy(out, all, (size_t)kept * elem);
		*count = kept;
	}
	free(all);
	errno = e;
	return rc;
}

static nvmlReturn_t call_detail(void *fn, nvmlDevice_t dev, const void *arg, unsigned int *count, void *buf)
{
	nvmlProcessDetailList_t q = *(const nvmlProcessDetailList_t *)arg;
	q.numProcArrayEntries = *count;
	q.procArray = buf;
	nvmlReturn_t rc = ((gs_fn_nvmlDeviceGetRunningProcessDetailList)fn)(dev, &q);
	*count = q.numProcArrayEntries;
	return rc;
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device, nvmlProcessDetailList_t *plist)
{
	gs_fn_nvmlDeviceGetRunningProcessDetailList fn = GS_REAL(nvmlDeviceGetRunningProcessDetailList);
	if (fn == NULL)
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	nvmlReturn_t rc;
	struct gs_group *g = filtering(device, &rc);
	if (rc != NVML_SUCCESS || g == NULL || plist == NULL || plist->version != nvmlProcessDetailList_v1)
		return rc != NVML_SUCCESS ? rc : fn(device, plist); /* the driver judges other versions */
	return filtered(g, call_detail, (void *)fn, plist, device, sizeof(nvmlProcessDetail_v1_t), 0,
			&plist->numProcArrayEntries, plist->procArray, NVML_SUCCESS);
}

static nvmlReturn_t call_util(void *fn, nvmlDevice_t dev, const void *arg, unsigned int *count, void *buf)
{
	return ((gs_fn_nvmlDeviceGetProcessUtilization)fn)(dev, buf, count, *(const unsigned long long *)arg);
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
						       unsigned int *processSamplesCount,
						       unsigned long long lastSeenTimeStamp)
{
	gs_fn_nvmlDeviceGetProcessUtilization fn = GS_REAL(nvmlDeviceGetProcessUtilization);
	if (fn == NULL)
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	nvmlReturn_t rc;
	struct gs_group *g = filtering(device, &rc);
	if (rc != NVML_SUCCESS || g == NULL)
		return rc != NVML_SUCCESS ? rc : fn(device, utilization, processSamplesCount, lastSeenTimeStamp);
	if (processSamplesCount == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	return filtered(g, call_util, (void *)fn, &lastSeenTimeStamp, device, sizeof(*utilization), 0,
			processSamplesCount, utilization, NVML_ERROR_NOT_FOUND);
}

static nvmlReturn_t call_utilinfo(void *fn, nvmlDevice_t dev, const void *arg, unsigned int *count, void *buf)
{
	nvmlProcessesUtilizationInfo_t q = *(const nvmlProcessesUtilizationInfo_t *)arg;
	q.processSamplesCount = *count;
	q.procUtilArray = buf;
	nvmlReturn_t rc = ((gs_fn_nvmlDeviceGetProcessesUtilizationInfo)fn)(dev, &q);
	*count = q.processSamplesCount;
	return rc;
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device,
							     nvmlProcessesUtilizationInfo_t *procesesUtilInfo)
{
	gs_fn_nvmlDeviceGetProcessesUtilizationInfo fn = GS_REAL(nvmlDeviceGetProcessesUtilizationInfo);
	if (fn == NULL)
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	nvmlReturn_t rc;
	struct gs_group *g = filtering(device, &rc);
	nvmlProcessesUtilizationInfo_t *info = procesesUtilInfo;
	if (rc != NVML_SUCCESS || g == NULL || info == NULL || info->version != nvmlProcessesUtilizationInfo_v1)
		return rc != NVML_SUCCESS ? rc : fn(device, info);
	return filtered(g, call_utilinfo, (void *)fn, info, device, sizeof(nvmlProcessUtilizationInfo_v1_t),
			offsetof(nvmlProcessUtilizationInfo_v1_t, pid), &info->processSamplesCount, info->procUtilArray,
			NVML_ERROR_NOT_FOUND);
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t device, unsigned int *count, unsigned int *pids)
{
	gs_fn_nvmlDeviceGetAccountingPids fn = GS_REAL(nvmlDeviceGetAccountingPids);
	if (fn == NULL)
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	nvmlReturn_t rc;
	struct gs_group *g = filtering(device, &rc);
	if (rc != NVML_SUCCESS || g == NULL)
		return rc != NVML_SUCCESS ? rc : fn(device, count, pids);
	if (count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	return filtered(g, call_procs, (void *)fn, NULL, device, sizeof(*pids), 0, count, pids, NVML_SUCCESS);
}

/* Stats only for a live member, named by the pid the caller knows it by. */
GS_EXPORT nvmlReturn_t nvmlDeviceGetAccountingStats(nvmlDevice_t device, unsigned int pid, nvmlAccountingStats_t *stats)
{
	gs_fn_nvmlDeviceGetAccountingStats fn = GS_REAL(nvmlDeviceGetAccountingStats);
	if (fn == NULL)
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	nvmlReturn_t rc;
	struct gs_group *g = filtering(device, &rc);
	if (rc != NVML_SUCCESS || g == NULL)
		return rc != NVML_SUCCESS ? rc : fn(device, pid, stats);
	int e = errno;
	gs_group_reap(g, 0);
	uint32_t host = gs_host_pid(gs_group_file(g), pid, gs_group_pidns(g));
	errno = e;
	return host == 0 ? NVML_ERROR_NOT_FOUND : fn(device, host, stats);
}
