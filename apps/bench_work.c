/* SPDX-License-Identifier: Apache-2.0
 * The launch-bound workload of gs-bench-hooks (bench_work.h). Kernel lengths
 * come from a fixed pseudo-random sequence, the same for every run. */
#include <dlfcn.h>

#include "bench_work.h"

typedef CUresult (*stream_create_fn)(CUstream *, unsigned int);
typedef CUresult (*begin_fn)(CUstream, CUstreamCaptureMode);
typedef CUresult (*end_fn)(CUstream, CUgraph *);
typedef CUresult (*inst_fn)(CUgraphExec *, CUgraph, unsigned long long);

struct work_fns work_fns(void *lib)
{
	return (struct work_fns){(launch_fn)dlsym(lib, "cuLaunchKernel"), (graph_launch_fn)dlsym(lib, "cuGraphLaunch")};
}

static unsigned long long next_us(unsigned *seed, unsigned lo, unsigned hi)
{
	*seed = *seed * 1103515245u + 12345u;
	return lo + (*seed >> 8) % (hi - lo + 1);
}

static CUresult kernel(launch_fn launch, CUfunction fn, CUstream s, unsigned long long us)
{
	void *params[] = {&us};
	return launch(fn, 1, 1, 1, 32, 1, 1, 0, s, params, NULL);
}

int work_setup(struct work *w, void *cuda, CUfunction fn)
{
	stream_create_fn create = (stream_create_fn)dlsym(cuda, "cuStreamCreate");
	begin_fn begin = (begin_fn)dlsym(cuda, "cuStreamBeginCapture_v2");
	end_fn end = (end_fn)dlsym(cuda, "cuStreamEndCapture");
	inst_fn inst = (inst_fn)dlsym(cuda, "cuGraphInstantiateWithFlags");
	launch_fn launch = (launch_fn)dlsym(cuda, "cuLaunchKernel");
	CUgraph g;
	unsigned seed = 7;

	w->fn = fn;
	w->stream_sync = (CUresult(*)(CUstream))dlsym(cuda, "cuStreamSynchronize");
	if (!create || !begin || !end || !inst || !launch || !w->stream_sync)
		return -1;
	for (int i = 0; i < 4; i++)
		if (create(&w->s[i], CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
			return -1;
	if (begin(w->s[0], CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS)
		return -1;
	for (int i = 0; i < 20; i++)
		if (kernel(launch, fn, w->s[0], next_us(&seed, 1, 5)) != CUDA_SUCCESS)
			return -1;
	if (end(w->s[0], &g) != CUDA_SUCCESS || inst(&w->graph, g, 0) != CUDA_SUCCESS)
		return -1;
	return 0;
}

double work_run(const struct work *w, const struct work_fns *f, const struct cuapi *api)
{
	unsigned seed = 1;
	double t0 = bench_now_ns();

	for (int i = 0; i < 1200; i++)
		if (kernel(f->launch, w->fn, w->s[i % 4], next_us(&seed, 1, 20)) != CUDA_SUCCESS)
			return -1;
	if (api->CtxSynchronize() != CUDA_SUCCESS)
		return -1;
	for (int i = 0; i < 400; i++) {
		if (kernel(f->launch, w->fn, w->s[0], next_us(&seed, 1, 20)) != CUDA_SUCCESS)
			return -1;
		if (i % 10 == 9 && w->stream_sync(w->s[0]) != CUDA_SUCCESS)
			return -1;
	}
	for (int i = 0; i < 20; i++)
		if (f->graph_launch(w->graph, w->s[1]) != CUDA_SUCCESS)
			return -1;
	if (api->CtxSynchronize() != CUDA_SUCCESS)
		return -1;
	return bench_now_ns() - t0;
}

double work_short_run(const struct work *w, const struct work_fns *f)
{
	double t0 = bench_now_ns();

	for (int i = 0; i < SHORT_LAUNCHES; i++)
		if (kernel(f->launch, w->fn, w->s[0], 0) != CUDA_SUCCESS)
			return -1;
	if (w->stream_sync(w->s[0]) != CUDA_SUCCESS)
		return -1;
	return bench_now_ns() - t0;
}
