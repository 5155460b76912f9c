/* SPDX-License-Identifier: Apache-2.0
 *
 * Launch hooks, generated from the GATE entries of hooks.def: the gate's fast
 * path (gate.h), one load of the real pointer and a tail call. Everything else
 * (a check of the queue, the slow path, the first call that resolves the
 * driver) is in cold out-of-line functions reached by tail calls, so the hot
 * path calls nothing. (GCC 12 still moves stack arguments, such as
 * cuLaunchKernel's last five, through registers for a tail call: ~3 ns, the
 * same with the gate off.) The held and the passing state each run straight
 * on to a tail call of their own: mk/libgpuslice.mk builds with
 * -fno-crossjumping, which would merge the two and cost one of them a taken
 * branch and a jump back (~3 ns on the simulator's ~50 ns launch).
 */
#include "gate.h"
#include "graphmem.h"
#include "internal.h"
#include "quiet.h"

/* A graph launch with allocation nodes takes memory: a quiet.h window. */
static __attribute__((noinline, cold)) CUresult graph_run(gs_graph_run_fn fn, CUgraphExec e, CUstream s, int ptsz)
{
	GS_QUIET_WINDOW;
	return gs_graph_run_slow(fn, e, s, ptsz);
}

#define HOOK(lib, ret, name, params, args)
#define REAL(lib, ret, name, params, args)
/* One launch hook: call_real is the cold path's call of the resolved real_fn;
 * slow, when true, sends the hot path there too. */
#define GATE_HOOK(ret, name, params, args, stream, call_real, slow)              \
	static __attribute__((noinline, cold)) ret cold_##name params            \
	{                                                                        \
		gs_fn_##name real_fn = (gs_fn_##name)gs_real_slow(GS_ID_##name); \
		if (real_fn == NULL)                                             \
			return CUDA_ERROR_NOT_FOUND;                             \
		return call_real;                                                \
	}                                                                        \
	static __attribute__((noinline, cold)) ret gated_##name params           \
	{                                                                        \
		CUresult gate_rc = gs_gate_resume(stream);                       \
		if (gate_rc != CUDA_SUCCESS)                                     \
			return gate_rc;                                          \
		return cold_##name args;                                         \
	}                                                                        \
	GS_EXPORT ret name params                                                \
	{                                                                        \
		int gate_state = gs_gate_state();                                \
		if (GS_LIKELY(gate_state == GS_GATE_HELD)) {                     \
			if (GS_UNLIKELY(!gs_gate_count()))                       \
				return gated_##name args;                        \
			GATE_TAIL(name, args, slow)                              \
		}                                                                \
		if (GS_LIKELY(gate_state == GS_GATE_PASS)) {                     \
			GATE_TAIL(name, args, slow)                              \
		}                                                                \
		return gated_##name args;                                        \
	}
/* The tail call of the real function, once per state: each state's path runs
 * straight on to its own jump. */
#define GATE_TAIL(name, args, slow)                                                                                  \
	gs_fn_##name real_fn = (gs_fn_##name)atomic_load_explicit(&gs_real_tab[GS_ID_##name], memory_order_acquire); \
	if (GS_UNLIKELY(real_fn == NULL || (slow)))                                                                  \
		return cold_##name args;                                                                             \
	return real_fn args;
#define GATE(lib, ret, name, params, args, stream) GATE_HOOK(ret, name, params, args, stream, real_fn args, 0)
/* A graph launch: as GATE, and through gs_graph_run_slow once the process
 * has execs with allocation nodes (graphmem.h). */
#define GRAPH_EXECS() atomic_load_explicit(&gs_hot.graph_execs, memory_order_relaxed)
#define GATEG(lib, ret, name, params, args, stream, exec, ptsz)                                                  \
	GATE_HOOK(ret, name, params, args, stream,                                                               \
		  (GRAPH_EXECS() == 0 ? real_fn args : graph_run((gs_graph_run_fn)real_fn, exec, stream, ptsz)), \
		  GRAPH_EXECS() != 0)
#include "hooks.def"
#undef HOOK
#undef GATE
#undef REAL
#undef GATE_HOOK
#undef GATE_TAIL
#undef GRAPH_EXECS
