/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "procfs.h"

GS_HIDDEN int gs_parse_stat(const char *buf, size_t len, char *state, uint64_t *start)
{
	/* "pid (comm) S f4 ... f22 ...": comm may hold spaces and ')'. */
	size_t i = len;
	while (i > 0 && buf[i - 1] != ')')
		i--;
	if (i == 0)
		return -1;
	int field = 2; /* the field just ended */
	uint64_t v = 0;
	int in_num = 0;
	for (; i < len && buf[i] != '\0' && buf[i] != '\n'; i++) {
		char c = buf[i];
		if (c == ' ') {
			if (in_num && field == 22)
				break;
			in_num = 0;
			continue;
		}
		if (!in_num) {
			in_num = 1;
			field++;
			v = 0;
			if (field == 3) {
				*state = c;
				continue;
			}
		}
		if (field == 22) {
			if (c < '0' || c > '9' || v > (UINT64_MAX - 9) / 10)
				return -1;
			v = v * 10 + (uint64_t)(c - '0');
		}
	}
	if (field != 22 || !in_num)
		return -1;
	*start = v;
	return 0;
}

static int read_stat(pid_t pid, char *state, uint64_t *start)
{
	char path[64], buf[1024];
	gs_fmt(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ESRCH ? 0 : -1;
	ssize_t n;
	do {
		n = read(fd, buf, sizeof(buf) - 1);
	} while (n < 0 && errno == EINTR);
	int read_errno = errno;
	close(fd);
	if (n < 0)
		return read_errno == ESRCH ? 0 : -1;
	return gs_parse_stat(buf, (size_t)n, state, start) == 0 ? 1 : -1;
}

GS_HIDDEN enum gs_liveness gs_proc_liveness(pid_t pid, uint64_t start)
{
	int saved = errno;
	char state = '?';
	uint64_t now_start = 0;
	int r = read_stat(pid, &state, &now_start);
	errno = saved;
	if (r < 0)
		return GS_UNKNOWN;
	if (r == 0 || state == 'Z' || state == 'X' || now_start != start)
		return GS_DEAD;
	return GS_ALIVE;
}

GS_HIDDEN uint64_t gs_proc_start(pid_t pid)
{
	int saved = errno;
	char state;
	uint64_t start = 0;
	if (read_stat(pid, &state, &start) != 1)
		start = 0;
	errno = saved;
	return start;
}

GS_HIDDEN uint64_t gs_pidns_self(void)
{
	int saved = errno;
	struct stat st;
	uint64_t ino = stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
	errno = saved;
	return ino;
}
