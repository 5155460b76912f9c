/* SPDX-License-Identifier: Apache-2.0
 * MIG devices through CUDA on a simulated H100 80GB with two 3g.40gb
 * instances: CUDA_VISIBLE_DEVICES=MIG-<uuid> enumerates that instance alone
 * as device 0 with its memory (one MIG device per process, as the driver);
 * the two instances' memory and engines are apart (filling one leaves the
 * other whole; a kernel on one does not wait for the other's); NVML lists an
 * instance's own processes, its GPU all of them with their instance ids;
 * instances and the mode are not changed under a running process (IN_USE,
 * MIG mode pending). Needs root (instances are made through NVML). */
#include <signal.h>
#include <sys/stat.h>

#include "testutil.h"

#define GiB (1ull << 30)
#define MiB (1ull << 20)

static const char *mark(void)
{
	return getenv("MIGT_MARK");
}

static void touch_mark(void)
{
	FILE *f = fopen(mark(), "w");
	MUST(f != NULL);
	fclose(f);
}

static void wait_mark(void)
{
	struct stat sb;
	double t0 = t_now_ms();
	while (stat(mark(), &sb) != 0) {
		MUST(t_now_ms() - t0 < 60000);
		usleep(10000);
	}
	unlink(mark());
}

/* One MIG device: its identity and memory; 30 GiB held until killed. */
static int child_alloc(const char *uuid)
{
	int n = 0, sms = 0;
	char name[128], want[64];
	size_t total = 0, fr = 0;
	CUuuid own, gpu;
	CUdeviceptr p, q;
	t_primary(0);
	CHECK_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
	CHECK_EQ(n, 1);
	CU_OK(cuDeviceGetName(name, sizeof(name), 0));
	CHECK(strcmp(name, "NVIDIA H100 80GB HBM3 MIG 3g.40gb") == 0);
	CU_OK(cuDeviceTotalMem_v2(&total, 0));
	CHECK_EQ(total, 40448 * MiB);
	CU_OK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
	CHECK_EQ(sms, 60);
	CU_OK(cuDeviceGetUuid_v2(&own, 0));
	CU_OK(cuDeviceGetUuid(&gpu, 0));
	snprintf(want, sizeof(want), "MIG-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 (unsigned char)own.bytes[0], (unsigned char)own.bytes[1], (unsigned char)own.bytes[2],
		 (unsigned char)own.bytes[3], (unsigned char)own.bytes[4], (unsigned char)own.bytes[5],
		 (unsigned char)own.bytes[6], (unsigned char)own.bytes[7], (unsigned char)own.bytes[8],
		 (unsigned char)own.bytes[9], (unsigned char)own.bytes[10], (unsigned char)own.bytes[11],
		 (unsigned char)own.bytes[12], (unsigned char)own.bytes[13], (unsigned char)own.bytes[14],
		 (unsigned char)own.bytes[15]);
	CHECK(strcmp(want, uuid) == 0);               /* v2: the MIG device */
	CHECK(memcmp(own.bytes, gpu.bytes, 16) != 0); /* v1: its GPU */
	CU_OK(cuMemAlloc_v2(&p, 30 * GiB));
	CU_OK(cuMemGetInfo_v2(&fr, &total));
	CHECK_EQ(total, 40448 * MiB);
	CHECK_EQ(fr, 40448 * MiB - 30 * GiB);
	CHECK_EQ(cuMemAlloc_v2(&q, 10 * GiB), CUDA_ERROR_OUT_OF_MEMORY); /* 9.5 GiB left in this instance */
	if (t_failures != 0)
		return 1;
	touch_mark();
	pause();
	return 0;
}

/* The other instance keeps all of its memory. */
static int child_full(void)
{
	CUdeviceptr p;
	t_primary(0);
	CU_OK(cuMemAlloc_v2(&p, 39 * GiB));
	return t_failures;
}

static int child_count(const char *want)
{
	int n = -1;
	CUresult rc = cuInit(0);
	if (strcmp(want, "none") == 0)
		return rc == CUDA_ERROR_NO_DEVICE ? 0 : 1;
	CU_MUST(rc);
	CU_OK(cuDeviceGetCount(&n));
	CHECK_EQ(n, atoi(want));
	return t_failures;
}

/* Holds its instance's engine for a minute (killed before). */
static int child_hold(void)
{
	CUfunction f;
	t_primary(0);
	f = t_busy_fn();
	CU_OK(t_busy(f, 60000000, NULL));
	usleep(300000); /* the kernel runs */
	touch_mark();
	CU_OK(cuCtxSynchronize());
	return t_failures;
}

