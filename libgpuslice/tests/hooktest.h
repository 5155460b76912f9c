/* SPDX-License-Identifier: Apache-2.0
 * Shared helpers of the hook tests: a private simulator state and group file
 * per test run, scenarios in forked children (the library reads its
 * environment once per process), and a read-only look at the group file. */
#ifndef GS_TEST_HOOKTEST_H
#define GS_TEST_HOOKTEST_H

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gpuslice/shm.h>

#include "check.h"
#include "drv.h"
#include "shmfile.h"

#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)

static char ht_dir[] = "/tmp/gs-hooks-test-XXXXXX";

static inline void ht_setup(void)
{
	CHECK(mkdtemp(ht_dir) != NULL);
	char p[300];
	snprintf(p, sizeof(p), "%s/sim-state", ht_dir);
	setenv("GPUSLICE_SIM_STATE", p, 1);
	setenv("GPUSLICE_SIM_MEMORY", "24GiB", 1);
	/* Contexts take nothing, so a test's exact figures are what its own calls
	 * hold; a test of what the driver holds unnamed (hooks_drvmem_test)
	 * restores the simulator's default after this. */
	setenv("GPUSLICE_SIM_CONTEXT_MEMORY", "0", 1);
	setenv("GPUSLICE_LOG", "1", 1);
}

static inline void ht_teardown(void)
{
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", ht_dir);
	CHECK(system(cmd) == 0);
}

/* Points the library at group file <name> in the test dir with a limit
 * (NULL: none). Returns the path. */
static inline const char *ht_group(const char *name, const char *limit)
{
	static char path[300];
	snprintf(path, sizeof(path), "%s/group-%s", ht_dir, name);
	setenv("GPUSLICE_GROUP_FILE", path, 1);
	setenv("GPUSLICE_GROUP", name, 1);
	if (limit != NULL)
		setenv("GPUSLICE_MEMORY_LIMIT", limit, 1);
	else
		unsetenv("GPUSLICE_MEMORY_LIMIT");
	return path;
}

static inline void ht_set_limit(struct gs_shm_header *h, const void *limit)
{
	h->limit = *(const uint64_t *)limit;
	h->limit_set = 1;
}

/* A group file <name> in the test dir as a manager (gpuslice run, the
 * time-slice daemon, gpuslice-node) makes it: the group's limit in the header.
 * Points the library at it (ht_group, no limit of its own); returns the path. */
static inline const char *ht_managed_group(const char *name, uint64_t limit)
{
	const char *path = ht_group(name, NULL);
	shm_write_managed(path, ht_set_limit, &limit);
	return path;
}

static inline pid_t ht_spawn(int (*fn)(void *), void *arg)
{
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		int rc = fn(arg);
		fflush(NULL);
		_exit(rc);
	}
	return pid;
}

static inline int ht_wait(pid_t pid)
{
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Runs fn in a child and checks it exits 0. */
#define HT_RUN(fn, arg)                                                    \
	do {                                                               \
		fprintf(stderr, "--- %s\n", #fn);                          \
		int rc_ = ht_wait(ht_spawn(fn, arg));                      \
		if (rc_ != 0) {                                            \
			fprintf(stderr, "%s failed: exit %d\n", #fn, rc_); \
			exit(1);                                           \
		}                                                          \
	} while (0)

/* The group file, mapped read-only (NULL if it does not exist yet). */
static inline const struct gs_shm_file *ht_map(const char *path)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return NULL;
	struct stat st;
	CHECK(fstat(fd, &st) == 0);
	if (st.st_size != (off_t)GS_SHM_FILE_SIZE) {
		close(fd);
		return NULL;
	}
	void *m = mmap(NULL, GS_SHM_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	CHECK(m != MAP_FAILED);
	return m;
}

static inline uint64_t ht_used(const struct gs_shm_file *f)
{
	return __atomic_load_n(&f->gpu[0].used, __ATOMIC_ACQUIRE);
}

/* Redirects stderr to a file in the test dir; ht_stderr() reads it back. */
static inline void ht_capture_stderr(const char *name)
{
	char p[300];
	snprintf(p, sizeof(p), "%s/%s.stderr", ht_dir, name);
	int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0 && dup2(fd, 2) == 2);
	close(fd);
}

static inline char *ht_stderr(char *buf, size_t n)
{
	memset(buf, 0, n);
	CHECK(pread(2, buf, n - 1, 0) >= 0);
	return buf;
}

static inline int ht_count_lines(const char *s)
{
	int n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

#endif /* GS_TEST_HOOKTEST_H */
