/* SPDX-License-Identifier: Apache-2.0
 * Internal declarations of libgpuslice, generated in part from hooks.def. */
#ifndef GS_INTERNAL_H
#define GS_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include <gpuslice/cuda_abi.h>
#include <gpuslice/nvml_abi.h>

#define GS_HIDDEN __attribute__((visibility("hidden")))
#define GS_EXPORT __attribute__((visibility("default")))
#define GS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define GS_LIKELY(x) __builtin_expect(!!(x), 1)
/* The allocation hooks' fast paths, inlined into each hook. */
#define GS_INLINE static inline __attribute__((always_inline))
/* Code that runs before a sanitizer runtime is initialised (it calls dlsym). */
#define GS_NOSAN __attribute__((no_sanitize("address", "undefined")))

enum gs_lib { GS_LIB_CU = 0, GS_LIB_NVML = 1, GS_LIB_COUNT };

/* Symbol ids, in hooks.def order. */
enum gs_id {
#define HOOK(lib, ret, name, params, args) GS_ID_##name,
#define GATE(lib, ret, name, params, args, stream) GS_ID_##name,
#define REAL(lib, ret, name, params, args) GS_ID_##name,
#include "hooks.def"
#undef HOOK
#undef GATE
#undef REAL
	GS_ID_COUNT
};

/* Typed real-function pointers: gs_fn_<name>. */
#define HOOK(lib, ret, name, params, args) typedef ret(*gs_fn_##name) params;
#define GATE(lib, ret, name, params, args, stream) typedef ret(*gs_fn_##name) params;
#define REAL(lib, ret, name, params, args) typedef ret(*gs_fn_##name) params;
#include "hooks.def"
#undef HOOK
#undef GATE
#undef REAL

/* Exported hook prototypes. */
#define HOOK(lib, ret, name, params, args) GS_EXPORT ret name params;
#define GATE(lib, ret, name, params, args, stream) GS_EXPORT ret name params;
#define REAL(lib, ret, name, params, args)
#include "hooks.def"
#undef HOOK
#undef GATE
#undef REAL

/* Real pointers, filled once per library (resolve.c). */
GS_HIDDEN extern void *_Atomic gs_real_tab[GS_ID_COUNT];
GS_HIDDEN void *gs_real_slow(enum gs_id id);
/* The real pointer (loading the library once), without any message. */
GS_HIDDEN void *gs_real_peek(enum gs_id id);

/* One acquire load (a plain load on x86-64) on the fast path. */
static inline void *gs_real_ptr(enum gs_id id)
{
	void *p = atomic_load_explicit(&gs_real_tab[id], memory_order_acquire);
	if (GS_UNLIKELY(p == NULL))
		p = gs_real_slow(id);
	return p;
}
#define GS_REAL(name) ((gs_fn_##name)gs_real_ptr(GS_ID_##name))
/* A _ptsz/_ptds entry point's stream: there NULL is the per-thread default
 * stream, which CU_STREAM_PER_THREAD names in every entry point. */
#define GS_PT(s) ((s) == NULL ? CU_STREAM_PER_THREAD : (s))

/* GS_AFTER_HOOK exports a hook that forwards to the driver, then runs after
 * (which sees the driver's result as rc), keeping errno as the driver left it. */
#define GS_AFTER_HOOK(name, params, args, after)     \
	GS_EXPORT CUresult name params               \
	{                                            \
		GS_QUIET_WINDOW;                     \
		gs_fn_##name fn = GS_REAL(name);     \
		if (fn == NULL)                      \
			return CUDA_ERROR_NOT_FOUND; \
		CUresult rc = fn args;               \
		int e = errno;                       \
		after;                               \
		errno = e;                           \
		return rc;                           \
	}

/* Lookups used by the dlsym / cuGetProcAddress hooks (resolve.c). */
GS_HIDDEN int gs_hook_id_by_name(const char *name);    /* -1 if not hooked */
GS_HIDDEN void *gs_hook_for_real(const void *real_fn); /* NULL if not a hooked real */
/* cuGetProcAddress by name, version and flags (procaddr.c, procaddr.def). */
GS_HIDDEN const char *gs_procaddr_export(const char *base, int ver, int per_thread);
GS_HIDDEN void *gs_procaddr_map(const char *symbol, void *p, int ver, cuuint64_t flags,
				void *(*again)(const char *symbol, int ver, cuuint64_t flags));
GS_HIDDEN void *gs_hook_addr(enum gs_id id);

/* libc's own dlsym / dlvsym, found without going through the global scope
 * (libc_sym.c). */
typedef void *(*gs_dlsym_fn)(void *, const char *);
typedef void *(*gs_dlvsym_fn)(void *, const char *, const char *);
GS_HIDDEN gs_dlsym_fn gs_libc_dlsym(void);
GS_HIDDEN gs_dlvsym_fn gs_libc_dlvsym(void);
GS_HIDDEN void *gs_elf_lookup_libc(const char *name, const char *version);

#endif /* GS_INTERNAL_H */
