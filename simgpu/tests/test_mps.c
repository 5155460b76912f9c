/* SPDX-License-Identifier: Apache-2.0
 * MPS mode of the simulated GPU with the stand-in daemon
 * (gpuslice-sim-mps-control, built next to this test): two clients at 30 %
 * and 70 % share the GPU's throughput at the same time; the 49th client is
 * refused; a killed server fails its clients and a restarted one admits new
 * clients; NVML lists a client in the MPS list and its server in the compute
 * list, as a real driver does; a client's allocations stop at its
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT. */
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <sys/stat.h>

#include "testutil.h"

#define SHARE_KERNEL_US 100000 /* 100 ms of whole-GPU work per kernel */
#define SHARE_WINDOW_MS 2000   /* each client is busy ~2 s at its share */

static char daemon_bin[PATH_MAX], pipe_dir[PATH_MAX];

static pid_t start_daemon(void)
{
	char sock[PATH_MAX + 32];
	struct stat sb;
	pid_t pid = fork();

	MUST(pid >= 0);
	if (pid == 0) {
		execl(daemon_bin, "gpuslice-sim-mps-control", "-f", (char *)NULL);
		_exit(127);
	}
	snprintf(sock, sizeof(sock), "%s/gpuslice-sim-mps.sock", pipe_dir);
	for (int i = 0; i < 500 && stat(sock, &sb) != 0; i++) /* ready: the socket exists */
		usleep(10000);
	MUST(stat(sock, &sb) == 0);
	usleep(20000); /* bind happens before listen */
	return pid;
}

static void stop_daemon(pid_t pid, int sig)
{
	kill(pid, sig);
	t_wait(pid);
}

/* Child: at CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, runs kernels worth pct % of
 * the window and prints the throughput it achieved, in tenths of a percent,
 * as its exit code's companion line on stdout. */
static int child_share(const char *pct)
{
	int p = atoi(pct), n = SHARE_WINDOW_MS * p / 100 / (SHARE_KERNEL_US / 1000);
	CUfunction f;
	double t0, t1;

	setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", pct, 1);
	t_primary(0);
	f = t_busy_fn();
	t0 = t_now_ms();
	for (int i = 0; i < n; i++)
		if (t_busy(f, SHARE_KERNEL_US, NULL) != CUDA_SUCCESS)
			return 2;
	if (cuCtxSynchronize() != CUDA_SUCCESS)
		return 3;
	t1 = t_now_ms();
	printf("share %s%%: %d x %d ms of GPU work in %.0f ms: %.1f%%\n", pct, n, SHARE_KERNEL_US / 1000, t1 - t0,
	       100.0 * n * (SHARE_KERNEL_US / 1000) / (t1 - t0));
	fflush(stdout);
	return (int)(1000.0 * n * (SHARE_KERNEL_US / 1000) / (t1 - t0) / 10.0 + 0.5); /* percent */
}

static void test_shares(void)
{
	pid_t d = start_daemon(), a = t_spawn("share", "30"), b = t_spawn("share", "70");
	int ra = t_wait(a), rb = t_wait(b);

	CHECK(ra >= 25 && ra <= 35);
	CHECK(rb >= 65 && rb <= 75);
	stop_daemon(d, SIGTERM);
}

/* Child: becomes a client, reports the context result on fd 3, waits for EOF
 * on fd 4, then runs one kernel. */
static int child_hold(void)
{
	CUcontext c;
	CUresult rc = cuInit(0);
	char b;

	if (rc == CUDA_SUCCESS)
		rc = cuDevicePrimaryCtxRetain(&c, 0);
	int code = (int)rc;
	MUST(write(3, &code, sizeof(code)) == (ssize_t)sizeof(code));
	while (read(4, &b, 1) > 0)
		;
	if (rc != CUDA_SUCCESS)
		return 0;
	cuCtxSetCurrent(c);
	CUfunction f = t_busy_fn();
	return t_busy(f, 10, NULL) == CUDA_SUCCESS && cuCtxSynchronize() == CUDA_SUCCESS ? 0 : 1;
}

static pid_t spawn_hold(int res_w, int hold_r)
{
	pid_t pid = fork();

	MUST(pid >= 0);
	if (pid == 0) {
		setenv("SIM_TEST_CHILD", "1", 1);
		MUST(dup2(res_w, 3) == 3 && dup2(hold_r, 4) == 4);
		execl("/proc/self/exe", "simtest-child", "child", "hold", "-", (char *)NULL);
		_exit(127);
	}
	return pid;
}

