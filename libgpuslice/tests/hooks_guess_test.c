/* SPDX-License-Identifier: Apache-2.0
 * Hook tests: a group's first contexts, made at one instant before any was
 * measured (issue 36 item 2: many processes of one group starting at once are
 * never refused memory the group has). The first creator reserves a guess (at
 * most the group's limit); the others wait for it to be measured, however
 * long its creation takes while it lives, and then reserve what it took; only
 * a shortage the measured figure shows refuses. A guesser that is stopped
 * holds the others no longer than GPUSLICE_CONTEXT_WAIT_MS.
 */
#include <errno.h>
#include <signal.h>
#include <time.h>

#include "race.h"

/* Each test on a simulated device of its own: the device's figure is its
 * members' alone. */
static void fresh_device(const char *name, const char *context_bytes, const char *latency_us)
{
	char state[300];
	snprintf(state, sizeof(state), "%s/sim-state-%s", ht_dir, name);
	setenv("GPUSLICE_SIM_STATE", state, 1);
	setenv("GPUSLICE_SIM_CONTEXT_MEMORY", context_bytes, 1);
	setenv("GPUSLICE_SIM_LATENCY_US", latency_us, 1);
}

#define GROUP_LIMIT 268435456ull /* 256 MiB */

/* First contexts started at one instant in a 256 MiB group, on a simulated
 * device of their own: how many are made and refused; the device never holds
 * more than the limit. */
struct first_case {
	const char *name;    /* the device's and the group's */
	const char *context; /* the simulator's context memory, bytes */
	const char *latency; /* the driver's time per call, us */
	int n, made, refused;
	const char *what; /* for the failure's line */
};

static const struct first_case first_cases[] = {
	/* The first reserves the group's 256 MiB as its guess, each 3 s in the
	 * driver (longer than the 2 s a waiter used to wait); the others wait
	 * for its measurement and then reserve 64 MiB each. All three are made
	 * (before: the waiters gave up after 2 s and were refused at the
	 * 512 MiB guess, "uses 256.0 MiB of its 256.0 MiB limit"). */
	{"slowfirst", "67108864", "3000000", 3, 3, 0, "three slow first contexts of 64 MiB"},
	/* Whichever reserves the headroom first guesses, every other waits for
	 * it, wherever the others are in their reservation when it does (none
	 * finds the headroom gone and no guess to wait for). */
	{"eight", "16777216", "100000", 8, 8, 0, "eight first contexts of 16 MiB"},
	/* A real shortage still refuses: the second waits for the first's
	 * measurement, which says 200 MiB do not fit beside it: refused before
	 * the driver is asked. */
	{"shortage", "209715200", "100000", 2, 1, 1, "two first contexts of 200 MiB"},
};

static int first_contexts(void *arg)
{
	const struct first_case *c = arg;
	fprintf(stderr, "    %s\n", c->name);
	fresh_device(c->name, c->context, c->latency);
	ht_group(c->name, "268435456");
	int made, refused;
	uint64_t most = race_run(c->n, first_create, &made, &refused);
	if (made != c->made || refused != c->refused || most > GROUP_LIMIT) {
		fprintf(stderr, "%s in 256 MiB: %d made, %d refused (want %d, %d), the device held %.1f MiB\n", c->what,
			made, refused, c->made, c->refused, (double)most / MiB);
		return 1;
	}
	return 0;
}

/* The entry of member pid in f, or NULL. */
static const struct gs_shm_proc *entry_of(const struct gs_shm_file *f, pid_t pid)
{
	for (int i = 0; i < GS_SHM_MAX_PROCS; i++)
		if (__atomic_load_n(&f->proc[i].state, __ATOMIC_ACQUIRE) == GS_PROC_LIVE && f->proc[i].pid == pid)
			return &f->proc[i];
	return NULL;
}

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The waiter of stopped_guesser: its first context, its stderr in a file. */
static int late_create(void *arg)
{
	ht_capture_stderr("stopped-waiter");
	return first_create(arg);
}

/* A guesser stopped (SIGSTOP) mid-creation, its guess holding the group's
 * 256 MiB, alive: another member's first context waits for it no longer than
 * GPUSLICE_CONTEXT_WAIT_MS (here 2 s), says so in one line, and is refused;
 * the guesser, continued, is made. The waiter must be done within a minute. */
