/* SPDX-License-Identifier: Apache-2.0
 *
 * Layout of the simulator's shared state file (GPUSLICE_SIM_STATE). Every
 * process that uses the same file sees the same devices: memory capacity,
 * the execution engine, utilization and the process table.
 *
 * Versioned: readers check magic, version and size and refuse anything else.
 * Bump SIM_STATE_VERSION on any layout change.
 */
#ifndef GPUSLICE_SIM_STATE_H
#define GPUSLICE_SIM_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define SIM_STATE_MAGIC 0x4d49534c53555047ull /* "GPUSLSIM" little endian */
#define SIM_STATE_VERSION \
	8u /* 2: sim_dev_state.minor (was padding in 1); 3: 1024 processes, busy time; 4: events;
                              5: sim_proc_state.mps_server; 6: sim_proc_state.work_ns; 7: sim_state.reaped_ns;
                              8: MIG (sim_state.mig, device slots for GPU instances, sim_proc_state.mig_ci) */
/* Configured GPUs: dev[0, ndev), ndev <= SIM_MAX_GPUS. */
#define SIM_MAX_GPUS 16
/* Device slots: the GPUs, then from SIM_MAX_GPUS on one per MIG GPU
 * instance (its memory and engine), taken when it is made. */
#define SIM_MAX_DEVICES 32
#define SIM_MIG_MAX_GI 7 /* an H100's seven compute slices */
#define SIM_MIG_MAX_CI 7
#define SIM_MAX_PROCS 1024
#define SIM_NAME_LEN 96
#define SIM_UTIL_BUCKETS 32
#define SIM_UTIL_BUCKET_NS 50000000ull /* 50 ms; the NVML window is 20 buckets */
#define SIM_UTIL_WINDOW_BUCKETS 20
#define SIM_TICKET_SLOTS 1024
#define SIM_EVENT_SLOTS 256

/* Fair FIFO engine lock (ticket lock) that survives a holder's or a waiter's
 * death: each ticket's owner publishes its pid and start time in a slot, and
 * waiters that time out skip a ticket whose owner is dead. */
struct sim_engine_slot {
	_Atomic uint32_t ticket; /* ticket + 1 when published, 0 when free */
	_Atomic int32_t pid;
	_Atomic uint64_t start; /* /proc/<pid>/stat starttime */
};

struct sim_engine {
	_Atomic uint32_t next_ticket;
	_Atomic uint32_t serving; /* futex word */
	_Atomic uint32_t waiters;
	uint32_t pad0;
	_Atomic uint64_t busy_since; /* CLOCK_MONOTONIC ns the running kernel started; 0 idle */
	_Atomic uint64_t busy_total_ns;
	_Atomic uint64_t kernels;
	struct {
		_Atomic uint64_t epoch; /* bucket number (time / SIM_UTIL_BUCKET_NS) */
		_Atomic uint64_t busy_ns;
	} util[SIM_UTIL_BUCKETS];
	struct sim_engine_slot slot[SIM_TICKET_SLOTS];
};

struct sim_dev_state {
	char name[SIM_NAME_LEN];
	unsigned char uuid[16];
	uint64_t total; /* bytes */
	uint32_t sms;
	uint32_t minor;        /* device node /dev/nvidia<minor> */
	_Atomic uint64_t used; /* bytes; changed only under sim_state.lock */
	struct sim_engine engine;
};

