/* SPDX-License-Identifier: Apache-2.0
 *
 * The launch gate's frames on the time-slice daemon's socket
 * (include/gpuslice/proto.h): a SOCK_SEQPACKET socket, one frame per record, so
 * sending a frame is one send() and receiving one is one recv(). Header-only and
 * libc-only, so that test/timeslice/grantbench.c measures exactly what the gate does.
 */
#ifndef GS_GATE_WIRE_H
#define GS_GATE_WIRE_H

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <gpuslice/proto.h>

/* The size of the message of a frame the daemon sends (0: not one). */
static inline uint32_t gs_wire_len(uint16_t type)
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
	case GS_MSG_LEND:
		return sizeof(struct gs_msg_lend);
	case GS_MSG_SPILL:
		return sizeof(struct gs_msg_spill);
	}
	return 0;
}

/* Whether a frame of `type` from the daemon may carry a message of len bytes:
 * its size, or for a grant also GS_GRANT_SIZE_NO_SENT_AT (no sent_at_ns: a
 * daemon from before GS_FEATURE_SENT_AT, or a connection that did not
 * announce it). */
static inline int gs_wire_len_ok(uint16_t type, uint32_t len)
{
	uint32_t want = gs_wire_len(type);
	return want != 0 && (len == want || (type == GS_MSG_GRANT && len == GS_GRANT_SIZE_NO_SENT_AT));
}

/* When a grant read at read_ns ends, on CLOCK_MONOTONIC (ns): by the
 * daemon's clock, sent_at_ns + valid_ns, where the grant says when it was
 * sent (sent_at_ns != 0) and that instant is plausible here (not after the
 * reading, at most GS_GRANT_SENT_AT_MAX_AGE_MS before it); otherwise valid_ns
 * after the reading. Never later than the reading's end: a grant read late
 * ends when the daemon ends it. Saturates. The same function as Go's
 * proto.GrantEnd (internal/proto/grant.go). */
static inline uint64_t gs_grant_end(uint64_t read_ns, uint64_t sent_at_ns, uint64_t valid_ns)
{
	uint64_t start = read_ns;
	if (sent_at_ns != 0 && sent_at_ns <= read_ns &&
	    read_ns - sent_at_ns <= GS_GRANT_SENT_AT_MAX_AGE_MS * 1000000ull)
		start = sent_at_ns;
	return valid_ns > UINT64_MAX - start ? UINT64_MAX : start + valid_ns;
}

/* A zeroed frame of `type` carrying len bytes of msg. */
static inline void gs_wire_frame(struct gs_frame *f, uint16_t type, const void *msg, uint32_t len)
{
	memset(f, 0, sizeof(*f));
	f->header.magic = GS_PROTO_MAGIC;
	f->header.version = GS_PROTO_VERSION;
	f->header.type = type;
	f->header.len = len;
	if (len > 0)
		memcpy(f->msg.raw, msg, len);
}

/* Sends one frame: 0, or -1 (errno set). Never raises SIGPIPE. */
static inline int gs_wire_send(int fd, const struct gs_frame *f)
{
	ssize_t w;
	do
		w = send(fd, f, sizeof(*f), MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
	if (w == (ssize_t)sizeof(*f))
		return 0;
	if (w >= 0)
		errno = EPROTO;
	return -1;
}

/* Receives one frame (flags: e.g. MSG_DONTWAIT): 0; -1 with errno EAGAIN (no
 * frame: non-blocking, or the socket's receive timeout), ECONNRESET (closed)
 * or EPROTO (not a frame of this protocol version from the daemon). A grant
 * without sent_at_ns reads as one with sent_at_ns 0. */
static inline int gs_wire_recv(int fd, struct gs_frame *f, int flags)
{
	ssize_t r;
	do
		r = recv(fd, f, sizeof(*f), flags | MSG_TRUNC);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -1;
	if (r == 0) {
		errno = ECONNRESET;
		return -1;
	}
	if (r != (ssize_t)sizeof(*f) || f->header.magic != GS_PROTO_MAGIC || f->header.version != GS_PROTO_VERSION ||
	    !gs_wire_len_ok(f->header.type, f->header.len)) {
		errno = EPROTO;
		return -1;
	}
	if (f->header.type == GS_MSG_GRANT && f->header.len < sizeof(struct gs_msg_grant))
		f->msg.grant.sent_at_ns = 0; /* not part of a short grant, whatever the padding holds */
	return 0;
}

#endif /* GS_GATE_WIRE_H */
