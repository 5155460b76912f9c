/* SPDX-License-Identifier: Apache-2.0
 * The host-pid hello (hello.h): one short connection to the node daemon at a
 * group member's first allocation, for members the group file has no host
 * pid for. The daemon identifies the caller by SO_PEERCRED and fills its
 * entry before it answers (docs/node.md). */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"
#include "gate_wire.h"
#include "hello.h"

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
	struct gs_msg_hello h = {.features = 0};
	gs_wire_frame(&f, GS_MSG_HELLO, &h, sizeof(h));
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0 &&
	    connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 && gs_wire_send(fd, &f) == 0 &&
	    gs_wire_recv(fd, &f, 0) == 0 && f.header.type == GS_MSG_WELCOME)
		rc = 0;
	close(fd);
out:
	errno = saved;
	return rc;
}