static void test_client_limit(void)
{
	pid_t d = start_daemon(), kids[49];
	int res[2], hold[2], code;

	MUST(pipe2(res, O_CLOEXEC) == 0 && pipe2(hold, O_CLOEXEC) == 0);
	for (int i = 0; i < 49; i++) {
		kids[i] = spawn_hold(res[1], hold[0]);
		MUST(read(res[0], &code, sizeof(code)) == (ssize_t)sizeof(code));
		if (i < 48)
			CHECK_EQ(code, CUDA_SUCCESS);
		else
			CHECK_EQ(code, CUDA_ERROR_MPS_MAX_CLIENTS_REACHED); /* the 49th, as the driver refuses */
	}
	close(hold[1]);
	for (int i = 0; i < 49; i++)
		CHECK_EQ(t_wait(kids[i]), 0);
	close(res[0]);
	close(res[1]);
	close(hold[0]);
	stop_daemon(d, SIGTERM);
}

static void test_process_lists(void)
{
	pid_t d = start_daemon(), kid;
	int res[2], hold[2], code;
	nvmlDevice_t h;
	nvmlProcessInfo_t v[8];
	unsigned int n = 8;

	MUST(pipe2(res, O_CLOEXEC) == 0 && pipe2(hold, O_CLOEXEC) == 0);
	kid = spawn_hold(res[1], hold[0]);
	MUST(read(res[0], &code, sizeof(code)) == (ssize_t)sizeof(code));
	CHECK_EQ(code, CUDA_SUCCESS);
	MUST(nvmlInit_v2() == NVML_SUCCESS && nvmlDeviceGetHandleByIndex_v2(0, &h) == NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetMPSComputeRunningProcesses_v3(h, &n, v), NVML_SUCCESS);
	CHECK(n == 1 && v[0].pid == (unsigned)kid); /* the client */
	n = 8;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, v), NVML_SUCCESS);
	CHECK(n == 1 && v[0].pid == (unsigned)d); /* its server, not the client */
	nvmlShutdown();
	close(hold[1]);
	CHECK_EQ(t_wait(kid), 0);
	close(res[0]);
	close(res[1]);
	close(hold[0]);
	stop_daemon(d, SIGTERM);
}

#define MiB (1024ull * 1024ull)

/* Child: a client under CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (arg) allocates up to
 * exactly its 64 MiB limit, never past it; a malformed limit ("bad") fails
 * context creation with a line on stderr. Exit 0 when all as expected. */
static int child_pinned(const char *arg)
{
	CUcontext c;
	CUdeviceptr a, b, d;

	setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", strcmp(arg, "bad") == 0 ? "0=64Q" : "0=64M", 1);
	MUST(cuInit(0) == CUDA_SUCCESS);
	CUresult rc = cuDevicePrimaryCtxRetain(&c, 0);
	if (strcmp(arg, "bad") == 0)
		return rc == CUDA_ERROR_INVALID_VALUE ? 0 : 10;
	if (rc != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS)
		return 11;
	if (cuMemAlloc_v2(&a, 48 * MiB) != CUDA_SUCCESS)
		return 12;
	if (cuMemAlloc_v2(&b, 32 * MiB) != CUDA_ERROR_OUT_OF_MEMORY) /* 80 MiB > 64 MiB */
		return 13;
	if (cuMemAlloc_v2(&b, 16 * MiB) != CUDA_SUCCESS) /* exactly the limit */
		return 14;
	if (cuMemAllocManaged(&d, 1, CU_MEM_ATTACH_GLOBAL) != CUDA_ERROR_OUT_OF_MEMORY)
		return 15;
	if (cuMemFree_v2(a) != CUDA_SUCCESS || cuMemAlloc_v2(&a, 40 * MiB) != CUDA_SUCCESS)
		return 16;
	return 0;
}

static void test_pinned_limit(void)
{
	pid_t d = start_daemon();

	CHECK_EQ(t_wait(t_spawn("pinned", "ok")), 0);
	CHECK_EQ(t_wait(t_spawn("pinned", "bad")), 0);
	stop_daemon(d, SIGTERM);
	/* No daemon: a normal process, the MPS variable means nothing. */
	CHECK_EQ(t_wait(t_spawn("nolimit", "-")), 0);
}

