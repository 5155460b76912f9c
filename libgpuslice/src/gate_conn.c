/* SPDX-License-Identifier: Apache-2.0
 *
 * The launch gate's connection to the time-slice daemon (include/gpuslice/proto.h,
 * frames sent and received as gate_wire.h does): connect and hello,
 * acquire/release, and the gate thread. A launcher waiting for its grant reads
 * the socket itself (one send and one recv per grant); the gate thread reads
 * it otherwise (grants that come late, revokes, the daemon going away), ends
 * the fast path when a grant runs out, hands back the grant of a holder that
 * went idle (after its outstanding work finished), and reconnects. Only the
 * gate thread closes sockets, once no launcher reads them.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gate_int.h"
#include "hello.h"
#include "log.h"
#include "procfs.h"

GS_HIDDEN void gs_gate_down_locked(const char *why)
{
	struct gs_gate *g = &gs_gate;
	const struct gs_gate_cfg *c = gs_gate_cfg();
	if (g->fd >= 0) {
		shutdown(g->fd, SHUT_RDWR); /* wakes a reader; the gate thread closes it */
		if (g->dead_fd >= 0)
			close(g->dead_fd); /* not reachable by anyone any more: a newer one went down */
		g->dead_fd = g->fd;
	}
	g->fd = -1;
	g->gen++;
	g->st = GS_GATE_DOWN;
	g->retry_at = gs_gate_now() + c->reconnect_ns;
	gs_log_once(&g->said_down, "lost the node daemon (%s): %s until it returns", why,
		    c->wait_on_loss ? "launches wait" : "running without time slicing");
	gs_gate_publish_locked(gs_gate_now());
	pthread_cond_broadcast(&g->cv);
}

static int send_locked(uint16_t type, const void *msg, uint32_t len)
{
	struct gs_frame f;
	gs_wire_frame(&f, type, msg, len);
	if (gs_gate.fd < 0)
		return -1;
	if (gs_wire_send(gs_gate.fd, &f) != 0) {
		gs_gate_down_locked("cannot send to it");
		return -1;
	}
	return 0;
}

GS_HIDDEN int gs_gate_acquire_locked(void)
{
	struct gs_msg_acquire a = {0};
	memcpy(a.gpu, gs_gate.gpu, sizeof(a.gpu));
	return send_locked(GS_MSG_ACQUIRE, &a, sizeof(a));
}

GS_HIDDEN int gs_gate_release_locked(uint64_t seq, int more)
{
	struct gs_msg_release r = {.seq = seq, .flags = more ? GS_RELEASE_MORE : 0};
	memcpy(r.gpu, gs_gate.gpu, sizeof(r.gpu));
	gs_gate.released = seq;
	return send_locked(GS_MSG_RELEASE, &r, sizeof(r));
}

GS_HIDDEN void gs_gate_handle_locked(const struct gs_frame *f)
{
	struct gs_gate *g = &gs_gate;
	uint64_t now = gs_gate_now();
	switch (f->header.type) {
	case GS_MSG_GRANT:
		/* A grant of the seq held (or being handed over) is a renewal: a
		 * later end, the queue kept. A renewal (GS_GRANT_RENEWAL) of a seq
		 * handed back crossed the release: stale. A grant without the flag
		 * answers an acquire: after handing its group's grant back, a member
		 * may be given the same, still running, grant again. */
		if (memcmp(f->msg.grant.gpu, g->gpu, sizeof(g->gpu)) != 0 ||
		    ((f->msg.grant.flags & GS_GRANT_RENEWAL) && f->msg.grant.seq == g->released))
			return;
		if ((g->st != GS_GATE_HOLDING && g->st != GS_GATE_RELEASING) || g->seq != f->msg.grant.seq) {
			gs_gate_queue_grant(f->msg.grant.slice_ns,
					    atomic_load_explicit(&gs_gate_fast.launches, memory_order_relaxed));
			g->turn_ns = f->msg.grant.slice_ns;
			g->renewed = 0;
		} else {
			g->renewed = 1;
		}
		g->st = GS_GATE_HOLDING;
		g->seq = f->msg.grant.seq;
		g->grant_end = gs_grant_end(now, g->sent_at ? f->msg.grant.sent_at_ns : 0, f->msg.grant.valid_ns);
		g->slice_ns = f->msg.grant.slice_ns;
		g->alone = (f->msg.grant.flags & GS_GRANT_ALONE) != 0;
		/* Renewed and alone: a slice of work may stay queued ahead, so the queue
		 * never drains toward a renewal's end (the daemon stretches the grant to
		 * a slice from when another group asks, so it drains by then). */
		gs_gate_queue_alone(g->alone && g->renewed ? g->turn_ns : 0);
		g->revoked = 0;
		g->slow = 0;
		break;
	case GS_MSG_REVOKE:
		if (g->st != GS_GATE_HOLDING || f->msg.revoke.seq != g->seq)
			return;
		if (f->msg.revoke.reason == GS_REVOKE_EXPIRED)
			g->st = GS_GATE_IDLE; /* void: nothing to hand back */
		else
			g->revoked = 1;
		break;
	case GS_MSG_ERROR: {
		char msg[sizeof(f->msg.error.message) + 1];
		memcpy(msg, f->msg.error.message, sizeof(f->msg.error.message));
		msg[sizeof(msg) - 1] = '\0';
		gs_log_once(&g->said_proto, "the node daemon refused this process: %s", msg);
		gs_gate_down_locked("refused");
		return;
	}
	default:
		return;
	}
	gs_gate_publish_locked(now);
	pthread_cond_broadcast(&g->cv);
}

