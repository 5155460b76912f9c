/* SPDX-License-Identifier: Apache-2.0
 *
 * The launch gate's slow path: taking the first grant, handing the GPU over at
 * the end of a slice (after the outstanding work finished) and waiting for the
 * next grant. With no daemon (or one too slow) launches go on ungated, as
 * configured, and the gate reconnects when the daemon returns.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gpuslice/shm.h>

#include "device.h"
#include "gate_int.h"
#include "log.h"
#include "pool.h"

GS_HIDDEN struct gs_gate_fast gs_gate_fast;
GS_HIDDEN struct gs_gate gs_gate = {
	.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .fd = -1, .dead_fd = -1, .st = GS_GATE_DOWN};

static struct gs_gate_cfg cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

static uint64_t env_u64(const char *name, uint64_t def, uint64_t min, uint64_t max)
{
	const char *v = getenv(name);
	char *end;
	if (v == NULL || *v == '\0')
		return def;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (errno != 0 || *end != '\0' || v[0] == '-' || n < min || n > max) {
		gs_log("%s=%s is not a number in [%llu, %llu]; using %llu", name, v, (unsigned long long)min,
		       (unsigned long long)max, (unsigned long long)def);
		return def;
	}
	return n;
}

/* The socket: GPUSLICE_NODE_SOCKET, else <run dir>/node.sock with the run
 * directory chosen as gpuslice's Go side does (internal/paths). */
static void default_socket(char *out, size_t n)
{
	const char *s = getenv("GPUSLICE_NODE_SOCKET");
	const char *run = getenv("GPUSLICE_RUN_DIR");
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	if (s != NULL && *s != '\0')
		gs_fmt(out, n, "%s", s);
	else if (run != NULL && *run != '\0')
		gs_fmt(out, n, "%s/node.sock", run);
	else if (geteuid() == 0)
		gs_fmt(out, n, "/run/gpuslice/node.sock");
	else if (xdg != NULL && *xdg != '\0')
		gs_fmt(out, n, "%s/gpuslice/node.sock", xdg);
	else
		gs_fmt(out, n, "/tmp/gpuslice-%u/node.sock", (unsigned)geteuid());
}

/* Every wait of the gate is on CLOCK_MONOTONIC: a step of the wall clock
 * (backwards during an outage) never stretches one. */
static void init_cv(void)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&gs_gate.cv, &ca);
	pthread_condattr_destroy(&ca);
}

static void after_fork_child(void)
{
	/* The child is a new caller: it connects with its own identity, from a
	 * gate thread of its own (threads do not survive fork). */
	pthread_mutex_init(&gs_gate.mu, NULL);
	init_cv();
	if (gs_gate.fd >= 0)
		close(gs_gate.fd);
	if (gs_gate.dead_fd >= 0)
		close(gs_gate.dead_fd);
	gs_gate.fd = gs_gate.dead_fd = -1;
	gs_gate.gen++;
	gs_gate.st = GS_GATE_DOWN;
	gs_gate.retry_at = 0;
	gs_gate.receiving = gs_gate.thread = 0;
	gs_gate.ctx = NULL;
	gs_gate.launcher = 0;
	gs_gate_track_reset();
	atomic_store(&gs_gate_fast.state, cfg.off ? GS_GATE_PASS : GS_GATE_ASK);
}

/* Whether launches go ungated. In a pod container (its group file where the
 * device plugin mounts it) the node decides, in the group's read-only
 * directory: a member cannot turn its gate off by its environment. Elsewhere
 * (a single node) GPUSLICE_GATE=off|0. */
static int gate_off(void)
{
	struct stat st;
	int e = errno, off;
	if (stat(GS_CONTAINER_GROUP_FILE, &st) == 0 || errno != ENOENT) {
		off = stat(GS_CONTAINER_GATE_OFF, &st) == 0;
	} else {
		const char *gate = getenv("GPUSLICE_GATE");
		off = gate != NULL && (strcmp(gate, "off") == 0 || strcmp(gate, "0") == 0);
	}
	errno = e;
	return off;
}

