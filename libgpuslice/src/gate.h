/* SPDX-License-Identifier: Apache-2.0
 *
 * Launch gate: every kernel/graph launch hook calls gs_gate_launch(stream)
 * before forwarding to the driver. Today it is an inline no-op (the compiler
 * removes it); the time-slice issue fills it in. Contract for the filled-in
 * version: the fast path stays a relaxed atomic load and a branch; a non-zero
 * CUresult is returned to the caller instead of launching.
 */
#ifndef GS_GATE_H
#define GS_GATE_H

#include <gpuslice/cuda_abi.h>

static inline CUresult gs_gate_launch(CUstream stream)
{
	(void)stream;
	return CUDA_SUCCESS;
}

#endif /* GS_GATE_H */
