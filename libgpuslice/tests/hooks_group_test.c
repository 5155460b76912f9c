/* SPDX-License-Identifier: Apache-2.0
 * Hook tests across processes and threads: two processes of one group cannot
 * exceed the limit together; threads hammering alloc/free never exceed it and
 * end at zero; a killed member's memory comes back; NVML reports the limit
 * and lists only the group's processes (with the size protocol).
 */
#include <pthread.h>
#include <signal.h>
#include <stddef.h>

#include "../src/internal.h"
#include "hooktest.h"

static int pipe_fd[2];

/* Joins the group, allocates 64 MiB blocks until refused (or arg blocks),
 * reports how many, and holds them until killed. */
static int filler(void *arg)
{
	int max = (int)(intptr_t)arg;
	struct drv d;
	CUcontext ctx;
	drv_open(&d, &ctx);
	int n = 0;
	CUdeviceptr p;
	while ((max == 0 || n < max) && cuMemAlloc_v2(&p, 64 * MiB) == CUDA_SUCCESS)
		n++;
	if (write(pipe_fd[1], &n, sizeof(n)) != sizeof(n))
		return 1;
	pause();
	return 0;
}

static void two_processes(void)
{
	fprintf(stderr, "--- two_processes\n");
	const char *path = ht_group("pair", "1073741824");
	CHECK(pipe(pipe_fd) == 0);
	pid_t a = ht_spawn(filler, NULL);
	pid_t b = ht_spawn(filler, NULL);
	int na, nb;
	CHECK(read(pipe_fd[0], &na, sizeof(na)) == sizeof(na));
	CHECK(read(pipe_fd[0], &nb, sizeof(nb)) == sizeof(nb));
	CHECK_EQ(na + nb, 16); /* 1 GiB / 64 MiB, between them */
	const struct gs_shm_file *f = ht_map(path);
	CHECK_EQ(ht_used(f), 1 * GiB);
	CHECK(f->gpu[0].peak == 1 * GiB);
	/* Killed members: the next allocation that would be refused reaps them. */
	kill(a, SIGKILL);
	kill(b, SIGKILL);
	CHECK_EQ(ht_wait(a), 128 + SIGKILL);
	CHECK_EQ(ht_wait(b), 128 + SIGKILL);
	CHECK_EQ(ht_used(f), 1 * GiB);
	pid_t c = ht_spawn(filler, NULL);
	int nc;
	CHECK(read(pipe_fd[0], &nc, sizeof(nc)) == sizeof(nc));
	CHECK_EQ(nc, 16);
	kill(c, SIGKILL);
	ht_wait(c);
	close(pipe_fd[0]);
	close(pipe_fd[1]);
}

struct hammer {
	CUcontext ctx;
	CUresult (*set_current)(CUcontext);
	const struct gs_shm_file *f;
	_Atomic int *stop, *violations, *refusals;
	unsigned seed;
};

static void *hammer_thread(void *arg)
{
	struct hammer *h = arg;
	gs_fn_cuMemAlloc_v2 a = cuMemAlloc_v2;
	CHECK_EQ(h->set_current(h->ctx), CUDA_SUCCESS);
	CUdeviceptr held[8] = {0};
	for (int i = 0; i < 3000; i++) {
		int k = (int)(rand_r(&h->seed) % 8);
		if (held[k] != 0) {
			CHECK_EQ(cuMemFree_v2(held[k]), CUDA_SUCCESS);
			held[k] = 0;
		} else {
			size_t sz = (1 + rand_r(&h->seed) % 64) * MiB;
			CUresult rc = a(&held[k], sz);
			CHECK(rc == CUDA_SUCCESS || rc == CUDA_ERROR_OUT_OF_MEMORY);
			if (rc != CUDA_SUCCESS) {
				held[k] = 0;
				atomic_fetch_add(h->refusals, 1);
			}
		}
	}
	for (int k = 0; k < 8; k++)
		if (held[k] != 0)
			CHECK_EQ(cuMemFree_v2(held[k]), CUDA_SUCCESS);
	return NULL;
}

static void *watch_thread(void *arg)
{
	struct hammer *h = arg;
	while (!atomic_load(h->stop))
		if (ht_used(h->f) > 256 * MiB)
			atomic_fetch_add(h->violations, 1);
	return NULL;
}

