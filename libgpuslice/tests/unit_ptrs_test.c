/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the allocation hooks' pointer table (ptrfast.c) and context
 * map (ctxmap.c): exactly-once takes, entries that do not fit the lock-free
 * table (dense keys, big sizes, reserved keys), kinds, draining a context,
 * churn, threads that take what other threads inserted, a drain beside a
 * take or another drain (neither hides an entry it does not take), and a
 * forked child (it starts empty; the parent keeps its entries). */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../src/ctxmap.h"
#include "../src/hot.h"
#include "../src/ptrfast.h"
#include "check.h"

static struct gs_ptrent ent(enum gs_kind kind, uint64_t key, uint64_t size, int slot, uint64_t ctx)
{
	return (struct gs_ptrent){.key = key, .size = size, .aux = ctx, .kind = (uint8_t)kind, .slot = (uint8_t)slot};
}

static void test_basic(void)
{
	struct gs_ptrent e;
	CHECK(gs_ptrs_take(GS_KIND_PTR, 0x7f0000001000ull, &e) == 0);
	struct gs_ptrent a = ent(GS_KIND_PTR, 0x7f0000001000ull, 4096, 3, 0xc0ffee);
	/* the last process slot (a device group's, group.h) */
	struct gs_ptrent b =
		ent(GS_KIND_ARRAY, 0x7f0000001000ull, 42, GS_MAX_CONTAINER_GROUPS * GS_SHM_MAX_GPUS - 1, 0);
	b.refs = 255; /* a pool's record */
	CHECK(gs_ptrs_insert(&a) == 0 && gs_ptrs_insert(&b) == 0);
	CHECK_EQ(gs_ptrs_count(), 2);
	CHECK(gs_ptrs_take(GS_KIND_MIPMAP, 0x7f0000001000ull, &e) == 0); /* other kind */
	CHECK(gs_ptrs_take(GS_KIND_PTR, 0x7f0000001000ull, &e) == 1);
	CHECK(e.key == a.key && e.size == 4096 && e.slot == 3 && e.aux == 0xc0ffee && e.kind == GS_KIND_PTR);
	CHECK(gs_ptrs_take(GS_KIND_PTR, 0x7f0000001000ull, &e) == 0); /* once */
	CHECK(gs_ptrs_take(GS_KIND_ARRAY, 0x7f0000001000ull, &e) == 1 && e.size == 42 &&
	      e.slot == GS_MAX_CONTAINER_GROUPS * GS_SHM_MAX_GPUS - 1 && e.refs == 255);
	struct gs_ptrent r = ent(GS_KIND_PTR, 0x7f0000003000ull, 9, 0, 0);
	r.refs = 256; /* past 8 bits: the locked table */
	CHECK(gs_ptrs_insert(&r) == 0 && gs_ptrs_take(GS_KIND_PTR, r.key, &e) == 1 && e.refs == 256 && e.size == 9);
	/* What does not fit an entry: reserved keys, sizes of 2^38 and more. */
	uint64_t odd[] = {0, 1, 2};
	for (int i = 0; i < 3; i++) {
		struct gs_ptrent o = ent(GS_KIND_PTR, odd[i], 100 + (uint64_t)i, 1, 0);
		CHECK(gs_ptrs_insert(&o) == 0);
	}
	struct gs_ptrent big = ent(GS_KIND_PTR, 0x7f0000200000ull, 1ull << 50, 2, 0);
	CHECK(gs_ptrs_insert(&big) == 0);
	struct gs_ptrent edge =
		ent(GS_KIND_PTR, 0x7f0000400000ull, (1ull << 38) - 1, 17, 0); /* the largest that fits */
	size_t spilled = atomic_load(&gs_hot.ptrs_spilled);
	CHECK(gs_ptrs_insert(&edge) == 0);
	CHECK_EQ(atomic_load(&gs_hot.ptrs_spilled), spilled); /* in the lock-free table */
	CHECK_EQ(gs_ptrs_count(), 5);
	CHECK(gs_ptrs_take(GS_KIND_PTR, edge.key, &e) == 1 && e.size == (1ull << 38) - 1 && e.slot == 17);
	CHECK_EQ(gs_ptrs_count(), 4);
	for (int i = 0; i < 3; i++)
		CHECK(gs_ptrs_take(GS_KIND_PTR, odd[i], &e) == 1 && e.size == 100 + (uint64_t)i);
	CHECK(gs_ptrs_take(GS_KIND_PTR, big.key, &e) == 1 && e.size == 1ull << 50 && e.slot == 2);
	CHECK_EQ(gs_ptrs_count(), 0);
}

