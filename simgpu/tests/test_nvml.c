/* SPDX-License-Identifier: Apache-2.0
 * NVML: memory info, running compute processes (host PIDs and their memory,
 * v1/v2/v3 layouts), utilization from the engine's busy time, per process too;
 * each process's work (its kernels' own durations) in the state file. */
#include <fcntl.h>
#include <sys/mman.h>

#include "simstate.h"
#include "testutil.h"

#define GiB (1ull << 30)

/* Child: primary context, allocate arg GiB, report, wait to be killed. */
static int child_hold(const char *arg)
{
	CUdeviceptr p;
	CUfunction f;

	t_primary(0);
	if (cuMemAlloc_v2(&p, strtoull(arg, NULL, 10) * GiB) != CUDA_SUCCESS)
		return 2;
	f = t_busy_fn();
	for (int i = 0; i < 20; i++) /* 1 s of device time */
		t_busy(f, 50000, NULL);
	if (cuCtxSynchronize() != CUDA_SUCCESS || write(1, "R", 1) != 1)
		return 3;
	for (;;)
		pause();
}

/* Child: primary context and 1 MiB, report, wait to be killed. */
static int child_small(void)
{
	CUdeviceptr p;

	t_primary(0);
	if (cuMemAlloc_v2(&p, 1 << 20) != CUDA_SUCCESS || write(1, "R", 1) != 1)
		return 2;
	for (;;)
		pause();
}

static pid_t spawn_child(const char *what, const char *gib)
{
	int fds[2];
	char c;
	pid_t pid;

	MUST(pipe(fds) == 0);
	pid = fork();
	MUST(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], 1);
		setenv("SIM_TEST_CHILD", "1", 1);
		execl("/proc/self/exe", "simtest-child", "child", what, gib, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	MUST(read(fds[0], &c, 1) == 1 && c == 'R');
	close(fds[0]);
	return pid;
}

static pid_t spawn_hold(const char *gib)
{
	return spawn_child("hold", gib);
}

static unsigned long long proc_mem(nvmlProcessInfo_t *v, unsigned n, pid_t pid)
{
	for (unsigned i = 0; i < n; i++)
		if (v[i].pid == (unsigned)pid)
			return v[i].usedGpuMemory;
	return ~0ull;
}

static void test_processes(nvmlDevice_t h, pid_t a, pid_t b)
{
	nvmlProcessInfo_t v3[8];
	nvmlProcessInfo_v1_t v1[8];
	unsigned n = 0;

	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, NULL), NVML_ERROR_INSUFFICIENT_SIZE);
	CHECK_EQ(n, 2);
	n = 1;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, v3), NVML_ERROR_INSUFFICIENT_SIZE);
	CHECK_EQ(n, 2);
	n = 8;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, v3), NVML_SUCCESS);
	CHECK_EQ(n, 2);
	CHECK_EQ(proc_mem(v3, n, a), 1 * GiB);
	CHECK_EQ(proc_mem(v3, n, b), 2 * GiB);
	CHECK_EQ(v3[0].gpuInstanceId, 0xffffffffu);
	n = 8;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v2(h, &n, (nvmlProcessInfo_v2_t *)v3), NVML_SUCCESS);
	CHECK_EQ(n, 2);
	n = 8;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses(h, &n, v1), NVML_SUCCESS);
	CHECK_EQ(n, 2);
	CHECK(v1[0].pid == (unsigned)a || v1[1].pid == (unsigned)a);
	CHECK(v1[0].usedGpuMemory + v1[1].usedGpuMemory == 3 * GiB);
}

/* Per-process busy time: each child held the engine 1 s of the ~2 s since it
 * took the device (they alternate); a second sample sees no new work. */
static void test_process_util(nvmlDevice_t h, pid_t a, pid_t b)
{
	nvmlProcessUtilizationSample_t s[8];
	unsigned n = 0;

	CHECK_EQ(nvmlDeviceGetProcessUtilization(h, NULL, &n, 0), NVML_ERROR_INSUFFICIENT_SIZE);
	CHECK_EQ(n, 2);
	n = 8;
	CHECK_EQ(nvmlDeviceGetProcessUtilization(h, s, &n, 0), NVML_SUCCESS);
	CHECK_EQ(n, 2);
	for (unsigned i = 0; i < n; i++) {
		CHECK(s[i].pid == (unsigned)a || s[i].pid == (unsigned)b);
		CHECK(s[i].smUtil >= 20 && s[i].smUtil <= 100);
		CHECK_EQ(s[i].memUtil, s[i].smUtil / 2);
	}
	n = 8;
	CHECK_EQ(nvmlDeviceGetProcessUtilization(h, s, &n, 0), NVML_SUCCESS);
	CHECK(n == 2 && s[0].smUtil == 0 && s[1].smUtil == 0);
	n = 8;
	CHECK_EQ(nvmlDeviceGetProcessUtilization(h, s, &n, s[0].timeStamp + 60000000ull), NVML_ERROR_NOT_FOUND);
}

/* In the state file, each child's work is its kernels' own durations, 20 x
 * 50 ms, exactly, and the time they held the engine at least that (more
 * when the worker thread waited for a CPU mid-kernel). */
