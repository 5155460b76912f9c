/* SPDX-License-Identifier: Apache-2.0
 *
 * Memory no call names: what context creation and module/library loads make
 * the driver hold, charged to the group like an allocation (hooks_load.c,
 * hooks_ctx.c), and reserved like one BEFORE the driver is asked:
 *  - at an estimate: for a context, the largest of what the node measured a
 *    context takes on that kind of device (the header's device_seed_kib for
 *    the device's memory size, written by the time-slice daemon from its own
 *    probe, bin/gpuslice-ctxprobe: no tenant's figure lowers it), what the
 *    last context made on that GPU took, as a member of the group measured
 *    it (the group file's context_kib, shared by its members), and what this
 *    process's own last context there took (a process whose contexts are
 *    larger than another member's is reserved at its own size); with the
 *    node's figure a creation that does not fit is refused at once (nothing
 *    to wait for); none of the three yet, a guess:
 *    the node's seed (the header's context_seed_kib: the largest context
 *    any group measured on the node, as the time-slice daemon gathers them;
 *    at most GS_DRV_CONTEXT_GUESS), else GS_DRV_CONTEXT_GUESS, at most the
 *    slot's limit, so only the node's first contexts are reserved blind; for
 *    a module or library,
 *    what this process's last load on that device took (none yet: 0). A
 *    creation whose estimate does not fit is refused with
 *    CUDA_ERROR_OUT_OF_MEMORY and never reaches the driver; the reservation
 *    is a CAS on the group's count, so creations in several processes never
 *    pass on the same headroom. A guess is marked in the member's entry
 *    (guessing) before its memory is taken, so a member that finds the
 *    headroom gone finds the guess. An estimate that does
 *    not fit while other members' guesses are in flight (a group's first
 *    contexts on a GPU, more of them at once than guesses fit its limit)
 *    waits for them, asleep on a futex on their guessing count (they are
 *    trued up within their own driver call, however long it takes under
 *    load; a dead one is reaped), and tries again at what they measured:
 *    until one context is measured nothing says whether the group holds
 *    another, and neither refusing it nor letting it reach the driver on the
 *    headroom left would be right; with none in flight, the headroom left is
 *    reserved and the measurement decides; refused only where none is in
 *    flight and the figures say it does not fit (looked at twice: a guess
 *    that ended in between gave its memory back). The wait is bounded for a
 *    guesser that lives but never ends its call (stopped, hung):
 *    GPUSLICE_CONTEXT_WAIT_MS (default GS_CONTEXT_WAIT_MS, 30 s; one line
 *    when reached), after which the creation goes on as with none in flight;
 *  - trued up after the call to what the driver holds for it: NVML's used
 *    memory for this process on the device (its host pid; the whole process
 *    list however many processes the device has), before and after, less
 *    what the allocation hooks counted for this process in between (another
 *    thread's allocations and frees), so nothing is counted twice. Both figures
 *    are read at a quiet point (quiet.h), and the process's other memory calls
 *    are held off until the measured call returns. More than reserved and past
 *    the limit: the call is undone (the caller's part). A process whose host
 *    pid is not known (another pid namespace, no daemon to say it) is
 *    measured only while it is the device's only process. Without a
 *    per-process figure (NVML without it) the estimate stands as the charge:
 *    the device's used memory is never charged to one process.
 * Measured calls of one process run one at a time. None of this is on a hot
 * path.
 */
#ifndef GS_DRVMEM_H
#define GS_DRVMEM_H

#include "group.h"
#include "internal.h"
#include "ptrtab.h"

#define GS_DRV_CONTEXT_GUESS GS_SHM_CONTEXT_GUESS /* a context's reservation before any was measured on the node */

enum gs_drv_what { GS_DRV_CONTEXT, GS_DRV_LOAD };

struct gs_drv_probe {
	struct gs_group *g;
	struct gs_shm_proc *self; /* NULL: nothing reserved nor measured: the call passes uncounted */
	nvmlDevice_t nvml;        /* NULL: no figure: the reservation stands as the charge */
	enum gs_drv_what what;
	CUdevice dev;
	int slot;
	int held;     /* other threads' memory hooks held off (quiet.h) until gs_drv_end */
	int quiet;    /* and none was in flight when the figures were first read: the figure is the next estimate */
	int guessed;  /* reserved at GS_DRV_CONTEXT_GUESS (self->guessing counts it) */
	uint32_t pid; /* this process's host pid, as NVML lists it (0: unknown) */
	int alone;    /* host pid unknown: measured only as the device's only process */
	uint64_t reserved; /* reserved on the slot before the call */
	uint64_t drv;      /* the driver's figure before the call */
	uint64_t counted;  /* what this process had counted on the slot before the call */
};

/* Before the driver's call on device dev (-1: none; the call passes
 * uncounted): takes the measuring lock, reserves the estimate and reads the
 * figures. CUDA_SUCCESS, then one gs_drv_end follows; or
 * CUDA_ERROR_OUT_OF_MEMORY (the estimate does not fit: one line said, nothing
 * held): the caller returns it without calling the driver. errno preserved. */
GS_HIDDEN CUresult gs_drv_begin(CUdevice dev, enum gs_drv_what what, struct gs_drv_probe *p);
/* After the driver's call: if it succeeded (ok), charges what the driver
 * holds for it (the reservation trued up) as (kind, key) made in context ctx
 * (0: none; the context's teardown releases it with ctx's allocations), else
 * gives the reservation back. CUDA_SUCCESS, or CUDA_ERROR_OUT_OF_MEMORY past
 * the limit (one line said, nothing charged): the caller then undoes its
 * call. Releases the lock. errno preserved. */
GS_HIDDEN CUresult gs_drv_end(struct gs_drv_probe *p, int ok, enum gs_kind kind, uint64_t key, uint64_t ctx);

#endif /* GS_DRVMEM_H */
