/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of the accounting logic on an in-memory group file: limits,
 * no underflow/overflow, slots, process entries and reaping, concurrent
 * threads, the pointer table, and the virtualized view. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "../src/account.h"
#include "../src/ptrtab.h"
#include "../src/view.h"
#include "check.h"

static struct gs_shm_file file;

static void test_reserve_limits(void)
{
	gs_shm_init(&file, 1, "t");
	int s = gs_shm_claim_gpu(&file, "GPU-a", 1000);
	struct gs_shm_gpu *g = &file.gpu[s];
	CHECK(gs_acct_reserve(g, 600) == 0);
	CHECK(gs_acct_reserve(g, 401) == -1); /* 1001 > 1000 */
	CHECK(gs_acct_reserve(g, 400) == 0);  /* exactly the limit */
	CHECK(gs_acct_reserve(g, 1) == -1);
	CHECK(gs_acct_reserve(g, 0) == 0);
	CHECK_EQ(g->used, 1000);
	CHECK(gs_acct_reserve(g, UINT64_MAX) == -1);
	gs_acct_release(g, 1000);
	CHECK_EQ(g->used, 0);
	gs_acct_release(g, 5); /* never below zero */
	CHECK_EQ(g->used, 0);
	CHECK_EQ(g->peak, 1000);
	CHECK(gs_acct_reserve(g, 1001) == -1); /* more than the limit alone */

	int u = gs_shm_claim_gpu(&file, "GPU-unlimited", 0);
	struct gs_shm_gpu *ug = &file.gpu[u];
	CHECK(gs_acct_reserve(ug, UINT64_MAX - 1) == 0);
	CHECK(gs_acct_reserve(ug, 2) == -1); /* would wrap */
	CHECK(gs_acct_reserve(ug, 1) == 0);
	CHECK_EQ(ug->used, UINT64_MAX);
}

static void test_slots(void)
{
	gs_shm_init(&file, 1, "t");
	CHECK(gs_shm_find_gpu(&file, "GPU-x") == -1);
	int a = gs_shm_claim_gpu(&file, "GPU-x", 10);
	int b = gs_shm_claim_gpu(&file, "GPU-y", 20);
	CHECK(a == 0 && b == 1);
	CHECK(gs_shm_claim_gpu(&file, "GPU-x", 99) == a); /* existing slot keeps its limit */
	CHECK_EQ(file.gpu[a].limit, 10);
	CHECK(gs_shm_find_gpu(&file, "GPU-y") == b);
	char name[32];
	for (int i = 2; i < GS_SHM_MAX_GPUS; i++) {
		snprintf(name, sizeof(name), "GPU-%d", i);
		CHECK(gs_shm_claim_gpu(&file, name, 1) == i);
	}
	CHECK(gs_shm_claim_gpu(&file, "GPU-one-too-many", 1) == -1);
	CHECK(gs_shm_find_gpu(&file, "GPU-one-too-many") == -1);
}

static void test_procs_and_reap(void)
{
	gs_shm_init(&file, 1, "t");
	int s = gs_shm_claim_gpu(&file, "GPU-a", 1000);
	struct gs_shm_proc who = {.pid = 10, .host_pid = 10, .start_time = 5, .pidns = 1};
	struct gs_shm_proc *p = gs_shm_claim_proc(&file, &who);
	CHECK(p != NULL && p->state == GS_PROC_LIVE);
	CHECK(gs_acct_reserve(&file.gpu[s], 700) == 0);
	gs_acct_proc_add(p, s, 700);
	struct gs_shm_proc who2 = {.pid = 11, .start_time = 5, .pidns = 1};
	struct gs_shm_proc *q = gs_shm_claim_proc(&file, &who2);
	CHECK(q != NULL && q != p);
	CHECK(gs_acct_reserve(&file.gpu[s], 400) == -1);
	gs_shm_reap_proc(&file, p); /* p died: its 700 bytes come back */
	CHECK_EQ(file.gpu[s].used, 0);
	CHECK(p->state == GS_PROC_FREE);
	CHECK(gs_acct_reserve(&file.gpu[s], 400) == 0);
	gs_acct_proc_add(q, s, 400);
	/* The same process attaching again (after exec) replaces its old entry. */
	struct gs_shm_proc *q2 = gs_shm_claim_proc(&file, &who2);
	CHECK(q2 != NULL);
	CHECK(q->state == GS_PROC_FREE || q2 == q);
	CHECK_EQ(file.gpu[s].used, 0);
	CHECK_EQ(q2->used[s], 0);
	gs_acct_proc_sub(q2, s, 50); /* saturates */
	CHECK_EQ(q2->used[s], 0);
	for (int i = 0; i < GS_SHM_MAX_PROCS; i++)
		file.proc[i].state = GS_PROC_LIVE;
	struct gs_shm_proc who3 = {.pid = 99, .start_time = 1, .pidns = 1};
	CHECK(gs_shm_claim_proc(&file, &who3) == NULL);
}

