/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "drvmem.h"
#include "memcore.h"
#include "pool.h"
#include "quiet.h"

#define DRV_PROCS 64              /* entries on the stack; more on the heap as NVML asks */
#define DRV_PROCS_MAX 65536       /* at most this many processes on one device */
#define DRV_TRIES 4               /* the list may grow between two calls */
#define DRV_NOT_AVAILABLE (~0ull) /* nvml.h's NVML_VALUE_NOT_AVAILABLE */

static pthread_mutex_t measuring = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;
static _Atomic int nvml_ok;

static void fork_prepare(void)
{
	pthread_mutex_lock(&measuring);
}

static void fork_done(void)
{
	pthread_mutex_unlock(&measuring);
}

static void fork_child(void)
{
	gs_quiet_forked(0); /* fork is never called from a hook's window */
	pthread_mutex_unlock(&measuring);
}

static void nvml_init(void)
{
	gs_fn_nvmlInit_v2 init = (gs_fn_nvmlInit_v2)gs_real_peek(GS_ID_nvmlInit_v2);
	atomic_store(&nvml_ok, init != NULL && init() == NVML_SUCCESS);
	(void)pthread_atfork(fork_prepare, fork_done, fork_child);
}

/* NVML's process list of h into procs (cap entries), or, when NVML says it
 * is short (NVML_ERROR_INSUFFICIENT_SIZE with the count it needs), into a
 * buffer of that count and some room for processes starting meanwhile
 * (*heap, the caller frees it); a few tries, at most DRV_PROCS_MAX entries.
 * The entries, or NULL with *n = 0 if NVML has no list. */
static nvmlProcessInfo_t *list_procs(nvmlDevice_t h, nvmlProcessInfo_t *procs, unsigned int cap, unsigned int *n,
				     nvmlProcessInfo_t **heap)
{
	gs_fn_nvmlDeviceGetComputeRunningProcesses_v3 list = GS_REAL(nvmlDeviceGetComputeRunningProcesses_v3);
	*heap = NULL;
	for (int tries = 0; list != NULL && tries < DRV_TRIES; tries++) {
		*n = cap;
		nvmlReturn_t rc = list(h, n, procs);
		if (rc == NVML_SUCCESS)
			return procs;
		if (rc != NVML_ERROR_INSUFFICIENT_SIZE || *n <= cap || *n > DRV_PROCS_MAX)
			break;
		cap = *n + *n / 8 + 16 > DRV_PROCS_MAX ? DRV_PROCS_MAX : *n + *n / 8 + 16;
		free(*heap);
		procs = *heap = malloc((size_t)cap * sizeof(*procs));
		if (procs == NULL)
			break;
	}
	*n = 0;
	return NULL;
}

/* NVML's used memory of host pid on h: 0 (and *v) if NVML has a figure
 * (0 if the process is not listed: it holds nothing there), -1 if not. */
static int process_used(nvmlDevice_t h, uint32_t pid, uint64_t *v)
{
	nvmlProcessInfo_t small[DRV_PROCS], *heap;
	unsigned int n;
	const nvmlProcessInfo_t *procs = list_procs(h, small, DRV_PROCS, &n, &heap);
	int rc = procs != NULL ? 0 : -1;
	*v = 0;
	for (unsigned int i = 0; i < n; i++) {
		if (procs[i].pid != pid)
			continue;
		if (procs[i].usedGpuMemory == DRV_NOT_AVAILABLE) {
			rc = -1; /* e.g. without the right to see it */
			break;
		}
		*v += procs[i].usedGpuMemory;
	}
	free(heap);
	return rc;
}

static int device_used(nvmlDevice_t h, uint64_t *v)
{
	gs_fn_nvmlDeviceGetMemoryInfo info = GS_REAL(nvmlDeviceGetMemoryInfo);
	nvmlMemory_t m;
	if (info == NULL || info(h, &m) != NVML_SUCCESS)
		return -1;
	*v = m.used;
	return 0;
}