/* 512-byte neighbours crowd their lines: the rest goes to the locked table,
 * and every entry is still taken once, in any order. */
static void test_dense_and_churn(void)
{
	enum { N = 6000 };
	struct gs_ptrent e;
	for (uint64_t i = 0; i < N; i++) {
		struct gs_ptrent a = ent(GS_KIND_PTR, 0x7f0000000000ull + i * 512, i + 1, (int)(i % 16), 0);
		CHECK(gs_ptrs_insert(&a) == 0);
	}
	CHECK_EQ(gs_ptrs_count(), N);
	for (uint64_t i = 0; i < N; i += 2)
		CHECK(gs_ptrs_take(GS_KIND_PTR, 0x7f0000000000ull + i * 512, &e) == 1 && e.size == i + 1);
	for (uint64_t i = N - 1; i < N; i -= 2)
		CHECK(gs_ptrs_take(GS_KIND_PTR, 0x7f0000000000ull + i * 512, &e) == 1 && e.size == i + 1 &&
		      e.slot == i % 16);
	CHECK_EQ(gs_ptrs_count(), 0);
	/* Moving addresses (a driver's bump allocator), a window of 300 live. */
	for (uint64_t i = 0; i < 200000; i++) {
		struct gs_ptrent a = ent(GS_KIND_PTR, 0x10000000000ull + i * 4096, i, 0, 0);
		CHECK(gs_ptrs_insert(&a) == 0);
		if (i >= 300)
			CHECK(gs_ptrs_take(GS_KIND_PTR, 0x10000000000ull + (i - 300) * 4096, &e) == 1 &&
			      e.size == i - 300);
	}
	for (uint64_t i = 200000 - 300; i < 200000; i++)
		CHECK(gs_ptrs_take(GS_KIND_PTR, 0x10000000000ull + i * 4096, &e) == 1);
	CHECK_EQ(gs_ptrs_count(), 0);
}

static int in_ctx(const struct gs_ptrent *e, void *arg)
{
	return e->aux == *(const uint64_t *)arg;
}

static void add_size(const struct gs_ptrent *e, void *arg)
{
	*(uint64_t *)arg += e->size;
}

struct drain_arg {
	uint64_t ctx, sum;
};

static int drain_match(const struct gs_ptrent *e, void *arg)
{
	return in_ctx(e, &((struct drain_arg *)arg)->ctx);
}

static void drain_each(const struct gs_ptrent *e, void *arg)
{
	add_size(e, &((struct drain_arg *)arg)->sum);
}

