/* SPDX-License-Identifier: Apache-2.0
 *
 * MPS client side of the simulated libcuda. When the directory
 * CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps) holds a listening
 * simulator stand-in daemon (gpuslice-sim-mps-control), the process's first
 * context makes it an MPS client: admitted up to the client limit
 * (CUDA_ERROR_MPS_MAX_CLIENTS_REACHED beyond), its kernels no longer take the
 * device's FIFO engine but run concurrently with the other clients' kernels,
 * each at its CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of the GPU's throughput
 * (scaled down together when running kernels ask for more than 100 %). If
 * the server dies, every later launch or synchronize returns
 * CUDA_ERROR_MPS_RPC_FAILURE. A client's device memory is bounded by
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT. No daemon listening: a normal (non-MPS)
 * process. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "mps.h"
#include "mps_table.h"
#include "sim.h"

enum { MPS_UNKNOWN, MPS_OFF, MPS_CLIENT, MPS_FAILED };

#define STEP_NS 1000000ull /* rates are re-read at least every 1 ms */
#define RATE_ONE 100000ull /* rate units: 1/1000 of a percent of the GPU */

static struct {
	_Atomic int state;
	int fd, slot;
	uint32_t pct;
	struct sim_mps_table *t;
	uint64_t limit[SIM_MAX_DEVICES]; /* pinned device memory limit per simulator device, 0: none */
} mps = {.fd = -1, .slot = -1};

static uint32_t env_pct(void)
{
	const char *v = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
	char *end;
	double d;

	if (v == NULL || v[0] == '\0')
		return 100;
	errno = 0;
	d = strtod(v, &end);
	if (errno != 0 || *end != '\0' || !(d > 0.0) || d > 100.0)
		return 100;
	return (uint32_t)d + ((double)(uint32_t)d < d ? 1u : 0u);
}

static void *monitor(void *arg)
{
	char b;

	(void)arg;
	while (recv(mps.fd, &b, 1, 0) != 0 && errno == EINTR)
		;
	atomic_store(&mps.state, MPS_FAILED);
	return NULL;
}

