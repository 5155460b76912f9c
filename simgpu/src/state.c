/* SPDX-License-Identifier: Apache-2.0
 * Shared state file: creation, process table and memory accounting. */
#include "state.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

uint64_t sim_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Where processes are looked up (see state.h). */
static struct {
	pthread_once_t once;
	char dir[200];
	bool host;
	int32_t self;
} procs = {.once = PTHREAD_ONCE_INIT, .dir = "/proc"};

static void procs_init(void)
{
	const char *d = getenv("GPUSLICE_SIM_HOST_PROC");
	char path[256], buf[32], *end;
	int saved = errno;
	ssize_t n;
	long pid;

	if (d == NULL || d[0] == '\0' || strlen(d) >= sizeof(procs.dir))
		goto out;
	/* <host proc>/self names this process in the host's pid namespace. */
	snprintf(path, sizeof(path), "%s/self", d);
	n = readlink(path, buf, sizeof(buf) - 1);
	if (n <= 0)
		goto out;
	buf[n] = '\0';
	pid = strtol(buf, &end, 10);
	if (*end != '\0' || pid <= 0 || pid > INT32_MAX)
		goto out;
	strcpy(procs.dir, d);
	procs.host = true;
	procs.self = (int32_t)pid;
out:
	errno = saved;
}

int32_t sim_self_pid(void)
{
	pthread_once(&procs.once, procs_init);
	return procs.host ? procs.self : (int32_t)getpid();
}

const char *sim_proc_dir(void)
{
	pthread_once(&procs.once, procs_init);
	return procs.dir;
}

