/* SPDX-License-Identifier: Apache-2.0
 *
 * The launch gate's connection to the node daemon (include/gpuslice/proto.h):
 * connect and hello, acquire/release, and a reader thread that receives grants
 * and revokes and hands back the grant of a holder that went idle (after its
 * outstanding work finished). Each reader thread owns its socket and closes it
 * when the connection's generation changes.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gate_int.h"
#include "log.h"

static void frame_init(struct gs_frame *f, uint16_t type, const void *msg, uint32_t len)
{
	memset(f, 0, sizeof(*f));
	f->header.magic = GS_PROTO_MAGIC;
	f->header.version = GS_PROTO_VERSION;
	f->header.type = type;
	f->header.len = len;
	if (len > 0)
		memcpy(f->msg.raw, msg, len);
}

static uint32_t msg_len(uint16_t type)
{
	switch (type) {
	case GS_MSG_WELCOME:
		return sizeof(struct gs_msg_welcome);
	case GS_MSG_GRANT:
		return sizeof(struct gs_msg_grant);
	case GS_MSG_REVOKE:
		return sizeof(struct gs_msg_revoke);
	case GS_MSG_ERROR:
		return sizeof(struct gs_msg_error);
	}
	return 0;
}

/* Reads one frame (blocking); 0, or -1 on EOF, error or a malformed frame. */
static int read_frame(int fd, struct gs_frame *f)
{
	size_t got = 0;
	while (got < sizeof(*f)) {
		ssize_t r = recv(fd, (char *)f + got, sizeof(*f) - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	if (f->header.magic != GS_PROTO_MAGIC || f->header.version != GS_PROTO_VERSION ||
	    msg_len(f->header.type) == 0 || f->header.len != msg_len(f->header.type))
		return -1;
	return 0;
}

GS_HIDDEN void gs_gate_down_locked(const char *why)
{
	struct gs_gate *g = &gs_gate;
	const struct gs_gate_cfg *c = gs_gate_cfg();
	if (g->fd >= 0)
		shutdown(g->fd, SHUT_RDWR); /* its reader thread closes it */
	g->fd = -1;
	g->gen++;
	g->st = GS_GATE_DOWN;
	g->retry_at = gs_gate_now() + c->retry_ns;
	gs_log_once(&g->said_down, "lost the node daemon (%s): %s until it returns", why,
		    c->wait_on_loss ? "launches wait" : "running without time slicing");
	gs_gate_publish_locked(gs_gate_now());
	pthread_cond_broadcast(&g->cv);
}

static int send_locked(uint16_t type, const void *msg, uint32_t len)
{
	struct gs_frame f;
	frame_init(&f, type, msg, len);
	if (gs_gate.fd < 0)
		return -1;
	ssize_t w = send(gs_gate.fd, &f, sizeof(f), MSG_NOSIGNAL);
	if (w != (ssize_t)sizeof(f)) {
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
	return send_locked(GS_MSG_RELEASE, &r, sizeof(r));
}

static void handle_locked(const struct gs_frame *f)
{
	struct gs_gate *g = &gs_gate;
	uint64_t now = gs_gate_now();
	switch (f->header.type) {
	case GS_MSG_GRANT:
		if (memcmp(f->msg.grant.gpu, g->gpu, sizeof(g->gpu)) != 0)
			return;
		g->st = GS_GATE_HOLDING;
		g->seq = f->msg.grant.seq;
		g->grant_end = now + f->msg.grant.valid_ns;
		g->revoked = 0;
		g->slow = 0;
		atomic_store_explicit(&gs_gate_fast.last, now, memory_order_relaxed);
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

/* The reader's view of a holder going idle: once no launch came for idle_ns
 * (at once if revoked), it waits for the outstanding work without blocking new
 * launches, and hands the grant back if still no launch came idle_ns later. */
struct idle {
	int synced;
	uint64_t last;      /* gs_gate_fast.last when the wait started */
	uint64_t synced_at; /* when the outstanding work was found finished */
};

/* Returns how long to poll (ns; UINT64_MAX: no deadline). */
static uint64_t idle_step(unsigned gen, struct idle *s)
{
	struct gs_gate *g = &gs_gate;
	const struct gs_gate_cfg *c = gs_gate_cfg();
	pthread_mutex_lock(&g->mu);
	int holding = g->gen == gen && g->st == GS_GATE_HOLDING;
	uint64_t seq = g->seq, idle = g->revoked ? 0 : c->idle_ns;
	CUcontext ctx = g->ctx;
	pthread_mutex_unlock(&g->mu);
	uint64_t now = gs_gate_now(), last = atomic_load_explicit(&gs_gate_fast.last, memory_order_relaxed);
	if (!holding) {
		s->synced = 0;
		return UINT64_MAX;
	}
	if (!s->synced || s->last != last) {
		if (last > now) /* stamped by another thread a moment ago */
			return idle;
		if (now - last < idle)
			return last + idle - now;
		if (ctx != NULL)
			gs_gate_sync(ctx);
		*s = (struct idle){.synced = 1, .last = last, .synced_at = gs_gate_now()};
		return 0;
	}
	if (now - s->synced_at < idle)
		return s->synced_at + idle - now;
	pthread_mutex_lock(&g->mu);
	if (g->gen == gen && g->st == GS_GATE_HOLDING && g->seq == seq) {
		g->st = GS_GATE_RELEASING; /* stop the fast path, then check nothing slipped in */
		gs_gate_publish_locked(now);
		if (atomic_load_explicit(&gs_gate_fast.last, memory_order_acquire) != s->last) {
			g->st = GS_GATE_HOLDING;
		} else if (gs_gate_release_locked(seq, 0) == 0) {
			g->st = GS_GATE_IDLE;
		}
		gs_gate_publish_locked(gs_gate_now());
		pthread_cond_broadcast(&g->cv);
	}
	pthread_mutex_unlock(&g->mu);
	s->synced = 0;
	return 0;
}

static void *reader_main(void *arg)
{
	unsigned gen = (unsigned)(uintptr_t)arg;
	struct gs_gate *g = &gs_gate;
	struct idle s = {0};
	pthread_mutex_lock(&g->mu);
	int fd = g->gen == gen ? g->fd : -1;
	pthread_mutex_unlock(&g->mu);
	for (int alive = fd >= 0; alive;) {
		uint64_t wait = idle_step(gen, &s);
		struct pollfd p = {.fd = fd, .events = POLLIN};
		struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000u), .tv_nsec = (long)(wait % 1000000000u)};
		int r = ppoll(&p, 1, wait == UINT64_MAX ? NULL : &ts, NULL);
		if (r < 0 && errno != EINTR)
			break;
		if (r <= 0)
			continue;
		struct gs_frame f;
		int rc = read_frame(fd, &f);
		pthread_mutex_lock(&g->mu);
		if (g->gen != gen) {
			alive = 0;
		} else if (rc != 0) {
			gs_gate_down_locked("connection closed");
			alive = 0;
		} else {
			handle_locked(&f);
		}
		pthread_mutex_unlock(&g->mu);
	}
	close(fd);
	return NULL;
}

/* Hello and welcome, with the socket's timeouts bounding a stuck daemon. */
static int handshake(int fd)
{
	struct timeval tv = {.tv_sec = 1};
	struct gs_frame f;
	struct gs_msg_hello h = {.features = GS_FEATURE_REVOKE};
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0)
		return -1;
	frame_init(&f, GS_MSG_HELLO, &h, sizeof(h));
	if (send(fd, &f, sizeof(f), MSG_NOSIGNAL) != (ssize_t)sizeof(f) || read_frame(fd, &f) != 0 ||
	    f.header.type != GS_MSG_WELCOME)
		return -1;
	tv.tv_sec = 0;
	return setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

GS_HIDDEN int gs_gate_connect_locked(uint64_t now)
{
	struct gs_gate *g = &gs_gate;
	const struct gs_gate_cfg *c = gs_gate_cfg();
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	pthread_t t;
	pthread_attr_t attr;
	g->retry_at = now + c->retry_ns;
	memcpy(addr.sun_path, c->socket, sizeof(addr.sun_path) - 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 || handshake(fd) != 0) {
		int err = errno;
		close(fd);
		if (c->explicit_socket)
			gs_log_once(&g->said_down, "node daemon not reachable at %s (%s): %s until it is", c->socket,
				    strerror(err), c->wait_on_loss ? "launches wait" : "running without time slicing");
		return -1;
	}
	g->fd = fd;
	g->gen++;
	g->st = GS_GATE_IDLE;
	g->revoked = g->slow = 0;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int rc = pthread_create(&t, &attr, reader_main, (void *)(uintptr_t)g->gen);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		close(fd);
		g->fd = -1;
		g->st = GS_GATE_DOWN;
		return -1;
	}
	if (atomic_exchange(&g->said_down, 0))
		gs_log("node daemon at %s is back: GPU time slicing resumed", c->socket);
	return 0;
}
