/* SPDX-License-Identifier: Apache-2.0
 * NVML drift check: compiled twice, once against our declarations
 * (include/gpuslice/nvml_abi.h, -DDRIFT_OURS) and once against NVIDIA's
 * nvml.h (the go-nvml module's copy, never committed). The nvml.h build also
 * declares every NVML entry of hooks.def with our signature: a mismatch is a
 * compile error. Each build emits a table of sizes, offsets and constants;
 * nvml_drift_main.c compares the two and names every difference.
 */
#include <stddef.h>

#ifdef DRIFT_OURS
#include <gpuslice/nvml_abi.h>
#define TABLE drift_ours
#else
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>
#define TABLE drift_nvml
/* Our hook prototypes against nvml.h's: a conflicting type fails the build. */
#define HOOK(lib, ret, name, params, args) HOOK_##lib(ret, name, params)
#define REAL(lib, ret, name, params, args) HOOK_##lib(ret, name, params)
#define GATE(lib, ret, name, params, args, stream)
#define HOOK_CU(ret, name, params)
#define HOOK_NVML(ret, name, params) ret name params;
/* Types only cuda.h has, named by the CUDA entries (never expanded here). */
typedef int CUresult;
#include "../../src/hooks.def"
#endif

#include "nvml_drift.h"

#define SIZE(t) {#t, sizeof(t)},
#define FIELD(t, m) {#t "." #m, offsetof(t, m)},
#define CONST(c) {#c, (unsigned long long)(c)},
const struct drift_row TABLE[] = {
#include "nvml_drift.def"
	{NULL, 0},
};