/* The entry being claimed is freed under the claimer (a reap took it for an
 * orphan): frees every entry left claiming. */
static int freed_under;
static void free_under(void)
{
	freed_under += gs_shm_free_orphans(&file);
}

/* Claims under the shared lock: the same process's former entry replaced, a
 * claiming entry neither live nor free (a write-lock claim skips it, a reap
 * under the write lock frees it); an entry freed between the claimer's CAS and
 * its live store is not returned, and after GS_CLAIM_TRIES such losses the
 * claim gives up (NULL: the caller goes to the write lock). */
static void test_claim_shared(void)
{
	gs_shm_init(&file, 1, "t");
	struct gs_shm_proc who = {.pid = 20, .start_time = 5, .pidns = 1};
	struct gs_shm_proc *p = gs_shm_claim_proc_shared(&file, &who, NULL);
	CHECK(p != NULL && p->state == GS_PROC_LIVE && p->pid == 20);
	struct gs_shm_proc *p2 = gs_shm_claim_proc_shared(&file, &who, NULL); /* after exec */
	CHECK(p2 != NULL && (p2 == p || p->state == GS_PROC_FREE));
	int live = 0;
	for (int i = 0; i < GS_SHM_MAX_PROCS; i++)
		live += file.proc[i].state == GS_PROC_LIVE;
	CHECK_EQ(live, 1);
	struct gs_shm_proc *orphan = &file.proc[0] == p2 ? &file.proc[1] : &file.proc[0];
	orphan->state = GS_PROC_CLAIMING;
	struct gs_shm_proc who2 = {.pid = 21, .start_time = 5, .pidns = 1};
	struct gs_shm_proc *q = gs_shm_claim_proc(&file, &who2);
	CHECK(q != NULL && q != orphan && orphan->state == GS_PROC_CLAIMING);
	CHECK_EQ(gs_shm_free_orphans(&file), 1);
	CHECK(orphan->state == GS_PROC_FREE && q->state == GS_PROC_LIVE && p2->state == GS_PROC_LIVE);
	freed_under = 0;
	struct gs_shm_proc who3 = {.pid = 22, .start_time = 5, .pidns = 1};
	CHECK(gs_shm_claim_proc_shared(&file, &who3, free_under) == NULL);
	CHECK_EQ(freed_under, GS_CLAIM_TRIES);
	for (int i = 0; i < GS_SHM_MAX_PROCS; i++)
		CHECK(file.proc[i].state != GS_PROC_CLAIMING &&
		      (file.proc[i].state != GS_PROC_LIVE || file.proc[i].pid != 22));
}

/* Mid-claim of pid 30 (its read lock lost): a reap frees its entry as an
 * orphan and pid 31 claims that entry (claiming, not live yet). */
static struct gs_shm_proc *taken_under;
static void free_and_take(void)
{
	if (taken_under != NULL)
		return;
	(void)gs_shm_free_orphans(&file);
	for (int i = 0; i < GS_SHM_MAX_PROCS; i++) {
		struct gs_shm_proc *p = &file.proc[i];
		if (p->state == GS_PROC_FREE && p->pid == 30) {
			p->state = GS_PROC_CLAIMING; /* as 31's CAS leaves it */
			p->pid = 31;
			taken_under = p;
			return;
		}
	}
}

/* An entry freed under its claimer and claimed by another process before
 * the first one's live store stays the other's: the first claimer's claim
 * word names it (pid 30), the entry's names 31, so it does not turn 31's
 * claim live as its own and takes another entry. */