static void cfg_init(void)
{
	const char *loss = getenv("GPUSLICE_GATE_ON_LOSS");
	cfg.off = gate_off();
	cfg.wait_on_loss = loss != NULL && strcmp(loss, "wait") == 0;
	if (loss != NULL && *loss != '\0' && !cfg.wait_on_loss && strcmp(loss, "run") != 0)
		gs_log("GPUSLICE_GATE_ON_LOSS=%s: want run or wait; using run", loss);
	cfg.explicit_socket = getenv("GPUSLICE_NODE_SOCKET") != NULL;
	cfg.depth = (unsigned)env_u64("GPUSLICE_GATE_DEPTH", 0, 0, 64);
	cfg.queue_ns = getenv("GPUSLICE_GATE_QUEUE_US") == NULL || *getenv("GPUSLICE_GATE_QUEUE_US") == '\0'
			       ? -1
			       : (int64_t)env_u64("GPUSLICE_GATE_QUEUE_US", 0, 0, 10000000) * 1000;
	cfg.idle_ns = env_u64("GPUSLICE_GATE_IDLE_US", 500, 10, 10000000) * 1000u;
	cfg.timeout_ns = env_u64("GPUSLICE_GATE_TIMEOUT_MS", 5000, 1, 3600000) * 1000000u;
	cfg.retry_ns = 1000000000u;
	cfg.reconnect_ns = 100000000u;
	cfg.step_ns = 100000000u;
	default_socket(cfg.socket, sizeof(cfg.socket));
	init_cv(); /* before anyone waits: every path to the gate reads cfg first */
	pthread_atfork(NULL, NULL, after_fork_child);
}

GS_HIDDEN const struct gs_gate_cfg *gs_gate_cfg(void)
{
	pthread_once(&cfg_once, cfg_init);
	return &cfg;
}

/* Publishes the fast-path view of the current state. */
GS_HIDDEN void gs_gate_publish_locked(uint64_t now)
{
	struct gs_gate *g = &gs_gate;
	int state = GS_GATE_ASK;
	if (cfg.off) {
		state = GS_GATE_PASS;
	} else if (g->st == GS_GATE_HOLDING && !g->revoked && now < g->grant_end) {
		atomic_store_explicit(&gs_gate_fast.end, g->grant_end, memory_order_relaxed);
		state = cfg.depth > 0 ? GS_GATE_TRACK : GS_GATE_HELD;
		if (state == GS_GATE_HELD) /* the next launch checks */
			atomic_store_explicit(&gs_gate_fast.check_at,
					      atomic_load_explicit(&gs_gate_fast.launches, memory_order_relaxed) + 1,
					      memory_order_relaxed);
	} else if (g->st == GS_GATE_DOWN && !cfg.wait_on_loss && !g->refused) {
		state = GS_GATE_PASS; /* ungated; the gate thread reconnects */
	} else if ((g->st == GS_GATE_WAITING || g->st == GS_GATE_RELEASING) && g->slow) {
		state = GS_GATE_PASS; /* until the daemon answers (the gate thread reads its grant) */
	}
	atomic_store_explicit(&gs_gate_fast.state, state, memory_order_release);
}

GS_HIDDEN void gs_gate_sync(CUcontext ctx)
{
	if (ctx != NULL) {
		gs_fn_cuCtxSetCurrent set = GS_REAL(cuCtxSetCurrent);
		if (set == NULL || set(ctx) != CUDA_SUCCESS)
			return;
	}
	gs_fn_cuCtxSynchronize sync = GS_REAL(cuCtxSynchronize);
	if (sync != NULL)
		(void)sync(); /* an error here is the application's to see on its next call */
	gs_pool_sync();       /* the synchronisation may have released what memory pools kept */
}

/* The GPU of the calling thread's context, once: a MIG device's own UUID
 * (cuDeviceGetUuid_v2), so that groups take turns per MIG instance, apart from
 * those on its siblings; else the GPU's. */
