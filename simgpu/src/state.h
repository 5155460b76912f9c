/* SPDX-License-Identifier: Apache-2.0
 * The shared state file: creation, the process table, memory accounting and
 * the execution engine. Used by both libcuda.so.1 and libnvidia-ml.so.1. */
#ifndef GPUSLICE_SIM_STATE_API_H
#define GPUSLICE_SIM_STATE_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "gpuslice/nvml_abi.h"
#include "simstate.h"

#define SIM_HIDDEN __attribute__((visibility("hidden")))

/* Opens (creating race-free if needed) the state file named by
 * GPUSLICE_SIM_STATE or /dev/shm/gpuslice-sim-v<version>-<uid>, checking magic, version
 * and size, and the device table against cfg. Returns the mapping or NULL with
 * a one-line message in err. */
SIM_HIDDEN struct sim_state *sim_state_open(const struct sim_config *cfg, char *err, size_t errlen);
SIM_HIDDEN void sim_state_close(struct sim_state *st);
/* Maps the existing state file (GPUSLICE_SIM_STATE or the default) without
 * creating or rewriting it: for tools that act on a running simulation. */
SIM_HIDDEN struct sim_state *sim_state_attach(char *err, size_t errlen);

/* Events: posts one on device dev (every process's event sets see it) and
 * wakes the waiters; -1 for a device that does not exist. */
SIM_HIDDEN int sim_event_post(struct sim_state *st, uint32_t dev, uint64_t type, uint64_t data);
/* A lost device's NVML queries fail with NVML_ERROR_GPU_IS_LOST. */
SIM_HIDDEN void sim_set_lost(struct sim_state *st, uint32_t dev, bool lost);
SIM_HIDDEN bool sim_is_lost(const struct sim_state *st, int dev);

/* Process identity: pid and /proc start time (0 if unknown). With
 * GPUSLICE_SIM_HOST_PROC (the host's /proc, mounted in a container) pids are
 * host pids, as the kernel driver knows processes, looked up there; else this
 * pid namespace's (getpid, /proc). */
SIM_HIDDEN int32_t sim_self_pid(void);
SIM_HIDDEN const char *sim_proc_dir(void);
SIM_HIDDEN uint64_t sim_proc_start_time(int32_t pid);
SIM_HIDDEN bool sim_proc_alive(int32_t pid, uint64_t start);

/* Process table. register returns the slot (existing or new) or -1 if full;
 * ci: the MIG compute instance id of its device, -1 for a whole GPU. */
SIM_HIDDEN int sim_proc_register(struct sim_state *st, int32_t pid, uint64_t start, int dev, int ci);
/* Frees everything the slot holds (normal process exit). */
SIM_HIDDEN void sim_proc_release(struct sim_state *st, int slot, int32_t pid);
/* Reaps entries of dead processes, returning their memory. */
SIM_HIDDEN void sim_reap(struct sim_state *st);

/* Reserves bytes on dev for the slot; reaps dead processes before giving up.
 * cap: the most the slot may hold on dev (0: no cap; an MPS client's pinned
 * device memory limit). Returns 0 or -1 (out of memory or over cap). */
SIM_HIDDEN int sim_mem_reserve(struct sim_state *st, int slot, int dev, uint64_t bytes, uint64_t cap);
SIM_HIDDEN void sim_mem_release(struct sim_state *st, int slot, int dev, uint64_t bytes);

/* Engine: one kernel at a time per device across every process, FIFO. */
SIM_HIDDEN uint32_t sim_engine_acquire(struct sim_engine *e, int32_t pid, uint64_t start);
SIM_HIDDEN void sim_engine_release(struct sim_engine *e, uint32_t ticket);
/* Runs one kernel: holds the engine for busy_ns nanoseconds (0: zero-time);
 * returns the time it held it. */
SIM_HIDDEN uint64_t sim_engine_run(struct sim_engine *e, uint64_t busy_ns, int32_t pid, uint64_t start);
/* Accounts busy time of a kernel that ran beside others (MPS) / counts one. */
SIM_HIDDEN void sim_engine_account(struct sim_engine *e, uint64_t start_ns, uint64_t end_ns);
SIM_HIDDEN void sim_engine_count(struct sim_engine *e);
/* Percent of the last ~1 s the engine was busy. */
SIM_HIDDEN unsigned sim_engine_utilization(struct sim_engine *e, uint64_t now_ns);