static int threads(void *arg)
{
	(void)arg;
	const char *path = ht_group("threads", "268435456"); /* 256 MiB */
	struct drv d;
	CUcontext ctx;
	drv_open(&d, &ctx);
	CUdeviceptr p;
	CHECK_EQ(cuMemAlloc_v2(&p, 1 * MiB), CUDA_SUCCESS); /* creates the group file */
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
	_Atomic int stop = 0, violations = 0, refusals = 0;
	struct hammer h[8];
	pthread_t t[8], w;
	for (int i = 0; i < 8; i++) {
		h[i] = (struct hammer){.ctx = ctx,
				       .set_current = d.cuCtxSetCurrent,
				       .f = ht_map(path),
				       .stop = &stop,
				       .violations = &violations,
				       .refusals = &refusals,
				       .seed = (unsigned)i * 7919u + 1};
		CHECK(h[i].f != NULL);
	}
	CHECK(pthread_create(&w, NULL, watch_thread, &h[0]) == 0);
	for (int i = 0; i < 8; i++)
		CHECK(pthread_create(&t[i], NULL, hammer_thread, &h[i]) == 0);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	atomic_store(&stop, 1);
	pthread_join(w, NULL);
	CHECK_EQ(atomic_load(&violations), 0);
	CHECK(atomic_load(&refusals) > 0); /* the limit was actually hit */
	CHECK_EQ(ht_used(h[0].f), 0);
	CHECK(h[0].f->gpu[0].peak <= 256 * MiB);
	return 0;
}

static int nvml_memory(void *arg)
{
	(void)arg;
	ht_group("nvmlmem", "2147483648");
	struct drv d;
	CUcontext ctx;
	drv_open(&d, &ctx);
	nvmlDevice_t dev = drv_nvml(&d);
	CUdeviceptr p;
	CHECK_EQ(cuMemAlloc_v2(&p, 512 * MiB), CUDA_SUCCESS);
	nvmlMemory_t m;
	CHECK_EQ(nvmlDeviceGetMemoryInfo(dev, &m), NVML_SUCCESS);
	CHECK_EQ(m.total, 2 * GiB);
	CHECK_EQ(m.used, 512 * MiB);
	CHECK_EQ(m.free, 1536 * MiB);
	nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
	CHECK_EQ(nvmlDeviceGetMemoryInfo_v2(dev, &m2), NVML_SUCCESS);
	CHECK(m2.total == 2 * GiB && m2.used == 512 * MiB && m2.free == 1536 * MiB && m2.reserved == 0);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
	unsigned int f32 = 0, t32 = 0, b32 = 0;
	CHECK_EQ(cuMemGetInfo(&f32, &t32), CUDA_SUCCESS); /* the 32-bit forms: the quota, not the card */
	CHECK(t32 == 2 * GiB && f32 == 2 * GiB);
	CHECK_EQ(cuDeviceTotalMem(&b32, 0), CUDA_SUCCESS);
	CHECK_EQ(b32, 2 * GiB);
	CHECK_EQ(nvmlDeviceGetMemoryInfo(dev, &m), NVML_SUCCESS);
	CHECK(m.used == 0 && m.free == 2 * GiB);
	return 0;
}

/* A process of another group, holding memory on the same GPU. */
static int outsider(void *arg)
{
	(void)arg;
	ht_group("others", NULL);
	return filler((void *)(intptr_t)2);
}

static pid_t outsider_pid;

/* n entries naming us and member (pids at offset off, elem bytes apart). */
static void two_members(const void *v, unsigned int n, size_t elem, size_t off, pid_t member)
{
	CHECK_EQ(n, 2);
	int me = 0, mem = 0;
	for (unsigned int i = 0; i < n; i++) {
		unsigned int pid;
		memcpy(&pid, (const char *)v + i * elem + off, sizeof(pid));
		me += pid == (unsigned)getpid();
		mem += pid == (unsigned)member;
	}
	CHECK(me == 1 && mem == 1);
}

