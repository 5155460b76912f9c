/* SPDX-License-Identifier: Apache-2.0
 * The hello exchange (hello.h), shared by the gate's connection and the
 * host-pid hello: one short connection to the time-slice daemon at a group
 * member's first allocation, for members the group file has no host pid
 * for. The daemon identifies the caller by SO_PEERCRED and fills its entry
 * before it answers (docs/timeslice.md). */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"
#include "gate_wire.h"
#include "hello.h"

GS_HIDDEN int gs_hello_exchange(int fd, uint32_t features, struct gs_frame *f)
{
	struct gs_msg_hello h = {.features = features};
	gs_wire_frame(f, GS_MSG_HELLO, &h, sizeof(h));
	int sent = gs_wire_send(fd, f) == 0;
	int err = errno;
	/* Refused before the hello went out: the refusal is queued already. A
	 * daemon that closed with our hello unread shows a reset first, then
	 * still delivers its last frame. */
	int rc = gs_wire_recv(fd, f, sent ? 0 : MSG_DONTWAIT);
	if (rc != 0 && errno == ECONNRESET)
		rc = gs_wire_recv(fd, f, MSG_DONTWAIT);
	if (rc != 0) {
		if (!sent)
			errno = err;
		return -1;
	}
	if (f->header.type == GS_MSG_WELCOME && sent)
		return 0;
	if (f->header.type == GS_MSG_ERROR && f->msg.error.code == GS_ERR_BUSY)
		return GS_ERR_BUSY;
	errno = sent ? EPROTO : err;
	return -1;
}

GS_HIDDEN int gs_hello_node(void)
{
	const char *path = gs_config()->node_socket;
	if (path[0] == '\0')
		return -1;
	int saved = errno, rc = -1;
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	memcpy(addr.sun_path, path, strlen(path));
	int fd = socket(AF_UNIX, GS_PROTO_SOCK_TYPE | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto out;
	struct timeval tv = {.tv_sec = 1};
	struct gs_frame f;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0 &&
	    connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 && gs_hello_exchange(fd, 0, &f) == 0)
		rc = 0;
	close(fd);
out:
	errno = saved;
	return rc;
}
