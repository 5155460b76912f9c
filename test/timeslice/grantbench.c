/* SPDX-License-Identifier: Apache-2.0
 *
 * gs-grantbench: grant round trips over the time-slice daemon's socket, made as
 * libgpuslice's gate makes them (the same frame code, libgpuslice/src/gate_wire.h):
 * a holder at the end of its slice sends release(seq, MORE) and blocks in one
 * recv for its next grant; one send and one recv per grant.
 *
 *   gs-grantbench SOCKET N PROCS [own|shared|floor]
 * PROCS processes each take N grants, concurrently. own (default): each on a
 * GPU of its own (its own policy instance), so the daemon grants again at once:
 * the round trip and the daemon's grant rate. shared: all on one GPU, each its
 * own group: every grant is a hand-over from another process. floor: no
 * daemon (SOCKET unused): each process exchanges the same frames with a child
 * that answers every frame at once (socketpair, same socket type): what the
 * machine's scheduler and unix sockets cost, the bound for the others.
 * Prints per process "rtt P50_NS P99_NS GRANTS_PER_S" (round trip: release sent
 * -> grant received), then "total GRANTS_PER_S" (all processes' grants over the
 * wall time of the whole run).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../libgpuslice/src/gate_wire.h"

static unsigned long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
	return x < y ? -1 : x > y;
}

static int dial(const char *path)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	struct gs_frame f;
	struct gs_msg_hello h = {.features = GS_FEATURE_REVOKE};
	int fd = socket(AF_UNIX, GS_PROTO_SOCK_TYPE, 0);
	strncpy(addr.sun_path, path, sizeof(addr.sun_path) - 1);
	if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
		perror("gs-grantbench: connect");
		return -1;
	}
	gs_wire_frame(&f, GS_MSG_HELLO, &h, sizeof(h));
	if (gs_wire_send(fd, &f) != 0 || gs_wire_recv(fd, &f, 0) != 0 || f.header.type != GS_MSG_WELCOME) {
		fprintf(stderr, "gs-grantbench: no welcome\n");
		return -1;
	}
	return fd;
}

/* Reads frames until a grant (revokes of earlier grants are skipped). */
static int next_grant(int fd, struct gs_frame *f)
{
	do
		if (gs_wire_recv(fd, f, 0) != 0)
			return -1;
	while (f->header.type != GS_MSG_GRANT);
	return 0;
}

/* floor: a child answers every frame with a grant at once; returns our end. */
static int echo_peer(void)
{
	int sv[2];
	if (socketpair(AF_UNIX, GS_PROTO_SOCK_TYPE, 0, sv) != 0) {
		perror("gs-grantbench: socketpair");
		return -1;
	}
	if (fork() == 0) {
		struct gs_frame f;
		struct gs_msg_grant g = {.gpu = {0xbe}, .valid_ns = 1000000};
		close(sv[0]);
		while (recv(sv[1], &f, sizeof(f), 0) == (ssize_t)sizeof(f)) {
			g.seq++;
			gs_wire_frame(&f, GS_MSG_GRANT, &g, sizeof(g));
			if (gs_wire_send(sv[1], &f) != 0)
				break;
		}
		_exit(0);
	}
	close(sv[1]);
	return sv[0];
}

static int bench(const char *path, uint8_t gpu, long n, int floor)
{
	struct gs_frame f;
	unsigned long long *lat = calloc((size_t)n, sizeof(*lat));
	int fd = floor ? echo_peer() : dial(path);
	struct gs_msg_acquire a = {.gpu = {0x70, gpu}}; /* a GPU the test daemon lists (testGPUs) */
	struct gs_msg_release r = {.gpu = {0x70, gpu}, .flags = GS_RELEASE_MORE};
	if (lat == NULL || fd < 0)
		return 1;
	gs_wire_frame(&f, GS_MSG_ACQUIRE, &a, sizeof(a));
	if (gs_wire_send(fd, &f) != 0 || next_grant(fd, &f) != 0)
		return 1;
	unsigned long long start = now_ns();
	for (long i = 0; i < n; i++) {
		unsigned long long t = now_ns();
		r.seq = f.msg.grant.seq;
		gs_wire_frame(&f, GS_MSG_RELEASE, &r, sizeof(r));
		if (gs_wire_send(fd, &f) != 0 || next_grant(fd, &f) != 0) {
			fprintf(stderr, "gs-grantbench: connection lost after %ld grants\n", i);
			return 1;
		}
		lat[i] = now_ns() - t;
	}
	double secs = (double)(now_ns() - start) / 1e9;
	r.seq = f.msg.grant.seq;
	r.flags = 0;
	gs_wire_frame(&f, GS_MSG_RELEASE, &r, sizeof(r));
	(void)gs_wire_send(fd, &f);
	qsort(lat, (size_t)n, sizeof(*lat), cmp);
	printf("rtt %llu %llu %.0f\n", lat[n / 2], lat[n * 99 / 100], (double)n / secs);
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc == 5 ? argv[4] : "own";
	if (argc < 4 || argc > 5 ||
	    (strcmp(mode, "own") != 0 && strcmp(mode, "shared") != 0 && strcmp(mode, "floor") != 0)) {
		fprintf(stderr, "usage: gs-grantbench SOCKET N PROCS [own|shared|floor]\n");
		return 2;
	}
	long n = atol(argv[2]);
	int procs = atoi(argv[3]), shared = strcmp(mode, "shared") == 0, floor = strcmp(mode, "floor") == 0;
	if (n <= 0 || procs <= 0 || procs > 64)
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	unsigned long long start = now_ns();
	for (int p = 0; p < procs; p++)
		if (fork() == 0)
			_exit(bench(argv[1], shared ? 0 : (uint8_t)(p + 1), n, floor));
	int bad = 0, st;
	while (wait(&st) > 0)
		bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	printf("total %.0f\n", (double)n * procs / ((double)(now_ns() - start) / 1e9));
	return bad;
}