static int stopped_guesser(void *arg)
{
	(void)arg;
	fresh_device("stopped", "67108864", "10000000"); /* the guesser's creation: 10 s */
	const char *path = ht_group("stopped", "268435456");
	int out[2], go[2], hold[2];
	char c;
	CHECK(pipe(out) == 0 && pipe(go) == 0 && pipe(hold) == 0);
	struct race r = {out[1], go[0], hold[0], go[1], hold[1]};
	pid_t guesser = ht_spawn(first_create, &r);
	CHECK(read(out[0], &c, 1) == 1 && c == 'R');
	close(go[1]); /* the guesser's creation begins */
	const struct gs_shm_file *f = NULL;
	const struct gs_shm_proc *e = NULL;
	for (int64_t end = mono_ms() + 60000; e == NULL || __atomic_load_n(&e->guessing, __ATOMIC_ACQUIRE) == 0;) {
		CHECK(mono_ms() < end); /* its guess in flight within a minute */
		usleep(1000);
		f = f != NULL ? f : ht_map(path);
		e = f != NULL ? entry_of(f, guesser) : NULL;
	}
	CHECK(kill(guesser, SIGSTOP) == 0);
	int st;
	CHECK(waitpid(guesser, &st, WUNTRACED) == guesser && WIFSTOPPED(st));
	if (__atomic_load_n(&e->guessing, __ATOMIC_ACQUIRE) == 0) {
		fprintf(stderr, "the guesser ended its 10 s creation before it was stopped\n");
		return 1;
	}
	/* The waiter, in a race of its own (its go already at EOF). */
	setenv("GPUSLICE_SIM_LATENCY_US", "0", 1);
	setenv("GPUSLICE_CONTEXT_WAIT_MS", "2000", 1);
	int wout[2], wgo[2], whold[2];
	CHECK(pipe(wout) == 0 && pipe(wgo) == 0 && pipe(whold) == 0);
	struct race w = {wout[1], wgo[0], whold[0], wgo[1], whold[1]};
	pid_t waiter = ht_spawn(late_create, &w);
	close(wgo[1]);
	close(wout[1]);
	char ready = 0, outcome = 0;
	CHECK(fcntl(wout[0], F_SETFL, O_NONBLOCK) == 0);
	for (int64_t end = mono_ms() + 60000; outcome == 0 && mono_ms() < end;) {
		if (read(wout[0], ready == 0 ? &ready : &outcome, 1) != 1)
			usleep(10000);
	}
	if (outcome == 0) {
		fprintf(stderr, "a stopped guesser: the waiter was not done within a minute\n");
		kill(waiter, SIGKILL);
		kill(guesser, SIGKILL);
		return 1;
	}
	close(whold[1]);
	CHECK(kill(guesser, SIGCONT) == 0);
	close(hold[1]);
	CHECK(read(out[0], &c, 1) == 1);
	CHECK_EQ(ht_wait(guesser), 0);
	CHECK_EQ(ht_wait(waiter), 0);
	char buf[2048];
	int fd = open(strcat(strcpy(buf, ht_dir), "/stopped-waiter.stderr"), O_RDONLY);
	CHECK(fd >= 0);
	memset(buf, 0, sizeof(buf));
	CHECK(read(fd, buf, sizeof(buf) - 1) >= 0);
	close(fd);
	if (outcome != 'N' || c != 'M' || strstr(buf, "waited") == NULL) {
		fprintf(stderr,
			"a stopped guesser: the waiter's outcome %c (want N within a minute), the guesser's %c (want "
			"M); the waiter said: %s\n",
			outcome != 0 ? outcome : '-', c, buf);
		return 1;
	}
	return 0;
}

int main(void)
{
	ht_setup();
	for (size_t i = 0; i < sizeof(first_cases) / sizeof(first_cases[0]); i++)
		HT_RUN(first_contexts, (void *)&first_cases[i]);
	HT_RUN(stopped_guesser, NULL);
	ht_teardown();
	fprintf(stderr, "hooks_guess_test: ok\n");
	return 0;
}
