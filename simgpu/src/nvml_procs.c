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
static unsigned add_server(struct sim_proc_row *rows, unsigned n, unsigned cap, struct sim_proc_row r)
{
	for (unsigned i = 0; i < n && i < cap; i++)
		if (rows[i].pid == r.pid && rows[i].gi == r.gi && rows[i].ci == r.ci) {
			rows[i].mem += r.mem;
			return n;
		}
	if (n < cap)
		rows[n] = r;
	return n + 1;
}

/* Which processes a list takes: device slot idx; on a MIG GPU instance's slot
 * its id gi and, for a MIG device, compute instance ci only (-1: all). */
struct sim_list_of {
	int idx;
	unsigned gi;
	int ci;
};

static unsigned collect_of(struct sim_list_of f, enum sim_list which, struct sim_proc_row *rows, unsigned n,
			   unsigned cap)
{
	struct sim_state *st = sim_nvml.st;
	int idx = f.idx;

	for (int i = 0; i < SIM_MAX_PROCS; i++) {
		struct sim_proc_state *p = &st->proc[i];
		int32_t pid = atomic_load(&p->pid);
		int32_t server = atomic_load(&p->mps_server);
		unsigned long long mem = atomic_load(&p->used[idx]);
		if (pid == 0 || (!(p->dev_mask & (1u << idx)) && mem == 0))
			continue;
		unsigned ci = p->mig_ci[idx] != 0 ? p->mig_ci[idx] - 1u : 0xffffffffu;
		if (f.ci >= 0 && ci != (unsigned)f.ci)
			continue;
		struct sim_proc_row r = {(unsigned)pid, mem, f.gi, f.gi == 0xffffffffu ? 0xffffffffu : ci};
		if (which == LIST_ALL) {
			n++;
			continue;
		}
		if (which == LIST_GRAPHICS) {
			if (atomic_load(&p->flags) & SIM_PROC_GRAPHICS) {
				if (n < cap)
					rows[n] = r;
				n++;
			}
			continue;
		}
		if (which == LIST_COMPUTE && server != 0) {
			r.pid = (unsigned)server;
			n = add_server(rows, n, cap, r);
			continue;
		}
		if ((which == LIST_MPS) != (server != 0))
			continue;
		if (n < cap)
			rows[n] = r;
		n++;
	}
	return n;
}

/* Live processes with a context or memory on device idx: MPS clients in the
 * MPS list, every other process and the clients' servers in the compute list.
 * A GPU in MIG mode lists those of all its instances, as the driver gives an
 * aggregate for the parent handle. */
unsigned sim_nvml_collect(int idx, enum sim_list which, struct sim_proc_row *rows, unsigned cap)
{
	struct sim_state *st = sim_nvml.st;
	unsigned n;

	sim_reap(st);
	n = collect_of((struct sim_list_of){idx, 0xffffffffu, -1}, which, rows, 0, cap);
	for (int k = 0; sim_mig_on(st, idx) && k < SIM_MIG_MAX_GI; k++) {
		const struct sim_mig_gi *gi = &st->mig[idx].gi[k];
		if (gi->live)
			n = collect_of((struct sim_list_of){(int)gi->slot, gi->id, -1}, which, rows, n, cap);
	}
	return n;
}

/* The list of a handle: a MIG device's own processes, else the device's. */
static unsigned collect_handle(nvmlDevice_t h, int idx, enum sim_list which, struct sim_proc_row *rows, unsigned cap)
{
	struct sim_mig_gi *gi;
	struct sim_mig_ci *ci;
	int gpu;

	if (!sim_nvml_mig(h, &gpu, &gi, &ci))
		return sim_nvml_collect(idx, which, rows, cap);
	sim_reap(sim_nvml.st);
	return collect_of((struct sim_list_of){(int)gi->slot, gi->id, (int)ci->id}, which, rows, 0, cap);
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
	n = collect_handle(h, idx, which, rows, SIM_MAX_PROCS);
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
			o->gpuInstanceId = rows[i].gi; /* 0xffffffff on a whole GPU */
			o->computeInstanceId = rows[i].ci;
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
	struct sim_state *st = sim_nvml.st;
	struct timespec ts;
	int idx;

	if (rc != NVML_SUCCESS)
		return rc;
	if (sim_nvml_dev(h, &idx) == NULL || count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (sim_is_lost(sim_nvml.st, idx))
		return NVML_ERROR_GPU_IS_LOST;
	if (idx >= SIM_MAX_GPUS || sim_mig_on(st, idx))
		return NVML_ERROR_NOT_SUPPORTED; /* "On MIG-enabled GPUs, querying process utilization is not currently supported" */
	clock_gettime(CLOCK_REALTIME, &ts);
	unsigned long long stamp = (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000u;
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