static void test_claim_taken_under(void)
{
	gs_shm_init(&file, 1, "t");
	taken_under = NULL;
	struct gs_shm_proc who = {.pid = 30, .start_time = 5, .pidns = 1};
	struct gs_shm_proc *p = gs_shm_claim_proc_shared(&file, &who, free_and_take);
	CHECK(taken_under != NULL);
	CHECK(p != NULL && p != taken_under && p->state == GS_PROC_LIVE && p->pid == 30);
	CHECK(taken_under->state == GS_PROC_CLAIMING && taken_under->pid == 31);
}

#define THREADS 8
#define ROUNDS 20000
static _Atomic int violations;

static void *hammer(void *arg)
{
	struct gs_shm_gpu *g = arg;
	uint64_t held[4] = {0};
	for (int i = 0; i < ROUNDS; i++) {
		int k = i % 4;
		if (held[k] != 0) {
			gs_acct_release(g, held[k]);
			held[k] = 0;
		} else {
			uint64_t sz = 1 + (uint64_t)((i * 7919) % 300);
			if (gs_acct_reserve(g, sz) == 0)
				held[k] = sz;
		}
		if (__atomic_load_n(&g->used, __ATOMIC_RELAXED) > g->limit)
			atomic_fetch_add(&violations, 1);
	}
	for (int k = 0; k < 4; k++)
		if (held[k] != 0)
			gs_acct_release(g, held[k]);
	return NULL;
}

