/* SPDX-License-Identifier: Apache-2.0
 * Process-local state of the simulated libcuda.so.1. Internal: hidden symbols. */
#ifndef GPUSLICE_SIM_H
#define GPUSLICE_SIM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpuslice/cuda_abi.h"
#include "mps.h"
#include "state.h"

#define SIM_API __attribute__((visibility("default")))
#define SIM_DRIVER_VERSION 12060
#define SIM_QUEUE_LEN 1024
#define SIM_CTX_STACK 32
#define SIM_MAX_BUSY_US (3600ull * 1000000ull)
#define SIM_GRANULARITY (2ull << 20)

enum sim_magic {
	SIM_MAGIC_CTX = 0x43545853,
	SIM_MAGIC_STREAM = 0x53545253,
	SIM_MAGIC_EVENT = 0x45564e53,
	SIM_MAGIC_MODULE = 0x4d4f4453,
	SIM_MAGIC_FUNC = 0x46554e53,
	SIM_MAGIC_GRAPH = 0x47525053,
	SIM_MAGIC_EXEC = 0x47455853,
	SIM_MAGIC_POOL = 0x504f4f53,
	SIM_MAGIC_ARRAY = 0x41525253,
	SIM_MAGIC_LIB = 0x4c494253,
	SIM_MAGIC_NODE = 0x4e4f4453,
};

enum sim_item_kind { SIM_ITEM_KERNEL, SIM_ITEM_EVENT, SIM_ITEM_HOSTFN, SIM_ITEM_WAIT, SIM_ITEM_NOP };

struct sim_event;
struct sim_queue;

struct sim_item {
	enum sim_item_kind kind;
	uint64_t busy_ns;
	struct sim_event *ev; /* EVENT: holds a reference */
	void (*fn)(void *);   /* HOSTFN */
	void *arg;
	struct sim_queue *wait_q; /* WAIT: until wait_q has completed wait_upto */
	uint64_t wait_upto;
};

/* One in-order work queue and worker thread per context. Sequence numbers:
 * push returns n (1-based); the item is complete once done >= n. Producers
 * serialize on mu; the worker reads the ring without it and takes mu only to
 * sleep or to wake someone (the *_waiters / worker_idle flags, seq_cst). */
struct sim_queue {
	pthread_mutex_t mu;
	pthread_cond_t cv_work, cv_space, cv_done;
	struct sim_item ring[SIM_QUEUE_LEN];
	_Atomic uint64_t tail; /* items pushed (written under mu) */
	_Atomic uint64_t head; /* items taken by the worker */
	_Atomic uint64_t done; /* items completed */
	_Atomic int space_waiters, done_waiters;
	_Atomic bool worker_idle;
	bool stop, started; /* stop: under mu */
	int dev;
	uint64_t mps_end; /* worker only: the simulated end of its last MPS kernel */
	pthread_t thread;
};

struct sim_stream;

/* cuCtxSetLimit / cuCtxGetLimit: CU_LIMIT_STACK_SIZE .. CU_LIMIT_PERSISTING_L2_CACHE_SIZE,
 * and what a context starts with (the driver's defaults). */
#define SIM_LIMITS 7
extern const size_t sim_limit_defaults[SIM_LIMITS] SIM_HIDDEN;

struct sim_ctx {
	uint32_t magic;
	int dev;     /* simulator device index */
	int ordinal; /* CUDA ordinal as seen by this process */
	unsigned flags;
	bool primary, active;
	int refs; /* primary: retain count */
	unsigned long long id;
	size_t limits[SIM_LIMITS];
	size_t limits_charged; /* device bytes the limits hold above the defaults (ctx_ops.c) */
	uint64_t own_charged;  /* device bytes the context itself holds (GPUSLICE_SIM_CONTEXT_MEMORY) */
	struct sim_queue q;
	struct sim_stream *def;        /* the NULL / legacy stream */
	struct sim_stream *pt;         /* per-thread default streams (stream.c), under sim_g.mu */
	unsigned long long gen;        /* activation: per-thread streams of an earlier one are gone */
	_Atomic int blocking_captures; /* captures on blocking streams (the legacy stream syncs with them) */
	_Atomic uint64_t implicit;     /* legacy-stream uses that invalidated those captures */
	struct sim_ctx *next;          /* registry */
};

enum sim_node_mem { SIM_NODE_RUN, SIM_NODE_ALLOC, SIM_NODE_FREE };

struct sim_node {
	uint32_t magic;
	enum sim_node_mem mem;   /* RUN: an item to run, else a memory node (graph_mem.c) */
	enum sim_item_kind kind; /* RUN: KERNEL, NOP or HOSTFN */
	uint64_t busy_ns;
	void (*fn)(void *);
	void *arg;
	CUdeviceptr ptr; /* ALLOC, FREE: the graph allocation */
	uint64_t size;   /* ALLOC */
	int dev, ordinal;
	bool escapes; /* ALLOC in an exec: not freed by the same graph */
};

