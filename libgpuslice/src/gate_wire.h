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
 * or EPROTO (not a frame of this protocol version from the daemon). */
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
	    gs_wire_len(f->header.type) == 0 || f->header.len != gs_wire_len(f->header.type)) {
		errno = EPROTO;
		return -1;
	}
	return 0;
}

#endif /* GS_GATE_WIRE_H */
