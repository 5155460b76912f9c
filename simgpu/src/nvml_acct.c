/* SPDX-License-Identifier: Apache-2.0
 * The newer process queries as a driver answers them:
 * nvmlDeviceGetRunningProcessDetailList (the compute, graphics or MPS list in
 * nvmlProcessDetail_v1_t), nvmlDeviceGetProcessesUtilizationInfo (the samples
 * of nvmlDeviceGetProcessUtilization in the v1 layout), and accounting as on
 * a driver with accounting mode on: nvmlDeviceGetAccountingPids lists the
 * live processes with a context on the device, nvmlDeviceGetAccountingStats
 * one of them (the simulator keeps no record of ended processes). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvml.h"

NVML_API nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t h, nvmlProcessDetailList_t *pl)
{
	static const enum sim_list by_mode[] = {LIST_COMPUTE, LIST_GRAPHICS, LIST_MPS};
	struct sim_proc_row rows[SIM_MAX_PROCS];
	int idx;
	nvmlReturn_t rc = sim_nvml_live(h, &idx);

	if (rc != NVML_SUCCESS)
		return rc;
	if (pl == NULL || pl->mode > GS_NVML_PROC_MPS)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (pl->version != nvmlProcessDetailList_v1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	unsigned n = sim_nvml_collect(idx, by_mode[pl->mode], rows, SIM_MAX_PROCS);
	if (n > pl->numProcArrayEntries || (n > 0 && pl->procArray == NULL)) {
		pl->numProcArrayEntries = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	pl->numProcArrayEntries = n;
	for (unsigned i = 0; i < n; i++)
		pl->procArray[i] = (nvmlProcessDetail_v1_t){.pid = rows[i].pid,
							    .usedGpuMemory = rows[i].mem,
							    .gpuInstanceId = 0xffffffffu,
							    .computeInstanceId = 0xffffffffu};
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t h, nvmlProcessesUtilizationInfo_t *info)
{
	int idx;
	nvmlReturn_t rc = sim_nvml_live(h, &idx);

	if (rc != NVML_SUCCESS)
		return rc;
	if (info == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (info->version != nvmlProcessesUtilizationInfo_v1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	unsigned n = info->processSamplesCount;
	nvmlProcessUtilizationSample_t *s =
		info->procUtilArray == NULL || n == 0 ? NULL : calloc(n, sizeof(nvmlProcessUtilizationSample_t));
	if (s == NULL && info->procUtilArray != NULL && n != 0)
		return NVML_ERROR_MEMORY;
	rc = nvmlDeviceGetProcessUtilization(h, s, &n, info->lastSeenTimeStamp);
	if (rc == NVML_SUCCESS)
		for (unsigned i = 0; i < n; i++)
			info->procUtilArray[i] = (nvmlProcessUtilizationInfo_v1_t){.timeStamp = s[i].timeStamp,
										   .pid = s[i].pid,
										   .smUtil = s[i].smUtil,
										   .memUtil = s[i].memUtil};
	if (rc == NVML_SUCCESS || rc == NVML_ERROR_INSUFFICIENT_SIZE)
		info->processSamplesCount = n;
	free(s);
	return rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t h, unsigned int *count, unsigned int *pids)
{
	struct sim_proc_row rows[SIM_MAX_PROCS];
	int idx;
	nvmlReturn_t rc = sim_nvml_live(h, &idx);

	if (rc != NVML_SUCCESS)
		return rc;
	if (count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	unsigned n = 0;
	struct sim_state *st = sim_nvml.st;
	sim_reap(st);
	for (int i = 0; i < SIM_MAX_PROCS; i++) {
		int32_t pid = atomic_load(&st->proc[i].pid);
		if (pid != 0 && (st->proc[i].dev_mask & (1u << idx)))
			rows[n++].pid = (unsigned)pid;
	}
	if (n > *count || (n > 0 && pids == NULL)) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	for (unsigned i = 0; i < n; i++)
		pids[i] = rows[i].pid;
	*count = n;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetAccountingStats(nvmlDevice_t h, unsigned int pid, nvmlAccountingStats_t *stats)
{
	int idx;
	nvmlReturn_t rc = sim_nvml_live(h, &idx);

	if (rc != NVML_SUCCESS)
		return rc;
	if (stats == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct sim_state *st = sim_nvml.st;
	sim_reap(st);
	for (int i = 0; i < SIM_MAX_PROCS; i++) {
		struct sim_proc_state *p = &st->proc[i];
		if (pid == 0 || atomic_load(&p->pid) != (int32_t)pid || !(p->dev_mask & (1u << idx)))
			continue;
		uint64_t now = sim_now_ns(), since = p->since_ns, busy = atomic_load(&p->busy_ns[idx]);
		uint64_t life = now > since ? now - since : 0;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t wall_us = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
		unsigned util = life > 0 ? (unsigned)(busy * 100 / life) : 0;
		*stats = (nvmlAccountingStats_t){.gpuUtilization = util > 100 ? 100 : util,
						 .memoryUtilization = (util > 100 ? 100 : util) / 2,
						 .maxMemoryUsage = atomic_load(&p->used[idx]),
						 .time = life / 1000000u,
						 .startTime = wall_us - life / 1000u,
						 .isRunning = 1};
		return NVML_SUCCESS;
	}
	return NVML_ERROR_NOT_FOUND;
}
