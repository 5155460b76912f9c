/* SPDX-License-Identifier: Apache-2.0
 *
 * Bounds the launches a holder has outstanding (GPUSLICE_GATE_DEPTH), so that
 * handing over at the end of a slice waits for a few kernels, not for a deep
 * driver queue. Before each launch under a grant an event is recorded on the
 * launch's stream (it completes when the work before it does); the event
 * recorded `depth` launches earlier is waited for first. One ring of events in
 * the first context that launches; launches from other contexts are not bounded.
 */
#include <errno.h>

#include "gate_int.h"

#define GS_TRACK_MAX 64

static struct {
	pthread_mutex_t mu;
	CUcontext ctx;
	int broken;
	unsigned next;
	CUevent ev[GS_TRACK_MAX];
	unsigned char used[GS_TRACK_MAX];
} ring = {.mu = PTHREAD_MUTEX_INITIALIZER};

GS_HIDDEN void gs_gate_track_reset(void)
{
	pthread_mutex_init(&ring.mu, NULL);
	ring.ctx = NULL;
	ring.broken = 0;
	ring.next = 0;
	for (unsigned i = 0; i < GS_TRACK_MAX; i++)
		ring.used[i] = 0;
}

static int ring_init_locked(CUcontext cur, unsigned depth)
{
	gs_fn_cuEventCreate create = GS_REAL(cuEventCreate);
	if (create == NULL)
		return -1;
	for (unsigned i = 0; i < depth; i++)
		if (create(&ring.ev[i], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
			return -1;
	ring.ctx = cur;
	return 0;
}

GS_HIDDEN void gs_gate_track(CUstream stream)
{
	int saved = errno;
	unsigned depth = gs_gate_cfg()->depth;
	gs_fn_cuCtxGetCurrent getcur = GS_REAL(cuCtxGetCurrent);
	gs_fn_cuEventRecord record = GS_REAL(cuEventRecord);
	gs_fn_cuEventSynchronize wait = GS_REAL(cuEventSynchronize);
	CUcontext cur = NULL;
	if (depth == 0 || getcur == NULL || record == NULL || wait == NULL || getcur(&cur) != CUDA_SUCCESS ||
	    cur == NULL) {
		errno = saved;
		return;
	}
	pthread_mutex_lock(&ring.mu);
	if (!ring.broken && ring.ctx == NULL && ring_init_locked(cur, depth) != 0)
		ring.broken = 1;
	if (!ring.broken && ring.ctx == cur) {
		unsigned i = ring.next;
		if (ring.used[i])
			(void)wait(ring.ev[i]); /* an error: do not bound this launch */
		ring.used[i] = record(ring.ev[i], stream) == CUDA_SUCCESS;
		ring.next = (i + 1) % depth;
	}
	pthread_mutex_unlock(&ring.mu);
	errno = saved;
}

GS_HIDDEN CUresult gs_gate_track_launch(CUstream stream)
{
	if (gs_gate_now() >= atomic_load_explicit(&gs_gate_fast.end, memory_order_relaxed))
		return gs_gate_slow(stream);
	gs_gate_track(stream);
	return CUDA_SUCCESS;
}
