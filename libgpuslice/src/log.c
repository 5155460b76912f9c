/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"

GS_HIDDEN char *gs_fmt(char *buf, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vsnprintf(buf, n, fmt, ap);
	va_end(ap);
	if (r < 0 && n > 0)
		buf[0] = '\0';
	return buf;
}

static void vlog(const char *fmt, va_list ap)
{
	int saved = errno;
	if (!gs_config()->log) {
		errno = saved;
		return;
	}
	char line[512];
	size_t prefix = strlen("gpuslice: ");
	memcpy(line, "gpuslice: ", prefix);
	int r = vsnprintf(line + prefix, sizeof(line) - prefix - 1, fmt, ap);
	if (r < 0)
		r = 0;
	size_t len = prefix + ((size_t)r < sizeof(line) - prefix - 1 ? (size_t)r : sizeof(line) - prefix - 2);
	line[len++] = '\n';
	for (size_t off = 0; off < len;) {
		ssize_t w = write(STDERR_FILENO, line + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	errno = saved;
}

GS_HIDDEN void gs_log(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

GS_HIDDEN void gs_log_once(_Atomic int *flag, const char *fmt, ...)
{
	if (atomic_exchange(flag, 1) != 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

GS_HIDDEN char *gs_fmt_size(char *buf, size_t n, uint64_t bytes)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	if (bytes < 1024)
		return gs_fmt(buf, n, "%llu B", (unsigned long long)bytes);
	double v = (double)bytes;
	size_t u = 0;
	while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024.0;
		u++;
	}
	return gs_fmt(buf, n, "%.1f %s", v, units[u]);
}
