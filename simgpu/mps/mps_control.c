/* SPDX-License-Identifier: Apache-2.0
 *
 * SIMULATOR PART: gpuslice-sim-mps-control, the simulated GPU's stand-in for
 * nvidia-cuda-mps-control and nvidia-cuda-mps-server (one process plays
 * both). It admits up to SIM_MPS_MAX_CLIENTS clients of the simulated libcuda
 * and shares the client table through which their kernels divide the GPU's
 * throughput. Command line as the real tool's:
 *
 *   gpuslice-sim-mps-control -f     daemon in the foreground
 *   gpuslice-sim-mps-control -d     daemon in the background
 *   echo quit | gpuslice-sim-mps-control            stop the daemon
 *   echo get_server_list | gpuslice-sim-mps-control  server pids
 *   echo get_client_list PID | gpuslice-sim-mps-control
 *
 * Directories: CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps) and
 * CUDA_MPS_LOG_DIRECTORY (default /var/log/nvidia-mps, control.log). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gpuslice/cuda_abi.h"
#include "mps_table.h"

struct daemon {
	char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
	FILE *log;
	int lfd, sfd, memfd;
	int cfd[SIM_MPS_MAX_CLIENTS];
	struct sim_mps_table *t;
	bool quit;
};

static const char *env_or(const char *name, const char *def)
{
	const char *v = getenv(name);

	return v != NULL && v[0] != '\0' ? v : def;
}

static void logf_(struct daemon *d, const char *fmt, ...)
{
	char ts[32];
	time_t now = time(NULL);
	struct tm tm;
	va_list ap;

	if (d->log == NULL)
		return;
	strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));
	fprintf(d->log, "[%s] ", ts);
	va_start(ap, fmt);
	vfprintf(d->log, fmt, ap);
	va_end(ap);
	fputc('\n', d->log);
	fflush(d->log);
}

static int mkdirs(const char *path)
{
	char buf[4096];
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(buf))
		return -1;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p != '\0'; p++)
		if (*p == '/') {
			*p = '\0';
			if (mkdir(buf, 0755) != 0 && errno != EEXIST)
				return -1;
			*p = '/';
		}
	return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int sock_path(char *out, size_t len)
{
	const char *dir = env_or("CUDA_MPS_PIPE_DIRECTORY", SIM_MPS_DEFAULT_PIPE_DIR);
	int n = snprintf(out, len, "%s/%s", dir, SIM_MPS_SOCKET);

	return n < 0 || (size_t)n >= len ? -1 : 0;
}

static int dial(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	memcpy(a.sun_path, path, strlen(path) + 1);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Control client: each stdin line is one command; replies go to stdout. */
static int run_commands(void)
{
	char path[108], line[120];
	int rc = 0;

	if (sock_path(path, sizeof(path)) != 0) {
		fprintf(stderr, "gpuslice-sim-mps-control: pipe directory path too long\n");
		return 1;
	}
	while (fgets(line, sizeof(line), stdin) != NULL) {
		struct sim_mps_command c = {.version = SIM_MPS_VERSION, .kind = SIM_MPS_COMMAND};
		char out[4096];
		ssize_t n;
		int fd;

		line[strcspn(line, "\r\n")] = '\0';
		if (line[0] == '\0')
			continue;
		snprintf(c.text, sizeof(c.text), "%.119s", line);
		fd = dial(path);
		if (fd < 0) {
			fprintf(stderr, "gpuslice-sim-mps-control: cannot connect to %s: %s\n", path, strerror(errno));
			return 1;
		}
		if (send(fd, &c, sizeof(c), MSG_NOSIGNAL) != (ssize_t)sizeof(c)) {
			close(fd);
			return 1;
		}
		while ((n = recv(fd, out, sizeof(out), 0)) > 0)
			fwrite(out, 1, (size_t)n, stdout);
		close(fd);
	}
	fflush(stdout);
	return rc;
}

