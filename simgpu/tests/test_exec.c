/* SPDX-License-Identifier: Apache-2.0
 * Execution: asynchronous launches, events, stream order, one engine per
 * device shared by every process, graph capture and replay. Timing asserts
 * use lower bounds that hold only if the engine really serializes, with
 * generous upper bounds. */
#include <pthread.h>

#include "testutil.h"

#define KERNELS 10
#define KERNEL_US 20000ull /* 10 x 20 ms = 200 ms of device time per process */

static float elapsed(CUevent a, CUevent b)
{
	float ms = -1;

	CU_OK(cuEventElapsedTime(&ms, a, b));
	return ms;
}

static void test_async_and_events(CUfunction f)
{
	CUevent a, b, nt;
	CUstream s;
	float ms;

	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_OK(cuEventCreate(&a, CU_EVENT_DEFAULT));
	CU_OK(cuEventCreate(&b, CU_EVENT_DEFAULT));
	CU_OK(cuEventCreate(&nt, CU_EVENT_DISABLE_TIMING));
	CHECK_EQ(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE); /* never recorded */
	CU_OK(cuEventRecord(a, s));
	for (int i = 0; i < 3; i++)
		CU_OK(t_busy(f, 100000, s)); /* 3 x 100 ms, queued: the calls return at once */
	CU_OK(cuEventRecord(b, s));
	CU_OK(cuEventRecord(nt, s));
	CHECK_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
	CHECK_EQ(cuEventQuery(b), CUDA_ERROR_NOT_READY);
	CHECK_EQ(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_NOT_READY);
	CU_OK(cuEventSynchronize(b));
	CU_OK(cuEventQuery(b));
	ms = elapsed(a, b);
	CHECK(ms >= 299.0f && ms < 3000.0f);
	CU_OK(cuStreamSynchronize(s));
	CU_OK(cuStreamQuery(s));
	CHECK_EQ(cuEventElapsedTime(&ms, a, nt), CUDA_ERROR_INVALID_HANDLE);
	CU_OK(cuEventDestroy_v2(a));
	CU_OK(cuEventDestroy_v2(b));
	CU_OK(cuEventDestroy_v2(nt));
	CU_OK(cuStreamDestroy_v2(s));
}

static void record_order(void *arg)
{
	int *v = arg;

	int i = v[0];

	v[i + 1] = v[i + 11];
	v[0] = i + 1;
}

static void test_stream_order(CUfunction f)
{
	int v[32] = {0};
	CUstream s1, s2;
	CUevent e;

	for (int i = 0; i < 5; i++)
		v[11 + i] = i + 1; /* values the callbacks copy in order */
	CU_OK(cuStreamCreate(&s1, 0));
	CU_OK(cuStreamCreate(&s2, 0));
	CU_OK(cuEventCreate(&e, 0));
	for (int i = 0; i < 5; i++) {
		CU_OK(t_busy(f, 1000, s1));
		CU_OK(cuLaunchHostFunc(s1, record_order, v));
	}
	CU_OK(cuEventRecord(e, s1));
	CU_OK(cuStreamWaitEvent(s2, e, 0));
	CU_OK(cuStreamSynchronize(s2));
	CU_OK(cuCtxSynchronize());
	CHECK_EQ(v[0], 5);
	for (int i = 0; i < 5; i++)
		CHECK_EQ(v[1 + i], i + 1);
	/* More launches than the queue holds: the launch blocks, nothing is lost. */
	for (int i = 0; i < 3000; i++)
		CU_OK(t_busy(f, 0, s2));
	CU_OK(cuStreamSynchronize(s2));
	CU_OK(cuEventDestroy_v2(e));
	CU_OK(cuStreamDestroy_v2(s1));
	CU_OK(cuStreamDestroy_v2(s2));
}

