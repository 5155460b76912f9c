/* SPDX-License-Identifier: Apache-2.0
 *
 * Graph memory hooks (graphmem.h): instantiation reserves what the graph's
 * allocation nodes need, an upload reserves it again after a trim, destroying
 * an exec and cuDeviceGraphMemTrim settle the count on what the driver's
 * graph pool still reserves. A capture's beginning turns on the check that
 * makes stream-ordered allocations on capturing streams graph nodes.
 */
#include <errno.h>

#include "graphmem.h"
#include "quiet.h"

/* Instantiation: walk and reserve, call, record (upload: CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD). */
#define GS_INSTANTIATE_BODY(name, graph, call, out, upload, upload_stream)                                           \
	GS_QUIET_WINDOW;                                                                                             \
	gs_fn_##name fn_ = GS_REAL(name);                                                                            \
	if (fn_ == NULL)                                                                                             \
		return CUDA_ERROR_NOT_FOUND;                                                                         \
	int errno_ = errno;                                                                                          \
	struct gs_graph_op op_;                                                                                      \
	CUresult rc_ = gs_graph_instantiate_begin((graph), &op_);                                                    \
	if (rc_ == CUDA_SUCCESS) {                                                                                   \
		errno = errno_;                                                                                      \
		rc_ = call;                                                                                          \
		errno_ = errno;                                                                                      \
		gs_graph_instantiate_end(&op_, rc_, rc_ == CUDA_SUCCESS ? *(out) : NULL, (upload), (upload_stream)); \
	}                                                                                                            \
	errno = errno_;                                                                                              \
	return rc_

GS_EXPORT CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
				      char *logBuffer, size_t bufferSize)
{
	GS_INSTANTIATE_BODY(cuGraphInstantiate, hGraph, fn_(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize),
			    phGraphExec, 0, NULL);
}

GS_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
					 char *logBuffer, size_t bufferSize)
{
	GS_INSTANTIATE_BODY(cuGraphInstantiate_v2, hGraph, fn_(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize),
			    phGraphExec, 0, NULL);
}

GS_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
	GS_INSTANTIATE_BODY(cuGraphInstantiateWithFlags, hGraph, fn_(phGraphExec, hGraph, flags), phGraphExec, 0, NULL);
}

#define UPLOADS(p) ((p) != NULL && ((p)->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) != 0)

GS_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
						CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	GS_INSTANTIATE_BODY(cuGraphInstantiateWithParams, hGraph, fn_(phGraphExec, hGraph, instantiateParams),
			    phGraphExec, UPLOADS(instantiateParams),
			    UPLOADS(instantiateParams) ? instantiateParams->hUploadStream : NULL);
}

GS_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
						     CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	CUstream us = UPLOADS(instantiateParams) ? instantiateParams->hUploadStream : NULL;
	GS_INSTANTIATE_BODY(cuGraphInstantiateWithParams_ptsz, hGraph, fn_(phGraphExec, hGraph, instantiateParams),
			    phGraphExec, UPLOADS(instantiateParams), us == NULL ? CU_STREAM_PER_THREAD : us);
}

static CUresult upload(gs_graph_run_fn fn, CUgraphExec e, CUstream s, int ptsz)
{
	GS_QUIET_WINDOW;
	if (fn == NULL)
		return CUDA_ERROR_NOT_FOUND;
	if (atomic_load_explicit(&gs_hot.graph_execs, memory_order_relaxed) == 0)
		return fn(e, s);
	return gs_graph_run_slow(fn, e, s, ptsz);
}

GS_EXPORT CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
	return upload(GS_REAL(cuGraphUpload), hGraphExec, hStream, 0);
}

GS_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	return upload(GS_REAL(cuGraphUpload_ptsz), hGraphExec, hStream, 1);
}

GS_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	GS_QUIET_WINDOW;
	gs_fn_cuGraphExecDestroy fn = GS_REAL(cuGraphExecDestroy);
	return fn == NULL ? CUDA_ERROR_NOT_FOUND : gs_graph_exec_destroy(fn, hGraphExec);
}

GS_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device)
{
	GS_QUIET_WINDOW;
	gs_fn_cuDeviceGraphMemTrim fn = GS_REAL(cuDeviceGraphMemTrim);
	return fn == NULL ? CUDA_ERROR_NOT_FOUND : gs_graph_trim(fn, device);
}

/* Set before the capture begins: from then on, stream-ordered allocations ask
 * whether their stream is capturing. */
#define CAPTURE_HOOK(name, params, args)                                               \
	GS_EXPORT CUresult name params                                                 \
	{                                                                              \
		gs_fn_##name fn = GS_REAL(name);                                       \
		if (fn == NULL)                                                        \
			return CUDA_ERROR_NOT_FOUND;                                   \
		atomic_store_explicit(&gs_hot.graph_capture, 1, memory_order_relaxed); \
		return fn args;                                                        \
	}

CAPTURE_HOOK(cuStreamBeginCapture, (CUstream hStream), (hStream))
CAPTURE_HOOK(cuStreamBeginCapture_ptsz, (CUstream hStream), (hStream))
CAPTURE_HOOK(cuStreamBeginCapture_v2, (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode))
CAPTURE_HOOK(cuStreamBeginCapture_v2_ptsz, (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode))
CAPTURE_HOOK(cuStreamBeginCaptureToGraph,
	     (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData,
	      size_t numDependencies, CUstreamCaptureMode mode),
	     (hStream, hGraph, dependencies, dependencyData, numDependencies, mode))
CAPTURE_HOOK(cuStreamBeginCaptureToGraph_ptsz,
	     (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData,
	      size_t numDependencies, CUstreamCaptureMode mode),
	     (hStream, hGraph, dependencies, dependencyData, numDependencies, mode))