/* Child: no MPS daemon, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT set: not enforced. */
static int child_nolimit(void)
{
	CUdeviceptr a;

	setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=64M", 1);
	t_primary(0);
	return cuMemAlloc_v2(&a, 128 * MiB) == CUDA_SUCCESS ? 0 : 1;
}

/* Child: a client whose server is killed while it is connected. */
static int child_orphan(void)
{
	char b;

	t_primary(0);
	CUfunction f = t_busy_fn();
	if (t_busy(f, 10, NULL) != CUDA_SUCCESS || cuCtxSynchronize() != CUDA_SUCCESS)
		return 1;
	MUST(write(3, "r", 1) == 1);
	while (read(4, &b, 1) > 0) /* until the parent has killed the server */
		;
	if (t_busy(f, 10, NULL) != CUDA_ERROR_MPS_RPC_FAILURE || cuCtxSynchronize() != CUDA_ERROR_MPS_RPC_FAILURE)
		return 2;
	return 0;
}

static void test_server_death(void)
{
	pid_t d = start_daemon(), kid;
	int res[2], hold[2];
	char b;

	MUST(pipe2(res, O_CLOEXEC) == 0 && pipe2(hold, O_CLOEXEC) == 0);
	kid = fork();
	MUST(kid >= 0);
	if (kid == 0) {
		setenv("SIM_TEST_CHILD", "1", 1);
		MUST(dup2(res[1], 3) == 3 && dup2(hold[0], 4) == 4);
		execl("/proc/self/exe", "simtest-child", "child", "orphan", "-", (char *)NULL);
		_exit(127);
	}
	close(res[1]);
	close(hold[0]);
	MUST(read(res[0], &b, 1) == 1);
	stop_daemon(d, SIGKILL); /* reaped: its sockets are closed */
	close(hold[1]);
	CHECK_EQ(t_wait(kid), 0);
	close(res[0]);
	d = start_daemon(); /* what the node agent does */
	MUST(pipe2(res, O_CLOEXEC) == 0 && pipe2(hold, O_CLOEXEC) == 0);
	kid = spawn_hold(res[1], hold[0]);
	int code = -1;
	MUST(read(res[0], &code, sizeof(code)) == (ssize_t)sizeof(code));
	CHECK_EQ(code, CUDA_SUCCESS);
	close(hold[1]);
	CHECK_EQ(t_wait(kid), 0);
	close(res[0]);
	close(res[1]);
	close(hold[0]);
	stop_daemon(d, SIGTERM);
}

int main(int argc, char **argv)
{
	char self[PATH_MAX], tmpl[] = "/tmp/gpuslice-simtest-mps-XXXXXX", logd[PATH_MAX + 8];
	ssize_t n;

	if (argc == 4 && strcmp(argv[1], "child") == 0) {
		if (strcmp(argv[2], "share") == 0)
			return child_share(argv[3]);
		if (strcmp(argv[2], "pinned") == 0)
			return child_pinned(argv[3]);
		if (strcmp(argv[2], "nolimit") == 0)
			return child_nolimit();
		return strcmp(argv[2], "hold") == 0 ? child_hold() : child_orphan();
	}
	t_private_state("mps");
	t_no_context_memory(); /* the pinned limit's exact 64 MiB */
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	MUST(n > 0);
	self[n] = '\0';
	snprintf(daemon_bin, sizeof(daemon_bin), "%s/gpuslice-sim-mps-control", dirname(self));
	MUST(mkdtemp(tmpl) != NULL);
	snprintf(pipe_dir, sizeof(pipe_dir), "%s", tmpl);
	snprintf(logd, sizeof(logd), "%s/log", tmpl);
	setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_dir, 1);
	setenv("CUDA_MPS_LOG_DIRECTORY", logd, 1);
	test_shares();
	test_client_limit();
	test_process_lists();
	test_pinned_limit();
	test_server_death();
	char cmd[PATH_MAX * 2];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpl);
	CHECK_EQ(system(cmd), 0);
	return t_done(
		"mps: shares 30/70, client limit 48, process lists, pinned memory limit, server death and restart");
}
