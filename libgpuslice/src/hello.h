/* SPDX-License-Identifier: Apache-2.0 */
#ifndef GS_HELLO_H
#define GS_HELLO_H

#include "internal.h"

struct gs_frame;

/* Says hello on a connected socket and reads the answer into *f. Returns 0
 * on a welcome; GS_ERR_BUSY when the daemon refused the connection for now
 * (too many connections: it is alive, the caller stays gated and connects
 * again later); -1 otherwise (errno set: a failed send or receive, EPROTO for
 * another frame). A refusal can close the socket before the hello is sent:
 * a frame already queued is still read then. */
GS_HIDDEN int gs_hello_exchange(int fd, uint32_t features, struct gs_frame *f);

/* Says hello to the time-slice daemon (GPUSLICE_NODE_SOCKET) and waits for its
 * welcome, so the daemon records this process's host pid in the group file:
 * a process in a pid namespace of its own cannot know it, and NVML names
 * processes by it. Returns 0 on a welcome, -1 otherwise (no socket set, no
 * daemon, refused, timeout: 1 s). errno is preserved; nothing is logged. */
GS_HIDDEN int gs_hello_node(void);

#endif /* GS_HELLO_H */