static void test_launch_validation(CUfunction f)
{
	uint64_t us = 10;
	void *args[] = {&us};
	size_t size = sizeof(us);
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &us, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
	CUlaunchConfig cfg = {
		.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 256, .blockDimY = 1, .blockDimZ = 1};

	CHECK_EQ(cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_HANDLE);
	CU_OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra));
	CU_OK(cuLaunchKernelEx(&cfg, f, args, NULL));
	CU_OK(cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args));
	CU_OK(cuLaunchKernel_ptsz(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
	CU_OK(cuCtxSynchronize());
}

static void test_graph(CUfunction f)
{
	CUstream s;
	CUgraph g;
	CUgraphExec x;
	CUevent a, b;
	CUstreamCaptureStatus st;
	size_t n = 0;
	float ms;

	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_OK(cuEventCreate(&a, 0));
	CU_OK(cuEventCreate(&b, 0));
	CHECK_EQ(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CU_OK(cuStreamIsCapturing(s, &st));
	CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	CHECK_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
	CU_OK(cuEventRecord(a, s));
	for (int i = 0; i < 3; i++)
		CU_OK(t_busy(f, 50000, s)); /* recorded, not run */
	CU_OK(cuMemsetD8Async(0, 0, 0, s));
	CU_OK(cuStreamEndCapture(s, &g));
	CU_OK(cuStreamIsCapturing(s, &st));
	CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE);
	CU_OK(cuGraphGetNodes(g, NULL, &n));
	CHECK_EQ(n, 4);
	CU_OK(cuGraphInstantiateWithFlags(&x, g, 0));
	CU_OK(cuEventRecord(a, s));
	CU_OK(cuGraphLaunch(x, s));
	CU_OK(cuGraphLaunch(x, s));
	CU_OK(cuEventRecord(b, s));
	CU_OK(cuStreamSynchronize(s));
	ms = elapsed(a, b);
	CHECK(ms >= 299.0f && ms < 3000.0f); /* 2 replays x 3 x 50 ms through the engine */
	CU_OK(cuGraphExecDestroy(x));
	CU_OK(cuGraphDestroy(g));

	/* Synchronizing a capturing stream is illegal and invalidates the capture. */
	CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
	CU_OK(t_busy(f, 10, s));
	CHECK_EQ(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	CHECK_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
	CHECK(g == NULL);
	CU_OK(cuEventDestroy_v2(a));
	CU_OK(cuEventDestroy_v2(b));
	CU_OK(cuStreamDestroy_v2(s));
}

/* Child: runs KERNELS busy kernels and syncs. */
static int child_busy(void)
{
	CUfunction f;

	t_primary(0);
	f = t_busy_fn();
	for (int i = 0; i < KERNELS; i++)
		if (t_busy(f, KERNEL_US, NULL) != CUDA_SUCCESS)
			return 1;
	return cuCtxSynchronize() == CUDA_SUCCESS ? 0 : 2;
}

static void test_engine_across_processes(void)
{
	const double one = KERNELS * KERNEL_US / 1000.0; /* ms of device time per process */
	double t0 = t_now_ms(), t1, t2;
	pid_t a, b;

	CHECK_EQ(t_run("busy", "-"), 0);
	t1 = t_now_ms() - t0;
	t0 = t_now_ms();
	a = t_spawn("busy", "-");
	b = t_spawn("busy", "-");
	CHECK_EQ(t_wait(a), 0);
	CHECK_EQ(t_wait(b), 0);
	t2 = t_now_ms() - t0;
	printf("     engine: one process %.0f ms, two processes %.0f ms (device time %.0f ms each)\n", t1, t2, one);
	CHECK(t1 >= one * 0.98);
	CHECK(t2 >= 2 * one * 0.98); /* the two could only overlap if the engine were not shared */
	CHECK(t2 < 2 * one + 5000);
}

static void test_utilization(CUfunction f)
{
	nvmlDevice_t h;
	nvmlUtilization_t u;

	MUST(nvmlInit_v2() == NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(0, &h), NVML_SUCCESS);
	for (int i = 0; i < 12; i++)
		CU_OK(t_busy(f, 100000, NULL));
	CU_OK(cuCtxSynchronize());
	CHECK_EQ(nvmlDeviceGetUtilizationRates(h, &u), NVML_SUCCESS);
	CHECK(u.gpu >= 75 && u.gpu <= 100); /* the last second was busy */
	CHECK_EQ(nvmlShutdown(), NVML_SUCCESS);
}

struct thread_arg {
	CUfunction f;
	CUcontext ctx;
	int rc;
};

static void *ctx_thread(void *p)
{
	struct thread_arg *a = p;

	a->rc = cuCtxSetCurrent(a->ctx);
	for (int i = 0; i < KERNELS && a->rc == CUDA_SUCCESS; i++)
		a->rc = t_busy(a->f, KERNEL_US, NULL);
	if (a->rc == CUDA_SUCCESS)
		a->rc = cuCtxSynchronize();
	return NULL;
}

static void test_engine_across_contexts(CUfunction f)
{
	struct thread_arg args[2];
	pthread_t th[2];
	CUcontext prev;
	double t0;

	CU_OK(cuCtxGetCurrent(&prev));
	for (int i = 0; i < 2; i++) {
		args[i].f = f;
		args[i].rc = -1;
		CU_OK(cuCtxCreate_v2(&args[i].ctx, 0, 0));
		CU_OK(cuCtxPopCurrent_v2(NULL));
	}
	t0 = t_now_ms();
	for (int i = 0; i < 2; i++)
		MUST(pthread_create(&th[i], NULL, ctx_thread, &args[i]) == 0);
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		CHECK_EQ(args[i].rc, CUDA_SUCCESS);
		CU_OK(cuCtxDestroy_v2(args[i].ctx));
	}
	CHECK(t_now_ms() - t0 >= 2 * KERNELS * KERNEL_US / 1000.0 * 0.98);
	CU_OK(cuCtxSetCurrent(prev));
}

/* Child: holds the engine with a 10 s kernel, then reports (and gets killed). */
static int child_hog(void)
{
	CUfunction f;

	t_primary(0);
	f = t_busy_fn();
	if (t_busy(f, 10000000, NULL) != CUDA_SUCCESS)
		return 1;
	usleep(200 * 1000); /* the worker has started it */
	if (write(1, "R", 1) != 1)
		return 2;
	for (;;)
		pause();
}

static void test_engine_holder_killed(CUfunction f)
{
	int fds[2];
	char c;
	pid_t pid;
	double t0;

	MUST(pipe(fds) == 0);
	pid = fork();
	MUST(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], 1);
		setenv("SIM_TEST_CHILD", "1", 1);
		execl("/proc/self/exe", "simtest-child", "child", "hog", "-", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	MUST(read(fds[0], &c, 1) == 1);
	close(fds[0]);
	kill(pid, SIGKILL); /* dies holding the engine */
	CHECK_EQ(t_wait(pid), 128 + SIGKILL);
	t0 = t_now_ms();
	CU_OK(t_busy(f, 10000, NULL));
	CU_OK(cuCtxSynchronize());
	CHECK(t_now_ms() - t0 < 5000); /* not the 10 s the dead holder had asked for */
}

static int child_after_fork(void)
{
	pid_t pid = fork();
	int n;

	MUST(pid >= 0);
	if (pid == 0)
		_exit(cuDeviceGetCount(&n) == CUDA_ERROR_NOT_INITIALIZED ? 0 : 1);
	return t_wait(pid);
}

int main(int argc, char **argv)
{
	CUfunction f;

	if (argc == 4 && strcmp(argv[1], "child") == 0)
		return strcmp(argv[2], "hog") == 0 ? child_hog() : child_busy();
	t_private_state("exec");
	t_primary(0);
	f = t_busy_fn();
	test_async_and_events(f);
	test_stream_order(f);
	test_launch_validation(f);
	test_graph(f);
	test_engine_across_processes();
	test_utilization(f);
	test_engine_across_contexts(f);
	test_engine_holder_killed(f);
	CHECK_EQ(child_after_fork(), 0); /* CUDA is unusable in a forked child, as on the real driver */
	return t_done("launches, events, stream order, shared engine, graphs");
}