/* A zero-time kernel: exit 0 if it finished within 1 s, 10 if it waited longer. */
static int child_quick(void)
{
	CUfunction f;
	t_primary(0);
	f = t_busy_fn();
	touch_mark(); /* at its launch: the parent times its wait from here */
	double t0 = t_now_ms();
	CU_OK(t_busy(f, 0, NULL));
	CU_OK(cuCtxSynchronize());
	double ms = t_now_ms() - t0;
	fprintf(stderr, "test_migcuda: zero-time kernel took %.0f ms\n", ms);
	return t_failures != 0 ? 1 : ms < 1000 ? 0 : 10;
}

static pid_t spawn_on(const char *uuid, const char *mode)
{
	setenv("CUDA_VISIBLE_DEVICES", uuid, 1);
	pid_t pid = t_spawn(mode, uuid);
	unsetenv("CUDA_VISIBLE_DEVICES");
	return pid;
}

static void make_instance(nvmlDevice_t h, nvmlGpuInstance_t *gi, nvmlComputeInstance_t *ci, char *uuid)
{
	nvmlDevice_t mig;
	unsigned n = 0, gid, cid;
	MUST(nvmlDeviceCreateGpuInstance(h, 9, gi) == NVML_SUCCESS);
	MUST(nvmlGpuInstanceCreateComputeInstance(*gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, ci) == NVML_SUCCESS);
	nvmlGpuInstanceInfo_t info;
	MUST(nvmlGpuInstanceGetInfo(*gi, &info) == NVML_SUCCESS);
	for (unsigned i = 0; i < 7 && nvmlDeviceGetMigDeviceHandleByIndex(h, i, &mig) == NVML_SUCCESS; i++)
		if (nvmlDeviceGetGpuInstanceId(mig, &gid) == NVML_SUCCESS && gid == info.id &&
		    nvmlDeviceGetComputeInstanceId(mig, &cid) == NVML_SUCCESS) {
			MUST(nvmlDeviceGetUUID(mig, uuid, 96) == NVML_SUCCESS);
			n++;
		}
	MUST(n == 1);
}

static void check_apart(nvmlDevice_t h, const char *ua, const char *ub)
{
	nvmlDevice_t ma, mb;
	nvmlMemory_t m;
	nvmlProcessInfo_t procs[4];
	unsigned n = 4, cur, pend;
	nvmlReturn_t act;
	MUST(nvmlDeviceGetHandleByUUID(ua, &ma) == NVML_SUCCESS && nvmlDeviceGetHandleByUUID(ub, &mb) == NVML_SUCCESS);
	pid_t a = spawn_on(ua, "alloc");
	wait_mark();
	CHECK_EQ(nvmlDeviceGetMemoryInfo(ma, &m), NVML_SUCCESS);
	CHECK_EQ(m.used, 30 * GiB);
	CHECK_EQ(nvmlDeviceGetMemoryInfo(mb, &m), NVML_SUCCESS);
	CHECK_EQ(m.used, 0);
	CHECK_EQ(nvmlDeviceGetMemoryInfo(h, &m), NVML_SUCCESS); /* the GPU: all of its instances */
	CHECK_EQ(m.total, 80 * GiB);
	CHECK_EQ(m.used, 30 * GiB);
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(ma, &n, procs), NVML_SUCCESS);
	CHECK_EQ(n, 1);
	CHECK_EQ(procs[0].pid, a);
	CHECK_EQ(procs[0].usedGpuMemory, 30 * GiB);
	n = 4;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(mb, &n, procs), NVML_SUCCESS);
	CHECK_EQ(n, 0);
	n = 4;
	unsigned gid = 0;
	CHECK_EQ(nvmlDeviceGetGpuInstanceId(ma, &gid), NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, procs), NVML_SUCCESS);
	CHECK_EQ(n, 1);
	CHECK_EQ(procs[0].gpuInstanceId, gid);
	CHECK_EQ(procs[0].computeInstanceId, 0);
	CHECK_EQ(t_wait(spawn_on(ub, "full")), 0); /* B is whole */
	/* Nothing is torn down under a running process. */
	nvmlComputeInstance_t cis[1];
	nvmlGpuInstance_t gi;
	n = 1;
	MUST(nvmlDeviceGetGpuInstanceById(h, gid, &gi) == NVML_SUCCESS);
	MUST(nvmlGpuInstanceGetComputeInstances(gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, cis, &n) == NVML_SUCCESS);
	CHECK_EQ(nvmlComputeInstanceDestroy(cis[0]), NVML_ERROR_IN_USE);
	CHECK_EQ(nvmlDeviceSetMigMode(h, NVML_DEVICE_MIG_DISABLE, &act), NVML_SUCCESS);
	CHECK_EQ(act, NVML_ERROR_IN_USE);
	CHECK_EQ(nvmlDeviceGetMigMode(h, &cur, &pend), NVML_SUCCESS);
	CHECK_EQ(cur, NVML_DEVICE_MIG_ENABLE);
	CHECK_EQ(pend, NVML_DEVICE_MIG_DISABLE);
	CHECK_EQ(nvmlDeviceSetMigMode(h, NVML_DEVICE_MIG_ENABLE, &act), NVML_SUCCESS); /* cancels it */
	CHECK_EQ(act, NVML_SUCCESS);
	kill(a, SIGKILL);
	t_wait(a);
	CHECK_EQ(nvmlDeviceGetMemoryInfo(ma, &m), NVML_SUCCESS); /* a dead process's memory comes back */
	CHECK_EQ(m.used, 0);
}

