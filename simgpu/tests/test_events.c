/* SPDX-License-Identifier: Apache-2.0
 * NVML events: event sets and registration, XID events posted by
 * gpuslice-sim-ctl (another process) wake a waiter, only registered devices
 * and types are delivered, a set that falls behind keeps the newest events,
 * lost GPUs fail their measurements, and the tool refuses bad arguments. */
#include <libgen.h>
#include <limits.h>
#include <pthread.h>

#include "state.h"
#include "testutil.h"

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set);
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set);
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t h, unsigned long long *types);
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t h, unsigned long long types, nvmlEventSet_t set);
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms);
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms);

static char ctl_bin[PATH_MAX];

/* Exit status of gpuslice-sim-ctl with up to three arguments (NULL ends). */
static int ctl(const char *a, const char *b, const char *c)
{
	pid_t pid = fork();

	MUST(pid >= 0);
	if (pid == 0) {
		execl(ctl_bin, "gpuslice-sim-ctl", a, b, c, (char *)NULL);
		_exit(127);
	}
	return t_wait(pid);
}

static void test_registration(nvmlDevice_t d0, nvmlDevice_t d1)
{
	unsigned long long types = 0;
	nvmlEventSet_t set = NULL;
	nvmlEventData_t e;

	CHECK_EQ(nvmlDeviceGetSupportedEventTypes(d0, &types), NVML_SUCCESS);
	CHECK_EQ(types, nvmlEventTypeXidCriticalError);
	CHECK_EQ(nvmlDeviceGetSupportedEventTypes(d0, NULL), NVML_ERROR_INVALID_ARGUMENT);
	MUST(nvmlEventSetCreate(&set) == NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceRegisterEvents(d0, nvmlEventTypeDoubleBitEccError, set), NVML_ERROR_NOT_SUPPORTED);
	CHECK_EQ(nvmlDeviceRegisterEvents(d0, nvmlEventTypeXidCriticalError, NULL), NVML_ERROR_INVALID_ARGUMENT);
	CHECK_EQ(nvmlDeviceRegisterEvents(d1, nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
	CHECK_EQ(nvmlEventSetWait_v2(set, &e, 0), NVML_ERROR_TIMEOUT);
	CHECK_EQ(nvmlEventSetWait_v2(NULL, &e, 0), NVML_ERROR_INVALID_ARGUMENT);
	/* Device 0 is not registered: its event is skipped, device 1's delivered. */
	CHECK_EQ(ctl("xid", "0", "48"), 0);
	CHECK_EQ(ctl("xid", "GPU-5e1ac0de-6770-7573-6c69-636500000001", "79"), 0);
	memset(&e, 0xab, sizeof(e));
	CHECK_EQ(nvmlEventSetWait_v2(set, &e, 1000), NVML_SUCCESS);
	CHECK(e.device == d1);
	CHECK_EQ(e.eventType, nvmlEventTypeXidCriticalError);
	CHECK_EQ(e.eventData, 79);
	CHECK_EQ(e.gpuInstanceId, 0xffffffffu);
	CHECK_EQ(nvmlEventSetWait(set, &e, 0), NVML_ERROR_TIMEOUT);
	CHECK_EQ(nvmlEventSetFree(set), NVML_SUCCESS);
}

struct waiter {
	nvmlEventSet_t set;
	nvmlReturn_t rc;
	nvmlEventData_t e;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;

	w->rc = nvmlEventSetWait_v2(w->set, &w->e, 20000);
	return NULL;
}

/* A waiter blocked in nvmlEventSetWait_v2 wakes for an event another process
 * posts (well before its 20 s timeout: the test would take that long). */
static void test_wakeup(nvmlDevice_t d0)
{
	struct waiter w = {0};
	pthread_t th;

	MUST(nvmlEventSetCreate(&w.set) == NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceRegisterEvents(d0, nvmlEventTypeXidCriticalError, w.set), NVML_SUCCESS);
	MUST(pthread_create(&th, NULL, wait_thread, &w) == 0);
	usleep(50 * 1000);
	double t0 = t_now_ms();
	CHECK_EQ(ctl("xid", "0", "13"), 0);
	pthread_join(th, NULL);
	CHECK_EQ(w.rc, NVML_SUCCESS);
	CHECK_EQ(w.e.eventData, 13);
	CHECK(t_now_ms() - t0 < 10000);
	CHECK_EQ(nvmlEventSetFree(w.set), NVML_SUCCESS);
}

/* More events than the ring holds: the set reads the newest SIM_EVENT_SLOTS. */
static void test_overrun(nvmlDevice_t d0)
{
	char err[4200];
	nvmlEventSet_t set;
	nvmlEventData_t e;
	struct sim_state *st = sim_state_attach(err, sizeof(err));
	unsigned n = 0;
	unsigned long long first = 0;

	MUST(st != NULL);
	MUST(nvmlEventSetCreate(&set) == NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceRegisterEvents(d0, nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
	for (unsigned i = 0; i < SIM_EVENT_SLOTS + 40; i++)
		CHECK_EQ(sim_event_post(st, 0, nvmlEventTypeXidCriticalError, 1000 + i), 0);
	CHECK_EQ(sim_event_post(st, 5, nvmlEventTypeXidCriticalError, 1), -1); /* no device 5 */
	while (nvmlEventSetWait_v2(set, &e, 0) == NVML_SUCCESS) {
		if (n++ == 0)
			first = e.eventData;
	}
	CHECK_EQ(n, SIM_EVENT_SLOTS);
	CHECK_EQ(first, 1000 + 40);
	CHECK_EQ(nvmlEventSetFree(set), NVML_SUCCESS);
	sim_state_close(st);
}

static void test_lost(nvmlDevice_t d1)
{
	nvmlMemory_t m;
	nvmlUtilization_t u;
	unsigned n = 0;
	char uuid[96];

	CHECK_EQ(ctl("lost", "1", NULL), 0);
	CHECK_EQ(nvmlDeviceGetMemoryInfo(d1, &m), NVML_ERROR_GPU_IS_LOST);
	CHECK_EQ(nvmlDeviceGetUtilizationRates(d1, &u), NVML_ERROR_GPU_IS_LOST);
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(d1, &n, NULL), NVML_ERROR_GPU_IS_LOST);
	CHECK_EQ(nvmlDeviceGetUUID(d1, uuid, sizeof(uuid)), NVML_SUCCESS);
	CHECK(strcmp(nvmlErrorString(NVML_ERROR_GPU_IS_LOST), "GPU is lost") == 0);
	CHECK_EQ(ctl("found", "1", NULL), 0);
	CHECK_EQ(nvmlDeviceGetMemoryInfo(d1, &m), NVML_SUCCESS);
}

static void test_bad_args(void)
{
	CHECK_EQ(ctl("xid", "2", "79"), 2);  /* two GPUs */
	CHECK_EQ(ctl("xid", "0", "x79"), 2); /* not a number */
	CHECK_EQ(ctl("xid", "0", NULL), 2);
	CHECK_EQ(ctl("reset", "0", NULL), 2);
	CHECK_EQ(ctl("xid", "GPU-00000000-0000-0000-0000-000000000000", "79"), 2);
	CHECK_EQ(ctl("lost", "0", "1"), 2);
	const char *saved = getenv("GPUSLICE_SIM_STATE");
	char keep[256];
	snprintf(keep, sizeof(keep), "%s", saved);
	setenv("GPUSLICE_SIM_STATE", "/nonexistent/gpuslice-sim-state", 1);
	CHECK_EQ(ctl("xid", "0", "79"), 1);
	setenv("GPUSLICE_SIM_STATE", keep, 1);
}

int main(void)
{
	char self[PATH_MAX];
	nvmlDevice_t d0, d1;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	MUST(n > 0);
	self[n] = '\0';
	snprintf(ctl_bin, sizeof(ctl_bin), "%s/gpuslice-sim-ctl", dirname(self));
	t_private_state("events");
	setenv("GPUSLICE_SIM_GPUS", "2", 1);
	MUST(nvmlInit_v2() == NVML_SUCCESS);
	MUST(nvmlDeviceGetHandleByIndex_v2(0, &d0) == NVML_SUCCESS);
	MUST(nvmlDeviceGetHandleByIndex_v2(1, &d1) == NVML_SUCCESS);
	test_registration(d0, d1);
	test_wakeup(d0);
	test_overrun(d0);
	test_lost(d1);
	test_bad_args();
	CHECK_EQ(nvmlShutdown(), NVML_SUCCESS);
	return t_done("NVML events, XID injection, lost GPUs");
}
