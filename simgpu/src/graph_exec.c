/* SPDX-License-Identifier: Apache-2.0
 * Graph objects, instantiation and launch. */
#include <stdlib.h>
#include <string.h>

#include "cuapi.h"
#include "sim.h"

static CUresult graph_get(void *h, uint32_t magic, struct sim_graph **out)
{
	struct sim_graph *g = h;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (g == NULL || g->magic != magic)
		return CUDA_ERROR_INVALID_VALUE;
	*out = g;
	return CUDA_SUCCESS;
}

static void graph_free(struct sim_graph *g)
{
	g->magic = 0;
	free(g->nodes);
	free(g);
}

SIM_API CUresult cuGraphCreate(CUgraph *out, unsigned int flags)
{
	CUresult rc = sim_check_init();
	struct sim_graph *g;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (out == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	g = calloc(1, sizeof(*g));
	if (g == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	g->magic = SIM_MAGIC_GRAPH;
	*out = (CUgraph)g;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphDestroy(CUgraph h)
{
	struct sim_graph *g;
	CUresult rc = graph_get(h, SIM_MAGIC_GRAPH, &g);

	if (rc == CUDA_SUCCESS)
		graph_free(g);
	return rc;
}

SIM_API CUresult cuGraphGetNodes(CUgraph h, CUgraphNode *nodes, size_t *n)
{
	struct sim_graph *g;
	CUresult rc = graph_get(h, SIM_MAGIC_GRAPH, &g);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (n == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (nodes != NULL) {
		for (size_t i = 0; i < *n; i++)
			nodes[i] = i < g->n ? (CUgraphNode)&g->nodes[i] : NULL;
	}
	*n = g->n;
	return CUDA_SUCCESS;
}

static CUresult instantiate(CUgraphExec *out, CUgraph h, unsigned long long flags)
{
	struct sim_graph *g, *e;
	CUresult rc = graph_get(h, SIM_MAGIC_GRAPH, &g);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (out == NULL || (flags & ~0xfull))
		return CUDA_ERROR_INVALID_VALUE;
	e = calloc(1, sizeof(*e));
	if (e == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (g->n > 0 && (e->nodes = malloc(g->n * sizeof(*e->nodes))) == NULL) {
		free(e);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (g->n > 0)
		memcpy(e->nodes, g->nodes, g->n * sizeof(*e->nodes));
	e->n = e->cap = g->n;
	e->magic = SIM_MAGIC_EXEC;
	*out = (CUgraphExec)e;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphInstantiate(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log, size_t len)
{
	if (err != NULL)
		*err = NULL;
	if (log != NULL && len > 0)
		log[0] = '\0';
	return instantiate(e, g, 0);
}

SIM_API CUresult cuGraphInstantiate_v2(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log, size_t len)
{
	if (err != NULL)
		*err = NULL;
	if (log != NULL && len > 0)
		log[0] = '\0';
	return instantiate(e, g, 0);
}

SIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags)
{
	return instantiate(e, g, flags);
}

static CUresult instantiate_params(CUgraphExec *e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	CUresult rc;

	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	rc = instantiate(e, g, p->flags);
	p->hErrNode_out = NULL;
	p->result_out = rc == CUDA_SUCCESS ? 0 : 1; /* CUDA_GRAPH_INSTANTIATE_SUCCESS / _ERROR */
	return rc;
}

SIM_API CUresult cuGraphInstantiateWithParams(CUgraphExec *e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	return instantiate_params(e, g, p);
}

SIM_API CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	return instantiate_params(e, g, p);
}

static CUresult graph_launch(CUgraphExec h, CUstream hs)
{
	struct sim_graph *e;
	struct sim_stream *s;
	CUresult rc = graph_get(h, SIM_MAGIC_EXEC, &e);

	if (rc == CUDA_SUCCESS)
		rc = sim_stream_resolve(hs, &s);
	for (size_t i = 0; rc == CUDA_SUCCESS && i < e->n; i++) {
		struct sim_item it = {.kind = e->nodes[i].kind,
				      .busy_ns = e->nodes[i].busy_ns,
				      .fn = e->nodes[i].fn,
				      .arg = e->nodes[i].arg};
		rc = sim_stream_submit(s, &it);
	}
	return rc;
}

SIM_API CUresult cuGraphLaunch(CUgraphExec e, CUstream s)
{
	return graph_launch(e, s);
}

SIM_API CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s)
{
	return graph_launch(e, s);
}

static CUresult graph_upload(CUgraphExec h, CUstream hs)
{
	struct sim_graph *e;
	struct sim_stream *s;
	CUresult rc = graph_get(h, SIM_MAGIC_EXEC, &e);

	return rc == CUDA_SUCCESS ? sim_stream_resolve(hs, &s) : rc;
}

SIM_API CUresult cuGraphUpload(CUgraphExec e, CUstream s)
{
	return graph_upload(e, s);
}

SIM_API CUresult cuGraphUpload_ptsz(CUgraphExec e, CUstream s)
{
	return graph_upload(e, s);
}

SIM_API CUresult cuGraphExecDestroy(CUgraphExec h)
{
	struct sim_graph *e;
	CUresult rc = graph_get(h, SIM_MAGIC_EXEC, &e);

	if (rc == CUDA_SUCCESS)
		graph_free(e);
	return rc;
}
