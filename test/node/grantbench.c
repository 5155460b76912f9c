/* SPDX-License-Identifier: Apache-2.0
 *
 * gs-grantbench: grant round trips over the node daemon's socket, as the C
 * client (libgpuslice's gate) makes them: blocking send/recv of fixed frames
 * (include/gpuslice/proto.h). Each of --procs processes asks for its own GPU
 * --n times (acquire -> grant, then release) and reports the round trip.
 * Prints per process "rtt p50_ns p99_ns grants_per_s", then "total grants_per_s".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpuslice/proto.h"

static unsigned long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static int xfer(int fd, struct gs_frame *f, int out)
{
	size_t done = 0;
	while (done < sizeof(*f)) {
		ssize_t r = out ? send(fd, (char *)f + done, sizeof(*f) - done, MSG_NOSIGNAL)
				: recv(fd, (char *)f + done, sizeof(*f) - done, 0);
		if (r <= 0)
			return -1;
		done += (size_t)r;
	}
	return 0;
}

static void frame(struct gs_frame *f, uint16_t type, uint32_t len)
{
	memset(f, 0, sizeof(*f));
	f->header.magic = GS_PROTO_MAGIC;
	f->header.version = GS_PROTO_VERSION;
	f->header.type = type;
	f->header.len = len;
}

static int cmp(const void *a, const void *b)
{
	unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
	return x < y ? -1 : x > y;
}

static int bench(const char *path, int id, long n)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	struct gs_frame f;
	unsigned long long *lat = calloc((size_t)n, sizeof(*lat));
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	strncpy(addr.sun_path, path, sizeof(addr.sun_path) - 1);
	if (lat == NULL || fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
		perror("gs-grantbench: connect");
		return 1;
	}
	frame(&f, GS_MSG_HELLO, sizeof(f.msg.hello));
	if (xfer(fd, &f, 1) != 0 || xfer(fd, &f, 0) != 0 || f.header.type != GS_MSG_WELCOME) {
		fprintf(stderr, "gs-grantbench: no welcome\n");
		return 1;
	}
	unsigned long long start = now_ns();
	for (long i = 0; i < n; i++) {
		unsigned long long t = now_ns();
		frame(&f, GS_MSG_ACQUIRE, sizeof(f.msg.acquire));
		f.msg.acquire.gpu[0] = 0xbe;
		f.msg.acquire.gpu[1] = (uint8_t)id;
		if (xfer(fd, &f, 1) != 0)
			return 1;
		do {
			if (xfer(fd, &f, 0) != 0)
				return 1;
		} while (f.header.type != GS_MSG_GRANT);
		lat[i] = now_ns() - t;
		uint64_t seq = f.msg.grant.seq;
		frame(&f, GS_MSG_RELEASE, sizeof(f.msg.release));
		f.msg.release.gpu[0] = 0xbe;
		f.msg.release.gpu[1] = (uint8_t)id;
		f.msg.release.seq = seq;
		if (xfer(fd, &f, 1) != 0)
			return 1;
	}
	double secs = (double)(now_ns() - start) / 1e9;
	qsort(lat, (size_t)n, sizeof(*lat), cmp);
	printf("rtt %llu %llu %.0f\n", lat[n / 2], lat[n * 99 / 100], (double)n / secs);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: gs-grantbench SOCKET N PROCS\n");
		return 2;
	}
	long n = atol(argv[2]);
	int procs = atoi(argv[3]);
	if (n <= 0 || procs <= 0 || procs > 64)
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	unsigned long long start = now_ns();
	for (int p = 0; p < procs; p++)
		if (fork() == 0)
			_exit(bench(argv[1], p, n));
	int bad = 0, st;
	while (wait(&st) > 0)
		bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	printf("total %.0f\n", (double)n * procs / ((double)(now_ns() - start) / 1e9));
	return bad;
}
