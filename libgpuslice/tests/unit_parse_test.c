/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the pure parsers and formatters, with a seeded fuzz loop
 * (random and mutated inputs must never crash or read out of bounds under
 * ASan, and must either parse or be refused). */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../src/account.h"
#include "../src/config.h"
#include "../src/group.h"
#include "../src/log.h"
#include "../src/procfs.h"
#include "check.h"

static void test_parse_u64(void)
{
	static const struct {
		const char *in;
		int ok;
		uint64_t want;
	} cases[] = {
		{"0", 1, 0},
		{"1073741824", 1, 1073741824ull},
		{"18446744073709551615", 1, UINT64_MAX},
		{"18446744073709551616", 0, 0},
		{"99999999999999999999", 0, 0},
		{"", 0, 0},
		{"-1", 0, 0},
		{"+1", 0, 0},
		{" 1", 0, 0},
		{"1 ", 0, 0},
		{"1GiB", 0, 0},
		{"0x10", 0, 0},
		{"6e9", 0, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t v = 12345;
		int rc = gs_parse_u64(cases[i].in, &v);
		CHECK_EQ(rc == 0, cases[i].ok);
		CHECK_EQ(v, cases[i].ok ? cases[i].want : 12345);
	}
	uint64_t v;
	CHECK(gs_parse_u64(NULL, &v) == -1);
}

static void test_fmt_size(void)
{
	static const struct {
		uint64_t in;
		const char *want;
	} cases[] = {
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{512ull << 20, "512.0 MiB"},
		{(11ull << 29), "5.5 GiB"},
		{6ull << 30, "6.0 GiB"},
		{UINT64_MAX, "16.0 EiB"},
	};
	char buf[32];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		gs_fmt_size(buf, sizeof(buf), cases[i].in);
		if (strcmp(buf, cases[i].want) != 0) {
			fprintf(stderr, "fmt_size(%llu) = %s, want %s\n", (unsigned long long)cases[i].in, buf,
				cases[i].want);
			exit(1);
		}
	}
}