static int find_gpu_locked(void)
{
	struct gs_gate *g = &gs_gate;
	CUdevice dev;
	int mig;
	if (g->have_gpu)
		return 0;
	if (gs_current_device(&dev) != 0 || gs_cuda_uuid_bytes(dev, g->gpu, &mig) != 0)
		return -1;
	g->have_gpu = 1;
	return 0;
}

/* The condition's clock is CLOCK_MONOTONIC (init_cv). */
GS_HIDDEN int gs_gate_wait_locked(uint64_t deadline)
{
	if (gs_gate_now() >= deadline)
		return ETIMEDOUT;
	struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000u), .tv_nsec = (long)(deadline % 1000000000u)};
	return pthread_cond_timedwait(&gs_gate.cv, &gs_gate.mu, &ts);
}

/* Hands over at the end of a slice: outstanding work first (unlocked). */
static void hand_over_locked(void)
{
	struct gs_gate *g = &gs_gate;
	uint64_t seq = g->seq;
	g->st = GS_GATE_RELEASING;
	gs_gate_publish_locked(gs_gate_now());
	pthread_mutex_unlock(&g->mu);
	gs_gate_sync(NULL);
	pthread_mutex_lock(&g->mu);
	if (g->st == GS_GATE_RELEASING && g->seq == seq && gs_gate_release_locked(seq, 1) == 0)
		g->st = GS_GATE_WAITING;
	pthread_cond_broadcast(&g->cv);
}

/* Reads the socket for the grant asked for, unless another launcher does:
 * the grant costs this thread one recv. Returns when the state may have changed. */
static void receive_locked(uint64_t *wait_start)
{
	struct gs_gate *g = &gs_gate;
	uint64_t now = gs_gate_now();
	if (*wait_start == 0)
		*wait_start = now;
	uint64_t deadline = *wait_start + cfg.timeout_ns;
	if (now >= deadline && cfg.wait_on_loss) {
		/* GPUSLICE_GATE_ON_LOSS=wait: launches wait for the grant, however long. */
		gs_log_once(&g->said_slow,
			    "the node daemon has not granted GPU time for %llu ms; launches "
			    "wait until it does",
			    (unsigned long long)(cfg.timeout_ns / 1000000u));
		deadline = now + cfg.step_ns;
	} else if (now >= deadline) {
		gs_log_once(&g->said_slow,
			    "the node daemon has not granted GPU time for %llu ms; running "
			    "without waiting for it until it does",
			    (unsigned long long)(cfg.timeout_ns / 1000000u));
		g->slow = 1;
		gs_gate_publish_locked(now);
		pthread_cond_broadcast(&g->cv); /* the gate thread reads the socket now */
		return;
	}
	if (g->receiving || g->fd < 0) {
		gs_gate_wait_locked(deadline);
		return;
	}
	struct gs_frame f;
	int fd = g->fd;
	unsigned gen = g->gen;
	g->receiving = 1;
	pthread_mutex_unlock(&g->mu);
	int rc = gs_wire_recv(fd, &f, 0); /* bounded by the socket's receive timeout (step_ns) */
	int err = errno;
	pthread_mutex_lock(&g->mu);
	g->receiving = 0;
	if (g->gen == gen) {
		if (rc == 0)
			gs_gate_handle_locked(&f);
		else if (err != EAGAIN)
			gs_gate_down_locked(err == EPROTO ? "a malformed frame" : "connection closed");
	}
	pthread_cond_broadcast(&g->cv);
}

/* At a grant's end, before handing over: a renewal the gate thread has not
 * read yet (the daemon sends it a little before the end) keeps the grant. */
static void take_pending_locked(void)
{
	struct gs_gate *g = &gs_gate;
	struct gs_frame f;
	while (g->st == GS_GATE_HOLDING && !g->receiving && g->fd >= 0) {
		if (gs_wire_recv(g->fd, &f, MSG_DONTWAIT) == 0) {
			gs_gate_handle_locked(&f);
		} else {
			if (errno != EAGAIN)
				gs_gate_down_locked(errno == EPROTO ? "a malformed frame" : "connection closed");
			return;
		}
	}
}