static int listen_on(struct daemon *d)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = dial(d->sock);

	if (fd >= 0) {
		close(fd);
		fprintf(stderr, "gpuslice-sim-mps-control: a daemon already listens on %s\n", d->sock);
		return -1;
	}
	unlink(d->sock); /* stale */
	d->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	memcpy(a.sun_path, d->sock, strlen(d->sock) + 1);
	if (d->lfd < 0 || bind(d->lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || chmod(d->sock, 0666) != 0 ||
	    listen(d->lfd, 64) != 0) {
		fprintf(stderr, "gpuslice-sim-mps-control: listen on %s: %s\n", d->sock, strerror(errno));
		return -1;
	}
	return 0;
}

static int make_table(struct daemon *d)
{
	d->memfd = memfd_create("gpuslice-sim-mps", MFD_CLOEXEC);
	if (d->memfd < 0 || ftruncate(d->memfd, sizeof(*d->t)) != 0)
		return -1;
	d->t = mmap(NULL, sizeof(*d->t), PROT_READ | PROT_WRITE, MAP_SHARED, d->memfd, 0);
	if (d->t == MAP_FAILED)
		return -1;
	d->t->magic = SIM_MPS_MAGIC;
	d->t->version = SIM_MPS_VERSION;
	d->t->size = sizeof(*d->t);
	d->t->server_pid = getpid();
	d->t->max_clients = SIM_MPS_MAX_CLIENTS;
	return 0;
}

static void reply(int fd, int32_t status, int slot, int memfd)
{
	struct sim_mps_reply r = {.version = SIM_MPS_VERSION, .status = status, .slot = slot, .server_pid = getpid()};
	struct iovec iov = {.iov_base = &r, .iov_len = sizeof(r)};
	char cbuf[CMSG_SPACE(sizeof(int))] = {0};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};

	if (memfd >= 0) {
		m.msg_control = cbuf;
		m.msg_controllen = sizeof(cbuf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &memfd, sizeof(int));
	}
	(void)sendmsg(fd, &m, MSG_NOSIGNAL);
}

static void admit(struct daemon *d, int fd, const struct sim_mps_hello *h)
{
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	int slot = -1;

	if (h->pct < 1 || h->pct > 100 || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0) {
		reply(fd, CUDA_ERROR_MPS_CONNECTION_FAILED, -1, -1);
		close(fd);
		return;
	}
	for (int i = 0; i < SIM_MPS_MAX_CLIENTS && slot < 0; i++)
		if (d->cfd[i] < 0)
			slot = i;
	if (slot < 0) {
		logf_(d, "client pid %d refused: %d clients", (int)cr.pid, SIM_MPS_MAX_CLIENTS);
		reply(fd, CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, -1, -1);
		close(fd);
		return;
	}
	atomic_store(&d->t->client[slot].running, 0);
	atomic_store(&d->t->client[slot].work_ns, 0);
	atomic_store(&d->t->client[slot].pct, h->pct);
	atomic_store(&d->t->client[slot].pid, (int32_t)cr.pid);
	d->cfd[slot] = fd;
	logf_(d, "New client %d connected, active thread percentage %u", (int)cr.pid, h->pct);
	reply(fd, CUDA_SUCCESS, slot, d->memfd);
}

static void command(struct daemon *d, int fd, const struct sim_mps_command *c)
{
	char out[4096] = "";
	size_t n = 0;
	char text[sizeof(c->text)];
	long pid;

	memcpy(text, c->text, sizeof(text));
	text[sizeof(text) - 1] = '\0';
	if (strcmp(text, "quit") == 0) {
		logf_(d, "quit");
		d->quit = true;
	} else if (strcmp(text, "get_server_list") == 0) {
		n = (size_t)snprintf(out, sizeof(out), "%d\n", (int)getpid());
	} else if (sscanf(text, "get_client_list %ld", &pid) == 1) {
		for (int i = 0; i < SIM_MPS_MAX_CLIENTS && pid == getpid() && n + 16 < sizeof(out); i++)
			if (d->cfd[i] >= 0)
				n += (size_t)snprintf(out + n, sizeof(out) - n, "%d\n", (int)d->t->client[i].pid);
	} else {
		n = (size_t)snprintf(out, sizeof(out), "unknown command: %.100s\n", text);
	}
	if (n > 0)
		(void)send(fd, out, n, MSG_NOSIGNAL);
	close(fd);
}

