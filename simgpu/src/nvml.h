/* SPDX-License-Identifier: Apache-2.0
 * Process-local state of the simulated libnvidia-ml.so.1. */
#ifndef GPUSLICE_SIM_NVML_H
#define GPUSLICE_SIM_NVML_H

#include <pthread.h>

#include "gpuslice/nvml_abi.h"
#include "state.h"

#define NVML_API __attribute__((visibility("default")))
#define SIM_NVML_DEV_MAGIC 0x4e564d4cu
#define SIM_NVML_MIG_MAGIC 0x4d494744u /* a MIG device (compute instance) handle */
#define SIM_NVML_GI_MAGIC 0x4e564749u
#define SIM_NVML_CI_MAGIC 0x4e564349u
#define SIM_MIG_IDS 16 /* GPU and compute instance ids the handles cover */

/* A device handle; MIG handles (nvml_mig*.c) name their GPU by index and their
 * instances by id, and answer only while those instances live (a handle is
 * valid again for an instance made later with the same ids, as the driver's
 * "handles may be reused"). */
struct sim_nvml_dev {
	unsigned magic;
	int index; /* simulator device index (MIG handles: their GPU's) */
	unsigned gi, ci;
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
	struct sim_nvml_dev mig[SIM_MAX_GPUS][SIM_MIG_IDS][SIM_MIG_IDS]; /* MIG devices */
	struct sim_nvml_dev gi[SIM_MAX_GPUS][SIM_MIG_IDS];
	struct sim_nvml_dev ci[SIM_MAX_GPUS][SIM_MIG_IDS][SIM_MIG_IDS];
};

extern struct sim_nvml sim_nvml SIM_HIDDEN;

/* NVML_SUCCESS if initialized; the device for a handle or NULL. */
SIM_HIDDEN nvmlReturn_t sim_nvml_check(void);
SIM_HIDDEN struct sim_dev_state *sim_nvml_dev(nvmlDevice_t h, int *index);
/* A handle's device index (a MIG device's: its instance's slot), or the
 * error to return: not initialized, not a handle (invalid argument), a lost
 * device (GPU is lost: the queries that measure it). */
SIM_HIDDEN nvmlReturn_t sim_nvml_live(nvmlDevice_t h, int *index);
/* A listed GPU's index from a parent handle (not a MIG device's), or the
 * error to return: not initialized, any other handle (invalid argument). */
SIM_HIDDEN nvmlReturn_t sim_nvml_parent(nvmlDevice_t h, int *gpu);
/* A MIG device handle's GPU, GPU instance and compute instance while they
 * live; false for any other handle. */
SIM_HIDDEN bool sim_nvml_mig(nvmlDevice_t h, int *gpu, struct sim_mig_gi **gi, struct sim_mig_ci **ci);
/* The handle of a MIG device (setting it up), and of a listed GPU (NULL if not listed). */
SIM_HIDDEN nvmlDevice_t sim_nvml_mig_handle(int gpu, unsigned gi, unsigned ci);
SIM_HIDDEN nvmlDevice_t sim_nvml_gpu_handle(int gpu);
/* A MIG device's index under its GPU (nvmlDeviceGetMigDeviceHandleByIndex's), -1 if none. */
SIM_HIDDEN int sim_nvml_mig_index(int gpu, unsigned gi, unsigned ci);
/* The live GPU / compute instance of a handle (NULL if gone or not one), and a compute instance's handle. */
SIM_HIDDEN struct sim_mig_gi *sim_nvml_gi_of(nvmlGpuInstance_t h, int *gpu);
SIM_HIDDEN struct sim_mig_ci *sim_nvml_ci_of(nvmlComputeInstance_t h, int *gpu, struct sim_mig_gi **gi);
SIM_HIDDEN nvmlComputeInstance_t sim_nvml_ci_handle(int gpu, unsigned gi, unsigned id);
SIM_HIDDEN nvmlGpuInstance_t sim_nvml_gi_handle(int gpu, unsigned id);
/* Appends devices that became accessible (GPUSLICE_SIM_DEVNODES); returns ndev. */
SIM_HIDDEN int sim_nvml_rescan(void);

NVML_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t h, nvmlProcessUtilizationSample_t *out,
						      unsigned int *count, unsigned long long last_seen);

struct sim_proc_row {
	unsigned pid;
	unsigned long long mem;
	unsigned gi, ci; /* MIG instance ids, 0xffffffff on a whole GPU */
};

/* LIST_ALL: every process with a context or memory (utilization samples). */
enum sim_list { LIST_GRAPHICS, LIST_COMPUTE, LIST_MPS, LIST_ALL };
/* Live processes of a list on device idx: the count, the first cap in rows. */
SIM_HIDDEN unsigned sim_nvml_collect(int idx, enum sim_list which, struct sim_proc_row *rows, unsigned cap);

#endif
