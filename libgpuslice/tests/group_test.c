/* SPDX-License-Identifier: Apache-2.0
 * Tests of the group file with real processes: race-free creation by many
 * processes at once, limits shared across processes, dead-process reclaim
 * (exited and zombie), pid reuse, malformed files and settings, fork. Each
 * scenario runs in forked children (the group is opened once per process).
 */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/account.h"
#include "../src/group.h"
#include "check.h"

static char dir[] = "/tmp/gs-group-test-XXXXXX";
static char path[256];

static pid_t spawn(int (*fn)(void *), void *arg)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		_exit(fn(arg));
	return pid;
}

static int wait_ok(pid_t pid)
{
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Maps the group file once a member has created it. */
static struct gs_shm_file *map_file(void)
{
	int fd = -1;
	struct stat st;
	for (int i = 0; i < 1000; i++) {
		fd = open(path, O_RDWR);
		if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size == (off_t)GS_SHM_FILE_SIZE)
			break;
		if (fd >= 0)
			close(fd);
		fd = -1;
		usleep(5000);
	}
	CHECK(fd >= 0);
	void *m = mmap(NULL, GS_SHM_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(m != MAP_FAILED);
	close(fd);
	return m;
}

static void fresh(const char *name, const char *limit)
{
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
	setenv("GPUSLICE_GROUP_FILE", path, 1);
	setenv("GPUSLICE_GROUP", name, 1);
	if (limit)
		setenv("GPUSLICE_MEMORY_LIMIT", limit, 1);
	else
		unsetenv("GPUSLICE_MEMORY_LIMIT");
}

/* Attach and reserve arg bytes on GPU-a, then exit (without releasing). */
/* Reaps the dead members (as a refusal does), then exits. */
static int reap_all(void *arg)
{
	(void)arg;
	struct gs_group *g = gs_group_get();
	if (g == NULL)
		return 10;
	gs_group_reap(g, 1);
	return 0;
}

static int attach_reserve(void *arg)
{
	struct gs_group *g = gs_group_get();
	if (g == NULL)
		return 10;
	int slot = gs_group_gpu(g, "GPU-a");
	struct gs_shm_proc *me = gs_group_self(g);
	if (slot < 0 || me == NULL)
		return 11;
	uint64_t size = (uint64_t)(uintptr_t)arg;
	if (gs_acct_reserve(&gs_group_file(g)->gpu[slot], size) != 0)
		return 12;
	gs_acct_proc_add(me, slot, size);
	return me->host_pid == getpid() && me->pid == getpid() ? 0 : 13;
}

static int ready_fd[2], go_fd[2];

/* attach_reserve(100), tell the parent, and stay alive until told to go. */
static int attach_and_hold(void *arg)
{
	(void)arg;
	close(go_fd[1]);
	int rc = attach_reserve((void *)(uintptr_t)100);
	char c = (char)rc;
	if (write(ready_fd[1], &c, 1) != 1)
		return 20;
	(void)read(go_fd[0], &c, 1); /* EOF when the parent closes it */
	return rc;
}

static void test_create_race_and_reclaim(void)
{
	fresh("race", "100000");
	enum { N = 8 };
	pid_t kids[N];
	CHECK(pipe(ready_fd) == 0 && pipe(go_fd) == 0);
	for (int i = 0; i < N; i++)
		kids[i] = spawn(attach_and_hold, NULL);
	for (int i = 0; i < N; i++) {
		char c;
		CHECK(read(ready_fd[0], &c, 1) == 1);
		CHECK_EQ(c, 0);
	}
	struct gs_shm_file *f = map_file();
	char err[200];
	CHECK(gs_shm_check(&f->hdr, GS_SHM_FILE_SIZE, err, sizeof(err)) == GS_SHM_OK);
	CHECK(strcmp(f->gpu[0].uuid, "GPU-a") == 0);
	CHECK(f->gpu[1].state == GS_SLOT_FREE); /* one slot, not one per racer */
	CHECK_EQ(f->gpu[0].limit, 100000);
	CHECK_EQ(f->gpu[0].used, N * 100);
	int live = 0;
	for (int i = 0; i < GS_SHM_MAX_PROCS; i++)
		live += f->proc[i].state == GS_PROC_LIVE;
	CHECK_EQ(live, N);
	close(go_fd[1]);
	for (int i = 0; i < N; i++)
		CHECK_EQ(wait_ok(kids[i]), 0);
	close(go_fd[0]);
	close(ready_fd[0]);
	close(ready_fd[1]);
	CHECK_EQ(f->gpu[0].used, N * 100); /* the dead hold it until someone reaps */
	/* A new member does not read every member's /proc on attach (many
	 * starting at once would wait for each other's scans under the lock);
	 * the dead are reaped when the table is full, before a refusal, and on
	 * the views. */
	CHECK_EQ(wait_ok(spawn(attach_reserve, (void *)(uintptr_t)7)), 0);
	CHECK_EQ(f->gpu[0].used, N * 100 + 7);
	CHECK_EQ(wait_ok(spawn(reap_all, NULL)), 0);
	CHECK_EQ(f->gpu[0].used, 0); /* the 7 of the member that exited since too */
	munmap(f, GS_SHM_FILE_SIZE);
}

/* Reserve 64 KiB chunks until refused; report how many through the pipe. */
static int fill(void *arg)
{
	int fd = (int)(intptr_t)arg;
	struct gs_group *g = gs_group_get();
	if (g == NULL)
		return 10;
	int slot = gs_group_gpu(g, "GPU-a");
	struct gs_shm_proc *me = gs_group_self(g);
	int n = 0;
	while (gs_acct_reserve(&gs_group_file(g)->gpu[slot], 65536) == 0) {
		gs_acct_proc_add(me, slot, 65536);
		n++;
	}
	if (write(fd, &n, sizeof(n)) != sizeof(n))
		return 11;
	pause(); /* stay alive: our memory must not be reaped meanwhile */
	return 0;
}

static void test_two_processes_share_limit(void)
{
	fresh("share", "67108864"); /* 64 MiB = 1024 chunks */
	int p[2];
	CHECK(pipe(p) == 0);
	pid_t a = spawn(fill, (void *)(intptr_t)p[1]);
	pid_t b = spawn(fill, (void *)(intptr_t)p[1]);
	int na = 0, nb = 0;
	CHECK(read(p[0], &na, sizeof(na)) == sizeof(na));
	CHECK(read(p[0], &nb, sizeof(nb)) == sizeof(nb));
	CHECK_EQ(na + nb, 1024);
	struct gs_shm_file *f = map_file();
	CHECK_EQ(f->gpu[0].used, 67108864);
	kill(a, SIGKILL);
	kill(b, SIGKILL);
	wait_ok(a);
	wait_ok(b);
	munmap(f, GS_SHM_FILE_SIZE);
	close(p[0]);
	close(p[1]);
}

static int attach_then_exit(void *arg)
{
	(void)arg;
	return attach_reserve((void *)(uintptr_t)5000);
}

static int reap_now(void *arg)
{
	(void)arg;
	struct gs_group *g = gs_group_get();
	if (g == NULL)
		return 10;
	gs_group_reap(g, 1);
	return (int)(gs_group_file(g)->gpu[0].used != 0);
}

static void test_zombie_reclaim(void)
{
	fresh("zombie", "100000");
	pid_t z = spawn(attach_then_exit, NULL);
	/* Not waited for: a zombie until we reap it. */
	struct gs_shm_file *f = map_file();
	for (int i = 0; i < 500 && f->gpu[0].used != 5000; i++)
		usleep(10000);
	CHECK_EQ(f->gpu[0].used, 5000);
	char st[64], buf[256];
	snprintf(st, sizeof(st), "/proc/%d/stat", (int)z);
	for (int i = 0; i < 500; i++) { /* wait until it is a zombie */
		int fd = open(st, O_RDONLY);
		ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
		if (fd >= 0)
			close(fd);
		if (n > 0 && (buf[n] = '\0', strstr(buf, ") Z ") != NULL))
			break;
		usleep(10000);
	}
	CHECK_EQ(wait_ok(spawn(reap_now, NULL)), 0);
	CHECK_EQ(f->gpu[0].used, 0);
	CHECK_EQ(wait_ok(z), 0);
	/* An entry whose pid is alive but with another start time (pid reused). */
	int free_i = 0;
	while (f->proc[free_i].state == GS_PROC_LIVE)
		free_i++;
	f->gpu[0].used = 300;
	f->proc[free_i].pid = getpid();
	f->proc[free_i].pidns = f->hdr.host_pidns;
	f->proc[free_i].start_time = 1; /* not ours */
	f->proc[free_i].used[0] = 300;
	__atomic_store_n(&f->proc[free_i].state, GS_PROC_LIVE, __ATOMIC_RELEASE);
	CHECK_EQ(wait_ok(spawn(reap_now, NULL)), 0);
	CHECK_EQ(f->gpu[0].used, 0);
	CHECK(f->proc[free_i].state == GS_PROC_FREE);
	munmap(f, GS_SHM_FILE_SIZE);
}

/* Expects the group to be unusable, with a message naming why on stderr. */
static int expect_broken(void *arg)
{
	const char *want = arg;
	char log[300];
	snprintf(log, sizeof(log), "%s/stderr", dir);
	int fd = open(log, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || dup2(fd, 2) < 0)
		return 10;
	if (gs_group_get() != NULL)
		return 11;
	char buf[512] = {0};
	if (pread(fd, buf, sizeof(buf) - 1, 0) <= 0)
		return 12;
	return strstr(buf, want) != NULL && strncmp(buf, "gpuslice: ", 10) == 0 &&
			       strchr(buf, '\n') == strrchr(buf, '\n')
		       ? 0
		       : 13;
}

static void write_file(const void *data, size_t n)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	CHECK(write(fd, data, n) == (ssize_t)n);
	close(fd);
}

