/* SPDX-License-Identifier: Apache-2.0
 * The execution engine: a fair FIFO ticket lock in shared memory that
 * survives the death of a holder or waiter, plus busy-time accounting. */
#include "state.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define WAIT_SLICE_NS 50000000ll /* liveness check period while waiting */
#define SPIN_NS 50000ull         /* busy kernels spin their last 50 us */

static void futex_wait(_Atomic uint32_t *addr, uint32_t val, long long ns)
{
	struct timespec ts = {.tv_sec = ns / 1000000000ll, .tv_nsec = ns % 1000000000ll};
	int saved = errno;

	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
	errno = saved;
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
	int saved = errno;

	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	errno = saved;
}

/* The ticket being served has a dead owner (or an owner that never published
 * itself in two wait slices): skip it. Only one waiter wins the CAS. */
static void skip_if_dead(struct sim_engine *e, uint32_t s, unsigned *stale)
{
	struct sim_engine_slot *sl = &e->slot[s % SIM_TICKET_SLOTS];
	bool dead;

	if (atomic_load(&sl->ticket) == s + 1) {
		dead = !sim_proc_alive(atomic_load(&sl->pid), atomic_load(&sl->start));
		*stale = 0;
	} else {
		dead = ++*stale >= 2;
	}
	if (!dead)
		return;
	if (atomic_compare_exchange_strong(&e->serving, &s, s + 1)) {
		atomic_store(&e->busy_since, 0);
		futex_wake_all(&e->serving);
	}
	*stale = 0;
}

uint32_t sim_engine_acquire(struct sim_engine *e, int32_t pid, uint64_t start)
{
	uint32_t t = atomic_fetch_add(&e->next_ticket, 1);
	struct sim_engine_slot *sl = &e->slot[t % SIM_TICKET_SLOTS];
	uint32_t last = t, s;
	unsigned stale = 0;

	atomic_store(&sl->pid, pid);
	atomic_store(&sl->start, start);
	atomic_store(&sl->ticket, t + 1);
	while ((s = atomic_load(&e->serving)) != t) {
		if (s != last) {
			last = s;
			stale = 0;
		}
		atomic_fetch_add(&e->waiters, 1);
		uint64_t before = sim_now_ns();
		futex_wait(&e->serving, s, WAIT_SLICE_NS);
		atomic_fetch_sub(&e->waiters, 1);
		if (atomic_load(&e->serving) == s && sim_now_ns() - before >= (uint64_t)WAIT_SLICE_NS)
			skip_if_dead(e, s, &stale);
	}
	return t;
}

void sim_engine_release(struct sim_engine *e, uint32_t ticket)
{
	atomic_store(&e->slot[ticket % SIM_TICKET_SLOTS].ticket, 0);
	atomic_store(&e->serving, ticket + 1);
	if (atomic_load(&e->waiters) != 0)
		futex_wake_all(&e->serving);
}

static void account(struct sim_engine *e, uint64_t s, uint64_t end)
{
	for (uint64_t b = s / SIM_UTIL_BUCKET_NS; b <= end / SIM_UTIL_BUCKET_NS; b++) {
		uint64_t lo = b * SIM_UTIL_BUCKET_NS, hi = lo + SIM_UTIL_BUCKET_NS;
		uint64_t from = s > lo ? s : lo, to = end < hi ? end : hi;
		unsigned i = (unsigned)(b % SIM_UTIL_BUCKETS);

		if (to <= from)
			continue;
		if (atomic_load(&e->util[i].epoch) != b) {
			atomic_store(&e->util[i].busy_ns, 0);
			atomic_store(&e->util[i].epoch, b);
		}
		atomic_fetch_add(&e->util[i].busy_ns, to - from);
	}
	atomic_fetch_add(&e->busy_total_ns, end - s);
}

static void hold_until(uint64_t deadline)
{
	uint64_t now = sim_now_ns();

	if (deadline > now + SPIN_NS) {
		uint64_t wake = deadline - SPIN_NS;
		struct timespec ts = {.tv_sec = (time_t)(wake / 1000000000ull),
				      .tv_nsec = (long)(wake % 1000000000ull)};
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
	}
	while (sim_now_ns() < deadline)
		;
}

uint64_t sim_engine_run(struct sim_engine *e, uint64_t busy_ns, int32_t pid, uint64_t start)
{
	uint32_t t = sim_engine_acquire(e, pid, start);
	uint64_t held = 0;

	if (busy_ns != 0) {
		uint64_t s = sim_now_ns();
		atomic_store(&e->busy_since, s);
		hold_until(s + busy_ns);
		uint64_t end = sim_now_ns();
		account(e, s, end);
		atomic_store(&e->busy_since, 0);
		held = end - s;
	}
	atomic_fetch_add(&e->kernels, 1);
	sim_engine_release(e, t);
	return held;
}

/* A holder killed while running a kernel leaves busy_since set and its
 * ticket served; with no waiter to notice, readers clean it up. */
static void reap_dead_holder(struct sim_engine *e)
{
	uint32_t s = atomic_load(&e->serving);
	struct sim_engine_slot *sl = &e->slot[s % SIM_TICKET_SLOTS];

	if (atomic_load(&e->busy_since) == 0 || atomic_load(&sl->ticket) != s + 1 ||
	    sim_proc_alive(atomic_load(&sl->pid), atomic_load(&sl->start)))
		return;
	if (atomic_compare_exchange_strong(&e->serving, &s, s + 1)) {
		atomic_store(&sl->ticket, 0);
		atomic_store(&e->busy_since, 0);
		futex_wake_all(&e->serving);
	}
}

unsigned sim_engine_utilization(struct sim_engine *e, uint64_t now)
{
	uint64_t nb = now / SIM_UTIL_BUCKET_NS;
	uint64_t first = nb >= SIM_UTIL_WINDOW_BUCKETS - 1 ? nb - (SIM_UTIL_WINDOW_BUCKETS - 1) : 0;
	uint64_t ws = first * SIM_UTIL_BUCKET_NS, busy = 0, since, pct;

	for (uint64_t b = first; b <= nb; b++) {
		unsigned i = (unsigned)(b % SIM_UTIL_BUCKETS);
		if (atomic_load(&e->util[i].epoch) == b)
			busy += atomic_load(&e->util[i].busy_ns);
	}
	reap_dead_holder(e);
	since = atomic_load(&e->busy_since);
	if (since != 0 && since < now)
		busy += now - (since > ws ? since : ws);
	if (now <= ws)
		return 0;
	pct = busy * 100 / (now - ws);
	return pct > 100 ? 100 : (unsigned)pct;
}

/* Busy time of kernels that do not hold the engine (MPS clients, mps.c). */
void sim_engine_account(struct sim_engine *e, uint64_t start_ns, uint64_t end_ns)
{
	if (end_ns > start_ns)
		account(e, start_ns, end_ns);
}

void sim_engine_count(struct sim_engine *e)
{
	atomic_fetch_add(&e->kernels, 1);
}
