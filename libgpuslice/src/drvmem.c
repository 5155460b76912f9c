/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "device.h"
#include "drvmem.h"
#include "log.h"
#include "memcore.h"
#include "pool.h"
#include "procfs.h"
#include "quiet.h"

#define DRV_PROCS 64              /* entries on the stack; more on the heap as NVML asks */
#define DRV_PROCS_MAX 65536       /* at most this many processes on one device */
#define DRV_TRIES 4               /* the list may grow between two calls */
#define DRV_NOT_AVAILABLE (~0ull) /* nvml.h's NVML_VALUE_NOT_AVAILABLE */
#define DRV_LOAD_DEVS 64          /* devices whose last load and context this process remembers */
#define DRV_WAIT_SLICE_MS 20      /* a wait on a member's guess looks at its liveness this often */
/* A device seed is a figure to reserve by from 1 MiB to the least of 4 GiB and
 * half the device (internal/ctxprobe.Plausible, which the daemon checks before
 * writing one; a member may write the header): outside, none applies. */
#define DRV_SEED_MIN_KIB 1024ull
#define DRV_SEED_MAX_KIB (4ull << 20)

static pthread_mutex_t measuring = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;
static _Atomic int nvml_ok;
/* What this process's last module or library load took, per CUDA device;
 * and 1 + the bytes its last context there took (0: none measured). */
static _Atomic uint64_t last_load[DRV_LOAD_DEVS];
static _Atomic uint64_t last_ctx[DRV_LOAD_DEVS];
/* 1 + each CUDA device's memory in MiB, as the driver reports it (0: not read
 * yet): the key of the node's seed for that kind of device. */
static _Atomic uint32_t dev_mib[DRV_LOAD_DEVS];
static _Atomic int said_wait; /* a wait for another member's guess ran out */

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

/* NVML's used memory on h of host pid *pid: 0 (and *v) if NVML has a figure
 * (0 if the process is not listed: it holds nothing there), -1 if not. Host
 * pid unknown (*pid 0, another pid namespace and no daemon to say it): the
 * figure of the device's only process, which *pid then names (0 and *v 0 if
 * the device has none); -1 with more. */