static int measure(const struct gs_drv_probe *p, uint64_t *v)
{
	if (p->per_process)
		return process_used(p->nvml, (uint32_t)__atomic_load_n(&p->self->host_pid, __ATOMIC_ACQUIRE), v);
	return device_used(p->nvml, v);
}

/* The group's slot and NVML's handle of dev; 0, or -1: nothing to measure. */
static int locate(CUdevice dev, struct gs_drv_probe *p)
{
	char uuid[GS_SHM_UUID_LEN];
	p->g = gs_group_get();
	if (p->g == NULL || gs_cuda_uuid(dev, uuid) != 0)
		return -1;
	p->slot = gs_slot_cuda(p->g, dev);
	p->self = p->slot >= 0 ? gs_group_self(p->g) : NULL;
	if (p->self == NULL)
		return -1;
	gs_fn_nvmlDeviceGetHandleByUUID by_uuid = GS_REAL(nvmlDeviceGetHandleByUUID);
	if (!atomic_load(&nvml_ok) || by_uuid == NULL || by_uuid(uuid, &p->nvml) != NVML_SUCCESS)
		return -1;
	return 0;
}

/* The driver's figure and this process's count at a quiet point (quiet.h):
 * no other thread of the process between a reservation and the driver's
 * answer or between the driver's free and its uncount, what the pools no
 * longer keep uncounted. The caller is in its hook's window. */
static int sample(const struct gs_drv_probe *p, uint64_t *drv, uint64_t *counted)
{
	gs_pool_sync();
	int rc = measure(p, drv);
	*counted = __atomic_load_n(&p->self->used[p->slot], __ATOMIC_ACQUIRE);
	return rc;
}

/* Takes the measuring lock, out of the caller's window while it waits (a
 * thread waiting for it is at no allocation's midpoint). */
static void lock_measuring(void)
{
	atomic_fetch_sub(&gs_quiet.inside, 1);
	pthread_mutex_lock(&measuring);
	atomic_fetch_add(&gs_quiet.inside, 1); /* only the lock's holder holds windows off */
}

GS_HIDDEN void gs_drv_begin(CUdevice dev, struct gs_drv_probe *p)
{
	int saved = errno;
	memset(p, 0, sizeof(*p));
	pthread_once(&nvml_once, nvml_init);
	lock_measuring();
	if (locate(dev, p) != 0) {
		p->nvml = NULL;
	} else {
		p->per_process = __atomic_load_n(&p->self->host_pid, __ATOMIC_ACQUIRE) != 0;
		/* Held until gs_drv_end: no other thread's hook changes the count
		 * or the driver's figure while the call is measured. */
		(void)gs_quiet_hold(1);
		p->held = 1;
		if (sample(p, &p->drv, &p->counted) != 0 && (p->per_process = 0, sample(p, &p->drv, &p->counted) != 0))
			p->nvml = NULL;
	}
	errno = saved;
}

/* What the driver grew by that the hooks did not count (0 if unknown). */
static uint64_t uncounted(const struct gs_drv_probe *p)
{
	uint64_t now, counted_now;
	if (sample(p, &now, &counted_now) != 0)
		return 0;
	int64_t counted = (int64_t)(counted_now - p->counted);
	int64_t grown = (int64_t)(now - p->drv) - counted;
	return grown > 0 ? (uint64_t)grown : 0;
}

GS_HIDDEN CUresult gs_drv_end(struct gs_drv_probe *p, int ok, enum gs_kind kind, uint64_t key, uint64_t ctx)
{
	int saved = errno;
	CUresult rc = CUDA_SUCCESS;
	uint64_t size = ok && p->nvml != NULL ? uncounted(p) : 0;
	if (p->held)
		gs_quiet_release();
	if (size > 0) {
		struct gs_resv r = {.g = p->g, .self = p->self, .slot = p->slot, .ci = -1};
		rc = gs_resv_take(&r, size);
		if (rc == CUDA_SUCCESS) {
			r.active = 1;
			r.size = size;
			r.ctx = ctx;
			gs_resv_finish(&r, CUDA_SUCCESS, kind, key);
		}
	}
	pthread_mutex_unlock(&measuring);
	errno = saved;
	return rc;
}