static void check_unchanged(const void *data, size_t n)
{
	static char back[GS_SHM_FILE_SIZE + 16];
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	CHECK(read(fd, back, sizeof(back)) == (ssize_t)n);
	close(fd);
	CHECK(memcmp(back, data, n) == 0);
}

static void test_malformed(void)
{
	static char junk[4096];
	memset(junk, 'x', sizeof(junk));
	fresh("junk", "1000");
	write_file(junk, sizeof(junk));
	CHECK_EQ(wait_ok(spawn(expect_broken, "bad magic")), 0);
	check_unchanged(junk, sizeof(junk));

	static struct gs_shm_file good;
	gs_shm_init(&good, 1, "v");
	good.hdr.version = 99;
	fresh("version", "1000");
	write_file(&good, sizeof(good));
	CHECK_EQ(wait_ok(spawn(expect_broken, "version 99")), 0);
	check_unchanged(&good, sizeof(good));

	fresh("tiny", "1000");
	write_file("GPUS", 4);
	CHECK_EQ(wait_ok(spawn(expect_broken, "too small")), 0);
	check_unchanged("GPUS", 4);

	fresh("limit", "6GiB");
	CHECK_EQ(wait_ok(spawn(expect_broken, "GPUSLICE_MEMORY_LIMIT=\"6GiB\"")), 0);

	fresh("nodir", "1000");
	setenv("GPUSLICE_GROUP_FILE", "/nonexistent-dir/x/y", 1);
	CHECK_EQ(wait_ok(spawn(expect_broken, "cannot open group file")), 0);
}

