/* SPDX-License-Identifier: Apache-2.0
 * The per-thread default stream, as cuda.h states it: CU_STREAM_PER_THREAD
 * (and NULL in the _ptsz/_ptds entry points) is the calling thread's own
 * stream, distinct from the legacy stream; it can be captured (the legacy
 * stream cannot); work on the legacy stream while a blocking stream of the
 * context captures is refused (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) and
 * invalidates that capture; cuStreamBeginCaptureToGraph captures into a given
 * graph. */
#include <pthread.h>

#include "testutil.h"

static CUfunction fn;

static void *other_thread(void *arg)
{
	unsigned long long *id = arg;

	CU_MUST(cuCtxSetCurrent(t_primary(0)));
	CU_OK(cuStreamGetId(CU_STREAM_PER_THREAD, id));
	return NULL;
}

static void test_identity(void)
{
	unsigned long long legacy = 0, pt = 0, ptsz = 0, again = 0, other = 0;
	pthread_t th;

	CU_OK(cuStreamGetId(NULL, &legacy));
	CU_OK(cuStreamGetId(CU_STREAM_PER_THREAD, &pt));
	CU_OK(cuStreamGetId_ptsz(NULL, &ptsz));
	CU_OK(cuStreamGetId(CU_STREAM_PER_THREAD, &again));
	CHECK(legacy != pt);
	CHECK_EQ(pt, ptsz);
	CHECK_EQ(pt, again);
	MUST(pthread_create(&th, NULL, other_thread, &other) == 0);
	pthread_join(th, NULL);
	CHECK(other != 0 && other != pt && other != legacy);
}

static void test_capture(void)
{
	CUgraph g;
	CUstreamCaptureStatus st;
	CUevent ev;
	size_t n = 0;

	CU_OK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
	CHECK_EQ(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	CHECK_EQ(cuStreamBeginCapture_v2(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL),
		 CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	CU_OK(cuStreamBeginCapture_v2_ptsz(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CU_OK(cuStreamIsCapturing(CU_STREAM_PER_THREAD, &st));
	CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	CU_OK(t_busy(fn, 10, CU_STREAM_PER_THREAD));
	void *args[] = {&(uint64_t){10}};
	CU_OK(cuLaunchKernel_ptsz(fn, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL)); /* the per-thread stream */
	CU_OK(cuEventRecord(ev, CU_STREAM_PER_THREAD));                        /* orders the capture */
	CU_OK(cuStreamEndCapture_ptsz(NULL, &g));
	CU_OK(cuGraphGetNodes(g, NULL, &n));
	CHECK_EQ(n, 2);
	CU_OK(cuGraphDestroy(g));

	/* The legacy stream while the per-thread stream captures: an implicit
	 * dependency, refused, and the capture is invalidated. */
	CU_OK(cuStreamBeginCapture_v2(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CHECK_EQ(cuEventRecord(ev, NULL), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
	CU_OK(cuStreamIsCapturing(CU_STREAM_PER_THREAD, &st));
	CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
	CHECK_EQ(cuStreamEndCapture(CU_STREAM_PER_THREAD, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
	CU_OK(cuEventRecord(ev, NULL)); /* no capture now */
	CU_OK(cuEventSynchronize(ev));
	CU_OK(cuEventDestroy_v2(ev));
}

static void test_non_blocking(void)
{
	CUstream s;
	CUgraph g;
	CUevent ev;

	/* A non-blocking stream does not synchronize with the legacy stream. */
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_OK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
	CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
	CU_OK(cuEventRecord(ev, NULL));
	CU_OK(t_busy(fn, 10, s));
	CU_OK(cuStreamEndCapture(s, &g));
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuEventSynchronize(ev));
	CU_OK(cuEventDestroy_v2(ev));
	CU_OK(cuStreamDestroy_v2(s));
}

static void test_to_graph(void)
{
	CUstream s;
	CUgraph g, out = NULL;
	size_t n = 0;

	CU_OK(cuStreamCreate(&s, 0));
	CU_OK(cuGraphCreate(&g, 0));
	CU_OK(cuStreamBeginCaptureToGraph(s, g, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CU_OK(t_busy(fn, 10, s));
	CU_OK(cuStreamEndCapture(s, &out));
	CHECK(out == g);
	CU_OK(cuStreamBeginCaptureToGraph_ptsz(NULL, g, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CU_OK(t_busy(fn, 10, CU_STREAM_PER_THREAD));
	CU_OK(cuStreamEndCapture_ptsz(NULL, &out));
	CU_OK(cuGraphGetNodes(g, NULL, &n));
	CHECK_EQ(n, 2);
	/* An invalidated capture leaves the caller's graph alone. */
	CU_OK(cuStreamBeginCaptureToGraph(s, g, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CHECK_EQ(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	CHECK_EQ(cuStreamEndCapture(s, &out), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
	CU_OK(cuGraphGetNodes(g, NULL, &n));
	CHECK_EQ(n, 2);
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuStreamDestroy_v2(s));
}

int main(void)
{
	t_private_state("ptstream");
	t_primary(0);
	fn = t_busy_fn();
	test_identity();
	test_capture();
	test_non_blocking();
	test_to_graph();
	CU_OK(cuCtxSynchronize());
	return t_done("per-thread default stream and its capture");
}
