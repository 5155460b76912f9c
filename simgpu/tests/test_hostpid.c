/* SPDX-License-Identifier: Apache-2.0
 * GPUSLICE_SIM_HOST_PROC: a process in a pid namespace of its own, given the
 * host's /proc, is known to the simulated driver by its host pid (as the
 * kernel driver knows it), in its own NVML view and in everyone else's. Needs
 * root (a new pid namespace); skips otherwise. */
#include <fcntl.h>
#include <sched.h>
#include <sys/types.h>

#include "testutil.h"

static int listed(nvmlDevice_t h, unsigned pid)
{
	nvmlProcessInfo_t v[16];
	unsigned n = 16;

	if (nvmlDeviceGetComputeRunningProcesses_v3(h, &n, v) != NVML_SUCCESS)
		return -1;
	for (unsigned i = 0; i < n; i++)
		if (v[i].pid == pid)
			return 1;
	return 0;
}

/* In the new namespace (pid 1): allocate, check the own NVML view, say 'R'
 * with the host pid, hold until killed. */
static int child_hold(void)
{
	char buf[32];
	ssize_t n = readlink("/proc/self", buf, sizeof(buf) - 1);
	CUdeviceptr p;
	nvmlDevice_t h;

	MUST(n > 0);
	buf[n] = '\0';
	MUST(getpid() == 1);
	t_primary(0);
	CU_MUST(cuMemAlloc_v2(&p, 1 << 20));
	MUST(nvmlInit_v2() == NVML_SUCCESS && nvmlDeviceGetHandleByIndex_v2(0, &h) == NVML_SUCCESS);
	if (listed(h, (unsigned)atoi(buf)) != 1 || listed(h, 1) != 0) {
		fprintf(stderr, "child: NVML does not name this process by its host pid %s\n", buf);
		return 1;
	}
	MUST(write(1, buf, strlen(buf)) == (ssize_t)strlen(buf));
	close(1);
	for (;;)
		pause();
}

int main(int argc, char **argv)
{
	int fds[2];
	char buf[32] = {0};
	nvmlDevice_t h;
	pid_t mid;

	if (argc > 1 && strcmp(argv[1], "child") == 0)
		return child_hold();
	if (geteuid() != 0) {
		printf("test_hostpid: skipped: needs root for a pid namespace\n");
		return 0;
	}
	t_private_state("hostpid");
	MUST(pipe(fds) == 0);
	mid = fork();
	MUST(mid >= 0);
	if (mid == 0) { /* unshare, then the next child is pid 1 of a new namespace */
		pid_t in;
		MUST(unshare(CLONE_NEWPID) == 0);
		in = fork();
		MUST(in >= 0);
		if (in == 0) {
			dup2(fds[1], 1);
			setenv("SIM_TEST_CHILD", "1", 1);
			setenv("GPUSLICE_SIM_HOST_PROC", "/proc", 1); /* this /proc is the host's */
			execl("/proc/self/exe", "simtest-child", "child", (char *)NULL);
			_exit(127);
		}
		_exit(t_wait(in));
	}
	close(fds[1]);
	MUST(read(fds[0], buf, sizeof(buf) - 1) > 0);
	close(fds[0]);
	unsigned host = (unsigned)atoi(buf);
	CHECK(host > 1);
	MUST(nvmlInit_v2() == NVML_SUCCESS && nvmlDeviceGetHandleByIndex_v2(0, &h) == NVML_SUCCESS);
	CHECK_EQ(listed(h, host), 1);
	CHECK_EQ(kill((pid_t)host, SIGKILL), 0);
	CHECK_EQ(t_wait(mid), 128 + SIGKILL);
	CHECK_EQ(listed(h, host), 0); /* reaped once gone */
	nvmlShutdown();
	if (t_failures == 0)
		printf("test_hostpid: ok\n");
	return t_failures != 0;
}
