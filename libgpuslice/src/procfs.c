/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
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

/* Reads and parses a stat file: 1, 0 if the process is gone, -1 if unreadable or malformed. */
static int read_stat_file(const char *path, char *state, uint64_t *start)
{
	char buf[1024];
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

static int read_stat(pid_t pid, char *state, uint64_t *start)
{
	char path[64];
	gs_fmt(path, sizeof(path), "/proc/%d/stat", (int)pid);
	return read_stat_file(path, state, start);
}

GS_HIDDEN int gs_thread_runnable(pid_t tid)
{
	int saved = errno;
	char path[64], state = '?';
	uint64_t start;
	gs_fmt(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	int r = read_stat_file(path, &state, &start) == 1 && state == 'R';
	errno = saved;
	return r;
}

GS_HIDDEN int gs_parse_schedstat(const char *buf, size_t len, uint64_t *exec, uint64_t *run_delay)
{
	uint64_t v[3] = {0, 0, 0};
	int field = 0, in_num = 0;
	size_t i = 0;
	for (; i < len && buf[i] != '\0' && buf[i] != '\n'; i++) {
		char c = buf[i];
		if (c == ' ') {
			in_num = 0;
			continue;
		}
		if (c < '0' || c > '9')
			return -1;
		if (!in_num) {
			if (field == 3)
				return -1; /* a fourth field */
			in_num = 1;
			field++;
		}
		uint64_t *x = &v[field - 1];
		if (*x > (UINT64_MAX - 9) / 10)
			return -1;
		*x = *x * 10 + (uint64_t)(c - '0');
	}
	if (field != 3)
		return -1;
	*exec = v[0];
	*run_delay = v[1];
	return 0;
}

GS_HIDDEN int gs_thread_schedstat(pid_t tid, uint64_t *exec, uint64_t *run_delay)
{
	int saved = errno;
	char path[64], buf[128];
	gs_fmt(path, sizeof(path), "/proc/self/task/%d/schedstat", (int)tid);
	int rc = -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n;
		do {
			n = read(fd, buf, sizeof(buf) - 1);
		} while (n < 0 && errno == EINTR);
		close(fd);
		if (n > 0)
			rc = gs_parse_schedstat(buf, (size_t)n, exec, run_delay);
	}
	errno = saved;
	return rc;
}

GS_HIDDEN int gs_starved(int runnable, uint64_t exec0, uint64_t exec1, uint64_t elapsed_ns)
{
	if (!runnable)
		return 0;
	return exec1 < exec0 || exec1 - exec0 < elapsed_ns / 2;
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

/* Parses a signed decimal of at most 18 digits (the range the kernel writes
 * seconds in and Go's monoclock accepts); 0 or -1. */
static int parse_i64(const char *s, size_t n, int64_t *out)
{
	int neg = n > 0 && s[0] == '-';
	size_t i = (size_t)neg;
	if (i == n || n - i > 18)
		return -1;
	int64_t v = 0;
	for (; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	*out = neg ? -v : v;
	return 0;
}

/* The end of a line (or of the text) at buf[i]. */
static int line_end(const char *buf, size_t len, size_t i)
{
	return i >= len || buf[i] == '\0' || buf[i] == '\n';
}

GS_HIDDEN int gs_parse_timens_monotonic(const char *buf, size_t len, int64_t *sec, int64_t *nsec)
{
	size_t i = 0;
	while (i < len && buf[i] != '\0') {
		const char *tok[3];
		size_t tlen[3], ntok = 0;
		for (; !line_end(buf, len, i); i++) {
			if (buf[i] == ' ' || buf[i] == '\t')
				continue;
			if (ntok == 3)
				return -1;
			size_t start = i;
			while (!line_end(buf, len, i + 1) && buf[i + 1] != ' ' && buf[i + 1] != '\t')
				i++;
			tok[ntok] = buf + start;
			tlen[ntok++] = i + 1 - start;
		}
		if (i < len && buf[i] == '\n')
			i++;
		if (ntok == 0)
			continue;
		if (ntok != 3)
			return -1;
		if (!(tlen[0] == 9 && memcmp(tok[0], "monotonic", 9) == 0) && !(tlen[0] == 1 && tok[0][0] == '1'))
			continue;
		int64_t s, ns;
		if (parse_i64(tok[1], tlen[1], &s) != 0 || parse_i64(tok[2], tlen[2], &ns) != 0 || ns < 0 ||
		    ns >= 1000000000)
			return -1;
		*sec = s;
		*nsec = ns;
		return 0;
	}
	return -1;
}

GS_HIDDEN int gs_clock_shared(void)
{
	int saved = errno, shared = 0;
	char buf[256];
	int fd = open("/proc/self/timens_offsets", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		shared = errno == ENOENT; /* a kernel without time namespaces: one clock */
		errno = saved;
		return shared;
	}
	ssize_t n;
	do {
		n = read(fd, buf, sizeof(buf));
	} while (n < 0 && errno == EINTR);
	close(fd);
	int64_t sec, nsec;
	shared = n > 0 && (size_t)n < sizeof(buf) && gs_parse_timens_monotonic(buf, (size_t)n, &sec, &nsec) == 0 &&
		 sec == 0 && nsec == 0;
	errno = saved;
	return shared;
}