static void test_contexts(void)
{
	CHECK_EQ(gs_ctx_index(0), 0);
	int a = gs_ctx_index(0xa000), b = gs_ctx_index(0xb000);
	CHECK(a > 0 && b > 0 && a != b && gs_ctx_index(0xa000) == a);
	CHECK(gs_ctx_at(a) == 0xa000 && gs_ctx_at(0) == 0);
	CUdevice dev;
	CHECK(gs_ctx_device(a, &dev) == -1);
	gs_ctx_learn(a, 3);
	CHECK(gs_ctx_device(a, &dev) == 0 && dev == 3);
	CHECK_EQ(gs_ctx_slot(a), -1); /* the slot is learnt apart from the device */
	gs_ctx_learn_slot(a, 2);
	gs_ctx_learn_slot(b, GS_MAX_CONTAINER_GROUPS * GS_SHM_MAX_GPUS); /* not a process slot: not learnt */
	CHECK_EQ(gs_ctx_slot(a), 2);
	CHECK_EQ(gs_ctx_slot(b), -1);
	CHECK_EQ(gs_ctx_slot(0), -1);
	CHECK_EQ(gs_ctx_slot(-1), -1);
	gs_ctx_forget(0xa000); /* destroyed: device and slot are asked again */
	CHECK(gs_ctx_device(a, &dev) == -1 && gs_ctx_index(0xa000) == a);
	CHECK_EQ(gs_ctx_slot(a), -1);
	uint64_t want = 0;
	for (uint64_t i = 0; i < 3000; i++) {
		uint64_t ctx = i % 3 == 0 ? 0xa000 : 0xb000;
		struct gs_ptrent e = ent(GS_KIND_PTR, 0x20000000000ull + i * 8192, i + 1, 0, ctx);
		CHECK(gs_ptrs_insert(&e) == 0);
		want += ctx == 0xa000 ? i + 1 : 0;
	}
	struct drain_arg d = {.ctx = 0xa000};
	CHECK_EQ(gs_ptrs_drain(drain_match, drain_each, &d), 1000);
	CHECK_EQ(d.sum, want);
	CHECK_EQ(gs_ptrs_count(), 2000);
	d = (struct drain_arg){.ctx = 0xb000};
	CHECK_EQ(gs_ptrs_drain(drain_match, drain_each, &d), 2000);
	CHECK_EQ(gs_ptrs_count(), 0);
	/* The map fills up: entries of contexts past it still work (locked table). */
	for (uint64_t c = 1; c <= GS_CTXMAP_MAX + 5; c++)
		(void)gs_ctx_index(0x100000 + c);
	CHECK_EQ(gs_ctx_index(0xdead0000), -1);
	struct gs_ptrent e = ent(GS_KIND_PTR, 0x30000000000ull, 7, 1, 0xdead0000), out;
	CHECK(gs_ptrs_insert(&e) == 0);
	CHECK(gs_ptrs_take(GS_KIND_PTR, e.key, &out) == 1 && out.aux == 0xdead0000 && out.size == 7);
}

/* Each thread inserts its keys; the next thread takes them, concurrently:
 * every entry is taken exactly once, with its own size. */
enum { THREADS = 4, PER = 20000 };
static _Atomic uint64_t inserted[THREADS];
static _Atomic uint64_t taken_sum, taken_n;

static uint64_t key_of(int t, uint64_t i)
{
	return 0x40000000000ull + ((uint64_t)t << 32) + i * 1024;
}

static void *worker(void *arg)
{
	int t = (int)(intptr_t)arg, from = (t + 1) % THREADS;
	uint64_t next = 0;
	for (uint64_t i = 0; i < PER || next < PER;) {
		if (i < PER) {
			struct gs_ptrent e = ent(GS_KIND_PTR, key_of(t, i), i + 1, t, 0);
			CHECK(gs_ptrs_insert(&e) == 0);
			atomic_store(&inserted[t], ++i);
		}
		while (next < atomic_load(&inserted[from])) {
			struct gs_ptrent e;
			CHECK(gs_ptrs_take(GS_KIND_PTR, key_of(from, next), &e) == 1);
			CHECK_EQ(e.size, next + 1);
			CHECK_EQ(e.slot, from);
			atomic_fetch_add(&taken_sum, e.size);
			atomic_fetch_add(&taken_n, 1);
			next++;
		}
	}
	return NULL;
}

static void test_threads(void)
{
	pthread_t th[THREADS];
	for (int t = 0; t < THREADS; t++)
		CHECK(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0);
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	CHECK_EQ(atomic_load(&taken_n), (uint64_t)THREADS * PER);
	CHECK_EQ(atomic_load(&taken_sum), (uint64_t)THREADS * PER * (PER + 1) / 2);
	CHECK_EQ(gs_ptrs_count(), 0);
}

/* A drain looks at every entry; while it looks at one it does not take,
 * another thread must still find it: a free beside a context's destruction
 * (reliability_prop_test: the free passed uncounted, the group kept counting
 * what the driver had freed), or another context's destruction (the entry
 * survived it). The drain's match stops at entry `stop` until the other
 * thread is done (at most 10 s, so a table that hides it fails the check,
 * not the run). */
struct beside {
	uint64_t ctx, stop, sum;
	_Atomic int at_stop, other_done;
};

static int beside_match(const struct gs_ptrent *e, void *arg)
{
	struct beside *b = arg;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (e->key == b->stop && !atomic_exchange(&b->at_stop, 1))
		while (!atomic_load(&b->other_done) && clock_gettime(CLOCK_MONOTONIC, &t) == 0 &&
		       t.tv_sec - t0.tv_sec < 10)
			usleep(100);
	return e->aux == b->ctx;
}

