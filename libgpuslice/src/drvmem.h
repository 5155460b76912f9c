/* SPDX-License-Identifier: Apache-2.0
 *
 * Memory no call names: what context creation and module/library loads make
 * the driver hold, as the driver reports it, charged to the group like an
 * allocation (hooks_load.c, hooks_ctx.c). Measured around the driver's call:
 * NVML's used memory for this process on the device (its host pid), else the
 * device's used memory where the driver gives no per-process figure. What the
 * allocation hooks counted for this process in between (another thread's
 * allocations and frees) is taken off, so nothing is counted twice; both
 * figures are read at a quiet point (quiet.h: no other thread of the process
 * between a reservation and the driver's answer), and the process's other
 * memory calls are held off until the measured call returns, so only that
 * call moves the figures: an allocation in flight is neither charged to the
 * context nor missed. Measured calls run one at a
 * time, so two of them never see each other's memory. The device-wide
 * fallback cannot quiet other processes: there a neighbour's allocation in
 * flight can still be charged. None of this is on a hot path.
 */
#ifndef GS_DRVMEM_H
#define GS_DRVMEM_H

#include "group.h"
#include "internal.h"
#include "ptrtab.h"

struct gs_drv_probe {
	struct gs_group *g;
	struct gs_shm_proc *self;
	nvmlDevice_t nvml; /* NULL: nothing measured, the call passes uncounted */
	int slot;
	int per_process;  /* 1: NVML's figure for this process; 0: the device's used memory */
	int held;         /* other threads' memory hooks held off (quiet.h) until gs_drv_end */
	uint64_t drv;     /* the driver's figure before the call */
	uint64_t counted; /* what this process had counted on the slot before the call */
};

/* Before the driver's call on device dev: takes the measuring lock and reads
 * the figures. Every gs_drv_begin is followed by one gs_drv_end. */
GS_HIDDEN void gs_drv_begin(CUdevice dev, struct gs_drv_probe *p);
/* After the driver's call: if it succeeded (ok), charges what the driver
 * grew by, less what the hooks counted meanwhile, as (kind, key) made in
 * context ctx (0: none; the context's teardown releases it with ctx's
 * allocations). CUDA_SUCCESS, or CUDA_ERROR_OUT_OF_MEMORY past the limit (one
 * line said): the caller then undoes its call. Releases the lock. */
GS_HIDDEN CUresult gs_drv_end(struct gs_drv_probe *p, int ok, enum gs_kind kind, uint64_t key, uint64_t ctx);

#endif /* GS_DRVMEM_H */
