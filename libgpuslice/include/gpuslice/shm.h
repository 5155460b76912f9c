/* SPDX-License-Identifier: Apache-2.0
 *
 * Layout of a gpuslice group state file (GPUSLICE_GROUP_FILE), shared by every
 * process of one group through mmap(MAP_SHARED). Written by libgpuslice.so;
 * read (and later partly written) by the node agent, which may mirror these
 * structs in Go: plain fixed-width fields only, no pointers, little endian.
 *
 * Creation (race-free): open(O_RDWR|O_CREAT, 0600), flock(LOCK_EX); under the
 * lock, a file of size 0 (or of exactly GS_SHM_FILE_SIZE bytes with magic 0) is
 * initialized: ftruncate, fill the header, then store `magic` last (release).
 * Any other content is refused (bad magic, version or size) and never changed.
 *
 * Concurrency: the fields marked "atomic" are accessed with __atomic builtins
 * (or sync/atomic in Go) at their natural 8/4-byte alignment. Claiming a GPU
 * slot or a process entry, and reaping dead processes, happen under
 * flock(LOCK_EX) on the file; the memory reservation itself is a lock-free CAS
 * on gpu[i].used that never exceeds gpu[i].limit and never goes below 0.
 *
 * Bump GS_SHM_VERSION on any layout change.
 */
#ifndef GPUSLICE_SHM_H
#define GPUSLICE_SHM_H

#include <stddef.h>
#include <stdint.h>

#define GS_SHM_MAGIC 0x4543494c53555047ull /* "GPUSLICE" little endian */
#define GS_SHM_VERSION 1u
#define GS_SHM_MAX_GPUS 16
#define GS_SHM_MAX_PROCS 1024

/* Where the device plugin mounts a container's group state file. Where this
 * path exists, it is the library's group file, whatever GPUSLICE_GROUP_FILE
 * says (a member cannot leave its group by its environment); elsewhere (a
 * single node) GPUSLICE_GROUP_FILE decides. docs/contracts.md. */
#define GS_CONTAINER_GROUP_FILE "/run/gpuslice-group/gpu.state"
/* In a container (GS_CONTAINER_GROUP_FILE exists), the launch gate is off
 * only where the node put this file in the group's read-only directory (MPS
 * clients); GPUSLICE_GATE is not read there. */
#define GS_CONTAINER_GATE_OFF "/run/gpuslice-group/gate-off"
#define GS_SHM_UUID_LEN 64 /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" + NUL fits */
#define GS_SHM_NAME_LEN 64

/* gs_shm_gpu.state */
enum { GS_SLOT_FREE = 0, GS_SLOT_READY = 2 };
/* gs_shm_gpu.elastic bits (written by the time-slice daemon; 0: a plain limit) */
enum { GS_ELASTIC_ON = 1, GS_ELASTIC_SPILL = 2 };
/* gs_shm_proc.state */
enum { GS_PROC_FREE = 0, GS_PROC_LIVE = 1 };

/* One GPU the group uses, keyed by its UUID string as NVML prints it
 * (lower-case hex), so CUDA ordinals under CUDA_VISIBLE_DEVICES and NVML
 * handles land on the same slot. 128 bytes. */
struct gs_shm_gpu {
	uint32_t state;   /* atomic; GS_SLOT_READY once uuid/limit are written */
	uint32_t elastic; /* atomic; GS_ELASTIC_* bits */
	char uuid[GS_SHM_UUID_LEN];
	uint64_t limit;   /* atomic; bytes, 0 = no limit */
	uint64_t used;    /* atomic; bytes the group holds now */
	uint64_t peak;    /* atomic; highest `used` seen */
	uint64_t refused; /* atomic; allocations refused at the limit */
	/* Elastic memory: `limit` is the allowance (min plus what the time-slice daemon
	 * lent); past it the library asks the daemon for a borrow. */
	uint64_t min;     /* atomic; the guarantee (memory.min) */
	uint64_t managed; /* atomic; bytes allocated as managed memory past min (spillable) */
	uint64_t spilled; /* atomic; bytes of those moved to host memory */
};

