/* SPDX-License-Identifier: Apache-2.0
 *
 * The process list of a group of MPS clients (simulated GPU with its stand-in
 * MPS daemon, gpuslice-sim-mps-control next to the simulated libcuda): as on
 * a real driver the compute list holds the server and the MPS list the
 * clients; a member still sees itself (and only its group) in both. As for
 * any process, a member is in its group's process table once it allocated.
 */
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>

#include "../src/internal.h"
#include "hooktest.h"

static int pipe_fd[2];

struct views {
	pid_t server, outsider;
};

/* A client in another group, holding a context until killed. */
static int outsider(void *arg)
{
	(void)arg;
	ht_group("others", NULL);
	struct drv d;
	CUcontext ctx;
	drv_open(&d, &ctx);
	CUdeviceptr p;
	CHECK_EQ(cuMemAlloc_v2(&p, 64 * MiB), CUDA_SUCCESS);
	int one = 1;
	CHECK(write(pipe_fd[1], &one, sizeof(one)) == sizeof(one));
	pause();
	return 0;
}

static int member(void *arg)
{
	pid_t server = (pid_t)(intptr_t)arg;
	ht_group("clients", NULL);
	struct drv d;
	CUcontext ctx;
	drv_open(&d, &ctx);
	nvmlDevice_t dev = drv_nvml(&d);
	CUdeviceptr p;
	CHECK_EQ(cuMemAlloc_v2(&p, 32 * MiB), CUDA_SUCCESS);
	nvmlProcessInfo_t v3[8];
	unsigned int n = 8;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, v3), NVML_SUCCESS);
	CHECK_EQ(n, 1); /* itself, from the MPS list: not the server, not the outsider */
	CHECK_EQ(v3[0].pid, (unsigned)getpid());
	CHECK_EQ(v3[0].usedGpuMemory, 32 * MiB);
	n = 8;
	CHECK_EQ(nvmlDeviceGetMPSComputeRunningProcesses_v3(dev, &n, v3), NVML_SUCCESS);
	CHECK(n == 1 && v3[0].pid == (unsigned)getpid());
	nvmlProcessInfo_v1_t v1[8];
	n = 0;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses(dev, &n, NULL), NVML_ERROR_INSUFFICIENT_SIZE);
	CHECK_EQ(n, 1);
	n = 8;
	CHECK_EQ(nvmlDeviceGetMPSComputeRunningProcesses(dev, &n, v1), NVML_SUCCESS);
	CHECK(n == 1 && v1[0].pid == (unsigned)getpid());
	nvmlProcessInfo_v2_t v2[8];
	n = 8;
	CHECK_EQ(nvmlDeviceGetMPSComputeRunningProcesses_v2(dev, &n, v2), NVML_SUCCESS);
	CHECK_EQ(n, 1);
	CHECK(server > 0 && (unsigned)server != v3[0].pid);
	return 0;
}

/* No group: the driver's own lists pass through unfiltered. With the member
 * gone, the compute list holds only the server (with its client's memory),
 * the MPS list only the outsider. */
static int driver_view(void *arg)
{
	struct views *v = arg;
	unsetenv("GPUSLICE_GROUP_FILE");
	unsetenv("GPUSLICE_GROUP");
	struct drv d;
	nvmlDevice_t dev = drv_nvml(&d);
	nvmlProcessInfo_t v3[8];
	unsigned int n = 8;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, v3), NVML_SUCCESS);
	CHECK_EQ(n, 1);
	CHECK_EQ(v3[0].pid, (unsigned)v->server);
	CHECK_EQ(v3[0].usedGpuMemory, 64 * MiB);
	n = 8;
	CHECK_EQ(nvmlDeviceGetMPSComputeRunningProcesses_v3(dev, &n, v3), NVML_SUCCESS);
	CHECK_EQ(n, 1);
	CHECK_EQ(v3[0].pid, (unsigned)v->outsider);
	return 0;
}

static pid_t start_daemon(const char *pipe_dir)
{
	const char *lib = getenv("LD_LIBRARY_PATH"); /* the simulator's directory (tests.mk) */
	CHECK(lib != NULL && strchr(lib, ':') == NULL);
	char bin[PATH_MAX], sock[PATH_MAX];
	snprintf(bin, sizeof(bin), "%s/gpuslice-sim-mps-control", lib);
	snprintf(sock, sizeof(sock), "%s/gpuslice-sim-mps.sock", pipe_dir);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		execl(bin, "gpuslice-sim-mps-control", "-f", (char *)NULL);
		_exit(127);
	}
	struct stat sb;
	for (int i = 0; i < 500 && stat(sock, &sb) != 0; i++) /* ready: the socket exists */
		usleep(10000);
	CHECK(stat(sock, &sb) == 0);
	usleep(20000); /* bind happens before listen */
	return pid;
}

int main(void)
{
	ht_setup();
	char pipe_dir[300], log_dir[300];
	snprintf(pipe_dir, sizeof(pipe_dir), "%s/mps", ht_dir);
	snprintf(log_dir, sizeof(log_dir), "%s/mps-log", ht_dir);
	setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_dir, 1);
	setenv("CUDA_MPS_LOG_DIRECTORY", log_dir, 1);
	pid_t server = start_daemon(pipe_dir);
	CHECK(pipe(pipe_fd) == 0);
	pid_t other = ht_spawn(outsider, NULL);
	int one;
	CHECK(read(pipe_fd[0], &one, sizeof(one)) == sizeof(one));
	CHECK_EQ(ht_wait(ht_spawn(member, (void *)(intptr_t)server)), 0);
	struct views v = {server, other};
	CHECK_EQ(ht_wait(ht_spawn(driver_view, &v)), 0);
	kill(other, SIGKILL);
	ht_wait(other);
	kill(server, SIGTERM);
	ht_wait(server);
	close(pipe_fd[0]);
	close(pipe_fd[1]);
	ht_teardown();
	fprintf(stderr, "hooks_mps_test: ok\n");
	return 0;
}