static void test_threads(void)
{
	gs_shm_init(&file, 1, "t");
	int s = gs_shm_claim_gpu(&file, "GPU-a", 1000);
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		CHECK(pthread_create(&t[i], NULL, hammer, &file.gpu[s]) == 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	CHECK_EQ(atomic_load(&violations), 0);
	CHECK_EQ(file.gpu[s].used, 0);
	CHECK(file.gpu[s].peak <= 1000);
	CHECK(file.gpu[s].peak > 500); /* they did contend */
}

static void test_ptrtab(void)
{
	struct gs_ptrtab t = GS_PTRTAB_INIT;
	struct gs_ptrent e;
	CHECK(gs_ptrtab_take(&t, GS_KIND_PTR, 1, &e) == 0);
	enum { N = 5000 };
	for (uint64_t i = 0; i < N; i++)
		CHECK(gs_ptrtab_put(&t, GS_KIND_PTR, 0x7f0000000000ull + i * 512, i + 1, (int)(i % 16)) == 0);
	CHECK(gs_ptrtab_put(&t, GS_KIND_ARRAY, 0x7f0000000000ull, 42, 3) == 0); /* same key, other kind */
	CHECK_EQ(gs_ptrtab_count(&t), N + 1);
	for (uint64_t i = 0; i < N; i += 2) {
		CHECK(gs_ptrtab_take(&t, GS_KIND_PTR, 0x7f0000000000ull + i * 512, &e) == 1);
		CHECK_EQ(e.size, i + 1);
		CHECK_EQ(e.slot, i % 16);
		CHECK(gs_ptrtab_take(&t, GS_KIND_PTR, 0x7f0000000000ull + i * 512, &e) == 0); /* once */
	}
	CHECK(gs_ptrtab_take(&t, GS_KIND_ARRAY, 0x7f0000000000ull, &e) == 1 && e.size == 42);
	/* Churn through tombstones: the table stays correct and bounded. */
	for (uint64_t r = 0; r < 50000; r++) {
		CHECK(gs_ptrtab_put(&t, GS_KIND_HANDLE, r, r, 0) == 0);
		CHECK(gs_ptrtab_take(&t, GS_KIND_HANDLE, r, &e) == 1 && e.size == r);
	}
	CHECK(t.cap <= 16384);
	CHECK_EQ(t.used, t.live); /* removals leave no tombstones */
	/* Random keys, random order of removal: every entry found until taken. */
	uint64_t keys[3000], x = 88172645463325252ull;
	for (int i = 0; i < 3000; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		keys[i] = x & 0xffffffull; /* collisions on purpose */
		if (gs_ptrtab_get(&t, GS_KIND_MIPMAP, keys[i], &e) == 1)
			keys[i] = 0;
		else
			CHECK(gs_ptrtab_put(&t, GS_KIND_MIPMAP, keys[i], i, 1) == 0);
	}
	for (int i = 2999; i >= 0; i -= 3)
		CHECK(keys[i] == 0 || gs_ptrtab_take(&t, GS_KIND_MIPMAP, keys[i], &e) == 1);
	for (int i = 0; i < 3000; i++)
		if (i % 3 != 2999 % 3 && keys[i] != 0)
			CHECK(gs_ptrtab_take(&t, GS_KIND_MIPMAP, keys[i], &e) == 1 && e.size == (uint64_t)i);
	CHECK_EQ(t.used, t.live);
	for (uint64_t i = 1; i < N; i += 2)
		CHECK(gs_ptrtab_take(&t, GS_KIND_PTR, 0x7f0000000000ull + i * 512, &e) == 1 && e.size == i + 1);
	CHECK_EQ(gs_ptrtab_count(&t), 0);
	gs_ptrtab_free(&t);
}

static void test_view(void)
{
	static const struct {
		uint64_t limit, used, rtotal, rfree;
		uint64_t total, vused, free;
	} cases[] = {
		{0, 5, 100, 60, 100, 40, 60},    /* no limit: real numbers */
		{50, 20, 100, 60, 50, 20, 30},   /* limit - used */
		{50, 20, 100, 10, 50, 20, 10},   /* others took the card: real free */
		{50, 70, 100, 60, 50, 50, 0},    /* over (limit lowered): no wrap */
		{200, 20, 100, 60, 100, 20, 60}, /* limit above the card */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct gs_memview v = gs_view(cases[i].limit, cases[i].used, cases[i].rtotal, cases[i].rfree);
		CHECK_EQ(v.total, cases[i].total);
		CHECK_EQ(v.used, cases[i].vused);
		CHECK_EQ(v.free, cases[i].free);
	}
}

static void test_view_pids(void)
{
	gs_shm_init(&file, 100, "t"); /* host pid namespace: 100 */
	struct gs_shm_proc a = {.pid = 7, .host_pid = 4007, .start_time = 1, .pidns = 200};
	struct gs_shm_proc b = {.pid = 4008, .host_pid = 4008, .start_time = 1, .pidns = 100};
	struct gs_shm_proc c = {.pid = 9, .host_pid = 0, .start_time = 1, .pidns = 300};
	CHECK(gs_shm_claim_proc(&file, &a) && gs_shm_claim_proc(&file, &b) && gs_shm_claim_proc(&file, &c));
	CHECK_EQ(gs_view_pid(&file, 4007, 100), 4007); /* host view: host pids */
	CHECK_EQ(gs_view_pid(&file, 4007, 200), 7);    /* a's own namespace */
	CHECK_EQ(gs_view_pid(&file, 4008, 200), 0);    /* b is not visible from 200 */
	CHECK_EQ(gs_view_pid(&file, 5555, 100), 0);    /* not a member */
	CHECK_EQ(gs_view_pid(&file, 0, 100), 0);

	nvmlProcessInfo_v2_t infos[4] = {
		{.pid = 5555, .usedGpuMemory = 1},
		{.pid = 4007, .usedGpuMemory = 2},
		{.pid = 1, .usedGpuMemory = 3},
		{.pid = 4008, .usedGpuMemory = 4},
	};
	unsigned int n = gs_filter_procs(&file, 100, infos, 4, sizeof(infos[0]));
	CHECK_EQ(n, 2);
	CHECK(infos[0].pid == 4007 && infos[0].usedGpuMemory == 2);
	CHECK(infos[1].pid == 4008 && infos[1].usedGpuMemory == 4);
	nvmlProcessInfo_v1_t v1[2] = {{.pid = 4007, .usedGpuMemory = 9}, {.pid = 4008, .usedGpuMemory = 8}};
	n = gs_filter_procs(&file, 200, v1, 2, sizeof(v1[0]));
	CHECK_EQ(n, 1);
	CHECK(v1[0].pid == 7 && v1[0].usedGpuMemory == 9);
}

int main(void)
{
	RUN(test_reserve_limits);
	RUN(test_slots);
	RUN(test_procs_and_reap);
	RUN(test_claim_shared);
	RUN(test_claim_taken_under);
	RUN(test_threads);
	RUN(test_ptrtab);
	RUN(test_view);
	RUN(test_view_pids);
	fprintf(stderr, "unit_acct_test: ok\n");
	return 0;
}