/* A kernel on one instance does not wait for the other's; on the same one it
 * waits until the holder is gone (killed; the engine skips a dead holder). */
static void check_engines(const char *ua, const char *ub)
{
	pid_t hold = spawn_on(ua, "hold");
	wait_mark();
	CHECK_EQ(t_wait(spawn_on(ub, "quick")), 0);
	unlink(mark());
	pid_t same = spawn_on(ua, "quick");
	wait_mark(); /* it is at its launch, however long it took to start */
	usleep(1500000);
	int st;
	CHECK_EQ(waitpid(same, &st, WNOHANG), 0); /* still waiting for A's engine */
	kill(hold, SIGKILL);
	CHECK_EQ(t_wait(hold), 128 + SIGKILL); /* reaped: a zombie still holds its ticket */
	CHECK_EQ(t_wait(same), 10);
}

int main(int argc, char **argv)
{
	char ua[96], ub[96], both[200], conf[] = "/tmp/gpuslice-simtest-migcuda-XXXXXX", mk[128];
	if (argc >= 4 && strcmp(argv[1], "child") == 0) {
		const char *m = argv[2];
		if (strcmp(m, "alloc") == 0)
			return child_alloc(argv[3]);
		if (strcmp(m, "full") == 0)
			return child_full();
		if (strcmp(m, "hold") == 0)
			return child_hold();
		return strcmp(m, "quick") == 0 ? child_quick() : child_count(argv[3]);
	}
	if (geteuid() != 0) {
		printf("skip test_migcuda: MIG instances are made through NVML, which needs root (as on a driver)\n");
		return 0;
	}
	t_private_state("migcuda");
	t_no_context_memory();
	snprintf(mk, sizeof(mk), "/tmp/gpuslice-simtest-migcuda-mark-%d", (int)getpid());
	setenv("MIGT_MARK", mk, 1);
	int fd = mkstemp(conf);
	MUST(fd >= 0);
	const char *text = "name=\"NVIDIA H100 80GB HBM3\" memory=80GiB sms=132 mig=on\n";
	MUST(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
	setenv("GPUSLICE_SIM_CONFIG", conf, 1);
	nvmlDevice_t h;
	nvmlGpuInstance_t ga, gb;
	nvmlComputeInstance_t ca, cb;
	MUST(nvmlInit_v2() == NVML_SUCCESS && nvmlDeviceGetHandleByIndex_v2(0, &h) == NVML_SUCCESS);
	CHECK_EQ(t_run("count", "none"), 0); /* MIG on, no instances: no CUDA device */
	make_instance(h, &ga, &ca, ua);
	make_instance(h, &gb, &cb, ub);
	CHECK_EQ(t_run("count", "1"), 0); /* without CUDA_VISIBLE_DEVICES: the first MIG device */
	snprintf(both, sizeof(both), "%s,%s", ua, ub);
	setenv("CUDA_VISIBLE_DEVICES", both, 1);
	CHECK_EQ(t_run("count", "1"), 0); /* two named: one enumerated */
	unsetenv("CUDA_VISIBLE_DEVICES");
	check_apart(h, ua, ub);
	check_engines(ua, ub);
	CHECK_EQ(nvmlComputeInstanceDestroy(ca), NVML_SUCCESS);
	CHECK_EQ(nvmlComputeInstanceDestroy(cb), NVML_SUCCESS);
	CHECK_EQ(nvmlGpuInstanceDestroy(ga), NVML_SUCCESS);
	CHECK_EQ(nvmlGpuInstanceDestroy(gb), NVML_SUCCESS);
	nvmlReturn_t act;
	CHECK_EQ(nvmlDeviceSetMigMode(h, NVML_DEVICE_MIG_DISABLE, &act), NVML_SUCCESS);
	CHECK_EQ(act, NVML_SUCCESS);
	CHECK_EQ(t_run("count", "1"), 0); /* the whole GPU again */
	unlink(conf);
	return t_done("test_migcuda");
}