/* The gate thread's view of a held grant: the launch count when it last
 * changed, and whether the outstanding work was waited for since. */
struct idle {
	unsigned gen;
	uint64_t seq;
	unsigned seen;  /* gs_gate_fast.launches */
	uint64_t since; /* when it was read */
	int synced;
	int have_exec;
	uint64_t start, exec0; /* the idle window's start, the launching thread's run time then */
};

/* Whether the launching thread is starved of CPU rather than without GPU
 * work (gs_starved: runnable, and it ran for less than half of the window
 * since s->start): a thread that waits for a CPU has work; one that ran CPU
 * work between launches, or sleeps, launched nothing because it had nothing
 * to launch. Where its run time cannot be read: whether it is runnable.
 * Called without the gate's lock (it reads /proc); s is the gate thread's. */
static int launcher_starved(pid_t tid, const struct idle *s, uint64_t now)
{
	int runnable = gs_thread_runnable(tid);
	uint64_t exec = 0, delay;
	if (!runnable || !s->have_exec || gs_thread_schedstat(tid, &exec, &delay) != 0)
		return runnable;
	return gs_starved(runnable, s->exec0, exec, now - s->start);
}

/* Records the launching thread's run time at the start of an idle window. */
static void idle_window_start(pid_t tid, struct idle *s, uint64_t now)
{
	uint64_t delay;
	s->start = now;
	s->have_exec = tid > 0 && gs_thread_schedstat(tid, &s->exec0, &delay) == 0;
}

/* A holder that launched nothing for idle_ns (at once if revoked) has its
 * outstanding work waited for, without blocking new launches; if it still
 * launched nothing idle_ns later, its grant is handed back. Not while the
 * daemon says no other group waits (it says so when one starts to): handing
 * back would only cost the holder a round trip at its next launch. Not while
 * its launching thread is starved of CPU (launcher_starved: runnable, and it
 * ran for less than half the window): such a holder has work, and handing it
 * back as idle would lend its turns to the others for as long as the machine
 * is loaded; one whose thread ran CPU work instead hands back. Revoked, it
 * hands back, and then says it has more work if starved (its launcher takes
 * the next grant). */
static void idle_locked(struct idle *s)
{
	struct gs_gate *g = &gs_gate;
	if (!s->synced) {
		CUcontext ctx = g->ctx;
		pid_t launcher = g->launcher;
		pthread_mutex_unlock(&g->mu);
		if (ctx != NULL)
			gs_gate_sync(ctx);
		s->since = gs_gate_now();
		idle_window_start(launcher, s, s->since);
		pthread_mutex_lock(&g->mu);
		s->synced = 1;
		return;
	}
	int busy = 0;
	if (g->launcher > 0) {
		pid_t launcher = g->launcher;
		pthread_mutex_unlock(&g->mu);
		uint64_t now = gs_gate_now();
		busy = launcher_starved(launcher, s, now);
		pthread_mutex_lock(&g->mu);
		if ((busy && !g->revoked) || g->st != GS_GATE_HOLDING || g->gen != s->gen || g->seq != s->seq) {
			s->since = now; /* looked at again idle_ns later (or anew); the window goes on from start */
			return;
		}
	}
	g->st = GS_GATE_RELEASING; /* stop the fast path, then check nothing slipped in */
	gs_gate_publish_locked(gs_gate_now());
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&gs_gate_fast.launches, memory_order_relaxed) != s->seen)
		g->st = GS_GATE_HOLDING;
	else if (gs_gate_release_locked(g->seq, busy) == 0)
		g->st = busy ? GS_GATE_WAITING : GS_GATE_IDLE;
	gs_gate_publish_locked(gs_gate_now());
	pthread_cond_broadcast(&g->cv);
	*s = (struct idle){0};
}

