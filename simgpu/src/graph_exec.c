/* SPDX-License-Identifier: Apache-2.0
 * Graph objects, instantiation and launch. */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
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
	rc = sim_gmem_exec_new(e);
	if (rc != CUDA_SUCCESS) {
		graph_free(e);
		return rc;
	}
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
	if (rc == CUDA_SUCCESS && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) &&
	    (rc = sim_gmem_bind((struct sim_graph *)*e)) != CUDA_SUCCESS) {
		sim_gmem_exec_destroy((struct sim_graph *)*e);
		graph_free((struct sim_graph *)*e);
		*e = NULL;
	}
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
	if (rc == CUDA_SUCCESS)
		rc = sim_gmem_bind(e);
	for (size_t i = 0; rc == CUDA_SUCCESS && i < e->n; i++) {
		if (e->nodes[i].mem != SIM_NODE_RUN)
			continue;
		struct sim_item it = {.kind = e->nodes[i].kind,
				      .busy_ns = e->nodes[i].busy_ns,
				      .fn = e->nodes[i].fn,
				      .arg = e->nodes[i].arg};
		rc = sim_stream_submit(s, &it);
	}
	if (rc == CUDA_SUCCESS)
		sim_gmem_launched(e, s);
	return rc;
}

SIM_API CUresult cuGraphLaunch(CUgraphExec e, CUstream s)
{
	return graph_launch(e, s);
}

SIM_API CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s)
{
	return graph_launch(e, SIM_PT(s));
}

static CUresult graph_upload(CUgraphExec h, CUstream hs)
{
	struct sim_graph *e;
	struct sim_stream *s;
	CUresult rc = graph_get(h, SIM_MAGIC_EXEC, &e);

	if (rc == CUDA_SUCCESS)
		rc = sim_stream_resolve(hs, &s);
	return rc == CUDA_SUCCESS ? sim_gmem_bind(e) : rc;
}

SIM_API CUresult cuGraphUpload(CUgraphExec e, CUstream s)
{
	return graph_upload(e, s);
}

SIM_API CUresult cuGraphUpload_ptsz(CUgraphExec e, CUstream s)
{
	return graph_upload(e, SIM_PT(s));
}

SIM_API CUresult cuGraphExecDestroy(CUgraphExec h)
{
	struct sim_graph *e;
	CUresult rc = graph_get(h, SIM_MAGIC_EXEC, &e);

	if (rc == CUDA_SUCCESS) {
		sim_gmem_exec_destroy(e);
		graph_free(e);
	}
	return rc;
}

/* Memory nodes. Node handles point into their graph: valid until the next
 * node is added to it. Dependencies are not recorded (nodes run in order). */
static CUresult node_get(CUgraphNode h, struct sim_node **out)
{
	struct sim_node *n = (struct sim_node *)h;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (n == NULL || n->magic != SIM_MAGIC_NODE)
		return CUDA_ERROR_INVALID_VALUE;
	*out = n;
	return CUDA_SUCCESS;
}

static CUresult add_node(CUgraphNode *out, CUgraph h, const struct sim_node *n)
{
	struct sim_graph *g;
	CUresult rc = graph_get(h, SIM_MAGIC_GRAPH, &g);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (sim_graph_add(g, n) != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = (CUgraphNode)&g->nodes[g->n - 1];
	return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphAddMemAllocNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
					CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	struct sim_node n;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (out == NULL || p == NULL || (ndeps > 0 && deps == NULL) ||
	    p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_gmem_alloc_node(&n, p->poolProps.location.id, p->bytesize);
	if (rc == CUDA_SUCCESS)
		rc = add_node(out, g, &n);
	if (rc == CUDA_SUCCESS)
		p->dptr = n.ptr;
	return rc;
}

SIM_API CUresult cuGraphAddMemFreeNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
				       CUdeviceptr p)
{
	struct sim_alloc a;
	struct sim_node n = {.mem = SIM_NODE_FREE, .kind = SIM_ITEM_NOP, .ptr = p};
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (out == NULL || (ndeps > 0 && deps == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_alloc_find(p, &a) || a.kind != SIM_AK_GRAPH || a.base != p)
		return CUDA_ERROR_NOT_SUPPORTED; /* not an allocation node's address */
	return add_node(out, g, &n);
}

SIM_API CUresult cuGraphMemAllocNodeGetParams(CUgraphNode h, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	struct sim_node *n;
	CUresult rc = node_get(h, &n);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (p == NULL || n->mem != SIM_NODE_ALLOC)
		return CUDA_ERROR_INVALID_VALUE;
	memset(p, 0, sizeof(*p));
	p->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p->poolProps.location.id = n->ordinal;
	p->bytesize = n->size;
	p->dptr = n->ptr;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphMemFreeNodeGetParams(CUgraphNode h, CUdeviceptr *p)
{
	struct sim_node *n;
	CUresult rc = node_get(h, &n);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (p == NULL || n->mem != SIM_NODE_FREE)
		return CUDA_ERROR_INVALID_VALUE;
	*p = n->ptr;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphNodeGetType(CUgraphNode h, CUgraphNodeType *t)
{
	struct sim_node *n;
	CUresult rc = node_get(h, &n);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (t == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (n->mem != SIM_NODE_RUN)
		*t = n->mem == SIM_NODE_ALLOC ? CU_GRAPH_NODE_TYPE_MEM_ALLOC : CU_GRAPH_NODE_TYPE_MEM_FREE;
	else
		*t = n->kind == SIM_ITEM_KERNEL   ? CU_GRAPH_NODE_TYPE_KERNEL
		     : n->kind == SIM_ITEM_HOSTFN ? CU_GRAPH_NODE_TYPE_HOST
						  : CU_GRAPH_NODE_TYPE_EMPTY;
	return CUDA_SUCCESS;
}