SIM_HIDDEN uint64_t sim_now_ns(void);

/* Device enumeration filter shared by libcuda and libnvidia-ml: index exists
 * and, with acc->devnodes, its node opens (or fails with ENXIO). Preserves errno. */
SIM_HIDDEN bool sim_device_accessible(const struct sim_state *st, const struct sim_access *acc, int index);

/* The state's robust lock (held briefly: memory accounting, process table, MIG). */
SIM_HIDDEN int sim_state_lock(struct sim_state *st);
SIM_HIDDEN void sim_state_unlock(struct sim_state *st);
/* Whether dev names a device slot in use: a configured GPU or a live MIG GPU instance. */
SIM_HIDDEN bool sim_dev_exists(const struct sim_state *st, int dev);

/* MIG (mig.c): a GPU instance profile of the H100 80GB table. */
struct sim_mig_profile {
	unsigned index; /* NVML_GPU_INSTANCE_PROFILE_* */
	unsigned id;    /* the driver's profile id (nvmlGpuInstanceProfileInfo_t.id) */
	const char *name;
	unsigned slices, mem_slices, count, sms, ce, dec, enc, jpeg, ofa;
	unsigned long long mem_mib;
	unsigned nstarts;
	unsigned starts[SIM_MIG_MAX_GI];
};
SIM_HIDDEN const struct sim_mig_profile *sim_mig_profile(unsigned index);
SIM_HIDDEN const struct sim_mig_profile *sim_mig_profile_by_id(unsigned id);
SIM_HIDDEN uint64_t sim_mig_profile_mib(const struct sim_state *st, int gpu, const struct sim_mig_profile *p);
SIM_HIDDEN unsigned sim_mig_profile_sms(const struct sim_state *st, int gpu, const struct sim_mig_profile *p);
/* Compute slices of a compute instance profile (NVML_COMPUTE_INSTANCE_PROFILE_*), -1 if unknown. */
SIM_HIDDEN int sim_mig_ci_profile_slices(unsigned index);
SIM_HIDDEN unsigned sim_mig_ci_sms(const struct sim_state *st, const struct sim_mig_gi *gi, unsigned ci_profile);
SIM_HIDDEN unsigned sim_mig_ci_placements(unsigned gi_slices, unsigned ci_slices, unsigned starts[SIM_MIG_MAX_CI]);
SIM_HIDDEN unsigned sim_mig_ci_remaining(const struct sim_mig_gi *gi, unsigned ci_profile);
/* Whether the GPU's MIG mode is on now. */
SIM_HIDDEN bool sim_mig_on(const struct sim_state *st, int gpu);
SIM_HIDDEN struct sim_mig_gi *sim_mig_gi_by_id(struct sim_state *st, int gpu, unsigned id);
SIM_HIDDEN struct sim_mig_ci *sim_mig_ci_by_id(struct sim_mig_gi *gi, unsigned id);
/* The GPU and GPU instance whose device slot slot is; false if none. */
SIM_HIDDEN bool sim_mig_slot_owner(const struct sim_state *st, int slot, int *gpu, const struct sim_mig_gi **gi);
/* Instances of a profile that can still be made (free placements). */
SIM_HIDDEN unsigned sim_mig_remaining(const struct sim_state *st, int gpu, const struct sim_mig_profile *p);
/* The state changes; NVML return codes as the driver answers. */
SIM_HIDDEN nvmlReturn_t sim_mig_set_mode(struct sim_state *st, int gpu, unsigned mode, nvmlReturn_t *activation);
SIM_HIDDEN nvmlReturn_t sim_mig_gi_create(struct sim_state *st, int gpu, unsigned profile_id, const unsigned *start,
					  unsigned *id);
SIM_HIDDEN nvmlReturn_t sim_mig_gi_destroy(struct sim_state *st, int gpu, unsigned id);
SIM_HIDDEN nvmlReturn_t sim_mig_ci_create(struct sim_state *st, int gpu, unsigned gi_id, unsigned prof,
					  const unsigned *start, unsigned *id);
SIM_HIDDEN nvmlReturn_t sim_mig_ci_destroy(struct sim_state *st, int gpu, unsigned gi_id, unsigned ci_id);

#endif
