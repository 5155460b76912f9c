/* SPDX-License-Identifier: Apache-2.0
 * nvmlDeviceGet{Compute,Graphics,MPSCompute}RunningProcesses in their v1,
 * v2 and v3 struct layouts; nvmlDeviceGetProcessUtilization. As on a real
 * driver, MPS clients are listed by the MPS list and their server (once, with
 * its clients' memory) by the compute list. */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "nvml.h"

/* Adds mem to the server's row, appending one if it has none yet. */
static unsigned add_server(struct sim_proc_row *rows, unsigned n, unsigned cap, unsigned pid, unsigned long long mem)
{
	for (unsigned i = 0; i < n && i < cap; i++)
		if (rows[i].pid == pid) {
			rows[i].mem += mem;
			return n;
		}
	if (n < cap)
		rows[n] = (struct sim_proc_row){pid, mem};
	return n + 1;
}

/* Live processes with a context or memory on device idx: MPS clients in the
 * MPS list, every other process and the clients' servers in the compute list. */
unsigned sim_nvml_collect(int idx, enum sim_list which, struct sim_proc_row *rows, unsigned cap)
{
	struct sim_state *st = sim_nvml.st;
	unsigned n = 0;

	sim_reap(st);
	for (int i = 0; i < SIM_MAX_PROCS; i++) {
		struct sim_proc_state *p = &st->proc[i];
		int32_t pid = atomic_load(&p->pid);
		int32_t server = atomic_load(&p->mps_server);
		unsigned long long mem = atomic_load(&p->used[idx]);
		if (pid == 0 || (!(p->dev_mask & (1u << idx)) && mem == 0))
			continue;
		if (which == LIST_ALL) {
			n++;
			continue;
		}
		if (which == LIST_GRAPHICS) {
			if (atomic_load(&p->flags) & SIM_PROC_GRAPHICS) {
				if (n < cap)
					rows[n] = (struct sim_proc_row){(unsigned)pid, mem};
				n++;
			}
			continue;
		}
		if (which == LIST_COMPUTE && server != 0) {
			n = add_server(rows, n, cap, (unsigned)server, mem);
			continue;
		}
		if ((which == LIST_MPS) != (server != 0))
			continue;
		if (n < cap)
			rows[n] = (struct sim_proc_row){(unsigned)pid, mem};
		n++;
	}
	return n;
}

/* v: 1, 2 or 3 (v2 and v3 share nvmlProcessInfo_v2_t's layout). */
static nvmlReturn_t running(nvmlDevice_t h, unsigned *count, void *infos, int v, enum sim_list which)
{
	struct sim_proc_row rows[SIM_MAX_PROCS];
	nvmlReturn_t rc = sim_nvml_check();
	unsigned n;
	int idx;

	if (rc != NVML_SUCCESS)
		return rc;
	if (sim_nvml_dev(h, &idx) == NULL || count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (sim_is_lost(sim_nvml.st, idx))
		return NVML_ERROR_GPU_IS_LOST;
	n = sim_nvml_collect(idx, which, rows, SIM_MAX_PROCS);
	if (n > *count || (infos == NULL && n > 0)) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	*count = n;
	for (unsigned i = 0; i < n; i++) {
		if (v == 1) {
			nvmlProcessInfo_v1_t *o = (nvmlProcessInfo_v1_t *)infos + i;
			o->pid = rows[i].pid;
			o->usedGpuMemory = rows[i].mem;
		} else {
			nvmlProcessInfo_v2_t *o = (nvmlProcessInfo_v2_t *)infos + i;
			memset(o, 0, sizeof(*o));
			o->pid = rows[i].pid;
			o->usedGpuMemory = rows[i].mem;
			o->gpuInstanceId = 0xffffffffu; /* no MIG */
			o->computeInstanceId = 0xffffffffu;
		}
	}
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_v1_t *p)
{
	return running(h, n, p, 1, LIST_COMPUTE);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_v2_t *p)
{
	return running(h, n, p, 2, LIST_COMPUTE);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_t *p)
{
	return running(h, n, p, 3, LIST_COMPUTE);
}

NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_v1_t *p)
{
	return running(h, n, p, 1, LIST_GRAPHICS);
}

NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_v2_t *p)
{
	return running(h, n, p, 2, LIST_GRAPHICS);
}

NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_t *p)
{
	return running(h, n, p, 3, LIST_GRAPHICS);
}

NVML_API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_v1_t *p)
{
	return running(h, n, p, 1, LIST_MPS);
}

NVML_API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *n,
								 nvmlProcessInfo_v2_t *p)
{
	return running(h, n, p, 2, LIST_MPS);
}

NVML_API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_t *p)
{
	return running(h, n, p, 3, LIST_MPS);
}

/* Per process slot: its busy time when this process last sampled it. */
static struct {
	pthread_mutex_t mu;
	struct util_seen {
		int32_t pid;
		uint64_t start, t_ns, busy[SIM_MAX_DEVICES];
	} seen[SIM_MAX_PROCS];
} util = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* One process's sample: the share of the time since this process last sampled
 * it (first time: since it took the device) that its kernels held the engine. */
static unsigned sm_util(int slot, const struct sim_proc_state *p, int idx, uint64_t now)
{
	struct util_seen *s = &util.seen[slot];
	uint64_t busy = atomic_load(&p->busy_ns[idx]), t = p->since_ns, before = 0;

	if (s->pid == atomic_load(&p->pid) && s->start == p->start) {
		t = s->t_ns;
		before = s->busy[idx];
	}
	unsigned pct = now > t && busy > before ? (unsigned)((busy - before) * 100 / (now - t)) : 0;
	if (s->pid != atomic_load(&p->pid) || s->start != p->start)
		*s = (struct util_seen){.pid = atomic_load(&p->pid), .start = p->start};
	s->t_ns = now;
	s->busy[idx] = busy;
	return pct > 100 ? 100 : pct;
}

/* Samples for the processes with a context on the device, stamped now (newer
 * than lastSeen unless lastSeen is in the future: NOT_FOUND). */
NVML_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t h, nvmlProcessUtilizationSample_t *out,
						      unsigned int *count, unsigned long long last_seen)
{
	nvmlReturn_t rc = sim_nvml_check();
	struct timespec ts;
	int idx;

	if (rc != NVML_SUCCESS)
		return rc;
	if (sim_nvml_dev(h, &idx) == NULL || count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (sim_is_lost(sim_nvml.st, idx))
		return NVML_ERROR_GPU_IS_LOST;
	clock_gettime(CLOCK_REALTIME, &ts);
	unsigned long long stamp = (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000u;
	struct sim_state *st = sim_nvml.st;
	unsigned n = last_seen >= stamp ? 0 : sim_nvml_collect(idx, LIST_ALL, NULL, 0);
	if (n == 0)
		return NVML_ERROR_NOT_FOUND;
	if (out == NULL || *count < n) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	uint64_t now = sim_now_ns();
	unsigned k = 0;
	pthread_mutex_lock(&util.mu);
	for (int i = 0; i < SIM_MAX_PROCS && k < n; i++) {
		struct sim_proc_state *p = &st->proc[i];
		int32_t pid = atomic_load(&p->pid);
		if (pid == 0 || (!(p->dev_mask & (1u << idx)) && atomic_load(&p->used[idx]) == 0))
			continue;
		unsigned sm = sm_util(i, p, idx, now);
		out[k++] = (nvmlProcessUtilizationSample_t){
			.pid = (unsigned)pid, .timeStamp = stamp, .smUtil = sm, .memUtil = sm / 2};
	}
	pthread_mutex_unlock(&util.mu);
	*count = k;
	return NVML_SUCCESS;
}