/* One step of the slow path; returns 1 when the launch may go. */
static int step_locked(uint64_t *wait_start)
{
	struct gs_gate *g = &gs_gate;
	uint64_t now = gs_gate_now();
	switch (g->st) {
	case GS_GATE_DOWN:
		if (now >= g->retry_at && gs_gate_connect_locked(now) == 0)
			return 0;
		gs_gate_publish_locked(now);
		if (!cfg.wait_on_loss && !g->refused)
			return 1;
		gs_gate_wait_locked(now + 100000000u);
		return 0;
	case GS_GATE_HOLDING:
		if (!g->revoked && now >= g->grant_end) {
			take_pending_locked();
			if (g->st != GS_GATE_HOLDING)
				return 0;
			now = gs_gate_now();
		}
		if (!g->revoked && now < g->grant_end) {
			gs_gate_publish_locked(now);
			return 1;
		}
		hand_over_locked();
		*wait_start = gs_gate_now();
		return 0;
	case GS_GATE_IDLE:
		if (find_gpu_locked() != 0)
			return 1; /* no context yet: the driver will refuse the launch itself */
		if (gs_gate_acquire_locked() == 0)
			g->st = GS_GATE_WAITING;
		*wait_start = now;
		return 0;
	case GS_GATE_RELEASING:
		if (g->slow)
			return 1;
		gs_gate_wait_locked(now + cfg.step_ns); /* another thread hands over */
		return 0;
	case GS_GATE_WAITING:
		if (g->slow) /* keep running until the daemon answers */
			return 1;
		receive_locked(wait_start);
		return 0;
	}
	return 1;
}

GS_HIDDEN CUresult gs_gate_slow(CUstream stream)
{
	int saved = errno;
	(void)stream;
	const struct gs_gate_cfg *c = gs_gate_cfg();
	if (c->off) {
		atomic_store(&gs_gate_fast.state, GS_GATE_PASS);
		errno = saved;
		return CUDA_SUCCESS;
	}
	struct gs_gate *g = &gs_gate;
	uint64_t wait_start = 0;
	pthread_mutex_lock(&g->mu);
	gs_gate_start_thread_locked();
	g->launcher = (pid_t)syscall(SYS_gettid);
	while (!step_locked(&wait_start))
		;
	if (g->st == GS_GATE_HOLDING && g->ctx == NULL) {
		gs_fn_cuCtxGetCurrent cur = GS_REAL(cuCtxGetCurrent);
		if (cur != NULL && cur(&g->ctx) != CUDA_SUCCESS)
			g->ctx = NULL;
	}
	int state = atomic_load_explicit(&gs_gate_fast.state, memory_order_relaxed);
	if (state >= GS_GATE_HELD)
		atomic_fetch_add_explicit(&gs_gate_fast.launches, 1, memory_order_relaxed);
	pthread_mutex_unlock(&g->mu);
	if (state == GS_GATE_TRACK)
		gs_gate_track(stream);
	errno = saved;
	return CUDA_SUCCESS;
}

GS_HIDDEN CUresult gs_gate_resume(CUstream stream)
{
	int state = atomic_load_explicit(&gs_gate_fast.state, memory_order_relaxed);
	if (state == GS_GATE_PASS) /* changed since the fast path read it */
		return CUDA_SUCCESS;
	if (state == GS_GATE_HELD) /* counted by gs_gate_pass (or not, if it just changed: the count is approximate) */
		return gs_gate_check(stream, atomic_load_explicit(&gs_gate_fast.launches, memory_order_relaxed));
	if (state == GS_GATE_TRACK) {
		atomic_fetch_add_explicit(&gs_gate_fast.launches, 1, memory_order_relaxed);
		return gs_gate_track_launch(stream);
	}
	return gs_gate_slow(stream);
}