struct sim_graph {
	uint32_t magic;
	size_t n, cap;
	struct sim_node *nodes;
	/* An exec's graph memory (graph_mem.c, under its lock): */
	bool gmem;            /* has memory nodes */
	bool gbound;          /* gneed bytes of the device's graph pool are bound to it */
	int gdev;             /* device of its allocation nodes */
	uint64_t gneed;       /* bytes of its allocation nodes */
	struct sim_queue *gq; /* its last launch: done once gq->done >= gseq */
	uint64_t gseq;
	struct sim_graph *gnext; /* execs with memory nodes */
};

struct sim_stream {
	uint32_t magic;
	struct sim_ctx *ctx;
	unsigned flags;
	int prio;
	unsigned long long id;
	_Atomic uint64_t last; /* sequence of the last item pushed for this stream */
	pthread_mutex_t cap_mu;
	_Atomic bool capturing;
	struct sim_graph *capture; /* non-NULL while capturing, under cap_mu */
	bool cap_invalid;
	int cap_mode;
	unsigned long long cap_id;
	bool cap_owned;             /* the capture's graph was made by BeginCapture (not ...ToGraph) */
	bool cap_blocking;          /* counted in ctx->blocking_captures */
	uint64_t cap_implicit;      /* ctx->implicit at the capture's start */
	struct sim_stream *pt_next; /* per-thread stream: the context's next one */
};

struct sim_event {
	uint32_t magic;
	unsigned flags;
	_Atomic int refs;
	pthread_mutex_t mu;
	struct sim_queue *q; /* last record: queue and sequence (0: never) */
	uint64_t seq;
	uint64_t time_ns;  /* when the record completed */
	uint64_t time_seq; /* the sequence time_ns belongs to */
};

struct sim_func {
	uint32_t magic;
	bool busy; /* gpuslice_sim_busy */
	int max_dyn_smem;
	void *owner; /* module or library */
	char name[128];
	struct sim_func *next;
};

struct sim_module {
	uint32_t magic;
	pthread_mutex_t mu;
	int dev;             /* device its globals are charged on */
	uint64_t charged;    /* bytes of its .global variables (ptx.c) */
	struct sim_ctx *ctx; /* the context a module (not a library) was loaded in */
	struct sim_func *funcs;
	struct sim_module *next;
};

/* A context went: the globals of the modules loaded in it go with it. */
SIM_HIDDEN void sim_modules_ctx_gone(struct sim_ctx *c);
/* Device bytes a PTX image's .global variables take (0 for other images). */
SIM_HIDDEN uint64_t sim_ptx_globals(const void *image);

/* Process-wide state (one instance, sim_g). */
struct sim_global {
	pthread_mutex_t mu;
	_Atomic bool inited;
	bool forked;
	CUresult init_rc;
	int32_t pid;       /* as the driver names it (sim_self_pid) */
	int32_t local_pid; /* getpid() at init: a forked child differs */
	uint64_t start;
	struct sim_state *st;
	int slot;                 /* process table slot, -1 until the first context */
	struct sim_access access; /* device node check (GPUSLICE_SIM_DEVNODES) */
	uint64_t ctx_mem;         /* device bytes each context takes (GPUSLICE_SIM_CONTEXT_MEMORY) */
	uint64_t copy_bps;        /* device-side copy bandwidth, bytes/s (GPUSLICE_SIM_COPY_GBPS) */
	uint64_t
		latency_ns; /* cuMemAlloc's and context creation's time before they take memory (GPUSLICE_SIM_LATENCY_US) */
	/* CUDA ordinal -> simulator device. Append-only: vis[i] is written under
	 * mu before nvis (release) covers it, so readers need no lock. */
	_Atomic int nvis;
	int vis[SIM_MAX_DEVICES];
	int vis_ci[SIM_MAX_DEVICES]; /* its MIG compute instance id, -1 for a whole GPU */
	struct sim_ctx *primary[SIM_MAX_DEVICES];
	struct sim_ctx *ctxs; /* registry of live explicit + primary contexts */
	_Atomic unsigned long long next_id;
};

extern struct sim_global sim_g SIM_HIDDEN;

/* Common checks. */
SIM_HIDDEN CUresult sim_check_init(void);
SIM_HIDDEN int sim_device(CUdevice ordinal); /* simulator index or -1 */
/* A MIG device's compute instance id (by ordinal / by simulator index), -1 for a whole GPU. */
SIM_HIDDEN int sim_device_ci(CUdevice ordinal);
SIM_HIDDEN int sim_dev_ci(int dev);
/* Appends devices that became accessible (GPUSLICE_SIM_DEVNODES); returns nvis. */
SIM_HIDDEN int sim_rescan_devices(void);

/* Contexts (ctx.c). */
SIM_HIDDEN struct sim_ctx *sim_current_ctx(void);
SIM_HIDDEN CUresult sim_ctx_get(struct sim_ctx **out);
/* Waits GPUSLICE_SIM_LATENCY_US (no lock held): a driver call's own time. */
SIM_HIDDEN void sim_latency(void);
SIM_HIDDEN bool sim_ctx_valid(struct sim_ctx *c);
SIM_HIDDEN CUresult sim_register_process(int dev);
/* op 0 push, 1 pop, 2 set current. */
SIM_HIDDEN CUresult sim_ctx_stack_op(int op, struct sim_ctx *in, struct sim_ctx **out);
/* A context's teardown: gives back what its limits held, back to the defaults
 * (ctx_limit.c). Called with sim_g.mu held. */
