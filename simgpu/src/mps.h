/* SPDX-License-Identifier: Apache-2.0
 * MPS client side of the simulated libcuda (mps.c). Internal: hidden symbols. */
#ifndef GPUSLICE_SIM_MPS_H
#define GPUSLICE_SIM_MPS_H

#include <stdbool.h>
#include <stdint.h>

#include "gpuslice/cuda_abi.h"
#include "state.h"

/* At context creation: becomes an MPS client if a stand-in daemon listens in
 * CUDA_MPS_PIPE_DIRECTORY (once per process). CUDA_SUCCESS also when there is
 * none; the refusal (client limit) or failure otherwise. */
SIM_HIDDEN CUresult sim_mps_attach(void);
/* The client's pinned device memory limit on simulator device dev in bytes
 * (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), 0 for none or when not a client. */
SIM_HIDDEN uint64_t sim_mps_limit(int dev);
/* The pid of the process's MPS server once it is a client, else 0. */
SIM_HIDDEN int32_t sim_mps_server(void);
/* CUDA_ERROR_MPS_RPC_FAILURE once the process's server died, else success. */
SIM_HIDDEN CUresult sim_mps_check(void);
/* Runs one kernel as an MPS client; false if the process is not one (the
 * caller runs it on the device engine). *end: in, where the kernel starts
 * when it was queued behind the previous one (that kernel's simulated end;
 * 0: now); out, where it ended in simulated time. */
SIM_HIDDEN bool sim_mps_run(struct sim_engine *e, uint64_t busy_ns, uint64_t *end);

#endif
