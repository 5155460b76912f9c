/* SPDX-License-Identifier: Apache-2.0
 *
 * Resolution of the real driver: the tables generated from hooks.def, the lazy
 * once-per-library dlopen of libcuda.so.1 / libnvidia-ml.so.1, the name table
 * (dlsym) and the pointer-identity table (cuGetProcAddress).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "log.h"

void *_Atomic gs_real_tab[GS_ID_COUNT];

static const char *const sym_name[GS_ID_COUNT] = {
#define HOOK(lib, ret, name, params, args) #name,
#define GATE(lib, ret, name, params, args, stream) #name,
#define REAL(lib, ret, name, params, args) #name,
#include "hooks.def"
#undef HOOK
#undef GATE
#undef REAL
};

static const unsigned char sym_lib[GS_ID_COUNT] = {
#define HOOK(lib, ret, name, params, args) GS_LIB_##lib,
#define GATE(lib, ret, name, params, args, stream) GS_LIB_##lib,
#define REAL(lib, ret, name, params, args) GS_LIB_##lib,
#include "hooks.def"
#undef HOOK
#undef GATE
#undef REAL
};

static void *const sym_hook[GS_ID_COUNT] = {
#define HOOK(lib, ret, name, params, args) (void *)name,
#define GATE(lib, ret, name, params, args, stream) (void *)name,
#define REAL(lib, ret, name, params, args) NULL,
#include "hooks.def"
#undef HOOK
#undef GATE
#undef REAL
};

/* Open-addressing tables, built once, read-only afterwards. Slots hold id+1. */
#define NAME_SLOTS 512
#define PTR_SLOTS 512
_Static_assert(GS_ID_COUNT * 2 < NAME_SLOTS, "name table too small");

static struct {
	pthread_once_t names_once;
	short name_slot[NAME_SLOTS];
	pthread_once_t lib_once[GS_LIB_COUNT];
	void *handle[GS_LIB_COUNT];
	char load_error[GS_LIB_COUNT][256];
	short ptr_slot[PTR_SLOTS]; /* real CU pointers -> id+1 */
} rs = {
	.names_once = PTHREAD_ONCE_INIT,
	.lib_once = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT},
};

static uint32_t name_hash(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

static uint32_t ptr_hash(const void *p)
{
	uint64_t v = (uint64_t)(uintptr_t)p;
	v ^= v >> 29;
	v *= 0xbf58476d1ce4e5b9ull;
	return (uint32_t)(v >> 32);
}

static void names_init(void)
{
	for (int id = 0; id < GS_ID_COUNT; id++) {
		if (sym_hook[id] == NULL)
			continue;
		uint32_t i = name_hash(sym_name[id]) % NAME_SLOTS;
		while (rs.name_slot[i] != 0)
			i = (i + 1) % NAME_SLOTS;
		rs.name_slot[i] = (short)(id + 1);
	}
}

GS_HIDDEN int gs_hook_id_by_name(const char *name)
{
	pthread_once(&rs.names_once, names_init);
	for (uint32_t i = name_hash(name) % NAME_SLOTS;; i = (i + 1) % NAME_SLOTS) {
		int slot = rs.name_slot[i];
		if (slot == 0)
			return -1;
		if (strcmp(sym_name[slot - 1], name) == 0)
			return slot - 1;
	}
}

GS_HIDDEN void *gs_hook_addr(enum gs_id id)
{
	return sym_hook[id];
}

static void ptr_insert(const void *p, int id)
{
	uint32_t i = ptr_hash(p) % PTR_SLOTS;
	for (uint32_t n = 0; n < PTR_SLOTS; n++, i = (i + 1) % PTR_SLOTS) {
		int slot = rs.ptr_slot[i];
		if (slot != 0 && atomic_load_explicit(&gs_real_tab[slot - 1], memory_order_relaxed) == p)
			return; /* an alias of a pointer already mapped: first name wins */
		if (slot == 0) {
			rs.ptr_slot[i] = (short)(id + 1);
			return;
		}
	}
}

static void lib_load(enum gs_lib lib)
{
	static const char *const env[GS_LIB_COUNT] = {"GPUSLICE_LIBCUDA", "GPUSLICE_LIBNVML"};
	static const char *const dflt[GS_LIB_COUNT] = {"libcuda.so.1", "libnvidia-ml.so.1"};
	const char *path = getenv(env[lib]);
	if (path == NULL || *path == '\0')
		path = dflt[lib];
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	gs_dlsym_fn real_dlsym = gs_libc_dlsym();
	if (h == NULL || real_dlsym == NULL) {
		const char *why = h == NULL ? dlerror() : "libc dlsym not found";
		gs_fmt(rs.load_error[lib], sizeof(rs.load_error[lib]), "cannot load %s: %s", path,
		       why ? why : "unknown error");
		return;
	}
	rs.handle[lib] = h;
	for (int id = 0; id < GS_ID_COUNT; id++) {
		if (sym_lib[id] != lib)
			continue;
		void *p = real_dlsym(h, sym_name[id]);
		atomic_store_explicit(&gs_real_tab[id], p, memory_order_release);
		if (p != NULL && lib == GS_LIB_CU && sym_hook[id] != NULL)
			ptr_insert(p, id);
	}
}

static void cu_once(void)
{
	lib_load(GS_LIB_CU);
}

static void nvml_once(void)
{
	lib_load(GS_LIB_NVML);
}

static void lib_ensure(enum gs_lib lib)
{
	int saved = errno;
	pthread_once(&rs.lib_once[lib], lib == GS_LIB_CU ? cu_once : nvml_once);
	errno = saved;
}

/* Real pointer without any message (dlsym path). */
GS_HIDDEN void *gs_real_peek(enum gs_id id)
{
	lib_ensure((enum gs_lib)sym_lib[id]);
	return atomic_load_explicit(&gs_real_tab[id], memory_order_acquire);
}

GS_HIDDEN void *gs_real_slow(enum gs_id id)
{
	void *p = gs_real_peek(id);
	if (p == NULL) {
		static _Atomic int said[GS_LIB_COUNT];
		enum gs_lib lib = (enum gs_lib)sym_lib[id];
		if (rs.handle[lib] == NULL)
			gs_log_once(&said[lib], "%s", rs.load_error[lib]);
	}
	return p;
}

GS_HIDDEN void *gs_hook_for_real(const void *real_fn)
{
	if (real_fn == NULL)
		return NULL;
	lib_ensure(GS_LIB_CU);
	uint32_t i = ptr_hash(real_fn) % PTR_SLOTS;
	for (uint32_t n = 0; n < PTR_SLOTS; n++, i = (i + 1) % PTR_SLOTS) {
		int slot = rs.ptr_slot[i];
		if (slot == 0)
			return NULL;
		if (atomic_load_explicit(&gs_real_tab[slot - 1], memory_order_relaxed) == real_fn)
			return sym_hook[slot - 1];
	}
	return NULL;
}