static int private_fork(void *arg)
{
	(void)arg;
	struct gs_group *g = gs_group_get();
	if (g == NULL || gs_group_shared(g))
		return 10;
	if (attach_reserve((void *)(uintptr_t)900) != 0 || gs_group_file(g)->gpu[0].used != 900)
		return 11;
	pid_t pid = fork();
	if (pid == 0) /* the child's private group starts empty, slots kept */
		_exit(gs_group_file(g)->gpu[0].used == 0 && gs_group_self(g) != NULL ? 0 : 1);
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 && gs_group_file(g)->gpu[0].used == 900 ? 0 : 12;
}

static void test_private_group(void)
{
	unsetenv("GPUSLICE_GROUP_FILE");
	setenv("GPUSLICE_MEMORY_LIMIT", "1000", 1);
	CHECK_EQ(wait_ok(spawn(private_fork, NULL)), 0);
}

int main(void)
{
	CHECK(mkdtemp(dir) != NULL);
	setenv("GPUSLICE_LOG", "1", 1);
	RUN(test_create_race_and_reclaim);
	RUN(test_two_processes_share_limit);
	RUN(test_zombie_reclaim);
	RUN(test_malformed);
	RUN(test_private_group);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK(system(cmd) == 0);
	fprintf(stderr, "group_test: ok\n");
	return 0;
}
