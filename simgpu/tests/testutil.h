/* SPDX-License-Identifier: Apache-2.0
 * Minimal test helpers for the simulator's C tests (no framework). */
#ifndef GPUSLICE_SIM_TESTUTIL_H
#define GPUSLICE_SIM_TESTUTIL_H

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuapi.h"
#include "gpuslice/nvml_abi.h"

static int t_failures;

#define CHECK(cond)                                                                              \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
			t_failures++;                                                            \
		}                                                                                \
	} while (0)

#define CHECK_EQ(a, b)                                                                                               \
	do {                                                                                                         \
		long long a_ = (long long)(a), b_ = (long long)(b);                                                  \
		if (a_ != b_) {                                                                                      \
			fprintf(stderr, "%s:%d: %s == %lld, want %s == %lld\n", __FILE__, __LINE__, #a, a_, #b, b_); \
			t_failures++;                                                                                \
		}                                                                                                    \
	} while (0)

/* Fatal: later steps depend on it. */
#define MUST(cond)                                                                        \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "%s:%d: fatal: %s\n", __FILE__, __LINE__, #cond); \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

#define CU_OK(call) CHECK_EQ((call), CUDA_SUCCESS)
#define CU_MUST(call) MUST((call) == CUDA_SUCCESS)

/* NVML prototypes (the ABI header declares types only). */
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
nvmlReturn_t nvmlShutdown(void);
const char *nvmlErrorString(nvmlReturn_t r);
nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len);
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *h);
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *h);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t h, unsigned int *i);
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t h, unsigned int *minor);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned int len);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned int len);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *u);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_v1_t *p);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_v2_t *p);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_t *p);
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t h, nvmlProcessUtilizationSample_t *s, unsigned int *n,
					     unsigned long long last_seen);
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_t *p);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *pci);
/* MIG */
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned int *current, unsigned int *pending);
nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t h, unsigned int mode, nvmlReturn_t *activation);
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t h, unsigned int profile, nvmlGpuInstanceProfileInfo_t *o);
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t h, unsigned int profile,
						  nvmlGpuInstanceProfileInfo_v2_t *o);
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t h, unsigned int id,
							   nvmlGpuInstancePlacement_t *p, unsigned int *n);
nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t h, unsigned int id, unsigned int *n);
nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t h, unsigned int id, nvmlGpuInstance_t *gi);
nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t h, unsigned int id,
						      const nvmlGpuInstancePlacement_t *p, nvmlGpuInstance_t *gi);
nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gi);
nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t h, unsigned int id, nvmlGpuInstance_t *gis, unsigned int *n);
nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t h, unsigned int id, nvmlGpuInstance_t *gi);
nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gi, nvmlGpuInstanceInfo_t *o);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gi, unsigned int profile, unsigned int eng,
							  nvmlComputeInstanceProfileInfo_t *o);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gi, unsigned int profile, unsigned int eng,
							   nvmlComputeInstanceProfileInfo_v2_t *o);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gi, unsigned int id, unsigned int *n);
nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t gi, unsigned int id,
								 nvmlComputeInstancePlacement_t *p, unsigned int *n);
nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gi, unsigned int id, nvmlComputeInstance_t *ci);
nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(nvmlGpuInstance_t gi, unsigned int id,
							       const nvmlComputeInstancePlacement_t *p,
							       nvmlComputeInstance_t *ci);
nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t ci);
nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gi, unsigned int id, nvmlComputeInstance_t *cis,
						unsigned int *n);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gi, unsigned int id, nvmlComputeInstance_t *ci);
nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t ci, nvmlComputeInstanceInfo_t *o);
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t h, unsigned int *is_mig);
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t h, unsigned int *id);
nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t h, unsigned int *id);
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h, unsigned int *n);
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h, unsigned int i, nvmlDevice_t *mig);
nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *h);

static char t_state[256];

static inline void t_cleanup(void)
{
	if (t_state[0] != '\0')
		unlink(t_state);
}

/* Gives this test (and its children) a private state file. Call before cuInit. */
static inline void t_private_state(const char *name)
{
	if (getenv("GPUSLICE_SIM_STATE") != NULL && getenv("SIM_TEST_CHILD") != NULL)
		return; /* a child shares its parent's */
	snprintf(t_state, sizeof(t_state), "/dev/shm/gpuslice-simtest-%s-%d", name, (int)getpid());
	unlink(t_state);
	setenv("GPUSLICE_SIM_STATE", t_state, 1);
	atexit(t_cleanup);
}

/* For a test about something other than the memory a context takes: every
 * context (this process's and its children's) takes none, so the test's exact
 * figures are what its own calls hold (test_ctxmem and test_dlopen check the
 * default). Call before cuInit. */
static inline void t_no_context_memory(void)
{
	setenv("GPUSLICE_SIM_CONTEXT_MEMORY", "0", 1);
}

static inline double t_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Starts this binary again as a child: argv = {self, "child", mode, arg}. */
static inline pid_t t_spawn(const char *mode, const char *arg)
{
	pid_t pid = fork();

	MUST(pid >= 0);
	if (pid == 0) {
		setenv("SIM_TEST_CHILD", "1", 1);
		execl("/proc/self/exe", "simtest-child", "child", mode, arg, (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* Exit code of a child (128+signal if killed). */
static inline int t_wait(pid_t pid)
{
	int st = 0;

	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static inline int t_run(const char *mode, const char *arg)
{
	return t_wait(t_spawn(mode, arg));
}

static inline CUcontext t_primary(int dev)
{
	CUcontext c = NULL;

	CU_MUST(cuInit(0));
	CU_MUST(cuDevicePrimaryCtxRetain(&c, dev));
	CU_MUST(cuCtxSetCurrent(c));
	return c;
}

static inline CUfunction t_busy_fn(void)
{
	CUmodule m;
	CUfunction f;

	CU_MUST(cuModuleLoadData(&m, "any image is accepted"));
	CU_MUST(cuModuleGetFunction(&f, m, "gpuslice_sim_busy"));
	return f;
}

static inline CUresult t_busy(CUfunction f, uint64_t us, CUstream s)
{
	void *args[] = {&us};

	return cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, NULL);
}

static inline int t_done(const char *name)
{
	if (t_failures == 0)
		printf("ok   %s\n", name);
	else
		printf("FAIL %s (%d failures)\n", name, t_failures);
	return t_failures == 0 ? 0 : 1;
}

#endif
