/* SPDX-License-Identifier: Apache-2.0
 * One-line messages on stderr ("gpuslice: ..."), never on hot paths. */
#ifndef GS_LOG_H
#define GS_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* snprintf that never fails the caller: returns buf. */
GS_HIDDEN char *gs_fmt(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Writes "gpuslice: <msg>\n" to stderr unless GPUSLICE_LOG=0. Preserves errno. */
GS_HIDDEN void gs_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* gs_log, the first time only for this flag. */
GS_HIDDEN void gs_log_once(_Atomic int *flag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "512.0 MiB", "6.0 GiB", "100 B". */
GS_HIDDEN char *gs_fmt_size(char *buf, size_t n, uint64_t bytes);

#endif /* GS_LOG_H */