/* Every other NVML list of processes or per-process figures. */
static void other_lists(nvmlDevice_t dev, pid_t member)
{
	nvmlProcessInfo_t v3[4];
	unsigned int n = 4;
	CHECK_EQ(nvmlDeviceGetGraphicsRunningProcesses_v3(dev, &n, v3), NVML_SUCCESS);
	two_members(v3, n, sizeof(v3[0]), 0, member);
	nvmlProcessInfo_v1_t v1[4];
	n = 4;
	CHECK_EQ(nvmlDeviceGetGraphicsRunningProcesses(dev, &n, v1), NVML_SUCCESS);
	two_members(v1, n, sizeof(v1[0]), 0, member);
	n = 4;
	CHECK_EQ(nvmlDeviceGetGraphicsRunningProcesses_v2(dev, &n, v3), NVML_SUCCESS);
	CHECK_EQ(n, 2);
	for (unsigned int mode = 0; mode < 2; mode++) {
		nvmlProcessDetail_v1_t d[4];
		nvmlProcessDetailList_t l = {
			.version = nvmlProcessDetailList_v1, .mode = mode, .numProcArrayEntries = 1, .procArray = d};
		CHECK_EQ(nvmlDeviceGetRunningProcessDetailList(dev, &l), NVML_ERROR_INSUFFICIENT_SIZE);
		CHECK_EQ(l.numProcArrayEntries, 2);
		l.numProcArrayEntries = 4;
		CHECK_EQ(nvmlDeviceGetRunningProcessDetailList(dev, &l), NVML_SUCCESS);
		two_members(d, l.numProcArrayEntries, sizeof(d[0]), 0, member);
	}
	nvmlProcessUtilizationSample_t u[4];
	n = 0;
	CHECK_EQ(nvmlDeviceGetProcessUtilization(dev, NULL, &n, 0), NVML_ERROR_INSUFFICIENT_SIZE);
	CHECK_EQ(n, 2);
	n = 4;
	CHECK_EQ(nvmlDeviceGetProcessUtilization(dev, u, &n, 0), NVML_SUCCESS);
	two_members(u, n, sizeof(u[0]), 0, member);
	nvmlProcessUtilizationInfo_v1_t ui[4];
	nvmlProcessesUtilizationInfo_t info = {
		.version = nvmlProcessesUtilizationInfo_v1, .processSamplesCount = 4, .procUtilArray = ui};
	CHECK_EQ(nvmlDeviceGetProcessesUtilizationInfo(dev, &info), NVML_SUCCESS);
	two_members(ui, info.processSamplesCount, sizeof(ui[0]), offsetof(nvmlProcessUtilizationInfo_v1_t, pid),
		    member);
	unsigned int pids[4];
	n = 4;
	CHECK_EQ(nvmlDeviceGetAccountingPids(dev, &n, pids), NVML_SUCCESS);
	two_members(pids, n, sizeof(pids[0]), 0, member);
	nvmlAccountingStats_t st;
	CHECK_EQ(nvmlDeviceGetAccountingStats(dev, (unsigned)member, &st), NVML_SUCCESS);
	CHECK_EQ(st.isRunning, 1);
	CHECK_EQ(nvmlDeviceGetAccountingStats(dev, (unsigned)outsider_pid, &st), NVML_ERROR_NOT_FOUND);
}

static int list_procs(void *arg)
{
	pid_t member = (pid_t)(intptr_t)arg;
	ht_group("listed", NULL);
	struct drv d;
	CUcontext ctx;
	drv_open(&d, &ctx);
	nvmlDevice_t dev = drv_nvml(&d);
	CUdeviceptr p;
	CHECK_EQ(cuMemAlloc_v2(&p, 64 * MiB), CUDA_SUCCESS);
	unsigned int n = 0;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, NULL), NVML_ERROR_INSUFFICIENT_SIZE);
	CHECK_EQ(n, 2); /* us and the other member, not the outsider */
	nvmlProcessInfo_t v3[4];
	unsigned int one = 1;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev, &one, v3), NVML_ERROR_INSUFFICIENT_SIZE);
	CHECK_EQ(one, 2);
	n = 4;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, v3), NVML_SUCCESS);
	CHECK_EQ(n, 2);
	int seen_me = 0, seen_member = 0;
	for (unsigned int i = 0; i < n; i++) {
		seen_me += v3[i].pid == (unsigned)getpid();
		seen_member += v3[i].pid == (unsigned)member;
	}
	CHECK(seen_me == 1 && seen_member == 1);
	nvmlProcessInfo_v2_t v2[4];
	n = 4;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v2(dev, &n, v2), NVML_SUCCESS);
	CHECK_EQ(n, 2);
	nvmlProcessInfo_v1_t v1[4];
	n = 4;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses(dev, &n, v1), NVML_SUCCESS);
	CHECK_EQ(n, 2);
	CHECK(v1[0].pid == (unsigned)getpid() || v1[1].pid == (unsigned)getpid());
	n = 1;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses(dev, &n, NULL), NVML_ERROR_INVALID_ARGUMENT);
	other_lists(dev, member);
	return 0;
}

static void process_list(void)
{
	fprintf(stderr, "--- process_list\n");
	CHECK(pipe(pipe_fd) == 0);
	ht_group("listed", NULL);
	setenv("GPUSLICE_SIM_GRAPHICS", "1", 1); /* every process also draws: the graphics list names them */
	pid_t member = ht_spawn(filler, (void *)(intptr_t)2);
	pid_t other = ht_spawn(outsider, NULL);
	outsider_pid = other;
	int n;
	CHECK(read(pipe_fd[0], &n, sizeof(n)) == sizeof(n));
	CHECK(read(pipe_fd[0], &n, sizeof(n)) == sizeof(n));
	CHECK_EQ(ht_wait(ht_spawn(list_procs, (void *)(intptr_t)member)), 0);
	kill(member, SIGKILL);
	kill(other, SIGKILL);
	ht_wait(member);
	ht_wait(other);
	close(pipe_fd[0]);
	close(pipe_fd[1]);
}

int main(void)
{
	ht_setup();
	two_processes();
	HT_RUN(threads, NULL);
	HT_RUN(nvml_memory, NULL);
	process_list();
	ht_teardown();
	fprintf(stderr, "hooks_group_test: ok\n");
	return 0;
}