/* The gate thread's work on a held grant: returns how long it may sleep (ns). */
static uint64_t holder_step_locked(struct idle *s)
{
	struct gs_gate *g = &gs_gate;
	uint64_t now = gs_gate_now();
	int over = g->revoked || now >= g->grant_end;
	if (over && atomic_load_explicit(&gs_gate_fast.state, memory_order_relaxed) >= GS_GATE_HELD)
		gs_gate_publish_locked(now); /* the grant ran out: the next launch hands over */
	unsigned n = atomic_load_explicit(&gs_gate_fast.launches, memory_order_relaxed);
	uint64_t idle = g->revoked ? 0 : gs_gate_cfg()->idle_ns;
	if (g->alone && !g->revoked) {
		*s = (struct idle){.gen = g->gen, .seq = g->seq, .seen = n, .since = now};
		return over ? idle : g->grant_end - now;
	}
	if (s->gen != g->gen || s->seq != g->seq || s->seen != n) {
		*s = (struct idle){.gen = g->gen, .seq = g->seq, .seen = n, .since = now};
	} else if (now - s->since >= idle) {
		idle_locked(s);
		return 0;
	}
	uint64_t wake = s->since + idle - now;
	if (!over && g->grant_end - now < wake)
		wake = g->grant_end - now;
	return wake;
}

/* Polls the socket (at most wait ns) and applies a frame, unless a launcher
 * reads it. */
static void poll_locked(uint64_t wait)
{
	struct gs_gate *g = &gs_gate;
	int fd = g->fd;
	unsigned gen = g->gen;
	struct pollfd p = {.fd = fd, .events = POLLIN};
	struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000u), .tv_nsec = (long)(wait % 1000000000u)};
	pthread_mutex_unlock(&g->mu);
	int r = ppoll(&p, 1, wait == UINT64_MAX ? NULL : &ts, NULL);
	pthread_mutex_lock(&g->mu);
	if (r <= 0 || g->gen != gen || g->receiving)
		return;
	struct gs_frame f;
	if (gs_wire_recv(fd, &f, MSG_DONTWAIT) == 0)
		gs_gate_handle_locked(&f);
	else if (errno != EAGAIN)
		gs_gate_down_locked(errno == EPROTO ? "a malformed frame" : "connection closed");
}

/* The gate thread. While a launcher waits for its grant (it reads the socket
 * itself), or nothing is held, it sleeps; it reads the socket while a grant is
 * held (revokes) or came late (slow); it reconnects when the daemon is gone. */
static void *gate_main(void *arg)
{
	struct gs_gate *g = &gs_gate;
	const struct gs_gate_cfg *c = gs_gate_cfg();
	struct idle s = {0};
	(void)arg;
	pthread_mutex_lock(&g->mu);
	for (;;) {
		if (g->dead_fd >= 0 && !g->receiving) {
			close(g->dead_fd);
			g->dead_fd = -1;
		}
		uint64_t now = gs_gate_now();
		switch (g->st) {
		case GS_GATE_DOWN:
			if (now < g->retry_at) {
				gs_gate_wait_locked(g->retry_at);
			} else if (gs_gate_connect_locked(now) == 0) {
				gs_gate_publish_locked(gs_gate_now());
				pthread_cond_broadcast(&g->cv);
			}
			break;
		case GS_GATE_HOLDING: {
			uint64_t wait = holder_step_locked(&s);
			if (wait == 0 || g->st != GS_GATE_HOLDING)
				break;
			if (g->receiving)
				gs_gate_wait_locked(now + wait); /* not expected while holding; never spin */
			else
				poll_locked(wait);
			break;
		}
		case GS_GATE_WAITING:
			if (g->slow && !g->receiving) {
				poll_locked(c->step_ns);
				break;
			}
			__attribute__((fallthrough)); /* the launcher reads its grant */
		case GS_GATE_IDLE:
		case GS_GATE_RELEASING:
			if (gs_gate_wait_locked(now + c->retry_ns) == ETIMEDOUT && g->st == GS_GATE_IDLE)
				poll_locked(0); /* a daemon gone while idle; a stale frame */
			break;
		}
	}
	return NULL;
}

