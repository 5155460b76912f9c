/* SPDX-License-Identifier: Apache-2.0
 *
 * SIMULATOR PART: the wire format and shared client table of the simulator's
 * stand-in MPS control daemon + server (gpuslice-sim-mps-control) and the
 * simulated libcuda's MPS client side. Not NVIDIA's protocol: a real driver
 * talks to nvidia-cuda-mps-control over its own pipes in the same directory.
 *
 * The daemon listens on <CUDA_MPS_PIPE_DIRECTORY>/SIM_MPS_SOCKET
 * (SOCK_SEQPACKET). A client sends one sim_mps_hello and receives one
 * sim_mps_reply, with the table's memfd (SCM_RIGHTS) when admitted, and keeps
 * the connection open for its life: the daemon frees the client's slot when
 * it closes, and the client treats EOF as the server's death. A control
 * connection sends one sim_mps_command and reads text until EOF.
 *
 * Versioned: both sides check magic, version and sizes and refuse the rest.
 */
#ifndef GPUSLICE_SIM_MPS_TABLE_H
#define GPUSLICE_SIM_MPS_TABLE_H

#include <stdatomic.h>
#include <stdint.h>

#define SIM_MPS_SOCKET "gpuslice-sim-mps.sock"
#define SIM_MPS_MAGIC 0x4d535053534c5347ull /* "GSLSSPSM" little endian */
#define SIM_MPS_VERSION 1u
#define SIM_MPS_MAX_CLIENTS 48 /* the client limit of Volta and later */
#define SIM_MPS_DEFAULT_PIPE_DIR "/tmp/nvidia-mps"
#define SIM_MPS_DEFAULT_LOG_DIR "/var/log/nvidia-mps"

enum sim_mps_kind { SIM_MPS_HELLO = 1, SIM_MPS_COMMAND = 2 };

struct sim_mps_hello {
	uint32_t version;
	uint32_t kind; /* SIM_MPS_HELLO */
	uint32_t pct;  /* CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, 1..100 */
	uint32_t reserved;
};

struct sim_mps_reply {
	uint32_t version;
	int32_t status; /* CUresult: CUDA_SUCCESS or why the client was refused */
	int32_t slot;
	int32_t server_pid;
};

struct sim_mps_command {
	uint32_t version;
	uint32_t kind;  /* SIM_MPS_COMMAND */
	char text[120]; /* NUL-terminated, e.g. "quit", "get_server_list" */
};

/* One admitted client. The daemon writes pid and pct at admission and clears
 * the slot when the client's connection closes; the client writes running
 * (the percentage its kernel is using now, 0 idle) and work_ns. */
struct sim_mps_client {
	_Atomic int32_t pid; /* 0: free */
	_Atomic uint32_t pct;
	_Atomic uint32_t running;
	uint32_t pad;
	_Atomic uint64_t work_ns; /* full-GPU nanoseconds of kernel work completed */
};

struct sim_mps_table {
	uint64_t magic;
	uint32_t version;
	uint32_t size; /* sizeof(struct sim_mps_table) */
	int32_t server_pid;
	uint32_t max_clients;
	struct sim_mps_client client[SIM_MPS_MAX_CLIENTS];
};

#endif /* GPUSLICE_SIM_MPS_TABLE_H */