static void test_parse_stat(void)
{
	static const struct {
		const char *in;
		int ok;
		char state;
		uint64_t start;
	} cases[] = {
		{"42 (sleep) S 1 42 42 0 -1 4194304 93 0 0 0 0 0 0 0 20 0 1 0 7654321 5623808 200 18446744073709551615\n",
		 1, 'S', 7654321},
		{"42 (a b) c) Z 1 42 42 0 -1 4194304 93 0 0 0 0 0 0 0 20 0 1 0 99 0", 1, 'Z', 99},
		{"42 ()) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 123", 1, 'R', 123},
		{"42 (x) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18", 0, 0, 0},
		{"42 (x) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 12a3", 0, 0, 0},
		{"42 (x) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99999999999999999999999", 0, 0, 0},
		{"no paren at all", 0, 0, 0},
		{"", 0, 0, 0},
		{")", 0, 0, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char st = 0;
		uint64_t start = 0;
		int rc = gs_parse_stat(cases[i].in, strlen(cases[i].in), &st, &start);
		if ((rc == 0) != cases[i].ok) {
			fprintf(stderr, "parse_stat case %zu: rc %d\n", i, rc);
			exit(1);
		}
		if (cases[i].ok) {
			CHECK_EQ(st, cases[i].state);
			CHECK_EQ(start, cases[i].start);
		}
	}
	/* Our own process: alive with its start time; a bogus start time means pid reuse. */
	uint64_t me = gs_proc_start(getpid());
	CHECK(me != 0);
	CHECK(gs_proc_liveness(getpid(), me) == GS_ALIVE);
	CHECK(gs_proc_liveness(getpid(), me + 1) == GS_DEAD);
	CHECK(gs_proc_liveness(0x7ffffff0, 1) == GS_DEAD);
	CHECK(gs_pidns_self() != 0);
}

/* A thread spinning on a CPU (running or waiting for one: state R) is runnable; one
 * blocked on a pipe is not; a thread of no such id neither. The gate's idle release
 * asks this of the launching thread. */
static _Atomic int spin_stop;

static void *spin(void *arg)
{
	*(_Atomic pid_t *)arg = (pid_t)syscall(SYS_gettid);
	while (!atomic_load(&spin_stop))
		;
	return NULL;
}

struct blocker {
	int fd;
	_Atomic pid_t tid;
};

static void *block(void *arg)
{
	struct blocker *b = arg;
	char c;
	atomic_store(&b->tid, (pid_t)syscall(SYS_gettid));
	return read(b->fd, &c, 1) == 1 ? NULL : arg;
}

static void test_thread_runnable(void)
{
	_Atomic pid_t spinner = 0;
	int fds[2] = {-1, -1};
	pthread_t a, b;
	CHECK(pipe(fds) == 0);
	struct blocker bl = {.fd = fds[0], .tid = 0};
	CHECK(pthread_create(&a, NULL, spin, (void *)&spinner) == 0);
	CHECK(pthread_create(&b, NULL, block, &bl) == 0);
	while (atomic_load(&spinner) == 0 || atomic_load(&bl.tid) == 0)
		;
	CHECK_EQ(gs_thread_runnable(atomic_load(&spinner)), 1);
	CHECK_EQ(gs_thread_runnable((pid_t)syscall(SYS_gettid)), 1); /* reading it: running */
	for (int i = 0; i < 5000 && gs_thread_runnable(atomic_load(&bl.tid)) != 0; i++)
		usleep(1000); /* until the reader sleeps on the pipe (S) */
	CHECK_EQ(gs_thread_runnable(atomic_load(&bl.tid)), 0);
	CHECK_EQ(gs_thread_runnable(0x7ffffff0), 0);
	atomic_store(&spin_stop, 1);
	CHECK(write(fds[1], "x", 1) == 1);
	CHECK(pthread_join(a, NULL) == 0);
	CHECK(pthread_join(b, NULL) == 0);
	close(fds[0]);
	close(fds[1]);
}

/* /proc/<pid>/task/<tid>/schedstat: "<ns on a CPU> <ns waiting for one> <timeslices>". */
static void test_parse_schedstat(void)
{
	static const struct {
		const char *in;
		int ok;
		uint64_t exec, delay;
	} cases[] = {
		{"123456 7890 12\n", 1, 123456, 7890},
		{"0 0 0", 1, 0, 0},
		{"1844674407370955160 1 3\n", 1, 1844674407370955160u, 1},
		{"1 18446744073709551616 3\n", 0, 0, 0},
		{"1 2\n", 0, 0, 0},
		{"1 2 3 4\n", 0, 0, 0},
		{"1 -2 3\n", 0, 0, 0},
		{"1 x 3\n", 0, 0, 0},
		{"\n", 0, 0, 0},
		{"", 0, 0, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t e = 42, d = 42;
		int rc = gs_parse_schedstat(cases[i].in, strlen(cases[i].in), &e, &d);
		if ((rc == 0) != cases[i].ok) {
			fprintf(stderr, "parse_schedstat case %zu: rc %d\n", i, rc);
			exit(1);
		}
		CHECK_EQ(e, cases[i].ok ? cases[i].exec : 42);
		CHECK_EQ(d, cases[i].ok ? cases[i].delay : 42);
	}
}

/* Starved: runnable, and ran for less than half of the time it launched nothing. */
static void test_starved(void)
{
	static const struct {
		int runnable;
		uint64_t exec0, exec1, elapsed;
		int starved;
	} cases[] = {
		{1, 100, 100, 1000000, 1},     /* waited for a CPU throughout */
		{1, 100, 400100, 1000000, 1},  /* ran 40 % */
		{1, 100, 500100, 1000000, 0},  /* ran half: CPU work, not starved */
		{1, 100, 1000100, 1000000, 0}, /* ran throughout */
		{0, 100, 100, 1000000, 0},     /* asleep: no work */
		{1, 500, 100, 1000000, 1},     /* a run time that went back: as runnable */
		{1, 5, 5, 0, 0},               /* no time yet */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		CHECK_EQ(gs_starved(cases[i].runnable, cases[i].exec0, cases[i].exec1, cases[i].elapsed),
			 cases[i].starved);
}

/* Three threads spinning on one CPU each run at most about a third of the time
 * (less if anything else runs there): starved, however loaded the machine is; a
 * thread blocked on a pipe runs for none of it and is not runnable. */
struct pinned {
	int cpu;
	_Atomic pid_t tid;
};

static void *spin_on(void *arg)
{
	struct pinned *p = arg;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(p->cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0)
		return arg;
	atomic_store(&p->tid, (pid_t)syscall(SYS_gettid));
	while (!atomic_load(&spin_stop))
		;
	return NULL;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void test_thread_schedstat(void)
{
	if (access("/proc/self/schedstat", R_OK) != 0) {
		fprintf(stderr, "test_thread_schedstat: skipped: this kernel has no schedstat (CONFIG_SCHED_INFO)\n");
		return;
	}
	int cpu = sched_getcpu();
	CHECK(cpu >= 0);
	struct pinned p[3];
	pthread_t t[3];
	atomic_store(&spin_stop, 0);
	for (int i = 0; i < 3; i++) {
		p[i].cpu = cpu;
		atomic_store(&p[i].tid, 0);
		CHECK(pthread_create(&t[i], NULL, spin_on, &p[i]) == 0);
	}
	for (int i = 0; i < 3; i++)
		while (atomic_load(&p[i].tid) == 0)
			;
	int fds[2] = {-1, -1};
	CHECK(pipe(fds) == 0);
	pthread_t b;
	struct blocker bl = {.fd = fds[0], .tid = 0};
	CHECK(pthread_create(&b, NULL, block, &bl) == 0);
	while (atomic_load(&bl.tid) == 0)
		;
	for (int i = 0; i < 5000 && gs_thread_runnable(atomic_load(&bl.tid)) != 0; i++)
		usleep(1000); /* until the reader sleeps on the pipe */
	uint64_t e0[3], e1[3], be0, be1, d;
	uint64_t a = mono_ns();
	for (int i = 0; i < 3; i++)
		CHECK_EQ(gs_thread_schedstat(atomic_load(&p[i].tid), &e0[i], &d), 0);
	CHECK_EQ(gs_thread_schedstat(atomic_load(&bl.tid), &be0, &d), 0);
	usleep(200000);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(gs_thread_schedstat(atomic_load(&p[i].tid), &e1[i], &d), 0);
	CHECK_EQ(gs_thread_schedstat(atomic_load(&bl.tid), &be1, &d), 0);
	uint64_t elapsed = mono_ns() - a;
	for (int i = 0; i < 3; i++)
		if (!gs_starved(gs_thread_runnable(atomic_load(&p[i].tid)), e0[i], e1[i], elapsed)) {
			fprintf(stderr, "a thread sharing one CPU with two others ran %llu ns in %llu ns\n",
				(unsigned long long)(e1[i] - e0[i]), (unsigned long long)elapsed);
			exit(1);
		}
	CHECK_EQ(be1, be0);
	CHECK_EQ(gs_starved(gs_thread_runnable(atomic_load(&bl.tid)), be0, be1, elapsed), 0);
	CHECK(gs_thread_schedstat(0x7ffffff0, &be1, &d) == -1);
	atomic_store(&spin_stop, 1);
	CHECK(write(fds[1], "x", 1) == 1);
	for (int i = 0; i < 3; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	CHECK(pthread_join(b, NULL) == 0);
	close(fds[0]);
	close(fds[1]);
}

static void valid_header(struct gs_shm_file *f)
{
	gs_shm_init(f, 7, "grp");
}

static void test_parse_timens(void)
{
	static const struct {
		const char *in;
		int ok;
		int64_t sec, nsec;
	} cases[] = {
		{"monotonic           0         0\nboottime            0         0\n", 1, 0, 0},
		{"boottime 7 0\nmonotonic -3 250\n", 1, -3, 250},
		{"1 86400 5\n7 0 0\n", 1, 86400, 5},
		{"\nmonotonic\t1\t2", 1, 1, 2},
		{"monotonic 5 1000000000\n", 0, 0, 0},
		{"monotonic 5 -1\n", 0, 0, 0},
		{"monotonic x 0\n", 0, 0, 0},
		{"monotonic - 0\n", 0, 0, 0},
		{"monotonic 1234567890123456789 0\n", 0, 0, 0},
		{"monotonic 0\n", 0, 0, 0},
		{"monotonic 0 0 0\n", 0, 0, 0},
		{"monotonicx 0 0\n", 0, 0, 0},
		{"boottime 0 0\n", 0, 0, 0},
		{"", 0, 0, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int64_t sec = 42, nsec = 42;
		int rc = gs_parse_timens_monotonic(cases[i].in, strlen(cases[i].in), &sec, &nsec);
		if ((rc == 0) != cases[i].ok)
			fprintf(stderr, "case %zu: %s\n", i, cases[i].in);
		CHECK_EQ(rc == 0, cases[i].ok);
		if (cases[i].ok) {
			CHECK_EQ(sec, cases[i].sec);
			CHECK_EQ(nsec, cases[i].nsec);
		}
	}
	/* The length bounds the parse: a line cut short is refused. */
	CHECK(gs_parse_timens_monotonic("monotonic 0 0", 11, &(int64_t){0}, &(int64_t){0}) == -1);
	errno = EBADF;
	int shared = gs_clock_shared();
	CHECK(errno == EBADF);
	CHECK(shared == 0 || shared == 1);
}

static void test_shm_check(void)
{
	static struct gs_shm_file f;
	char err[200];
	valid_header(&f);
	CHECK(gs_shm_check(&f.hdr, GS_SHM_FILE_SIZE, err, sizeof(err)) == GS_SHM_OK);
	CHECK(gs_shm_check(NULL, 0, err, sizeof(err)) == GS_SHM_EMPTY);
	CHECK(gs_shm_check(NULL, 10, err, sizeof(err)) == GS_SHM_BAD);
	CHECK(strstr(err, "too small") != NULL);
	f.hdr.magic = 0;
	CHECK(gs_shm_check(&f.hdr, GS_SHM_FILE_SIZE, err, sizeof(err)) == GS_SHM_EMPTY);
	CHECK(gs_shm_check(&f.hdr, GS_SHM_FILE_SIZE + 1, err, sizeof(err)) == GS_SHM_BAD);
	f.hdr.magic = 0x1234;
	CHECK(gs_shm_check(&f.hdr, GS_SHM_FILE_SIZE, err, sizeof(err)) == GS_SHM_BAD);
	CHECK(strstr(err, "bad magic") != NULL);
	valid_header(&f);
	f.hdr.version = GS_SHM_VERSION + 1;
	CHECK(gs_shm_check(&f.hdr, GS_SHM_FILE_SIZE, err, sizeof(err)) == GS_SHM_BAD);
	CHECK(strstr(err, "version") != NULL);
	valid_header(&f);
	f.hdr.max_procs = 3;
	CHECK(gs_shm_check(&f.hdr, GS_SHM_FILE_SIZE, err, sizeof(err)) == GS_SHM_BAD);
	CHECK(strstr(err, "layout") != NULL);
	valid_header(&f);
	CHECK(gs_shm_check(&f.hdr, GS_SHM_FILE_SIZE - 8, err, sizeof(err)) == GS_SHM_BAD);
	CHECK(strcmp(f.hdr.group, "grp") == 0);
	CHECK_EQ(f.hdr.host_pidns, 7);
}

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

/* Seeded fuzzing of every parser: random bytes, and mutations of valid input. */
static void test_fuzz_parsers(void)
{
	static const char seed[] =
		"42 (sl ee)p) S 1 42 42 0 -1 4194304 93 0 0 0 0 0 0 0 20 0 1 0 7654321 5623808 200\n";
	static const char alphabet[] = "0123456789 ()SZx-+\n\0\tmonotic";
	static struct gs_shm_file f;
	char err[200];
	for (int iter = 0; iter < 200000; iter++) {
		char buf[128];
		size_t len = rnd() % sizeof(buf);
		if (iter % 2 == 0) {
			for (size_t i = 0; i < len; i++)
				buf[i] = alphabet[rnd() % (sizeof(alphabet) - 1)];
		} else {
			len = sizeof(seed) - 1;
			memcpy(buf, seed, len);
			for (int m = 0; m < 3; m++)
				buf[rnd() % len] = (char)(rnd() & 0xff);
			len = rnd() % (len + 1);
		}
		char st;
		uint64_t start;
		(void)gs_parse_stat(buf, len, &st, &start);
		uint64_t exec = 7, delay = 7;
		if (gs_parse_schedstat(buf, len, &exec, &delay) != 0)
			CHECK(exec == 7 && delay == 7); /* left as they were when refused */
		int64_t sec, nsec;
		if (gs_parse_timens_monotonic(buf, len, &sec, &nsec) == 0)
			CHECK(nsec >= 0 && nsec < 1000000000);
		char *s = malloc(len + 1);
		CHECK(s != NULL);
		memcpy(s, buf, len);
		s[len] = '\0';
		uint64_t v;
		if (gs_parse_u64(s, &v) == 0) {
			char back[32];
			gs_fmt(back, sizeof(back), "%llu", (unsigned long long)v);
			CHECK(strlen(back) <= strlen(s)); /* leading zeros only ever shorten */
		}
		free(s);
		/* A damaged header is classified, never read out of bounds. */
		unsigned char *raw = (unsigned char *)&f.hdr;
		valid_header(&f);
		raw[rnd() % sizeof(f.hdr)] ^= (unsigned char)(1u << (rnd() % 8));
		enum gs_shm_status r = gs_shm_check(&f.hdr, GS_SHM_FILE_SIZE, err, sizeof(err));
		CHECK(r == GS_SHM_BAD || r == GS_SHM_OK || r == GS_SHM_EMPTY);
	}
}

static void test_array_bytes(void)
{
	CHECK_EQ(gs_array_bytes(1024, 0, 0, CU_AD_FORMAT_FLOAT, 1), 4096);
	CHECK_EQ(gs_array_bytes(1024, 768, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4), 1024 * 768 * 4);
	CHECK_EQ(gs_array_bytes(64, 64, 64, CU_AD_FORMAT_HALF, 2), 64 * 64 * 64 * 4);
	CHECK_EQ(gs_array_bytes(SIZE_MAX, SIZE_MAX, 2, CU_AD_FORMAT_FLOAT, 4), UINT64_MAX);
	/* 8x8 float: 256 + 64 + 16 + 4 bytes over 4 levels. */
	CHECK_EQ(gs_mipmap_bytes(8, 8, 0, CU_AD_FORMAT_FLOAT, 1, 4), 256 + 64 + 16 + 4);
	CHECK_EQ(gs_mipmap_bytes(8, 0, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0), 8);
	CHECK_EQ(gs_mipmap_bytes(1, 1, 1, CU_AD_FORMAT_UNSIGNED_INT8, 1, 1000), 64);
}

static void test_due(void)
{
	CHECK(gs_due(0, 5, 100));
	CHECK(!gs_due(1000, 1050, 100));
	CHECK(gs_due(1000, 1100, 100));
	CHECK(gs_due(1000, 500, 100)); /* clock went backwards (other boot): run */
}

static void test_libc_lookup(void)
{
	void *mine = gs_elf_lookup_libc("dlsym", "GLIBC_2.34");
	void *theirs = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
	CHECK(mine != NULL);
	CHECK(mine == theirs);
	CHECK(gs_elf_lookup_libc("dlvsym", NULL) == dlsym(RTLD_DEFAULT, "dlvsym"));
	CHECK(gs_elf_lookup_libc("no_such_symbol_gpuslice", NULL) == NULL);
	CHECK(gs_elf_lookup_libc("dlsym", "GLIBC_0.0") == NULL);
	CHECK(gs_libc_dlsym() != NULL && gs_libc_dlvsym() != NULL);
}

int main(void)
{
	RUN(test_parse_u64);
	RUN(test_fmt_size);
	RUN(test_parse_stat);
	RUN(test_thread_runnable);
	RUN(test_parse_schedstat);
	RUN(test_starved);
	RUN(test_thread_schedstat);
	RUN(test_parse_timens);
	RUN(test_shm_check);
	RUN(test_fuzz_parsers);
	RUN(test_array_bytes);
	RUN(test_due);
	RUN(test_libc_lookup);
	fprintf(stderr, "unit_parse_test: ok\n");
	return 0;
}