GS_HIDDEN void gs_gate_start_thread_locked(void)
{
	pthread_t t;
	pthread_attr_t attr;
	if (gs_gate.thread)
		return;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	gs_gate.thread = pthread_create(&t, &attr, gate_main, NULL) == 0;
	pthread_attr_destroy(&attr);
}

/* Hello and welcome, with the socket's timeouts (GPUSLICE_GATE_TIMEOUT_MS: a
 * daemon welcoming hundreds of processes at once may take a while) bounding a
 * stuck daemon; then a receive timeout of step_ns (a launcher waiting for its
 * grant wakes up to check its deadline; the gate thread reads with
 * MSG_DONTWAIT). Returns 0, GS_ERR_BUSY (refused for now: *f holds the
 * refusal) or -1. */
static int handshake(int fd, uint64_t timeout_ns, uint64_t step_ns, uint32_t features, struct gs_frame *f)
{
	struct timeval tv = {.tv_sec = (time_t)(timeout_ns / 1000000000u),
			     .tv_usec = (suseconds_t)(timeout_ns % 1000000000u / 1000u)};
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0)
		return -1;
	int rc = gs_hello_exchange(fd, features, f);
	if (rc != 0)
		return rc;
	tv.tv_sec = (time_t)(step_ns / 1000000000u);
	tv.tv_usec = (suseconds_t)(step_ns % 1000000000u / 1000u);
	return setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* The daemon is alive but refused this process for now (too many
 * connections): launches wait, whatever GPUSLICE_GATE_ON_LOSS says (running
 * ungated would let a process flood its own way out of the gate). */
static void refused_locked(const struct gs_frame *f)
{
	char msg[sizeof(f->msg.error.message) + 1];
	memcpy(msg, f->msg.error.message, sizeof(f->msg.error.message));
	msg[sizeof(msg) - 1] = '\0';
	gs_gate.refused = 1;
	gs_log_once(&gs_gate.said_down,
		    "the node daemon refused this process for now (%s): launches wait until it "
		    "accepts",
		    msg);
}

GS_HIDDEN int gs_gate_connect_locked(uint64_t now)
{
	struct gs_gate *g = &gs_gate;
	const struct gs_gate_cfg *c = gs_gate_cfg();
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	g->retry_at = now + c->reconnect_ns;
	memcpy(addr.sun_path, c->socket, sizeof(addr.sun_path) - 1);
	int fd = socket(AF_UNIX, GS_PROTO_SOCK_TYPE | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct gs_frame f;
	int rc = -1;
	/* Grants say when the daemon sent them only where this process's
	 * CLOCK_MONOTONIC is the host's (no time namespace offset). */
	uint32_t features = GS_FEATURE_REVOKE | GS_FEATURE_RENEW | (gs_clock_shared() ? GS_FEATURE_SENT_AT : 0);
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0)
		rc = handshake(fd, c->timeout_ns, c->step_ns, features, &f);
	if (rc == GS_ERR_BUSY) {
		close(fd);
		refused_locked(&f);
		return -1;
	}
	if (rc != 0) {
		int err = errno;
		close(fd);
		g->refused = 0;
		if (c->explicit_socket)
			gs_log_once(&g->said_down, "node daemon not reachable at %s (%s%s): %s until it is", c->socket,
				    strerror(err), err == EPROTOTYPE ? ": it speaks another protocol version" : "",
				    c->wait_on_loss ? "launches wait" : "running without time slicing");
		return -1;
	}
	g->fd = fd;
	g->sent_at = (features & f.msg.welcome.features & GS_FEATURE_SENT_AT) != 0;
	g->gen++;
	g->st = GS_GATE_IDLE;
	g->seq = g->released = 0; /* a restarted daemon counts seqs from 1 again */
	g->revoked = g->slow = g->refused = 0;
	if (atomic_exchange(&g->said_down, 0))
		gs_log("node daemon at %s is back: GPU time slicing resumed", c->socket);
	return 0;
}