/* One message per new connection (1 s to send it), then admit or answer. */
static void on_accept(struct daemon *d)
{
	union {
		struct sim_mps_hello h;
		struct sim_mps_command c;
	} m;
	struct timeval tv = {.tv_sec = 1};
	int fd = accept4(d->lfd, NULL, NULL, SOCK_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	memset(&m, 0, sizeof(m));
	n = recv(fd, &m, sizeof(m), 0);
	if (n == (ssize_t)sizeof(m.h) && m.h.version == SIM_MPS_VERSION && m.h.kind == SIM_MPS_HELLO)
		admit(d, fd, &m.h);
	else if (n == (ssize_t)sizeof(m.c) && m.c.version == SIM_MPS_VERSION && m.c.kind == SIM_MPS_COMMAND)
		command(d, fd, &m.c);
	else
		close(fd);
}

static void drop_client(struct daemon *d, int i)
{
	logf_(d, "Client %d disconnected", (int)atomic_load(&d->t->client[i].pid));
	close(d->cfd[i]);
	d->cfd[i] = -1;
	atomic_store(&d->t->client[i].running, 0);
	atomic_store(&d->t->client[i].pid, 0);
}

static void serve(struct daemon *d)
{
	struct pollfd p[2 + SIM_MPS_MAX_CLIENTS];

	while (!d->quit) {
		int map[SIM_MPS_MAX_CLIENTS], n = 2;

		p[0] = (struct pollfd){.fd = d->lfd, .events = POLLIN};
		p[1] = (struct pollfd){.fd = d->sfd, .events = POLLIN};
		for (int i = 0; i < SIM_MPS_MAX_CLIENTS; i++)
			if (d->cfd[i] >= 0) {
				map[n - 2] = i;
				p[n++] = (struct pollfd){.fd = d->cfd[i], .events = POLLIN};
			}
		if (poll(p, (nfds_t)n, -1) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		if (p[1].revents != 0) {
			logf_(d, "signal: shutting down");
			return;
		}
		for (int k = 2; k < n; k++) {
			char b;
			if (p[k].revents != 0 && recv(p[k].fd, &b, 1, MSG_DONTWAIT) <= 0)
				drop_client(d, map[k - 2]);
		}
		if (p[0].revents & POLLIN)
			on_accept(d);
	}
}

static int run_daemon(bool background)
{
	struct daemon d = {.lfd = -1, .sfd = -1, .memfd = -1};
	const char *pipe = env_or("CUDA_MPS_PIPE_DIRECTORY", SIM_MPS_DEFAULT_PIPE_DIR);
	const char *logd = env_or("CUDA_MPS_LOG_DIRECTORY", SIM_MPS_DEFAULT_LOG_DIR);
	char logp[4096];
	sigset_t ss;

	for (int i = 0; i < SIM_MPS_MAX_CLIENTS; i++)
		d.cfd[i] = -1;
	if (mkdirs(pipe) != 0 || mkdirs(logd) != 0 || sock_path(d.sock, sizeof(d.sock)) != 0) {
		fprintf(stderr, "gpuslice-sim-mps-control: cannot create %s or %s\n", pipe, logd);
		return 1;
	}
	snprintf(logp, sizeof(logp), "%s/control.log", logd);
	d.log = fopen(logp, "ae");
	if (make_table(&d) != 0 || listen_on(&d) != 0)
		return 1;
	if (background && daemon(0, 0) != 0)
		return 1;
	sigemptyset(&ss);
	sigaddset(&ss, SIGTERM);
	sigaddset(&ss, SIGINT);
	sigprocmask(SIG_BLOCK, &ss, NULL);
	signal(SIGPIPE, SIG_IGN);
	d.sfd = signalfd(-1, &ss, SFD_CLOEXEC);
	logf_(&d, "Starting control daemon (simulator stand-in), pid %d", (int)getpid());
	serve(&d);
	unlink(d.sock);
	for (int i = 0; i < SIM_MPS_MAX_CLIENTS; i++)
		if (d.cfd[i] >= 0)
			drop_client(&d, i);
	logf_(&d, "exit");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 1)
		return run_commands();
	if (argc == 2 && (strcmp(argv[1], "-f") == 0 || strcmp(argv[1], "-d") == 0))
		return run_daemon(argv[1][1] == 'd');
	fprintf(stderr, "usage: gpuslice-sim-mps-control [-d | -f]   (commands on stdin without flags)\n");
	return 2;
}