static void beside_each(const struct gs_ptrent *e, void *arg)
{
	((struct beside *)arg)->sum += e->size;
}

static void *beside_drain(void *arg)
{
	struct beside *b = arg;
	return (void *)(uintptr_t)gs_ptrs_drain(beside_match, beside_each, b);
}

static void wait_at_stop(struct beside *b)
{
	while (!atomic_load(&b->at_stop))
		sched_yield();
}

/* Contexts of test_contexts' map (a context past the map would put the
 * entries in the locked table, where the drain holds the lock). */
static void test_drain_beside(void)
{
	struct gs_ptrent p = ent(GS_KIND_PTR, 0x60000000000ull, 4 * 1048576, 0, 0xa000);
	struct gs_ptrent q = ent(GS_KIND_ARRAY, 0x60000400000ull, 241664, 0, 0xb000), e;
	CHECK(gs_ptrs_insert(&p) == 0 && gs_ptrs_insert(&q) == 0);
	CHECK_EQ(atomic_load(&gs_hot.ptrs_spilled), 0); /* both in the lock-free table */
	/* A take beside a drain of another context. */
	struct beside b = {.ctx = 0xb000, .stop = p.key};
	pthread_t th;
	CHECK(pthread_create(&th, NULL, beside_drain, &b) == 0);
	wait_at_stop(&b);
	int took = gs_ptrs_take(GS_KIND_PTR, p.key, &e);
	atomic_store(&b.other_done, 1);
	void *n;
	pthread_join(th, &n);
	CHECK_EQ(took, 1);
	CHECK_EQ(e.size, p.size);
	CHECK_EQ((uintptr_t)n, 1);
	CHECK_EQ(b.sum, q.size);
	CHECK_EQ(gs_ptrs_count(), 0);
	/* Two drains of two contexts at once. */
	CHECK(gs_ptrs_insert(&p) == 0 && gs_ptrs_insert(&q) == 0);
	b = (struct beside){.ctx = 0xa000, .stop = q.key};
	CHECK(pthread_create(&th, NULL, beside_drain, &b) == 0);
	wait_at_stop(&b);
	struct beside other = {.ctx = 0xb000};
	size_t m = gs_ptrs_drain(beside_match, beside_each, &other);
	atomic_store(&b.other_done, 1);
	pthread_join(th, &n);
	CHECK_EQ(m, 1);
	CHECK_EQ(other.sum, q.size);
	CHECK_EQ((uintptr_t)n, 1);
	CHECK_EQ(b.sum, p.size);
	CHECK_EQ(gs_ptrs_count(), 0);
}

static void test_fork(void)
{
	struct gs_ptrent a = ent(GS_KIND_PTR, 0x50000000000ull, 64, 1, 0), big = a, e;
	big.key += 1ull << 30;
	big.size = 1ull << 41; /* the locked table */
	CHECK(gs_ptrs_insert(&a) == 0 && gs_ptrs_insert(&big) == 0);
	gs_ptrs_fork_prepare();
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		gs_ptrs_fork_child();
		_exit(gs_ptrs_count() == 0 && gs_ptrs_take(GS_KIND_PTR, a.key, &e) == 0 &&
				      gs_ptrs_take(GS_KIND_PTR, big.key, &e) == 0 && gs_ptrs_insert(&a) == 0 &&
				      gs_ptrs_take(GS_KIND_PTR, a.key, &e) == 1
			      ? 0
			      : 1);
	}
	gs_ptrs_fork_parent();
	int st;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK_EQ(gs_ptrs_count(), 2);
	CHECK(gs_ptrs_take(GS_KIND_PTR, a.key, &e) == 1 && gs_ptrs_take(GS_KIND_PTR, big.key, &e) == 1);
	CHECK_EQ(e.size, 1ull << 41);
}

int main(void)
{
	RUN(test_basic);
	RUN(test_dense_and_churn);
	RUN(test_contexts);
	RUN(test_threads);
	RUN(test_drain_beside);
	RUN(test_fork);
	fprintf(stderr, "unit_ptrs_test: ok\n");
	return 0;
}
