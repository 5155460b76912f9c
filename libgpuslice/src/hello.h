/* SPDX-License-Identifier: Apache-2.0 */
#ifndef GS_HELLO_H
#define GS_HELLO_H

#include "internal.h"

/* Says hello to the node daemon (GPUSLICE_NODE_SOCKET) and waits for its
 * welcome, so the daemon records this process's host pid in the group file:
 * a process in a pid namespace of its own cannot know it, and NVML names
 * processes by it. Returns 0 on a welcome, -1 otherwise (no socket set, no
 * daemon, timeout: 1 s). errno is preserved; nothing is logged. */
GS_HIDDEN int gs_hello_node(void);

#endif /* GS_HELLO_H */