static void test_work(pid_t a, pid_t b)
{
	int fd = open(getenv("GPUSLICE_SIM_STATE"), O_RDONLY | O_CLOEXEC);
	MUST(fd >= 0);
	const struct sim_state *s = mmap(NULL, sizeof(*s), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	MUST(s != MAP_FAILED);
	int seen = 0;
	for (int i = 0; i < SIM_MAX_PROCS; i++) {
		int32_t pid = atomic_load(&s->proc[i].pid);
		if (pid != a && pid != b)
			continue;
		seen++;
		CHECK_EQ(atomic_load(&s->proc[i].work_ns[0]), 1000000000ull);
		CHECK(atomic_load(&s->proc[i].busy_ns[0]) >= 1000000000ull);
	}
	CHECK_EQ(seen, 2);
	munmap((void *)s, sizeof(*s));
}

static void test_nvml(void)
{
	nvmlDevice_t h;
	nvmlMemory_t m;
	nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
	nvmlUtilization_t u;
	unsigned n = 0;
	pid_t a, b;

	MUST(nvmlInit_v2() == NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(0, &h), NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(1, &h), NVML_ERROR_INVALID_ARGUMENT);
	CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(0, &h), NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetMemoryInfo(h, &m), NVML_SUCCESS);
	CHECK(m.total == 8 * GiB && m.used == 0 && m.free == 8 * GiB);
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, NULL), NVML_SUCCESS);
	CHECK_EQ(n, 0);
	a = spawn_hold("1");
	b = spawn_hold("2");
	CHECK_EQ(nvmlDeviceGetMemoryInfo(h, &m), NVML_SUCCESS);
	CHECK(m.used == 3 * GiB && m.free == 5 * GiB);
	CHECK_EQ(nvmlDeviceGetMemoryInfo_v2(h, &m2), NVML_SUCCESS);
	CHECK(m2.total == 8 * GiB && m2.used == 3 * GiB && m2.free == 5 * GiB);
	m2.version = 1;
	CHECK_EQ(nvmlDeviceGetMemoryInfo_v2(h, &m2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
	test_processes(h, a, b);
	CHECK_EQ(nvmlDeviceGetUtilizationRates(h, &u), NVML_SUCCESS);
	CHECK(u.gpu >= 50); /* the children kept the engine busy for the last second */
	test_process_util(h, a, b);
	test_work(a, b);
	kill(a, SIGKILL);
	CHECK_EQ(t_wait(a), 128 + SIGKILL);
	n = 0;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, NULL), NVML_ERROR_INSUFFICIENT_SIZE);
	CHECK_EQ(n, 1); /* the dead one is reaped on query */
	CHECK_EQ(nvmlDeviceGetMemoryInfo(h, &m), NVML_SUCCESS);
	CHECK_EQ(m.used, 2 * GiB);
	kill(b, SIGTERM);
	CHECK_EQ(t_wait(b), 128 + SIGTERM);
	CHECK_EQ(nvmlDeviceGetMemoryInfo(h, &m), NVML_SUCCESS);
	CHECK_EQ(m.used, 0);
	usleep(1100 * 1000);
	CHECK_EQ(nvmlDeviceGetUtilizationRates(h, &u), NVML_SUCCESS);
	CHECK_EQ(u.gpu, 0); /* idle for a full window */
	CHECK_EQ(nvmlShutdown(), NVML_SUCCESS);
	CHECK_EQ(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
}

#define MANY 80 /* more than the 64 entries a caller might offer */

/* More processes than the caller's buffer holds: as a driver does, the call
 * answers NVML_ERROR_INSUFFICIENT_SIZE and the count it needs (every layout),
 * and a buffer of that count gets every process with its own memory. */
static void test_short_buffer(void)
{
	static nvmlProcessInfo_t v3[MANY];
	static nvmlProcessInfo_v1_t v1[MANY];
	static pid_t kids[MANY];
	nvmlDevice_t h;
	unsigned n;

	MUST(nvmlInit_v2() == NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(0, &h), NVML_SUCCESS);
	for (int i = 0; i < MANY; i++)
		kids[i] = spawn_child("small", "0");
	n = 64;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, v3), NVML_ERROR_INSUFFICIENT_SIZE);
	CHECK_EQ(n, MANY);
	n = 64;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v2(h, &n, (nvmlProcessInfo_v2_t *)v3),
		 NVML_ERROR_INSUFFICIENT_SIZE);
	CHECK_EQ(n, MANY);
	n = MANY - 1;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses(h, &n, v1), NVML_ERROR_INSUFFICIENT_SIZE);
	CHECK_EQ(n, MANY);
	n = 0;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, NULL), NVML_ERROR_INSUFFICIENT_SIZE);
	CHECK_EQ(n, MANY);
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, v3), NVML_SUCCESS);
	CHECK_EQ(n, MANY);
	for (int i = 0; i < MANY; i++)
		CHECK_EQ(proc_mem(v3, n, kids[i]), 1ull << 20);
	n = MANY;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses(h, &n, v1), NVML_SUCCESS);
	CHECK_EQ(n, MANY);
	for (int i = 0; i < MANY; i++) {
		kill(kids[i], SIGKILL);
		CHECK_EQ(t_wait(kids[i]), 128 + SIGKILL);
	}
	/* All gone at once, more than one batch of the reap (64 per taking of
	 * the lock): one query frees every one and their memory. */
	n = 0;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, NULL), NVML_SUCCESS);
	CHECK_EQ(n, 0);
	nvmlMemory_t m;
	CHECK_EQ(nvmlDeviceGetMemoryInfo(h, &m), NVML_SUCCESS);
	CHECK_EQ(m.used, 0);
	CHECK_EQ(nvmlShutdown(), NVML_SUCCESS);
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "child") == 0)
		return strcmp(argv[2], "small") == 0 ? child_small() : child_hold(argv[3]);
	t_private_state("nvml");
	setenv("GPUSLICE_SIM_MEMORY", "8GiB", 1);
	t_no_context_memory();
	test_nvml();
	test_short_buffer();
	return t_done("NVML memory, processes, utilization, a buffer shorter than the process list");
}
