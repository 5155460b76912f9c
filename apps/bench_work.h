/* SPDX-License-Identifier: Apache-2.0
 * A launch-bound workload for gs-bench-hooks: thousands of tiny kernels on
 * several streams, with and without synchronization, and CUDA graphs. */
#ifndef GS_BENCH_WORK_H
#define GS_BENCH_WORK_H

#include "cuapi.h"

#define WORK_DESCRIPTION                                                                                    \
	"4 streams x 300 kernels of 1-20 us, then 400 with a stream sync every 10, then 20 graph launches " \
	"of 20 kernels of 1-5 us"

/* The shortest kernels back to back on one stream, then a stream synchronize:
 * the GPU drains the queue as fast as it is filled, so the launch path bounds
 * the throughput. */
#define SHORT_LAUNCHES 10000
#define SHORT_DESCRIPTION "10,000 kernels of 0 us on one stream, then a stream sync"

typedef CUresult (*launch_fn)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
			      unsigned int, unsigned int, CUstream, void **, void **);
typedef CUresult (*graph_launch_fn)(CUgraphExec, CUstream);

/* The gated entry points, from the driver or from libgpuslice. */
struct work_fns {
	launch_fn launch;
	graph_launch_fn graph_launch;
};

struct work {
	CUfunction fn;
	CUstream s[4];
	CUgraphExec graph;
	CUresult (*stream_sync)(CUstream);
};

struct work_fns work_fns(void *lib);
/* Streams and the graph (captured through the driver directly). */
int work_setup(struct work *w, void *cuda, CUfunction fn);
/* One run through f: ns, or -1. */
double work_run(const struct work *w, const struct work_fns *f, const struct cuapi *api);

/* One run of the shortest-kernel stream through f: ns, or -1. */
double work_short_run(const struct work *w, const struct work_fns *f);

double bench_now_ns(void);
double bench_quantile(double *v, int n, double q);

#endif /* GS_BENCH_WORK_H */
