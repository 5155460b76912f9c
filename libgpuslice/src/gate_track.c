/* SPDX-License-Identifier: Apache-2.0
 *
 * Bounds the work a holder leaves queued on the GPU, so that handing over at
 * the end of a slice waits for little, while launches run deep ahead of the GPU
 * for the rest of the slice.
 *
 * By time (the default, state HELD): every few launches (gs_gate_check, when
 * the launch count reaches check_at) a timing event, a marker, is recorded on
 * the launch's stream with the launch count. Markers that completed, in order,
 * tell how many launches the GPU has finished; two completed markers on one
 * stream tell the GPU time per launch (the elapsed time between them over the
 * launches between them, all streams together: the rate the GPU drains the
 * queue). The queued work is then (launches - finished) x time per launch. A
 * launch may go while that stays within the time left in the grant plus the
 * bound (GPUSLICE_GATE_QUEUE_US, default 10 % of the slice); otherwise the
 * launcher waits for the oldest marker. The next check comes after as many
 * launches as the remaining room allows (at most GS_GATE_CHECK_EVERY, or up to
 * GS_GATE_CHECK_MAX while those hold under a quarter of the bound); markers
 * come every 64 launches, or sooner when those hold a quarter of the bound. So the
 * queue is deep early in a slice and drained to the bound at its end.
 *
 * By count (GPUSLICE_GATE_DEPTH=N, state TRACK): an event recorded before each
 * launch; the one recorded N launches earlier is waited for first.
 *
 * Both use the first context that launches; other contexts are not bounded.
 * Markers go on the launch's own stream (a _ptsz launch's NULL is the
 * per-thread stream: GS_PT in hooks.def), never on a capturing one.
 */
#include <errno.h>

#include "gate_int.h"
#include "graphmem.h"

#define GS_TRACK_MAX 64

static struct {
	pthread_mutex_t mu;
	CUcontext ctx;
	int broken;
	unsigned next;
	CUevent ev[GS_TRACK_MAX];
	unsigned char used[GS_TRACK_MAX];
} ring = {.mu = PTHREAD_MUTEX_INITIALIZER};

#define GS_MARKS 16             /* markers in the ring (one slot kept: the last completed) */
#define GS_MARK_EVERY 64u       /* launches between two markers, at least */
#define GS_QUEUE_MIN_NS 200000u /* the default bound, at least */
#define GS_LAUNCH_NS0 1000000u  /* GPU time per launch until measured: pessimistic (a first drain learns it) */

static struct {
	pthread_mutex_t mu;
	CUcontext ctx;
	int broken;
	unsigned head, tail; /* markers recorded / completed (tail-1: the last completed) */
	unsigned done;       /* launch count the GPU has surely finished */
	uint64_t launch_ns;  /* GPU time per launch */
	_Atomic uint64_t bound_ns;
	_Atomic uint64_t alone_ns; /* gs_gate_queue_alone */
	_Atomic unsigned base;     /* launch count at the grant's start */
	struct mark {
		CUevent ev;
		CUstream stream;
		unsigned n;  /* launch count when recorded */
		int drained; /* every earlier marker had completed when it was recorded */
	} m[GS_MARKS];
} q = {.mu = PTHREAD_MUTEX_INITIALIZER, .launch_ns = GS_LAUNCH_NS0};

GS_HIDDEN void gs_gate_queue_grant(uint64_t slice_ns, unsigned n)
{
	int64_t b = gs_gate_cfg()->queue_ns;
	if (b < 0)
		b = slice_ns / 10 > GS_QUEUE_MIN_NS ? (int64_t)(slice_ns / 10) : GS_QUEUE_MIN_NS;
	atomic_store_explicit(&q.bound_ns, (uint64_t)b, memory_order_relaxed);
	atomic_store_explicit(&q.base, n, memory_order_relaxed);
}

GS_HIDDEN void gs_gate_queue_alone(uint64_t ahead_ns)
{
	atomic_store_explicit(&q.alone_ns, ahead_ns, memory_order_relaxed);
}

GS_HIDDEN void gs_gate_track_reset(void)
{
	pthread_mutex_init(&q.mu, NULL);
	q.ctx = NULL;
	q.broken = 0;
	q.head = q.tail = q.done = 0;
	q.launch_ns = GS_LAUNCH_NS0;
	atomic_store(&q.alone_ns, 0);
	pthread_mutex_init(&ring.mu, NULL);
	ring.ctx = NULL;
	ring.broken = 0;
	ring.next = 0;
	for (unsigned i = 0; i < GS_TRACK_MAX; i++)
		ring.used[i] = 0;
}

