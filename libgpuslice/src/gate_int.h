/* SPDX-License-Identifier: Apache-2.0
 * Internals of the launch gate shared by gate.c (slow path), gate_conn.c (the
 * daemon connection and the gate thread) and gate_track.c (in-flight bound). */
#ifndef GS_GATE_INT_H
#define GS_GATE_INT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include <gpuslice/proto.h>

#include "gate.h"
#include "gate_wire.h"

/* Configuration, read once from the environment (docs/timeslice.md). */
struct gs_gate_cfg {
	int off;             /* GPUSLICE_GATE=off */
	int wait_on_loss;    /* GPUSLICE_GATE_ON_LOSS=wait (default: run) */
	int explicit_socket; /* GPUSLICE_NODE_SOCKET was set: say when it is not reachable */
	unsigned depth;      /* GPUSLICE_GATE_DEPTH: outstanding launches (0: bounded by time, below) */
	int64_t queue_ns; /* GPUSLICE_GATE_QUEUE_US: GPU time left queued at a slice's end (-1: 10 % of the slice, 0: unbounded) */
	uint64_t idle_ns;      /* GPUSLICE_GATE_IDLE_US: idle holder hands the GPU back */
	uint64_t timeout_ns;   /* GPUSLICE_GATE_TIMEOUT_MS: longest wait for a grant */
	uint64_t retry_ns;     /* how often an idle gate thread checks its connection */
	uint64_t reconnect_ns; /* reconnect interval: a restarted daemon enforces again within it */
	uint64_t step_ns;      /* a launcher waiting for a grant re-checks its deadline this often */
	char socket[108];
};

enum gs_gate_state {
	GS_GATE_DOWN,      /* no daemon connection */
	GS_GATE_IDLE,      /* connected, no grant, not asking */
	GS_GATE_WAITING,   /* asked (acquire or release with more work) */
	GS_GATE_HOLDING,   /* holds grant seq until grant_end */
	GS_GATE_RELEASING, /* finishing outstanding work before handing over */
};

struct gs_gate {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* state changes */
	int fd;            /* -1 when down */
	int dead_fd;       /* a connection that went down, closed by the gate thread once no one reads it */
	unsigned gen;      /* connection generation */
	enum gs_gate_state st;
	uint64_t seq;
	uint64_t released; /* the seq last handed back (0: none on this connection): a renewal of it is stale */
	uint64_t grant_end;
	int sent_at;       /* grants on this connection say when they were sent (GS_FEATURE_SENT_AT) */
	uint64_t slice_ns; /* the held grant's slice */
	int revoked;
	int alone;        /* the daemon said no other group waits (GS_GRANT_ALONE): an idle holder keeps the grant */
	int renewed;      /* the held grant was renewed (a grant of its seq came again) */
	uint64_t turn_ns; /* the held grant's slice when first granted */
	int slow;         /* a grant took longer than timeout_ns: run until one comes */
	int refused;      /* the daemon refused the last connection for now (GS_ERR_BUSY): launches wait */
	int receiving;    /* a launcher is blocked reading the socket for its grant */
	int thread;       /* the gate thread was started (in this process) */
	int have_gpu;
	uint8_t gpu[16];
	CUcontext ctx;     /* the holder's context, for the gate thread's idle release */
	pid_t launcher;    /* the thread that last took the slow path (tid): the idle release checks it */
	uint64_t retry_at; /* next connection attempt */
	_Atomic int said_down, said_slow, said_proto;
};

GS_HIDDEN extern struct gs_gate gs_gate;
GS_HIDDEN const struct gs_gate_cfg *gs_gate_cfg(void);

/* With gs_gate.mu held. */
GS_HIDDEN int gs_gate_connect_locked(uint64_t now);
GS_HIDDEN void gs_gate_down_locked(const char *why);
GS_HIDDEN int gs_gate_acquire_locked(void);
GS_HIDDEN int gs_gate_release_locked(uint64_t seq, int more);
GS_HIDDEN void gs_gate_publish_locked(uint64_t now);
/* Applies one frame from the daemon. */
GS_HIDDEN void gs_gate_handle_locked(const struct gs_frame *f);
/* Starts the gate thread (once per process): it reads the socket while no
 * launcher does, ends grants, hands back idle ones and reconnects. */
GS_HIDDEN void gs_gate_start_thread_locked(void);
/* Waits on gs_gate.cv until CLOCK_MONOTONIC deadline: 0, or ETIMEDOUT. */
GS_HIDDEN int gs_gate_wait_locked(uint64_t deadline);

/* Finishes the outstanding work of ctx (NULL: the calling thread's). */
GS_HIDDEN void gs_gate_sync(CUcontext ctx);
/* Forgets the in-flight ring and the queue markers (after fork). */
GS_HIDDEN void gs_gate_track_reset(void);
/* A grant starts (with gs_gate.mu held): the queue bound for it, from launch count n. */
GS_HIDDEN void gs_gate_queue_grant(uint64_t slice_ns, unsigned n);
/* A renewed grant with no other group waiting: work up to ahead_ns past now may
 * be queued, whatever the time left in the grant (0: none). */
GS_HIDDEN void gs_gate_queue_alone(uint64_t ahead_ns);

#endif /* GS_GATE_INT_H */
