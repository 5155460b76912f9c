/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "account.h"
#include "config.h"
#include "group.h"
#include "hello.h"
#include "hot.h"
#include "log.h"
#include "procfs.h"
#include "ptrfast.h"

struct gs_group {
	struct gs_shm_file *f;
	int fd;    /* -1: private anonymous mapping */
	int index; /* in the process's table of groups (0: its own) */
	dev_t dev; /* the file's, to know a device group that is the process's own */
	ino_t ino;
	uint64_t pidns;
	pthread_mutex_t mu; /* threads; fcntl locks exclude processes */
	_Atomic uint64_t last_reap_ns;
	_Atomic int said_full_procs, said_full_gpus;
};

/* A GPU's group in a container of several groups: known once looked up. */
struct devgroup {
	char uuid[GS_SHM_UUID_LEN];
	int index; /* in the table of groups; -1: its group cannot be used */
};

/* Once group_init ran, gs_hot.group_done is set and gs_hot.group (&gs.g if
 * usable, else NULL) is final: the hooks skip pthread_once. The device groups
 * (more[1..ngroups-1]) and the devices looked up are added under tmu and
 * published by their counts (release); never removed. */
static struct {
	struct gs_group g;
	pthread_once_t once;
	pthread_mutex_t tmu;
	_Atomic int ngroups, ndevs;
	_Atomic int said_many, said_writable;
	struct gs_group more[GS_MAX_CONTAINER_GROUPS];
	struct devgroup dev[GS_SHM_MAX_GPUS * GS_MAX_CONTAINER_GROUPS];
} gs __attribute__((aligned(64))) = {.once = PTHREAD_ONCE_INIT,
				     .tmu = PTHREAD_MUTEX_INITIALIZER,
				     .ngroups = 1,
				     .g = {.fd = -1, .mu = PTHREAD_MUTEX_INITIALIZER}};

GS_HIDDEN struct gs_groups_hot gs_ghot;

