/* SPDX-License-Identifier: Apache-2.0
 * Process-local state of the simulated libnvidia-ml.so.1. */
#ifndef GPUSLICE_SIM_NVML_H
#define GPUSLICE_SIM_NVML_H

#include <pthread.h>

#include "gpuslice/nvml_abi.h"
#include "state.h"

#define NVML_API __attribute__((visibility("default")))
#define SIM_NVML_DEV_MAGIC 0x4e564d4cu

struct sim_nvml_dev {
	unsigned magic;
	int index; /* simulator device index */
};

struct sim_nvml {
	pthread_mutex_t mu;
	int refs; /* nvmlInit / nvmlShutdown nesting */
	struct sim_state *st;
	struct sim_access access; /* device node check (GPUSLICE_SIM_DEVNODES) */
	/* Index -> device; append-only while initialized (dev[i] written under mu
	 * before ndev covers it), rebuilt by the first nvmlInit after a full
	 * shutdown. */
	_Atomic int ndev;
	struct sim_nvml_dev dev[SIM_MAX_DEVICES];
};

extern struct sim_nvml sim_nvml SIM_HIDDEN;

/* NVML_SUCCESS if initialized; the device for a handle or NULL. */
SIM_HIDDEN nvmlReturn_t sim_nvml_check(void);
SIM_HIDDEN struct sim_dev_state *sim_nvml_dev(nvmlDevice_t h, int *index);
/* Appends devices that became accessible (GPUSLICE_SIM_DEVNODES); returns ndev. */
SIM_HIDDEN int sim_nvml_rescan(void);

NVML_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t h, nvmlProcessUtilizationSample_t *out,
						      unsigned int *count, unsigned long long last_seen);

struct sim_proc_row {
	unsigned pid;
	unsigned long long mem;
};

/* LIST_ALL: every process with a context or memory (utilization samples). */
enum sim_list { LIST_GRAPHICS, LIST_COMPUTE, LIST_MPS, LIST_ALL };
/* Live processes of a list on device idx: the count, the first cap in rows. */
SIM_HIDDEN unsigned sim_nvml_collect(int idx, enum sim_list which, struct sim_proc_row *rows, unsigned cap);

#endif
