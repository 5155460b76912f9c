/* SPDX-License-Identifier: Apache-2.0
 *
 * Launch hooks, generated from the GATE entries of hooks.def: the gate
 * (gate.h), one acquire load of the real pointer, and a tail call.
 */
#include "gate.h"
#include "internal.h"

#define HOOK(lib, ret, name, params, args)
#define REAL(lib, ret, name, params, args)
#define GATE(lib, ret, name, params, args, stream)                 \
	GS_EXPORT ret name params                                  \
	{                                                          \
		CUresult gate_rc = gs_gate_launch(stream);         \
		if (GS_UNLIKELY(gate_rc != CUDA_SUCCESS))          \
			return gate_rc;                            \
		gs_fn_##name real_fn = GS_REAL(name);              \
		if (GS_UNLIKELY(real_fn == NULL))                  \
			return CUDA_ERROR_NOT_FOUND;               \
		return real_fn args;                               \
	}
#include "hooks.def"
#undef HOOK
#undef GATE
#undef REAL