struct sim_proc_state {
	_Atomic int32_t pid;        /* 0: free slot */
	uint32_t dev_mask;          /* devices this process has a context on */
	uint64_t start;             /* /proc/<pid>/stat starttime, detects pid reuse */
	_Atomic int32_t mps_server; /* pid of its MPS server when an MPS client, else 0 */
	_Atomic uint32_t flags;     /* SIM_PROC_*; was reserved (0) before version 5 used it */
	_Atomic uint64_t used[SIM_MAX_DEVICES];
	_Atomic uint64_t busy_ns[SIM_MAX_DEVICES]; /* time its kernels held each device's engine */
	uint64_t since_ns;                         /* CLOCK_MONOTONIC ns the slot was taken */
	/* Its kernels' own durations on each device: what a GPU takes to run
	 * them. busy_ns is the time they held the engine, which grows when the
	 * simulator's worker thread waits for a CPU mid-kernel; this does not. */
	_Atomic uint64_t work_ns[SIM_MAX_DEVICES];
	/* Per device slot of a MIG GPU instance: the compute instance id + 1 of
	 * the MIG device its context is on (a CUDA process sees one MIG device), 0 none. */
	uint8_t mig_ci[SIM_MAX_DEVICES];
};

/* sim_proc_state.flags: the process also has a graphics context
 * (GPUSLICE_SIM_GRAPHICS=1): NVML lists it among graphics processes too. */
#define SIM_PROC_GRAPHICS 1u

/* One NVML event (an injected XID). seq is the event's number + 1 once its
 * fields are written (a reader that sees it change while reading retries). */
struct sim_nvml_event {
	_Atomic uint64_t seq;
	uint32_t dev;
	uint32_t pad;
	uint64_t type; /* nvmlEventType* */
	uint64_t data; /* the XID */
};

/* Events of every device, in posting order: a ring of the last
 * SIM_EVENT_SLOTS. Posted under sim_state.lock. */
struct sim_nvml_events {
	_Atomic uint32_t posted;    /* events posted so far; futex word */
	_Atomic uint32_t lost_mask; /* devices whose NVML queries fail with GPU_IS_LOST */
	struct sim_nvml_event ring[SIM_EVENT_SLOTS];
};

/* MIG (mig.c). A compute instance: a MIG device, what CUDA enumerates. */
struct sim_mig_ci {
	uint8_t live;
	uint8_t profile; /* NVML_COMPUTE_INSTANCE_PROFILE_* */
	uint8_t start;   /* compute slices within its GPU instance */
	uint8_t size;
	uint32_t id;
	unsigned char uuid[16]; /* "MIG-<uuid>" */
};

/* A GPU instance: memory slices [start, start + size) of its GPU; its memory
 * and engine are device slot `slot`, apart from every other instance's. */
struct sim_mig_gi {
	uint8_t live;
	uint8_t profile; /* NVML_GPU_INSTANCE_PROFILE_* */
	uint8_t start;
	uint8_t size;
	uint32_t id;
	uint32_t slot;
	uint32_t pad;
	struct sim_mig_ci ci[SIM_MIG_MAX_CI];
};

/* MIG state of one GPU; changed under sim_state.lock. */
struct sim_mig_gpu {
	uint32_t capable; /* 0: not MIG-capable (NVML: NOT_SUPPORTED) */
	uint32_t current; /* NVML_DEVICE_MIG_DISABLE / _ENABLE */
	uint32_t pending; /* applied once the GPU is idle (nvmlDeviceSetMigMode, gpuslice-sim-ctl mig) */
	uint32_t made;    /* instances made so far: each gets a UUID of its own */
	struct sim_mig_gi gi[SIM_MIG_MAX_GI];
};

struct sim_state {
	uint64_t magic;
	uint32_t version;
	uint32_t size; /* sizeof(struct sim_state) */
	_Atomic uint32_t ready;
	uint32_t ndev;
	/* Robust, process-shared: guards memory accounting and the process table. */
	pthread_mutex_t lock;
	struct sim_dev_state dev[SIM_MAX_DEVICES];
	struct sim_proc_state proc[SIM_MAX_PROCS];
	struct sim_nvml_events events;
	/* CLOCK_MONOTONIC ns of the last reap that read every entry's start time
	 * in /proc (pid reuse); between them, reaps ask kill() only (state.c). */
	_Atomic uint64_t reaped_ns;
	struct sim_mig_gpu mig[SIM_MAX_GPUS];
};

#endif /* GPUSLICE_SIM_STATE_H */