static int process_used(nvmlDevice_t h, uint32_t *pid, uint64_t *v)
{
	nvmlProcessInfo_t small[DRV_PROCS], *heap;
	unsigned int n;
	const nvmlProcessInfo_t *procs = list_procs(h, small, DRV_PROCS, &n, &heap);
	int rc = procs != NULL && (*pid != 0 || n <= 1) ? 0 : -1;
	if (rc == 0 && *pid == 0 && n == 1)
		*pid = procs[0].pid;
	*v = 0;
	for (unsigned int i = 0; rc == 0 && i < n; i++) {
		if (procs[i].pid != *pid)
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

/* The group's slot and NVML's handle of dev: 0, or -1 if there is no slot
 * (nothing to reserve); p->nvml NULL: nothing to measure with. */
static int locate(CUdevice dev, struct gs_drv_probe *p)
{
	char uuid[GS_SHM_UUID_LEN];
	p->g = gs_group_get();
	if (dev < 0 || p->g == NULL || gs_cuda_uuid(dev, uuid) != 0)
		return -1;
	p->slot = gs_slot_cuda(p->g, dev);
	if (p->slot >= 0 && gs_group_fault_broken(gs_slot_group(p->slot)))
		return -1; /* as gs_group_get for the process's own group */
	if (p->slot >= 0)
		p->g = gs_group_of(p->slot);
	p->self = p->slot >= 0 ? gs_group_self(p->g) : NULL;
	if (p->self == NULL)
		return -1;
	p->dev = dev;
	gs_fn_nvmlDeviceGetHandleByUUID by_uuid = GS_REAL(nvmlDeviceGetHandleByUUID);
	if (!atomic_load(&nvml_ok) || by_uuid == NULL || by_uuid(uuid, &p->nvml) != NVML_SUCCESS)
		p->nvml = NULL;
	return 0;
}

/* A context's reservation before the group measured one on its GPU: the
 * node's seed (what a context took there, as the time-slice daemon gathered
 * it from every group; never more than the guess), else the guess. */
static uint64_t first_guess(struct gs_group *g)
{
	uint32_t seed = __atomic_load_n(&gs_group_file(g)->hdr.context_seed_kib, __ATOMIC_ACQUIRE);
	uint64_t size = seed != 0 ? (uint64_t)(seed - 1) << 10 : GS_DRV_CONTEXT_GUESS;
	return size < GS_DRV_CONTEXT_GUESS ? size : GS_DRV_CONTEXT_GUESS;
}

/* The device's memory in MiB as the driver reports it (0: unknown). */
static uint32_t device_mib(CUdevice dev)
{
	uint32_t v = dev < DRV_LOAD_DEVS ? atomic_load(&dev_mib[dev]) : 0;
	if (v != 0)
		return v - 1;
	gs_fn_cuDeviceTotalMem_v2 total = GS_REAL(cuDeviceTotalMem_v2);
	size_t bytes = 0;
	if (total == NULL || total(&bytes, dev) != CUDA_SUCCESS || (bytes >> 20) == 0 || (bytes >> 20) >= UINT32_MAX)
		return 0;
	v = (uint32_t)(bytes >> 20);
	if (dev < DRV_LOAD_DEVS)
		atomic_store(&dev_mib[dev], v + 1);
	return v;
}

/* 1 + what a context takes on the device, as the node measured it (the
 * header's entry for its kind of device, written by the time-slice daemon
 * from its own probe, never from a tenant's figure); 0: no entry, or one that
 * is no context's figure (under 1 MiB: a context reserved at 0 B lets a
 * group's first contexts all pass on the same headroom; past 4 GiB or half
 * the device). */
static uint64_t device_seed(const struct gs_drv_probe *p)
{
	uint32_t mib = device_mib(p->dev);
	const struct gs_shm_header *h = &gs_group_file(p->g)->hdr;
	for (int i = 0; mib != 0 && i < GS_SHM_DEVICE_SEEDS; i++) {
		if (__atomic_load_n(&h->device_seed_mib[i], __ATOMIC_ACQUIRE) != mib)
			continue;
		uint64_t kib = __atomic_load_n(&h->device_seed_kib[i], __ATOMIC_ACQUIRE);
		uint64_t most = (uint64_t)mib << 9 < DRV_SEED_MAX_KIB ? (uint64_t)mib << 9 : DRV_SEED_MAX_KIB;
		return kib > DRV_SEED_MIN_KIB && kib - 1 <= most ? ((kib - 1) << 10) + 1 : 0;
	}
	return 0;
}

/* What the call is reserved at (*guess: 1 if nothing was measured yet;
 * *seeded: 1 if the node measured this kind of device). A context: the
 * largest of the node's measurement for its kind of device, the group's last
 * measurement on that GPU and this process's own last context there (a
 * process whose contexts are larger than another member's is reserved at its
 * own size: its creation cannot pass the limit while it runs; no member's
 * figure lowers the node's). */
static uint64_t estimate(const struct gs_drv_probe *p, int *guess, int *seeded)
{
	*guess = *seeded = 0;
	if (p->what == GS_DRV_LOAD)
		return p->dev < DRV_LOAD_DEVS ? atomic_load(&last_load[p->dev]) : 0;
	uint32_t kib = __atomic_load_n(&gs_group_file(p->g)->hdr.context_kib[gs_slot_gpu(p->slot)], __ATOMIC_ACQUIRE);
	uint64_t own = p->dev < DRV_LOAD_DEVS ? atomic_load(&last_ctx[p->dev]) : 0;
	uint64_t group = kib != 0 ? (uint64_t)(kib - 1) << 10 : 0;
	uint64_t node = device_seed(p);
	*seeded = node != 0;
	*guess = kib == 0 && own == 0 && node == 0;
	if (*guess) { /* at most the slot's limit: more never fits, and the rest of it is what a guess takes */
		uint64_t limit = gs_ld64(&gs_group_slot(p->slot)->limit), first = first_guess(p->g);
		return limit != 0 && first > limit ? limit : first;
	}
	uint64_t est = own > group + 1 ? own - 1 : group;
	return node > est + 1 ? node - 1 : est;
}

/* What a call took becomes the next estimate: the group's (a context) and
 * this process's own. */
static void remember(const struct gs_drv_probe *p, uint64_t size)
{
	if (p->what == GS_DRV_LOAD) {
		if (p->dev < DRV_LOAD_DEVS)
			atomic_store(&last_load[p->dev], size);
		return;
	}
	if (p->dev < DRV_LOAD_DEVS)
		atomic_store(&last_ctx[p->dev], size + 1);
	uint64_t kib = ((size + 1023) >> 10) + 1; /* 0 says none measured yet */
	kib = kib > UINT32_MAX ? UINT32_MAX : kib;
	__atomic_store_n(&gs_group_file(p->g)->hdr.context_kib[gs_slot_gpu(p->slot)], (uint32_t)kib, __ATOMIC_RELEASE);
}

/* Another live member with a guessed reservation in flight, or NULL; with
 * same_slot, only one that holds memory on the call's slot (its guess may be
 * there). */
static struct gs_shm_proc *other_guessing(const struct gs_drv_probe *p, int same_slot)
{
	struct gs_shm_file *f = gs_group_file(p->g);
	int gpu = gs_slot_gpu(p->slot);
	for (int i = 0; i < GS_SHM_MAX_PROCS; i++) {
		struct gs_shm_proc *o = &f->proc[i];
		if (o != p->self && __atomic_load_n(&o->guessing, __ATOMIC_ACQUIRE) != 0 &&
		    __atomic_load_n(&o->state, __ATOMIC_ACQUIRE) == GS_PROC_LIVE &&
		    (!same_slot || __atomic_load_n(&o->used[gpu], __ATOMIC_ACQUIRE) != 0))
			return o;
	}
	return NULL;
}

/* Reserves what is left under the slot's limit: that much (0: nothing). */
static uint64_t reserve_rest(struct gs_shm_gpu *gpu)
{
	for (int i = 0; i < 100; i++) {
		uint64_t limit = gs_ld64(&gpu->limit), used = gs_ld64(&gpu->used);
		uint64_t rest = limit == 0 ? GS_DRV_CONTEXT_GUESS : used < limit ? limit - used : 0;
		if (rest == 0 || gs_acct_reserve(gpu, rest) == 0)
			return rest;
	}
	return 0;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct guess_wait {
	int64_t deadline; /* the wait's end (0: not begun) */
	int calm;         /* passes in a row that found no guess in flight */
};

/* Another member's guess (with same_slot, one on the call's slot) may be in
 * the way: 1 once it ended (trued up at the end of its call, however slow,
 * which wakes the futex on its guessing count) or it is found dead (reaped),
 * if one is in flight within the wait's bound; else 0 (the bound reached:
 * said once). No polling: a crowd of waiters sleeps in the kernel, and the
 * member it waits for has the CPU to finish. */
static int wait_for_guesses(const struct gs_drv_probe *p, struct guess_wait *w, int same_slot)
{
	int64_t now = now_ms();
	if (w->deadline == 0)
		w->deadline = now + gs_config()->context_wait_ms;
	atomic_thread_fence(memory_order_acquire); /* a guess seen on the slot: its mark, made before, too */
	struct gs_shm_proc *o = other_guessing(p, same_slot);
	if (o == NULL)
		return 0;
	if (now >= w->deadline) {
		gs_log_once(
			&said_wait,
			"a context on %s waited %u ms for pid %d's context, whose guess holds group \"%s\"'s memory, "
			"to be measured; going on without it (GPUSLICE_CONTEXT_WAIT_MS)",
			gs_group_slot(p->slot)->uuid, gs_config()->context_wait_ms,
			__atomic_load_n(&o->pid, __ATOMIC_RELAXED), gs_group_name(p->g));
		return 0;
	}
	w->calm = 0;
	uint32_t v = __atomic_load_n(&o->guessing, __ATOMIC_ACQUIRE);
	int64_t left = w->deadline - now;
	struct timespec ts = {.tv_sec = 0, .tv_nsec = (left < DRV_WAIT_SLICE_MS ? left : DRV_WAIT_SLICE_MS) * 1000000};
	if (v != 0 && syscall(SYS_futex, &o->guessing, FUTEX_WAIT, v, &ts, NULL, 0) != 0 && errno == ETIMEDOUT &&
	    __atomic_load_n(&o->pidns, __ATOMIC_RELAXED) == gs_group_pidns(p->g) &&
	    gs_proc_liveness(o->pid, o->start_time) == GS_DEAD)
		gs_group_reap(p->g, 1); /* its guess goes back with the rest of what it held */
	return 1;
}

/* Wakes the members waiting for this process's guess to end. */
static void guess_ended(struct gs_shm_proc *self)
{
	if (__atomic_sub_fetch(&self->guessing, 1, __ATOMIC_ACQ_REL) == 0)
		(void)syscall(SYS_futex, &self->guessing, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

enum take_how { TAKE_EST, TAKE_REST, TAKE_RETRY };

/* Reserves est on the slot (TAKE_REST: what is left under the limit;
 * TAKE_RETRY: est through gs_resv_take: reaps, checks the pools, borrows):
 * CUDA_SUCCESS and the reservation recorded, else nothing held. A guess is
 * marked (guessing) before its memory is taken: a member then finding the
 * headroom gone finds the guess to wait for. Where the slot has no room
 * nothing is marked (waiters wake no one with marks of their own). */
static CUresult take(struct gs_drv_probe *p, uint64_t est, int guess, enum take_how how)
{
	struct gs_shm_gpu *gpu = gs_group_slot(p->slot);
	struct gs_resv r = {.g = p->g, .self = p->self, .slot = p->slot, .ci = -1};
	uint64_t limit = gs_ld64(&gpu->limit), used = gs_ld64(&gpu->used);
	if (how != TAKE_RETRY && limit != 0 && (how == TAKE_REST ? used >= limit : est > limit || used > limit - est))
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (guess)
		__atomic_fetch_add(&p->self->guessing, 1, __ATOMIC_SEQ_CST);
	uint64_t size = est;
	CUresult rc = CUDA_SUCCESS;
	if (how == TAKE_RETRY)
		rc = gs_resv_take(&r, est); /* counts it on the process too */
	else if (how == TAKE_REST)
		rc = (size = reserve_rest(gpu)) != 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	else if (gs_acct_reserve(gpu, est) != 0)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (rc != CUDA_SUCCESS) {
		if (guess)
			guess_ended(p->self);
		return rc;
	}
	if (how != TAKE_RETRY)
		gs_acct_proc_add(p->self, p->slot, size);
	p->reserved = size;
	p->guessed = guess;
	return CUDA_SUCCESS;
}

/* Reserves the call's estimate on the slot (drvmem.h): CUDA_SUCCESS, or
 * CUDA_ERROR_OUT_OF_MEMORY (one line said). Refused only where the figures
 * say it does not fit: not while another member's guess, which holds memory
 * its measurement may give back, is in flight and alive (within the bound). */
static CUresult reserve(struct gs_drv_probe *p)
{
	struct guess_wait w = {0, 0};
	int guess, seeded;
	uint64_t est;
	for (;;) {
		est = estimate(p, &guess, &seeded);
		if (take(p, est, guess, TAKE_EST) == CUDA_SUCCESS)
			return CUDA_SUCCESS;
		/* The node's figure: nothing of its own to wait for; a member's guess
		 * made before the figure was written (the daemon's start) may be
		 * on the slot: it is trued up at the end of its call. */
		if (wait_for_guesses(p, &w, seeded))
			continue;
		/* No measurement to go by: the driver's answer decides. */
		if (guess && take(p, est, 1, TAKE_REST) == CUDA_SUCCESS)
			return CUDA_SUCCESS;
		if (guess && wait_for_guesses(p, &w, 0))
			continue; /* another's guess took the rest meanwhile */
		/* Twice in a row none in flight (a guess that ended between a
		 * reservation and the look at the guesses: the next pass sees it). */
		if (++w.calm == 2)
			break;
	}
	return take(p, est, guess, TAKE_RETRY); /* else refuses (one line) */
}

static void unreserve(struct gs_drv_probe *p, uint64_t size)
{
	gs_acct_proc_sub(p->self, p->slot, size);
	gs_acct_release(gs_group_slot(p->slot), size);
}

/* The driver's figure and this process's count at a quiet point (quiet.h):
 * no other thread of the process between a reservation and the driver's
 * answer or between the driver's free and its uncount, what the pools no
 * longer keep uncounted. The caller is in its hook's window. */
static int sample(const struct gs_drv_probe *p, uint32_t *pid, uint64_t *drv, uint64_t *counted)
{
	gs_pool_sync();
	int rc = process_used(p->nvml, pid, drv);
	/* p->self: our entry in the slot's group's file, whose used[] is per GPU slot there */
	*counted = __atomic_load_n(&p->self->used[gs_slot_gpu(p->slot)], __ATOMIC_ACQUIRE);
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

GS_HIDDEN CUresult gs_drv_begin(CUdevice dev, enum gs_drv_what what, struct gs_drv_probe *p)
{
	int saved = errno;
	memset(p, 0, sizeof(*p));
	p->what = what;
	pthread_once(&nvml_once, nvml_init);
	lock_measuring();
	if (locate(dev, p) != 0) {
		p->self = NULL;
	} else {
		CUresult rc = reserve(p);
		if (rc != CUDA_SUCCESS) {
			pthread_mutex_unlock(&measuring);
			errno = saved;
			return rc;
		}
		/* Held until gs_drv_end: no other thread's hook changes the count
		 * or the driver's figure while the call is measured. */
		p->quiet = gs_quiet_hold(1);
		p->held = 1;
		p->pid = (uint32_t)__atomic_load_n(&p->self->host_pid, __ATOMIC_ACQUIRE);
		p->alone = p->pid == 0;
		if (p->nvml != NULL && sample(p, &p->pid, &p->drv, &p->counted) != 0)
			p->nvml = NULL;
	}
	errno = saved;
	return CUDA_SUCCESS;
}

/* What the driver holds for the call, less what the hooks counted meanwhile:
 * 0 and *size, or -1 (no figure). */
static int measure(const struct gs_drv_probe *p, uint64_t *size)
{
	uint64_t now, counted_now;
	uint32_t pid = p->alone ? 0 : p->pid; /* alone: the device's only process again */
	if (p->nvml == NULL || sample(p, &pid, &now, &counted_now) != 0 ||
	    (p->alone && (pid == 0 || (p->pid != 0 && pid != p->pid))))
		return -1; /* host pid unknown: the same only process before (or none) and after, or no figure */
	int64_t counted = (int64_t)(counted_now - p->counted);
	int64_t grown = (int64_t)(now - p->drv) - counted;
	*size = grown > 0 ? (uint64_t)grown : 0;
	return 0;
}

/* Trues the reservation up to size: 0, or -1 past the limit (refused, one
 * line said; the reservation given back). */
static int true_up(struct gs_drv_probe *p, uint64_t size)
{
	if (size <= p->reserved) {
		unreserve(p, p->reserved - size);
		return 0;
	}
	struct gs_resv r = {.g = p->g, .self = p->self, .slot = p->slot, .ci = -1};
	if (gs_resv_take(&r, size - p->reserved) == CUDA_SUCCESS)
		return 0;
	unreserve(p, p->reserved);
	return -1;
}

GS_HIDDEN CUresult gs_drv_end(struct gs_drv_probe *p, int ok, enum gs_kind kind, uint64_t key, uint64_t ctx)
{
	int saved = errno;
	CUresult rc = CUDA_SUCCESS;
	if (p->self == NULL) {
		pthread_mutex_unlock(&measuring);
		errno = saved;
		return rc;
	}
	uint64_t size = p->reserved;
	int measured = ok && measure(p, &size) == 0;
	if (p->held)
		gs_quiet_release();
	if (!ok) {
		unreserve(p, p->reserved);
	} else if (true_up(p, size) != 0) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	} else if (size > 0) {
		struct gs_resv r = {
			.g = p->g, .self = p->self, .slot = p->slot, .ci = -1, .active = 1, .size = size, .ctx = ctx};
		gs_resv_finish(&r, CUDA_SUCCESS, kind, key);
	}
	if (measured && p->quiet) /* another thread's call in flight may have moved the figures */
		remember(p, size);
	if (p->guessed)
		guess_ended(p->self);
	pthread_mutex_unlock(&measuring);
	errno = saved;
	return rc;
}
