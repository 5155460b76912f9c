/* SPDX-License-Identifier: Apache-2.0
 * Creating and attaching the shared state file, race-free under flock. */
#include "state.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static void state_path(char *buf, size_t len)
{
	const char *p = getenv("GPUSLICE_SIM_STATE");

	if (p != NULL && *p != '\0')
		snprintf(buf, len, "%s", p);
	else
		snprintf(buf, len, "/dev/shm/gpuslice-sim-v%u-%u", SIM_STATE_VERSION, (unsigned)getuid());
}

static bool devs_match(const struct sim_state *st, const struct sim_config *cfg)
{
	if (st->ndev != (uint32_t)cfg->ndev)
		return false;
	for (int i = 0; i < cfg->ndev; i++) {
		const struct sim_dev_state *d = &st->dev[i];
		const struct sim_dev_config *c = &cfg->dev[i];
		if (strncmp(d->name, c->name, SIM_NAME_LEN) != 0 || memcmp(d->uuid, c->uuid, 16) != 0 ||
		    d->total != c->memory || d->sms != c->sms || d->minor != c->minor ||
		    st->mig[i].capable != (c->mig == SIM_MIG_OFF || c->mig == SIM_MIG_ON))
			return false;
	}
	return true;
}

static void write_devs(struct sim_state *st, const struct sim_config *cfg)
{
	memset(st->dev, 0, sizeof(st->dev));
	memset(st->mig, 0, sizeof(st->mig));
	for (int i = 0; i < cfg->ndev; i++) {
		/* MIG mode persists with the state file, as a board keeps it across reboots. */
		st->mig[i].capable = cfg->dev[i].mig == SIM_MIG_OFF || cfg->dev[i].mig == SIM_MIG_ON;
		st->mig[i].current = st->mig[i].pending = cfg->dev[i].mig == SIM_MIG_ON;
		snprintf(st->dev[i].name, SIM_NAME_LEN, "%s", cfg->dev[i].name);
		memcpy(st->dev[i].uuid, cfg->dev[i].uuid, 16);
		st->dev[i].total = cfg->dev[i].memory;
		st->dev[i].sms = cfg->dev[i].sms;
		st->dev[i].minor = cfg->dev[i].minor;
	}
	st->ndev = (uint32_t)cfg->ndev;
}

static int init_state(struct sim_state *st, const struct sim_config *cfg)
{
	pthread_mutexattr_t a;
	int rc;

	memset(st, 0, sizeof(*st));
	st->magic = SIM_STATE_MAGIC;
	st->version = SIM_STATE_VERSION;
	st->size = (uint32_t)sizeof(*st);
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	rc = pthread_mutex_init(&st->lock, &a);
	pthread_mutexattr_destroy(&a);
	if (rc != 0)
		return -1;
	write_devs(st, cfg);
	atomic_store(&st->ready, 1);
	return 0;
}

static bool any_live_proc(const struct sim_state *st, int32_t *pid)
{
	for (int i = 0; i < SIM_MAX_PROCS; i++) {
		int32_t p = atomic_load(&st->proc[i].pid);
		if (p != 0 && sim_proc_alive(p, st->proc[i].start)) {
			*pid = p;
			return true;
		}
	}
	return false;
}

/* Called with the flock held. */
static int check_or_init(struct sim_state *st, bool fresh, const struct sim_config *cfg, const char *path, char *err,
			 size_t errlen)
{
	int32_t pid = 0;

	if (fresh || atomic_load(&st->ready) == 0)
		return init_state(st, cfg) == 0 ? 0 : (set_err(err, errlen, "%s: mutex init failed", path), -1);
	/* Version 1 differs only in that minor was padding: treat it like a
	 * different device configuration (rewritten when nobody uses it). */
	bool v1 = st->magic == SIM_STATE_MAGIC && st->version == 1 && st->size == sizeof(*st);
	if (!v1 && (st->magic != SIM_STATE_MAGIC || st->version != SIM_STATE_VERSION || st->size != sizeof(*st))) {
		set_err(err, errlen, "%s: not a simulator state file of version %u (remove it)", path,
			SIM_STATE_VERSION);
		return -1;
	}
	if (!v1 && devs_match(st, cfg))
		return 0;
	if (any_live_proc(st, &pid)) {
		set_err(err, errlen, "%s: in use by pid %d with a different device configuration", path, (int)pid);
		return -1;
	}
	return init_state(st, cfg) == 0 ? 0 : (set_err(err, errlen, "%s: mutex init failed", path), -1);
}