SIM_HIDDEN void sim_ctx_limits_free(struct sim_ctx *c);

/* Queue (queue.c). */
SIM_HIDDEN int sim_queue_start(struct sim_queue *q, int dev);
SIM_HIDDEN void sim_queue_stop(struct sim_queue *q);
/* Pushes it (blocking while the queue is full); stores the sequence in *last
 * and calls hook(arg, q, seq), both under the queue lock before the worker can
 * run it. Returns the sequence. */
typedef void (*sim_seq_hook)(void *arg, struct sim_queue *q, uint64_t seq);
SIM_HIDDEN uint64_t sim_queue_push(struct sim_queue *q, const struct sim_item *it, _Atomic uint64_t *last,
				   sim_seq_hook hook, void *arg);
SIM_HIDDEN void sim_queue_wait(struct sim_queue *q, uint64_t upto);
SIM_HIDDEN uint64_t sim_queue_tail(struct sim_queue *q);

/* Streams (stream.c). NULL and CU_STREAM_LEGACY are the context's legacy
 * stream, CU_STREAM_PER_THREAD the calling thread's own default stream (a
 * blocking stream that can be captured); the _ptsz/_ptds entry points pass
 * SIM_PT(h): their NULL is the per-thread stream. */
#define SIM_PT(h) ((h) == NULL ? CU_STREAM_PER_THREAD : (h))
SIM_HIDDEN CUresult sim_stream_resolve(CUstream h, struct sim_stream **out);
/* Frees the context's per-thread streams (sim_g.mu held, at deactivation). */
SIM_HIDDEN void sim_stream_free_pt(struct sim_ctx *c);
/* Queues bytes of device-side work (a prefetch) on stream hs's engine time (copy.c). */
SIM_HIDDEN CUresult sim_copy_engine(CUstream hs, uint64_t bytes);
SIM_HIDDEN CUresult sim_stream_submit(struct sim_stream *s, const struct sim_item *it);
SIM_HIDDEN CUresult sim_stream_submit_hook(struct sim_stream *s, const struct sim_item *it, sim_seq_hook hook,
					   void *arg);
SIM_HIDDEN struct sim_stream *sim_stream_new(struct sim_ctx *c, unsigned flags, int prio);
SIM_HIDDEN void sim_stream_free(struct sim_stream *s);
SIM_HIDDEN void sim_event_put(struct sim_event *e);
SIM_HIDDEN void sim_event_complete(struct sim_event *e, struct sim_queue *q, uint64_t seq);

/* Graph capture (graph.c). Returns true if the item was captured (or the
 * capture is invalid, *rc set), false to run it now. */
SIM_HIDDEN bool sim_capture_item(struct sim_stream *s, const struct sim_item *it, CUresult *rc);
SIM_HIDDEN bool sim_stream_capturing(struct sim_stream *s);
SIM_HIDDEN bool sim_capture_invalid_locked(struct sim_stream *s);
/* Appends n to g (0, or -1 out of memory). */
SIM_HIDDEN int sim_graph_add(struct sim_graph *g, const struct sim_node *n);
/* Appends a node to s's capture. false: not capturing (*rc untouched). */
SIM_HIDDEN bool sim_capture_node(struct sim_stream *s, const struct sim_node *n, CUresult *rc);

/* Graph memory (graph_mem.c): a per-device graph pool, charged when an exec
 * with allocation nodes is launched or uploaded. */
SIM_HIDDEN CUresult sim_gmem_alloc_node(struct sim_node *n, int ordinal, uint64_t size);
SIM_HIDDEN CUresult sim_gmem_exec_new(struct sim_graph *e);
SIM_HIDDEN CUresult sim_gmem_bind(struct sim_graph *e);
SIM_HIDDEN void sim_gmem_launched(struct sim_graph *e, struct sim_stream *s);
SIM_HIDDEN void sim_gmem_exec_destroy(struct sim_graph *e);
/* cuMemFree / cuMemFreeAsync of p: true if p is a graph allocation (*rc set). */
SIM_HIDDEN bool sim_gmem_free(CUdeviceptr p, CUresult *rc);
SIM_HIDDEN void sim_gmem_teardown(int dev);

/* Memory (mem.c). */
SIM_HIDDEN void sim_mem_free_ctx(struct sim_ctx *c);
/* A synchronisation: every memory pool releases its free memory above its
 * release threshold. A context's teardown: dev's pools release all their free
 * memory (pool.c). */
SIM_HIDDEN void sim_pool_sync(void);
SIM_HIDDEN void sim_pool_trim_dev(int dev);
/* Frees the arrays of a context being destroyed (array.c). */
SIM_HIDDEN void sim_array_free_ctx(struct sim_ctx *c);
SIM_HIDDEN bool sim_mem_lookup(CUdeviceptr p, CUdeviceptr *base, size_t *size, int *dev, bool *managed,
			       struct sim_ctx **ctx);

#endif