uint64_t sim_proc_start_time(int32_t pid)
{
	char path[256], buf[1024];
	int saved = errno, fd;
	ssize_t n;
	char *p;

	snprintf(path, sizeof(path), "%s/%d/stat", sim_proc_dir(), (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		errno = saved;
		return 0;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	errno = saved;
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (p == NULL)
		return 0;
	/* Field 3 starts at p + 2; starttime is field 22. */
	p += 2;
	for (int i = 0; i < 19 && p != NULL; i++) {
		p = strchr(p, ' ');
		if (p != NULL)
			p++;
	}
	return p == NULL ? 0 : strtoull(p, NULL, 10);
}

bool sim_proc_alive(int32_t pid, uint64_t start)
{
	int saved = errno;
	bool alive;

	if (pid <= 0)
		return false;
	pthread_once(&procs.once, procs_init);
	if (procs.host) { /* host pids: kill() would address this namespace */
		uint64_t now = sim_proc_start_time(pid);
		return now != 0 && (start == 0 || now == start);
	}
	alive = kill(pid, 0) == 0 || errno == EPERM;
	errno = saved;
	if (alive && start != 0) {
		uint64_t now = sim_proc_start_time(pid);
		/* 0: /proc unreadable; then trust kill(). A zombie still reads fine. */
		alive = now == 0 || now == start;
	}
	return alive;
}

/* Frees a process's slot (lock held): its memory goes back to each device. */
static void free_slot_locked(struct sim_state *st, struct sim_proc_state *p)
{
	for (uint32_t d = 0; d < SIM_MAX_DEVICES; d++) {
		p->mig_ci[d] = 0;
		uint64_t u = atomic_exchange(&p->used[d], 0);
		uint64_t cur = atomic_load(&st->dev[d].used);
		atomic_store(&st->dev[d].used, u > cur ? 0 : cur - u);
	}
	p->dev_mask = 0;
	atomic_store(&p->mps_server, 0);
	atomic_store(&p->pid, 0);
}

#define SIM_REAP_FULL_NS 100000000ull /* 100 ms */

static void reap_locked(struct sim_state *st)
{
	for (int i = 0; i < SIM_MAX_PROCS; i++) {
		struct sim_proc_state *p = &st->proc[i];
		int32_t pid = atomic_load(&p->pid);

		if (pid == 0 || sim_proc_alive(pid, p->start))
			continue;
		free_slot_locked(st, p);
	}
}

/* After a holder died inside the lock: drop dead entries and recompute each
 * device's usage from the live entries. */
static void recover_locked(struct sim_state *st)
{
	reap_locked(st);
	for (uint32_t d = 0; d < SIM_MAX_DEVICES; d++) {
		uint64_t sum = 0;
		for (int i = 0; i < SIM_MAX_PROCS; i++)
			if (atomic_load(&st->proc[i].pid) != 0)
				sum += atomic_load(&st->proc[i].used[d]);
		atomic_store(&st->dev[d].used, sum);
	}
}

static int state_lock(struct sim_state *st)
{
	int saved = errno;
	int rc = pthread_mutex_lock(&st->lock);

	if (rc == EOWNERDEAD) {
		recover_locked(st);
		pthread_mutex_consistent(&st->lock);
		rc = 0;
	}
	errno = saved;
	return rc == 0 ? 0 : -1;
}

static void state_unlock(struct sim_state *st)
{
	pthread_mutex_unlock(&st->lock);
}

int sim_state_lock(struct sim_state *st)
{
	return state_lock(st);
}

void sim_state_unlock(struct sim_state *st)
{
	state_unlock(st);
}

bool sim_dev_exists(const struct sim_state *st, int dev)
{
	return (dev >= 0 && (uint32_t)dev < st->ndev) || sim_mig_slot_owner(st, dev, NULL, NULL);
}

/* Whether pid names a process (a cheap check: kill() only, outside the host
 * pid namespace; no pid-reuse check). */
static bool proc_present(int32_t pid)
{
	int saved = errno;
	pthread_once(&procs.once, procs_init); /* procs.host is read below */
	bool present = procs.host ? sim_proc_alive(pid, 0) : kill(pid, 0) == 0 || errno == EPERM;
	errno = saved;
	return present;
}

#define SIM_REAP_BATCH 64 /* gone entries freed per taking of the lock */

struct sim_gone {
	int i;
	int32_t pid;
	uint64_t start;
};

/* Frees the n entries found gone, each only if it still names that process:
 * one taking of the lock for the batch. -1 if the lock could not be taken. */
static int free_gone(struct sim_state *st, const struct sim_gone *gone, int n)
{
	if (state_lock(st) != 0)
		return -1;
	for (int k = 0; k < n; k++) {
		struct sim_proc_state *p = &st->proc[gone[k].i];
		if (atomic_load(&p->pid) == gone[k].pid && p->start == gone[k].start)
			free_slot_locked(st, p);
	}
	state_unlock(st);
	return 0;
}

/* Frees the slots of processes that are gone, checking each outside the lock
 * (so that many processes querying or registering at once do not wait for one
 * another's checks) and taking the lock once per SIM_REAP_BATCH gone entries
 * (it was once per entry: 240 jobs that exited at once made 240 takings per
 * query while the next 240 registered). full: the start time in /proc (pid
 * reuse) is read for each entry; else kill() says who is gone. */
static void reap_batched(struct sim_state *st, bool full)
{
	struct sim_gone gone[SIM_REAP_BATCH];
	int n = 0;
	for (int i = 0; i < SIM_MAX_PROCS; i++) {
		struct sim_proc_state *p = &st->proc[i];
		int32_t pid = atomic_load(&p->pid);
		uint64_t start =
			__atomic_load_n(&p->start, __ATOMIC_RELAXED); /* outside the lock: checked again under it */
		if (pid == 0 || (full ? sim_proc_alive(pid, start) : proc_present(pid)))
			continue;
		gone[n++] = (struct sim_gone){.i = i, .pid = pid, .start = start};
		if (n == SIM_REAP_BATCH) {
			if (free_gone(st, gone, n) != 0)
				return;
			n = 0;
		}
	}
	if (n > 0)
		(void)free_gone(st, gone, n);
}

/* The start time in /proc is read at most every SIM_REAP_FULL_NS across all
 * processes (the first caller past it does it); in between, kill() only. */
void sim_reap(struct sim_state *st)
{
	uint64_t now = sim_now_ns(), last = atomic_load(&st->reaped_ns);
	bool full = (now - last >= SIM_REAP_FULL_NS || now < last) &&
		    atomic_compare_exchange_strong(&st->reaped_ns, &last, now);
	reap_batched(st, full);
}

static int find_slot(struct sim_state *st, int32_t pid, uint64_t start)
{
	for (int i = 0; i < SIM_MAX_PROCS; i++)
		if (atomic_load(&st->proc[i].pid) == pid && st->proc[i].start == start)
			return i;
	for (int i = 0; i < SIM_MAX_PROCS; i++) {
		struct sim_proc_state *p = &st->proc[i];
		if (atomic_load(&p->pid) != 0)
			continue;
		__atomic_store_n(&p->start, start, __ATOMIC_RELAXED); /* read outside the lock by reap_batched */
		p->dev_mask = 0;
		memset(p->mig_ci, 0, sizeof(p->mig_ci));
		atomic_store(&p->mps_server, 0);
		for (int d = 0; d < SIM_MAX_DEVICES; d++) {
			atomic_store(&p->used[d], 0);
			atomic_store(&p->busy_ns[d], 0);
			atomic_store(&p->work_ns[d], 0);
		}
		p->since_ns = sim_now_ns();
		atomic_store(&p->pid, pid);
		return i;
	}
	return -1;
}

int sim_proc_register(struct sim_state *st, int32_t pid, uint64_t start, int dev, int ci)
{
	int slot;

	if (state_lock(st) != 0)
		return -1;
	slot = find_slot(st, pid, start);
	if (slot < 0) { /* full: the dead are found outside the lock, then one more try */
		state_unlock(st);
		reap_batched(st, true);
		if (state_lock(st) != 0)
			return -1;
		slot = find_slot(st, pid, start);
	}
	if (slot >= 0 && dev >= 0 && dev < SIM_MAX_DEVICES) {
		st->proc[slot].dev_mask |= 1u << dev;
		st->proc[slot].mig_ci[dev] = ci >= 0 && ci < 255 ? (uint8_t)(ci + 1) : 0;
	}
	state_unlock(st);
	return slot;
}

void sim_proc_release(struct sim_state *st, int slot, int32_t pid)
{
	struct sim_proc_state *p;

	if (slot < 0 || slot >= SIM_MAX_PROCS || state_lock(st) != 0)
		return;
	p = &st->proc[slot];
	if (atomic_load(&p->pid) == pid)
		free_slot_locked(st, p);
	state_unlock(st);
}

static int try_reserve_locked(struct sim_state *st, int slot, int dev, uint64_t bytes, uint64_t cap)
{
	struct sim_dev_state *d = &st->dev[dev];
	uint64_t used = atomic_load(&d->used), mine = atomic_load(&st->proc[slot].used[dev]);

	if (bytes > d->total || used > d->total - bytes)
		return -1;
	if (cap != 0 && (bytes > cap || mine > cap - bytes))
		return -1;
	atomic_store(&d->used, used + bytes);
	atomic_fetch_add(&st->proc[slot].used[dev], bytes);
	return 0;
}

int sim_mem_reserve(struct sim_state *st, int slot, int dev, uint64_t bytes, uint64_t cap)
{
	int rc;

	if (slot < 0 || slot >= SIM_MAX_PROCS || !sim_dev_exists(st, dev))
		return -1;
	if (state_lock(st) != 0)
		return -1;
	rc = try_reserve_locked(st, slot, dev, bytes, cap);
	if (rc != 0) { /* the dead may hold it: found outside the lock, then one more try */
		state_unlock(st);
		reap_batched(st, true);
		if (state_lock(st) != 0)
			return -1;
		rc = try_reserve_locked(st, slot, dev, bytes, cap);
	}
	state_unlock(st);
	return rc;
}

void sim_mem_release(struct sim_state *st, int slot, int dev, uint64_t bytes)
{
	struct sim_proc_state *p;
	uint64_t mine, cur;

	if (slot < 0 || slot >= SIM_MAX_PROCS || dev < 0 || dev >= SIM_MAX_DEVICES || state_lock(st) != 0)
		return;
	p = &st->proc[slot];
	mine = atomic_load(&p->used[dev]);
	if (bytes > mine) /* never underflow: release at most what we hold */
		bytes = mine;
	atomic_store(&p->used[dev], mine - bytes);
	cur = atomic_load(&st->dev[dev].used);
	atomic_store(&st->dev[dev].used, bytes > cur ? 0 : cur - bytes);
	state_unlock(st);
}

/* The one place that decides which simulator devices this process may use,
 * for CUDA and NVML alike. With acc->devnodes, like the real driver: the
 * device's node <devdir>/nvidia<minor> must open. ENXIO (a node the devices
 * cgroup permits, with no driver behind it) counts as accessible; EPERM (the
 * cgroup denies it), ENOENT, EACCES and anything else do not. */
bool sim_device_accessible(const struct sim_state *st, const struct sim_access *acc, int index)
{
	char path[SIM_DEVDIR_LEN + 32];
	int saved, fd;
	bool ok;

	if (!sim_dev_exists(st, index))
		return false;
	if (!acc->devnodes) /* a MIG instance: its GPU's node (minor) */
		return true;
	snprintf(path, sizeof(path), "%s/nvidia%u", acc->devdir, (unsigned)st->dev[index].minor);
	saved = errno;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	ok = fd >= 0 || errno == ENXIO;
	if (fd >= 0)
		close(fd);
	errno = saved;
	return ok;
}

int sim_event_post(struct sim_state *st, uint32_t dev, uint64_t type, uint64_t data)
{
	struct sim_nvml_events *ev = &st->events;
	uint32_t k;
	int saved = errno;

	if (dev >= st->ndev || dev >= SIM_MAX_DEVICES || state_lock(st) != 0)
		return -1;
	k = atomic_load(&ev->posted);
	struct sim_nvml_event *e = &ev->ring[k % SIM_EVENT_SLOTS];
	atomic_store(&e->seq, 0); /* readers of the old event see it change */
	e->dev = dev;
	e->type = type;
	e->data = data;
	atomic_store(&e->seq, (uint64_t)k + 1);
	atomic_store(&ev->posted, k + 1);
	state_unlock(st);
	syscall(SYS_futex, (uint32_t *)&ev->posted, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	errno = saved;
	return 0;
}

void sim_set_lost(struct sim_state *st, uint32_t dev, bool lost)
{
	if (dev >= SIM_MAX_DEVICES)
		return;
	if (lost)
		atomic_fetch_or(&st->events.lost_mask, 1u << dev);
	else
		atomic_fetch_and(&st->events.lost_mask, ~(1u << dev));
}

bool sim_is_lost(const struct sim_state *st, int dev)
{
	sim_mig_slot_owner(st, dev, &dev, NULL); /* a MIG instance is lost with its GPU */
	return dev >= 0 && dev < SIM_MAX_DEVICES &&
	       (atomic_load(&((struct sim_state *)st)->events.lost_mask) & (1u << dev)) != 0;
}