static int dial(void)
{
	const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int n, fd;

	if (dir == NULL || dir[0] == '\0')
		dir = SIM_MPS_DEFAULT_PIPE_DIR;
	n = snprintf(a.sun_path, sizeof(a.sun_path), "%s/%s", dir, SIM_MPS_SOCKET);
	if (n < 0 || (size_t)n >= sizeof(a.sun_path))
		return -1;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Sends the hello and maps the table from the reply. */
static CUresult handshake(int fd)
{
	struct sim_mps_hello h = {.version = SIM_MPS_VERSION, .kind = SIM_MPS_HELLO, .pct = env_pct()};
	struct sim_mps_reply r;
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {.iov_base = &r, .iov_len = sizeof(r)};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *c;
	int memfd = -1;
	void *p;

	if (send(fd, &h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h) ||
	    recvmsg(fd, &m, MSG_CMSG_CLOEXEC) != (ssize_t)sizeof(r) || r.version != SIM_MPS_VERSION)
		return CUDA_ERROR_MPS_CONNECTION_FAILED;
	c = CMSG_FIRSTHDR(&m);
	if (c != NULL && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
		memcpy(&memfd, CMSG_DATA(c), sizeof(int));
	if (r.status != CUDA_SUCCESS || memfd < 0 || r.slot < 0 || r.slot >= SIM_MPS_MAX_CLIENTS) {
		if (memfd >= 0)
			close(memfd);
		return r.status != CUDA_SUCCESS ? (CUresult)r.status : CUDA_ERROR_MPS_CONNECTION_FAILED;
	}
	p = mmap(NULL, sizeof(*mps.t), PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	close(memfd);
	if (p == MAP_FAILED)
		return CUDA_ERROR_MPS_CONNECTION_FAILED;
	mps.t = p;
	if (mps.t->magic != SIM_MPS_MAGIC || mps.t->version != SIM_MPS_VERSION || mps.t->size != sizeof(*mps.t)) {
		munmap(p, sizeof(*mps.t));
		mps.t = NULL;
		return CUDA_ERROR_MPS_CONNECTION_FAILED;
	}
	mps.slot = r.slot;
	mps.pct = h.pct;
	return CUDA_SUCCESS;
}

/* CUDA_MPS_PINNED_DEVICE_MEM_LIMIT by CUDA ordinal -> mps.limit by simulator
 * device (ordinals this process does not list are ignored). */
static int pinned_limits(void)
{
	uint64_t by_ord[SIM_MAX_DEVICES];
	char err[SIM_ERR_LEN];

	if (sim_parse_pinned_limits(getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), by_ord, err, sizeof(err)) != 0) {
		fprintf(stderr, "gpuslice: simulated GPU: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: %s\n", err);
		return -1;
	}
	for (int i = 0; i < SIM_MAX_DEVICES; i++) {
		int d = by_ord[i] != 0 ? sim_device(i) : -1;
		if (d >= 0 && d < SIM_MAX_DEVICES)
			mps.limit[d] = by_ord[i];
	}
	return 0;
}

uint64_t sim_mps_limit(int dev)
{
	int st = atomic_load(&mps.state);

	if ((st != MPS_CLIENT && st != MPS_FAILED) || dev < 0 || dev >= SIM_MAX_DEVICES)
		return 0;
	return mps.limit[dev];
}

CUresult sim_mps_attach(void)
{
	pthread_t th;
	CUresult rc;
	int fd;

	switch (atomic_load(&mps.state)) {
	case MPS_OFF:
	case MPS_CLIENT:
		return CUDA_SUCCESS;
	case MPS_FAILED:
		return CUDA_ERROR_MPS_RPC_FAILURE;
	}
	fd = dial();
	if (fd < 0) {
		atomic_store(&mps.state, MPS_OFF);
		return CUDA_SUCCESS;
	}
	if (pinned_limits() != 0) {
		close(fd);
		return CUDA_ERROR_INVALID_VALUE;
	}
	rc = handshake(fd);
	if (rc != CUDA_SUCCESS) {
		close(fd);
		return rc;
	}
	mps.fd = fd;
	atomic_store(&mps.state, MPS_CLIENT);
	if (pthread_create(&th, NULL, monitor, NULL) != 0) {
		atomic_store(&mps.state, MPS_FAILED);
		return CUDA_ERROR_MPS_CONNECTION_FAILED;
	}
	pthread_detach(th);
	return CUDA_SUCCESS;
}

int32_t sim_mps_server(void)
{
	return atomic_load(&mps.state) == MPS_OFF || mps.t == NULL ? 0 : mps.t->server_pid;
}

/* Also peeks at the connection, so a server that is gone (its process
 * reaped) fails the very next call, not only once the monitor has run. */
CUresult sim_mps_check(void)
{
	char b;
	int st = atomic_load(&mps.state);

	if (st == MPS_CLIENT) {
		int saved = errno;
		ssize_t n = recv(mps.fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			atomic_store(&mps.state, MPS_FAILED);
			st = MPS_FAILED;
		}
		errno = saved;
	}
	return st == MPS_FAILED ? CUDA_ERROR_MPS_RPC_FAILURE : CUDA_SUCCESS;
}

/* This kernel's rate in RATE_ONE units: its percentage, scaled down when the
 * running kernels of all clients ask for more than the whole GPU. */
static uint64_t rate(void)
{
	uint64_t sum = 0;

	for (int i = 0; i < SIM_MPS_MAX_CLIENTS; i++)
		if (atomic_load(&mps.t->client[i].pid) != 0)
			sum += atomic_load(&mps.t->client[i].running);
	return (uint64_t)mps.pct * RATE_ONE / (sum > 100 ? sum : 100);
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull), .tv_nsec = (long)(ns % 1000000000ull)};

	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
		;
}

/* Processor sharing: the kernel's work (busy_ns of the whole GPU) advances
 * by the elapsed time times its current rate, from start (the previous
 * kernel's end when this one was queued behind it: a GPU runs queued kernels
 * back to back, whenever the host thread that models it wakes up), else from
 * now. Returns the simulated end: the instant its work was complete, not
 * when the sleeping thread noticed. */
static uint64_t run_shared(struct sim_engine *e, uint64_t busy_ns, uint64_t start)
{
	struct sim_mps_client *me = &mps.t->client[mps.slot];
	uint64_t left = busy_ns * RATE_ONE, now = sim_now_ns(), last = start != 0 && start < now ? start : now;

	atomic_store(&me->running, mps.pct);
	while (left > 0 && atomic_load(&mps.state) == MPS_CLIENT) {
		uint64_t r = rate(), wait = (left + r - 1) / r, done;

		now = sim_now_ns();
		if (now - last < wait)
			sleep_ns(wait - (now - last) < STEP_NS ? wait - (now - last) : STEP_NS);
		now = sim_now_ns();
		done = (now - last) * r;
		if (done >= left) { /* complete: it ended within this step */
			done = left;
			now = last + wait;
		}
		left -= done;
		atomic_fetch_add(&me->work_ns, done / RATE_ONE);
		sim_engine_account(e, last, last + done / RATE_ONE);
		last = now;
	}
	atomic_store(&me->running, 0);
	return last;
}

bool sim_mps_run(struct sim_engine *e, uint64_t busy_ns, uint64_t *end)
{
	int st = atomic_load(&mps.state);

	if (st != MPS_CLIENT && st != MPS_FAILED)
		return false;
	if (st == MPS_CLIENT && busy_ns != 0)
		*end = run_shared(e, busy_ns, *end);
	else
		*end = 0;
	sim_engine_count(e);
	return true;
}
