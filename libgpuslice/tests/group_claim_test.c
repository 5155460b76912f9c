/* SPDX-License-Identifier: Apache-2.0
 * Claiming process entries with real processes: claimers hold the group
 * file's lock shared, so one stopped mid-claim (SIGSTOP, its entry
 * GS_PROC_CLAIMING) holds up none of the others (under the write lock, as
 * before, it held up every one); one killed mid-claim leaves its entry
 * claiming until the next reap under the write lock frees it.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../src/account.h"
#include "../src/group.h"
#include "check.h"

extern void (*gs_test_claim_mid)(void); /* group.c under GS_TEST_HOOKS */

static char dir[] = "/tmp/gs-claim-test-XXXXXX";
static char path[256];

static pid_t spawn(int (*fn)(void *), void *arg)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		_exit(fn(arg));
	return pid;
}

static int exit_code(int st)
{
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int wait_ok(pid_t pid)
{
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	return exit_code(st);
}

static struct gs_shm_file *map_file(void)
{
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	void *m = mmap(NULL, GS_SHM_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(m != MAP_FAILED);
	close(fd);
	return m;
}

static int count(const struct gs_shm_file *f, uint32_t state)
{
	int n = 0;
	for (int i = 0; i < GS_SHM_MAX_PROCS; i++)
		n += __atomic_load_n(&f->proc[i].state, __ATOMIC_ACQUIRE) == state;
	return n;
}

/* Makes the group's file (a slot on GPU-a, under the write lock, as a first member does). */
static int make_group(void *arg)
{
	(void)arg;
	struct gs_group *g = gs_group_get();
	return g != NULL && gs_group_gpu(g, "GPU-a") >= 0 ? 0 : 10;
}

/* Attaches: 0 once its own entry is live. */
static int attach(void *arg)
{
	(void)arg;
	struct gs_group *g = gs_group_get();
	if (g == NULL)
		return 10;
	struct gs_shm_proc *me = gs_group_self(g);
	return me != NULL && me->pid == getpid() && __atomic_load_n(&me->state, __ATOMIC_ACQUIRE) == GS_PROC_LIVE ? 0
														  : 11;
}

static void stop_self(void)
{
	raise(SIGSTOP);
}

static void kill_self(void)
{
	raise(SIGKILL);
}

static int attach_stopping(void *arg)
{
	(void)arg;
	gs_test_claim_mid = stop_self;
	return attach(NULL);
}

static int attach_dying(void *arg)
{
	(void)arg;
	gs_test_claim_mid = kill_self;
	return attach(NULL);
}

static int reap_all(void *arg)
{
	(void)arg;
	struct gs_group *g = gs_group_get();
	if (g == NULL)
		return 10;
	gs_group_reap(g, 1);
	return 0;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void fresh(const char *name)
{
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
	setenv("GPUSLICE_GROUP_FILE", path, 1);
	setenv("GPUSLICE_GROUP", name, 1);
	setenv("GPUSLICE_MEMORY_LIMIT", "100000", 1);
	CHECK_EQ(wait_ok(spawn(make_group, NULL)), 0);
}

/* A claimer stopped mid-claim holds up 0 of 8 others: all 8 attach while it
 * is stopped (waited for up to 30 s, a bound no load reaches: under the write
 * lock none would ever get through), then it finishes its own claim. */
static void test_stopped_claimer(void)
{
	enum { N = 8 };
	fresh("stopped");
	pid_t s = spawn(attach_stopping, NULL);
	int st;
	CHECK(waitpid(s, &st, WUNTRACED) == s);
	CHECK(WIFSTOPPED(st));
	struct gs_shm_file *f = map_file();
	CHECK_EQ(count(f, GS_PROC_CLAIMING), 1);
	pid_t kids[N];
	int done = 0, ok = 0, exited[N] = {0};
	for (int i = 0; i < N; i++)
		kids[i] = spawn(attach, NULL);
	for (int64_t end = now_ms() + 30000; done < N && now_ms() < end;) {
		for (int i = 0; i < N; i++) {
			if (exited[i] || waitpid(kids[i], &st, WNOHANG) != kids[i])
				continue;
			exited[i] = 1;
			done++;
			ok += exit_code(st) == 0;
		}
		usleep(1000);
	}
	int claiming = count(f, GS_PROC_CLAIMING); /* still the stopped one's */
	CHECK(kill(s, SIGCONT) == 0);
	CHECK_EQ(wait_ok(s), 0);
	for (int i = 0; i < N; i++)
		if (!exited[i])
			(void)wait_ok(kids[i]);
	CHECK_EQ(done, N); /* none held up by the stopped claimer */
	CHECK_EQ(ok, N);
	CHECK_EQ(claiming, 1);
	CHECK_EQ(count(f, GS_PROC_LIVE), N + 1);
	CHECK_EQ(count(f, GS_PROC_CLAIMING), 0);
	munmap(f, GS_SHM_FILE_SIZE);
}

/* A claimer killed mid-claim leaves its entry claiming: not live to anyone,
 * not taken by the next claimer, freed by the next reap under the write lock. */
static void test_killed_claimer(void)
{
	fresh("killed");
	CHECK_EQ(wait_ok(spawn(attach_dying, NULL)), 128 + SIGKILL);
	struct gs_shm_file *f = map_file();
	CHECK_EQ(count(f, GS_PROC_CLAIMING), 1);
	CHECK_EQ(wait_ok(spawn(attach, NULL)), 0);
	CHECK_EQ(count(f, GS_PROC_CLAIMING), 1);
	CHECK_EQ(count(f, GS_PROC_LIVE), 1);
	CHECK_EQ(wait_ok(spawn(reap_all, NULL)), 0);
	CHECK_EQ(count(f, GS_PROC_CLAIMING), 0);
	CHECK_EQ(count(f, GS_PROC_LIVE), 0); /* the member that attached has exited: reaped too */
	munmap(f, GS_SHM_FILE_SIZE);
}

int main(void)
{
	CHECK(mkdtemp(dir) != NULL);
	setenv("GPUSLICE_LOG", "1", 1);
	RUN(test_stopped_claimer);
	RUN(test_killed_claimer);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK(system(cmd) == 0);
	fprintf(stderr, "group_claim_test: ok\n");
	return 0;
}