/* Where a group's entry of ours is published: gs_hot for the process's own. */
static struct gs_shm_proc *_Atomic *self_ref(struct gs_group *g)
{
	return g->index == 0 ? &gs_hot.group_self : &gs_ghot.self[g->index];
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

GS_HIDDEN int gs_due(uint64_t last_ns, uint64_t now, uint64_t interval_ns)
{
	return last_ns == 0 || now < last_ns || now - last_ns >= interval_ns;
}

static int file_lock(int fd, short type)
{
	struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
	int r;
	do {
		r = fcntl(fd, F_SETLKW, &fl);
	} while (r < 0 && errno == EINTR);
	return r;
}

/* 0 once the file's write lock is held (a private group: always); on failure
 * still thread-safe, best effort across processes. */
static int group_lock(struct gs_group *g)
{
	pthread_mutex_lock(&g->mu);
	return g->fd >= 0 ? file_lock(g->fd, F_WRLCK) : 0;
}

static void group_unlock(struct gs_group *g)
{
	if (g->fd >= 0)
		(void)file_lock(g->fd, F_UNLCK);
	pthread_mutex_unlock(&g->mu);
}

/* Opens, initialises if empty, validates and maps the group file. A file a
 * manager made (managed) is never made again here: gone, its run directory was
 * removed, and a new one would give the group a second limit. A file found
 * whole is mapped without the file's lock, which only an empty, half-made or
 * unreadable one takes (then read again under it), so that members attaching
 * at once do not queue on it. */
static int open_file(struct gs_group *g, const char *path, const char *name, int managed, char *err, size_t n)
{
	int fd = open(path, O_RDWR | O_CLOEXEC | (managed ? 0 : O_CREAT), 0600);
	if (fd < 0 && managed && errno == ENOENT)
		return gs_fmt(err, n, "group file %s is gone (its run directory was removed?); not making a second one",
			      path),
		       -1;
	if (fd < 0)
		return gs_fmt(err, n, "cannot open group file %s: %s", path, strerror(errno)), -1;
	int rc = -1, locked = 0;
	struct stat st;
	struct gs_shm_header h;
again:
	if ((locked && file_lock(fd, F_WRLCK) != 0) || fstat(fd, &st) != 0) {
		gs_fmt(err, n, "cannot lock group file %s: %s", path, strerror(errno));
		goto out;
	}
	memset(&h, 0, sizeof(h));
	if (st.st_size >= (off_t)sizeof(h) && pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		gs_fmt(err, n, "cannot read group file %s: %s", path, strerror(errno));
		goto out;
	}
	char why[200];
	enum gs_shm_status s =
		gs_shm_check(st.st_size >= (off_t)sizeof(h) ? &h : NULL, (uint64_t)st.st_size, why, sizeof(why));
	if (!locked && s != GS_SHM_OK) {
		locked = 1;
		goto again;
	}
	if (s == GS_SHM_BAD) {
		gs_fmt(err, n, "group file %s: %s", path, why);
		goto out;
	}
	if (s == GS_SHM_EMPTY && ftruncate(fd, (off_t)GS_SHM_FILE_SIZE) != 0) {
		gs_fmt(err, n, "cannot size group file %s: %s", path, strerror(errno));
		goto out;
	}
	void *m = mmap(NULL, GS_SHM_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		gs_fmt(err, n, "cannot map group file %s: %s", path, strerror(errno));
		goto out;
	}
	if (s == GS_SHM_EMPTY)
		gs_shm_init(m, g->pidns, name);
	g->f = m;
	g->fd = fd;
	g->dev = st.st_dev;
	g->ino = st.st_ino;
	rc = 0;
out:
	if (locked)
		(void)file_lock(fd, F_UNLCK);
	if (rc != 0)
		close(fd);
	return rc;
}

static int open_private(struct gs_group *g, const char *name, char *err, size_t n)
{
	void *m = mmap(NULL, GS_SHM_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return gs_fmt(err, n, "cannot map private group state: %s", strerror(errno)), -1;
	gs_shm_init(m, g->pidns, name);
	g->f = m;
	return 0;
}

static void atfork_prepare(void)
{
	pthread_mutex_lock(&gs.tmu);
	pthread_mutex_lock(&gs.g.mu);
	for (int i = 1; i < atomic_load(&gs.ngroups); i++)
		pthread_mutex_lock(&gs.more[i].mu);
	gs_ptrtab_fork_prepare();
	gs_ptrs_fork_prepare();
}

static void atfork_parent(void)
{
	gs_ptrs_fork_parent();
	gs_ptrtab_fork_parent();
	for (int i = atomic_load(&gs.ngroups) - 1; i >= 1; i--)
		pthread_mutex_unlock(&gs.more[i].mu);
	pthread_mutex_unlock(&gs.g.mu);
	pthread_mutex_unlock(&gs.tmu);
}

/* The child is a new process: it attaches its own entry when it allocates
 * (fcntl locks are per process, so the inherited fd stays usable). */
static void atfork_child(void)
{
	struct gs_group *g = &gs.g;
	atomic_store(&gs_hot.group_self, NULL);
	atomic_store(&g->last_reap_ns, 0);
	if (g->fd < 0 && g->f != NULL) { /* a private copy: the parent's usage is not ours */
		for (int i = 0; i < GS_SHM_MAX_GPUS; i++)
			g->f->gpu[i].used = g->f->gpu[i].peak = g->f->gpu[i].refused = 0;
		memset(g->f->proc, 0, sizeof(g->f->proc));
	}
	for (int i = atomic_load(&gs.ngroups) - 1; i >= 1; i--) {
		atomic_store(&gs_ghot.self[i], NULL);
		atomic_store(&gs.more[i].last_reap_ns, 0);
		pthread_mutex_unlock(&gs.more[i].mu);
	}
	gs_ptrs_fork_child();
	gs_ptrtab_fork_child();
	pthread_mutex_unlock(&g->mu);
	pthread_mutex_unlock(&gs.tmu);
}

static void group_init(void)
{
	int saved = errno;
	const struct gs_config *c = gs_config();
	struct gs_group *g = &gs.g;
	char err[PATH_MAX + 200];
	g->pidns = gs_pidns_self();
	int rc;
	if (c->limit_bad)
		rc = (gs_fmt(err, sizeof(err), "GPUSLICE_MEMORY_LIMIT=\"%s\" is not a decimal byte count",
			     c->limit_raw),
		      -1);
	else if (c->group_file[0] != '\0')
		rc = open_file(g, c->group_file, c->group, c->group_managed, err, sizeof(err));
	else
		rc = open_private(g, c->group, err, sizeof(err));
	if (rc == 0) {
		pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
		if (g->fd >= 0)
			gs_group_fault_guard(g->f, GS_SHM_FILE_SIZE, c->group_file, 0);
		gs_hot.group_file = g->f;
		gs_hot.group = g;
	} else {
		gs_log("%s; refusing GPU memory allocations", err);
	}
	atomic_store_explicit(&gs_hot.group_done, 1, memory_order_release);
	errno = saved;
}

GS_HIDDEN struct gs_group *gs_group_get(void)
{
	if (GS_UNLIKELY(!atomic_load_explicit(&gs_hot.group_done, memory_order_acquire)))
		pthread_once(&gs.once, group_init);
	return gs_hot.group;
}

GS_HIDDEN int gs_group_broken(struct gs_group *g)
{
	return gs_group_fault_broken(g->index);
}

GS_HIDDEN struct gs_shm_file *gs_group_file(struct gs_group *g)
{
	return g->f;
}

GS_HIDDEN int gs_group_shared(struct gs_group *g)
{
	return g->fd >= 0;
}

GS_HIDDEN const char *gs_group_name(struct gs_group *g)
{
	const char *env = gs_config()->group;
	return env[0] != '\0' && g->index == 0 ? env : g->f->hdr.group;
}

GS_HIDDEN struct gs_group *gs_group_of(int slot)
{
	int i = gs_slot_group(slot);
	return i == 0 ? gs_hot.group : &gs.more[i];
}

GS_HIDDEN uint64_t gs_group_pidns(struct gs_group *g)
{
	return g->pidns;
}

/* Under the write lock, held for sure (an entry left claiming has lost its
 * claimer: claimers hold the read lock; and a dead member's entry cannot be
 * freed and taken by a new member under us). */
static void reap_locked(struct gs_group *g)
{
	(void)gs_shm_free_orphans(g->f);
	struct gs_shm_proc *self = atomic_load(self_ref(g));
	for (int i = 0; i < GS_SHM_MAX_PROCS; i++) {
		struct gs_shm_proc *p = &g->f->proc[i];
		if (p == self || gs_ld32(&p->state) != GS_PROC_LIVE || p->pidns != g->pidns)
			continue;
		if (gs_proc_liveness(p->pid, p->start_time) == GS_DEAD)
			gs_shm_reap_proc(g->f, p);
	}
	atomic_store(&g->last_reap_ns, now_ns());
}

GS_HIDDEN void gs_group_reap(struct gs_group *g, int force)
{
	if (g->fd < 0)
		return; /* a private group has one member: us */
	if (!force && !gs_due(atomic_load(&g->last_reap_ns), now_ns(), 100000000ull))
		return;
	int saved = errno;
	if (group_lock(g) == 0) /* else: no reap (another reaper could free a member that took a dead one's entry) */
		reap_locked(g);
	group_unlock(g);
	errno = saved;
}

#ifdef GS_TEST_HOOKS
/* Called mid-claim (the entry GS_PROC_CLAIMING, the read lock held): tests stop there. */
GS_HIDDEN void (*gs_test_claim_mid)(void);
#define CLAIM_MID gs_test_claim_mid
#else
#define CLAIM_MID NULL
#endif

/* Claims an entry for who: under the file's read lock, shared with other
 * claimers (none waits for another, gs_shm_claim_proc_shared); where that
 * finds no free entry it can take, under the write lock as before, reaping the
 * dead when the table is full. Under g->mu. */
static struct gs_shm_proc *claim_self(struct gs_group *g, const struct gs_shm_proc *who)
{
	struct gs_shm_proc *self = NULL;
	if (g->fd >= 0 && file_lock(g->fd, F_RDLCK) == 0) {
		self = gs_shm_claim_proc_shared(g->f, who, CLAIM_MID);
		(void)file_lock(g->fd, F_UNLCK);
	}
	if (self != NULL)
		return self;
	int excl = g->fd < 0 || file_lock(g->fd, F_WRLCK) == 0;
	/* Dead members are reaped only when the table is full (and before a
	 * refusal, and on the views): a reap reads /proc for every member under
	 * the file's lock, so N members attaching at once made N² reads. */
	self = gs_shm_claim_proc(g->f, who);
	if (self == NULL && g->fd >= 0 && excl) { /* no reap without the lock: another could free a new member */
		reap_locked(g);
		self = gs_shm_claim_proc(g->f, who);
	}
	if (g->fd >= 0)
		(void)file_lock(g->fd, F_UNLCK);
	return self;
}

GS_HIDDEN struct gs_shm_proc *gs_group_self(struct gs_group *g)
{
	struct gs_shm_proc *_Atomic *ref = self_ref(g);
	struct gs_shm_proc *self = atomic_load_explicit(ref, memory_order_acquire);
	if (self != NULL)
		return self;
	int saved = errno, need_host_pid = 0;
	pthread_mutex_lock(&g->mu);
	self = atomic_load(ref);
	if (self == NULL) {
		struct gs_shm_proc who = {.pid = (int32_t)getpid(), .pidns = g->pidns};
		who.start_time = gs_proc_start(who.pid);
		if (g->pidns != 0 && g->pidns == g->f->hdr.host_pidns)
			who.host_pid = who.pid;
		self = claim_self(g, &who);
		atomic_store_explicit(ref, self, memory_order_release);
		need_host_pid = self != NULL && who.host_pid == 0 && g->fd >= 0;
	}
	pthread_mutex_unlock(&g->mu);
	/* Another pid namespace: the time-slice daemon fills our host pid in before
	 * it answers (outside the lock: it takes the file's lock). */
	if (need_host_pid)
		(void)gs_hello_node();
	if (self == NULL)
		gs_log_once(&g->said_full_procs,
			    "group \"%s\" has %d processes already; refusing GPU memory allocations", gs_group_name(g),
			    GS_SHM_MAX_PROCS);
	errno = saved;
	return self;
}

/* Opens the device group whose file is at path (under gs.tmu): its index,
 * or -1 (said). */
static int open_device_group(const char *path, const char *uuid)
{
	int n = atomic_load(&gs.ngroups);
	if (n >= GS_MAX_CONTAINER_GROUPS) {
		gs_log_once(&gs.said_many, "more than %d groups in this process; refusing GPU memory allocations on %s",
			    GS_MAX_CONTAINER_GROUPS, uuid);
		return -1;
	}
	struct gs_group *g = &gs.more[n];
	*g = (struct gs_group){.fd = -1, .index = n, .pidns = gs.g.pidns};
	pthread_mutex_init(&g->mu, NULL);
	char err[PATH_MAX + 200];
	if (open_file(g, path, "", 1, err, sizeof(err)) != 0) {
		gs_log("%s; refusing GPU memory allocations on %s", err, uuid);
		return -1;
	}
	gs_group_fault_guard(g->f, GS_SHM_FILE_SIZE, path, n);
	atomic_store_explicit(&gs_ghot.file[n], g->f, memory_order_release);
	atomic_store_explicit(&gs.ngroups, n + 1, memory_order_release);
	return n;
}

/* The group of GPU uuid (under gs.tmu): the one whose read-only directory the
 * node mounted at GS_CONTAINER_DEVICE_GROUPS/<uuid>, else the process's own
 * (0). A directory the container could have made itself (not a read-only
 * mount, gs_node_mount) is not the node's: ignored, said once. -1: it cannot be
 * used (said). */
static int resolve_device_group(const char *uuid)
{
	char dir[PATH_MAX], path[PATH_MAX];
	const char *base = GS_STATE_FILE_NAME;
	if (!gs_uuid_name_ok(uuid) ||
	    strlen(GS_CONTAINER_DEVICE_GROUPS) + strlen(uuid) + strlen(base) + 3 > sizeof(dir))
		return 0;
	gs_fmt(dir, sizeof(dir), "%s/%s", GS_CONTAINER_DEVICE_GROUPS, uuid);
	gs_fmt(path, sizeof(path), "%s/%s", dir, base);
	struct stat st;
	if (stat(dir, &st) != 0 && (errno == ENOENT || errno == ENOTDIR))
		return 0;
	if (!gs_node_mount(dir)) {
		gs_log_once(&gs.said_writable,
			    "%s is not a read-only mount (not the node's): GPU %s stays in the container's group", dir,
			    uuid);
		return 0;
	}
	if (stat(path, &st) != 0) { /* the node's directory without its file: no group to charge */
		gs_log("cannot use group file %s: %s; refusing GPU memory allocations on %s", path, strerror(errno),
		       uuid);
		return -1;
	}
	if (st.st_dev == gs.g.dev && st.st_ino == gs.g.ino)
		return 0;
	for (int i = 1; i < atomic_load(&gs.ngroups); i++)
		if (st.st_dev == gs.more[i].dev && st.st_ino == gs.more[i].ino)
			return i;
	return open_device_group(path, uuid);
}

/* The index of GPU uuid's group in the process's table (resolve_device_group),
 * looked up once per GPU: -1 where it cannot be used. */
static int device_group(const char *uuid)
{
	int n = atomic_load_explicit(&gs.ndevs, memory_order_acquire);
	for (int i = 0; i < n; i++)
		if (strcmp(gs.dev[i].uuid, uuid) == 0)
			return gs.dev[i].index;
	int saved = errno;
	pthread_mutex_lock(&gs.tmu);
	int idx = -2;
	n = atomic_load(&gs.ndevs);
	for (int i = 0; i < n && idx == -2; i++)
		if (strcmp(gs.dev[i].uuid, uuid) == 0)
			idx = gs.dev[i].index;
	if (idx == -2) {
		idx = resolve_device_group(uuid);
		if (n < (int)(sizeof(gs.dev) / sizeof(gs.dev[0])) && strlen(uuid) < GS_SHM_UUID_LEN) {
			strcpy(gs.dev[n].uuid, uuid);
			gs.dev[n].index = idx;
			atomic_store_explicit(&gs.ndevs, n + 1, memory_order_release);
		}
	}
	pthread_mutex_unlock(&gs.tmu);
	errno = saved;
	return idx;
}

static int claim_gpu(struct gs_group *g, const char *uuid)
{
	int i = gs_shm_find_gpu(g->f, uuid);
	if (i >= 0)
		return i;
	int saved = errno;
	(void)group_lock(g);
	uint64_t limit = gs_group_limit(&g->f->hdr, gs_config()->limit);
	i = gs_shm_claim_gpu(g->f, uuid, limit);
	if (i >= 0 && gs_config()->elastic != 0 && gs_ld32(&g->f->gpu[i].elastic) == 0) {
		/* elastic from the start: the guarantee is the limit (the daemon may rewrite both) */
		__atomic_store_n(&g->f->gpu[i].min, limit, __ATOMIC_RELAXED);
		__atomic_store_n(&g->f->gpu[i].elastic, gs_config()->elastic, __ATOMIC_RELEASE);
	}
	group_unlock(g);
	if (i < 0)
		gs_log_once(&g->said_full_gpus, "group \"%s\" uses %d GPUs already; refusing allocations on %s",
			    gs_group_name(g), GS_SHM_MAX_GPUS, uuid);
	errno = saved;
	return i;
}

GS_HIDDEN int gs_group_in_container(void)
{
	return strcmp(gs_config()->group_file, GS_CONTAINER_GROUP_FILE) == 0;
}

GS_HIDDEN int gs_group_gpu(struct gs_group *g, const char *uuid)
{
	if (gs_group_in_container()) {
		int d = device_group(uuid);
		if (d < 0)
			return -1;
		g = d == 0 ? g : &gs.more[d];
	}
	int i = claim_gpu(g, uuid);
	return i < 0 ? -1 : g->index * GS_SHM_MAX_GPUS + i;
}
