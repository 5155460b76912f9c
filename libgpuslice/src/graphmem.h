/* SPDX-License-Identifier: Apache-2.0
 *
 * Graph memory nodes (graphmem.c). The driver takes the physical memory of
 * an exec's allocation nodes from the device's graph memory pool when the
 * exec is instantiated, uploaded or launched (or while it runs), keeps it
 * bound to the exec between launches, and keeps what is unbound (an exec
 * destroyed, or idle at a trim) reserved until cuDeviceGraphMemTrim; an
 * allocation the graph does not free stays in use until freed. So:
 *  - an exec is "bound": its allocation nodes' bytes (the graph walked at
 *    instantiation, child graphs included) are counted from before its
 *    instantiation, and again before a launch or upload after a trim
 *    unbound it; refused at the limit with CUDA_ERROR_OUT_OF_MEMORY;
 *  - unbinding (the exec destroyed, or idle at cuDeviceGraphMemTrim: the
 *    event recorded after its last launch or upload has completed) moves its
 *    bytes to the device's "left" count, which then settles down to what the
 *    driver says its graph pool reserves (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
 *  - count = bound execs' bytes + left >= what the driver's graph pool holds
 *    or can come to hold without another reservation, and equals it when no
 *    exec with allocation nodes is alive (after a trim).
 * A captured cuMemAllocAsync is an allocation node: counted with its exec,
 * not as a pool block (gs_graph_capturing).
 */
#ifndef GS_GRAPHMEM_H
#define GS_GRAPHMEM_H

#include <stdatomic.h>

#include "hot.h"
#include "internal.h"

/* Per device of the graph's allocation nodes: bytes, and their reservation. */
struct gs_graph_op {
	int n;
	struct {
		CUdevice dev;
		int slot;
		uint64_t need;
	} d[16];
	uint64_t ctx;
};

/* Before an instantiation of g: walks it and reserves what its allocation
 * nodes need. CUDA_SUCCESS: call the driver, then gs_graph_instantiate_end
 * (upload: the stream of CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD, else NULL, and
 * whether it was asked); else the error to return without calling it. */
GS_HIDDEN CUresult gs_graph_instantiate_begin(CUgraph g, struct gs_graph_op *op);
GS_HIDDEN void gs_graph_instantiate_end(struct gs_graph_op *op, CUresult rc, CUgraphExec e, int upload, CUstream us);

/* cuGraphLaunch(_ptsz) / cuGraphUpload(_ptsz) through fn (ptsz: a NULL
 * stream is the per-thread one): an unbound exec with allocation nodes is
 * reserved again first. The launch hooks call it only when gs_hot.graph_execs
 * is not 0. */
typedef CUresult (*gs_graph_run_fn)(CUgraphExec e, CUstream s);
GS_HIDDEN CUresult gs_graph_run_slow(gs_graph_run_fn fn, CUgraphExec e, CUstream s, int ptsz);

/* cuGraphExecDestroy and cuDeviceGraphMemTrim through the driver, settled. */
GS_HIDDEN CUresult gs_graph_exec_destroy(gs_fn_cuGraphExecDestroy fn, CUgraphExec e);
GS_HIDDEN CUresult gs_graph_trim(gs_fn_cuDeviceGraphMemTrim fn, CUdevice dev);

/* After context ctx was torn down: its execs and their memory are gone. */
GS_HIDDEN void gs_graph_teardown(uint64_t ctx);

/* Whether stream s is capturing (a stream-ordered allocation or free on it
 * is a graph node, not an allocation). One relaxed load until a capture has
 * begun in this process. A _ptsz entry point passes GS_PT(s): its NULL is the
 * per-thread stream, which can be captured. */
GS_HIDDEN int gs_graph_capturing_slow(CUstream s);
static inline int gs_graph_capturing(CUstream s)
{
	return GS_UNLIKELY(atomic_load_explicit(&gs_hot.graph_capture, memory_order_relaxed) != 0) &&
	       gs_graph_capturing_slow(s);
}

#endif /* GS_GRAPHMEM_H */