/* One process of the group (attached on its first allocation). 160 bytes. */
struct gs_shm_proc {
	uint32_t state;   /* atomic; GS_PROC_LIVE while the entry is in use */
	int32_t pid;      /* pid in the process's own pid namespace */
	int32_t host_pid; /* atomic; pid as the driver/NVML sees it; 0 = unknown yet
			      * (filled in by the time-slice daemon for another pid namespace) */
	uint32_t reserved0;
	uint64_t start_time;            /* /proc/<pid>/stat field 22: detects pid reuse */
	uint64_t pidns;                 /* inode of /proc/<pid>/ns/pid */
	uint64_t used[GS_SHM_MAX_GPUS]; /* atomic; bytes per gpu[] slot */
};

struct gs_shm_header {
	uint64_t magic;       /* GS_SHM_MAGIC, stored last at creation */
	uint32_t version;     /* GS_SHM_VERSION */
	uint32_t header_size; /* sizeof(struct gs_shm_header) */
	uint64_t file_size;   /* GS_SHM_FILE_SIZE */
	uint32_t max_gpus;    /* GS_SHM_MAX_GPUS */
	uint32_t max_procs;   /* GS_SHM_MAX_PROCS */
	uint32_t gpu_size;    /* sizeof(struct gs_shm_gpu) */
	uint32_t proc_size;   /* sizeof(struct gs_shm_proc) */
	uint64_t gpu_offset;  /* offsetof(struct gs_shm_file, gpu) */
	uint64_t proc_offset; /* offsetof(struct gs_shm_file, proc) */
	/* Inode of the host pid namespace: the creator's (the node agent creates
	 * the files of pod containers). A member in that namespace records
	 * host_pid = getpid(); others leave 0 and say hello to the time-slice daemon,
	 * which fills it in (SO_PEERCRED + /proc/<pid>/status NSpid). */
	uint64_t host_pidns;
	char group[GS_SHM_NAME_LEN]; /* GPUSLICE_GROUP of the creator */
	/* The group's memory.max, written under the file lock by whoever manages
	 * the group (gpuslice run, the time-slice daemon when memory.max changes). Once
	 * limit_set is 1, every GPU slot a member claims takes this limit, whatever
	 * the member's own GPUSLICE_MEMORY_LIMIT says: the limit belongs to the
	 * group. 0 (files made by the library alone): the member's variable. */
	uint64_t limit;     /* atomic; bytes, 0 = no limit */
	uint32_t limit_set; /* atomic; 1 once `limit` is written (stored after it) */
	uint32_t reserved0;
	uint64_t reserved[14];
};

struct gs_shm_file {
	struct gs_shm_header hdr;
	struct gs_shm_gpu gpu[GS_SHM_MAX_GPUS];
	struct gs_shm_proc proc[GS_SHM_MAX_PROCS];
};

#define GS_SHM_FILE_SIZE sizeof(struct gs_shm_file)

_Static_assert(sizeof(struct gs_shm_gpu) == 128, "gs_shm_gpu layout");
_Static_assert(sizeof(struct gs_shm_proc) == 160, "gs_shm_proc layout");
_Static_assert(sizeof(struct gs_shm_header) == 256, "gs_shm_header layout");
_Static_assert(offsetof(struct gs_shm_file, gpu) == 256, "gpu offset");
_Static_assert(offsetof(struct gs_shm_file, proc) == 256 + 128 * GS_SHM_MAX_GPUS, "proc offset");
_Static_assert(offsetof(struct gs_shm_proc, used) % 8 == 0, "used alignment");
_Static_assert(offsetof(struct gs_shm_header, limit) == 128, "header limit offset");

#endif /* GPUSLICE_SHM_H */
