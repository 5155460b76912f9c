/* SPDX-License-Identifier: Apache-2.0
 *
 * Context limits that hold device memory (hooks_limit.c): what a context's
 * cuCtxSetLimit calls counted above the limits it started with.
 */
#ifndef GS_CTXLIMIT_H
#define GS_CTXLIMIT_H

#include <stdint.h>

#include "internal.h"

/* The context went (destroyed, or a primary context reset or released for
 * the last time): uncounts what its limits held and forgets it. */
GS_HIDDEN void gs_ctxlim_gone(uint64_t ctx);

#endif /* GS_CTXLIMIT_H */