static int ring_init_locked(CUcontext cur, unsigned depth)
{
	gs_fn_cuEventCreate create = GS_REAL(cuEventCreate);
	if (create == NULL)
		return -1;
	for (unsigned i = 0; i < depth; i++)
		if (create(&ring.ev[i], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
			return -1;
	ring.ctx = cur;
	return 0;
}

GS_HIDDEN void gs_gate_track(CUstream stream)
{
	int saved = errno;
	unsigned depth = gs_gate_cfg()->depth;
	gs_fn_cuCtxGetCurrent getcur = GS_REAL(cuCtxGetCurrent);
	gs_fn_cuEventRecord record = GS_REAL(cuEventRecord);
	gs_fn_cuEventSynchronize wait = GS_REAL(cuEventSynchronize);
	CUcontext cur = NULL;
	if (depth == 0 || getcur == NULL || record == NULL || wait == NULL || getcur(&cur) != CUDA_SUCCESS ||
	    cur == NULL) {
		errno = saved;
		return;
	}
	pthread_mutex_lock(&ring.mu);
	if (!ring.broken && ring.ctx == NULL && ring_init_locked(cur, depth) != 0)
		ring.broken = 1;
	if (!ring.broken && ring.ctx == cur) {
		unsigned i = ring.next;
		if (ring.used[i])
			(void)wait(ring.ev[i]);    /* an error: do not bound this launch */
		if (!gs_graph_capturing(stream)) { /* a launch into a capture queues nothing */
			ring.used[i] = record(ring.ev[i], stream) == CUDA_SUCCESS;
			ring.next = (i + 1) % depth;
		}
	}
	pthread_mutex_unlock(&ring.mu);
	errno = saved;
}

GS_HIDDEN CUresult gs_gate_track_launch(CUstream stream)
{
	if (gs_gate_now() >= atomic_load_explicit(&gs_gate_fast.end, memory_order_relaxed))
		return gs_gate_slow(stream);
	gs_gate_track(stream);
	return CUDA_SUCCESS;
}

static int marks_init_locked(CUcontext cur)
{
	gs_fn_cuEventCreate create = GS_REAL(cuEventCreate);
	if (create == NULL)
		return -1;
	for (unsigned i = 0; i < GS_MARKS; i++)
		if (create(&q.m[i].ev, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
			return -1;
	q.ctx = cur;
	return 0;
}

/* Takes in the markers that completed, oldest first: what the GPU finished and
 * its time per launch. */
static void poll_marks_locked(void)
{
	gs_fn_cuEventQuery query = GS_REAL(cuEventQuery);
	gs_fn_cuEventElapsedTime elapsed = GS_REAL(cuEventElapsedTime);
	while (q.tail != q.head && query(q.m[q.tail % GS_MARKS].ev) == CUDA_SUCCESS) {
		struct mark *m = &q.m[q.tail % GS_MARKS];
		/* The last completed marker (kept in its slot) on the same stream. */
		struct mark *p = q.tail > 0 ? &q.m[(q.tail - 1) % GS_MARKS] : NULL;
		float ms;
		if (p != NULL && p->stream == m->stream && m->n != p->n && elapsed != NULL &&
		    elapsed(&ms, p->ev, m->ev) == CUDA_SUCCESS && ms >= 0) {
			uint64_t per = (uint64_t)((double)ms * 1e6 / (double)(m->n - p->n));
			/* Up at once (longer kernels must not overfill the queue), down
			 * smoothly. A sample whose start had completed before its end was
			 * recorded may hold time the GPU sat idle (the queue drained, other
			 * work ran): at most the time per launch, it only lowers it. */
			if (per < q.launch_ns)
				q.launch_ns = (3 * q.launch_ns + (per > 0 ? per : 1)) / 4;
			else if (!m->drained)
				q.launch_ns = per;
		}
		q.done = m->n;
		q.tail++;
	}
}

/* Waits for the oldest outstanding marker (unlocked). */
static void wait_oldest_locked(void)
{
	gs_fn_cuEventSynchronize wait = GS_REAL(cuEventSynchronize);
	CUevent ev = q.m[q.tail % GS_MARKS].ev;
	pthread_mutex_unlock(&q.mu);
	(void)wait(ev); /* an error: the next poll sees the marker still outstanding, or not */
	pthread_mutex_lock(&q.mu);
}

/* The launches to the next check: as many as the room left allows at the
 * measured rate, at most GS_GATE_CHECK_EVERY, or up to GS_GATE_CHECK_MAX while
 * those hold less than a quarter of the bound (the rule markers follow): a
 * check costs 1-2 us when its cache lines went cold, ~8 ns a launch at 256 with
 * the simulator's ~50 ns launches. */
static unsigned next_check(uint64_t queued, uint64_t room, uint64_t quarter)
{
	uint64_t left = queued < room ? (room - queued) / q.launch_ns : 0;
	uint64_t most = quarter / q.launch_ns;
	most = most < GS_GATE_CHECK_EVERY ? GS_GATE_CHECK_EVERY : most > GS_GATE_CHECK_MAX ? GS_GATE_CHECK_MAX : most;
	return left < 1 ? 1 : left > most ? (unsigned)most : (unsigned)left;
}

/* Bounds the queue for a launch (the n-th) on stream, at now; returns the
 * launches the next check may wait, or 0 when the grant ended meanwhile. */
static unsigned bound_locked(CUstream stream, unsigned n, uint64_t now)
{
	gs_fn_cuEventRecord record = GS_REAL(cuEventRecord);
	for (int waited = 0;; waited = 1) {
		if (waited)
			now = gs_gate_now();
		uint64_t end = atomic_load_explicit(&gs_gate_fast.end, memory_order_relaxed);
		if (now >= end || atomic_load_explicit(&gs_gate_fast.state, memory_order_relaxed) != GS_GATE_HELD)
			return 0;
		poll_marks_locked();
		unsigned base = atomic_load_explicit(&q.base, memory_order_relaxed);
		unsigned done = (int)(q.done - base) > 0 ? q.done : base; /* launches before the grant: drained */
		uint64_t queued = (uint64_t)(unsigned)(n - done) * q.launch_ns;
		uint64_t ahead = end - now, alone = atomic_load_explicit(&q.alone_ns, memory_order_relaxed);
		uint64_t room =
			(ahead > alone ? ahead : alone) + atomic_load_explicit(&q.bound_ns, memory_order_relaxed);
		int full = q.head - q.tail >= GS_MARKS - 1;
		if ((queued > room || full) && q.tail != q.head) {
			wait_oldest_locked();
			continue;
		}
		/* A marker every GS_MARK_EVERY launches, or sooner when they hold a
		 * quarter of the bound (long kernels): waits stay short. */
		unsigned since = n - q.m[(q.head - 1) % GS_MARKS].n;
		uint64_t quarter = atomic_load_explicit(&q.bound_ns, memory_order_relaxed) / 4;
		if ((q.tail == q.head || since >= GS_MARK_EVERY || (uint64_t)since * q.launch_ns >= quarter) &&
		    !gs_graph_capturing(stream)) { /* a launch into a capture queues nothing */
			struct mark *m = &q.m[q.head % GS_MARKS];
			int drained = q.tail == q.head;
			if (record(m->ev, stream) == CUDA_SUCCESS) {
				m->stream = stream;
				m->drained = drained;
				m->n = n - 1; /* recorded before this launch: covers the ones before it */
				q.head++;
			}
		}
		return next_check(queued, room, quarter);
	}
}

GS_HIDDEN CUresult gs_gate_check(CUstream stream, unsigned n)
{
	int saved = errno;
	const struct gs_gate_cfg *c = gs_gate_cfg();
	uint64_t now = gs_gate_now();
	if (now >= atomic_load_explicit(&gs_gate_fast.end, memory_order_relaxed))
		return gs_gate_slow(stream);
	/* Unbounded (GPUSLICE_GATE_QUEUE_US=0): a check only reads the clock for the
	 * grant's end, which the gate thread also ends. */
	unsigned next = c->queue_ns == 0 ? GS_GATE_CHECK_MAX : GS_GATE_CHECK_EVERY;
	gs_fn_cuCtxGetCurrent getcur = GS_REAL(cuCtxGetCurrent);
	CUcontext cur = NULL;
	if (c->queue_ns != 0 && getcur != NULL && GS_REAL(cuEventRecord) != NULL && GS_REAL(cuEventQuery) != NULL &&
	    GS_REAL(cuEventSynchronize) != NULL && getcur(&cur) == CUDA_SUCCESS && cur != NULL) {
		pthread_mutex_lock(&q.mu);
		if (!q.broken && q.ctx == NULL && marks_init_locked(cur) != 0)
			q.broken = 1;
		if (!q.broken && q.ctx == cur)
			next = bound_locked(stream, n, now);
		pthread_mutex_unlock(&q.mu);
		if (next == 0) {
			errno = saved;
			return gs_gate_slow(stream);
		}
	}
	atomic_store_explicit(&gs_gate_fast.check_at, n + next, memory_order_relaxed);
	errno = saved;
	return CUDA_SUCCESS;
}