static int lock_file(int fd)
{
	int rc;

	do
		rc = flock(fd, LOCK_EX);
	while (rc != 0 && errno == EINTR);
	return rc;
}

/* The state of fd mapped if it is whole and made for cfg (no lock needed: it
 * is only read), else NULL: then it is opened under the flock. Every process
 * opens the state at cuInit and again at nvmlInit: many starting at once
 * queued on the flock twice each. */
static struct sim_state *map_ready(int fd, const struct sim_config *cfg)
{
	struct stat sb;
	struct sim_state *st;

	if (fstat(fd, &sb) != 0 || sb.st_size != (off_t)sizeof(*st))
		return NULL;
	st = mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (st == MAP_FAILED)
		return NULL;
	if (atomic_load(&st->ready) == 1 && st->magic == SIM_STATE_MAGIC && st->version == SIM_STATE_VERSION &&
	    st->size == sizeof(*st) && devs_match(st, cfg))
		return st;
	munmap(st, sizeof(*st));
	return NULL;
}

struct sim_state *sim_state_open(const struct sim_config *cfg, char *err, size_t errlen)
{
	char path[4096];
	struct stat sb;
	struct sim_state *st = NULL;
	bool fresh;
	int fd, saved = errno;

	state_path(path, sizeof(path));
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0 && (st = map_ready(fd, cfg)) != NULL) {
		close(fd);
		errno = saved;
		return st;
	}
	if (fd < 0 || lock_file(fd) != 0 || fstat(fd, &sb) != 0) {
		set_err(err, errlen, "%s: %s", path, strerror(errno));
		goto out;
	}
	fresh = sb.st_size == 0;
	if (fresh && ftruncate(fd, (off_t)sizeof(*st)) != 0) {
		set_err(err, errlen, "%s: %s", path, strerror(errno));
		goto out;
	}
	if (!fresh && sb.st_size != (off_t)sizeof(*st)) {
		set_err(err, errlen, "%s: not a simulator state file of version %u (remove it)", path,
			SIM_STATE_VERSION);
		goto out;
	}
	st = mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (st == MAP_FAILED) {
		st = NULL;
		set_err(err, errlen, "%s: mmap: %s", path, strerror(errno));
		goto out;
	}
	if (check_or_init(st, fresh, cfg, path, err, errlen) != 0) {
		munmap(st, sizeof(*st));
		st = NULL;
	}
out:
	if (fd >= 0) {
		flock(fd, LOCK_UN); /* explicit: the mapping keeps the open file (and a flock) alive */
		close(fd);
	}
	errno = saved;
	return st;
}

struct sim_state *sim_state_attach(char *err, size_t errlen)
{
	char path[4096];
	struct stat sb;
	struct sim_state *st;
	int fd, saved = errno;

	state_path(path, sizeof(path));
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb) != 0) {
		set_err(err, errlen, "%s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		errno = saved;
		return NULL;
	}
	if (sb.st_size != (off_t)sizeof(*st)) {
		set_err(err, errlen, "%s: not a simulator state file of version %u", path, SIM_STATE_VERSION);
		close(fd);
		errno = saved;
		return NULL;
	}
	st = mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (st == MAP_FAILED) {
		set_err(err, errlen, "%s: mmap: %s", path, strerror(errno));
		errno = saved;
		return NULL;
	}
	if (st->magic != SIM_STATE_MAGIC || st->version != SIM_STATE_VERSION || st->size != sizeof(*st) ||
	    atomic_load(&st->ready) == 0) {
		set_err(err, errlen, "%s: not a ready simulator state file of version %u", path, SIM_STATE_VERSION);
		munmap(st, sizeof(*st));
		st = NULL;
	}
	errno = saved;
	return st;
}

void sim_state_close(struct sim_state *st)
{
	if (st != NULL)
		munmap(st, sizeof(*st));
}
