/* SPDX-License-Identifier: Apache-2.0
 *
 * cuGetProcAddress(_v2) resolved by symbol name, version and flags: the driver
 * answers first (so its errors, status and "not found" stay its own); a
 * pointer it hands out is then swapped for the hook of the export that the
 * name, version and flags select in procaddr.def (cudaTypedefs.h's versioned
 * names). A driver may hand out pointers that are not its exported symbols
 * (trampolines): the name decides. Pointer identity is a cross-check: a
 * pointer that is exactly the real pointer of another hooked export wins (the
 * driver said which function it is), with one line on stderr.
 *
 * Past the newest CUDA version the table knows (GS_PROCADDR_KNOWN), the driver
 * may have a newer variant we have never seen: the name's hook is used only
 * when the driver hands out the same pointer for the known version too.
 */
#include <string.h>

#include "internal.h"
#include "log.h"

#define GS_PROCADDR_KNOWN 12060 /* CUDA 12.6: the newest version procaddr.def is complete for */

struct proc_row {
	const char *base, *export;
	int version;
	unsigned char per_thread;
};

static const struct proc_row rows[] = {
#define PROC(base, ver, pt, exp) {#base, #exp, ver, pt},
#include "procaddr.def"
#undef PROC
};

/* The export a lookup of base at version ver selects (NULL: a base the table
 * does not list, or no variant that old). */
GS_HIDDEN const char *gs_procaddr_export(const char *base, int ver, int per_thread)
{
	const struct proc_row *best = NULL;
	for (int pass = per_thread ? 1 : 0; pass >= 0 && best == NULL; pass--)
		for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
			if (rows[i].per_thread == pass && rows[i].version <= ver && strcmp(rows[i].base, base) == 0 &&
			    (best == NULL || rows[i].version > best->version))
				best = &rows[i];
	return best != NULL ? best->export : NULL;
}

/* What the library hands out for the driver's answer p to (symbol, ver,
 * flags); again asks the driver at the known version when ver is newer. */
GS_HIDDEN void *gs_procaddr_map(const char *symbol, void *p, int ver, cuuint64_t flags,
				void *(*again)(const char *symbol, int ver, cuuint64_t flags))
{
	static _Atomic int said_identity, said_newer;
	if (p == NULL || symbol == NULL)
		return p;
	int pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
	const char *export = gs_procaddr_export(symbol, ver, pt);
	int id = export != NULL ? gs_hook_id_by_name(export) : -1;
	void *by_name = id >= 0 ? gs_hook_addr((enum gs_id)id) : NULL;
	if (by_name != NULL && gs_real_peek((enum gs_id)id) == p)
		return by_name; /* the exported symbol itself: name and pointer agree */
	void *by_ptr = gs_hook_for_real(p);
	if (by_ptr != NULL) {
		if (by_ptr != by_name && export != NULL)
			gs_log_once(
				&said_identity,
				"cuGetProcAddress(%s, %d): the driver's pointer is another hooked export's than %s; "
				"using the driver's",
				symbol, ver, export);
		return by_ptr;
	}
	if (by_name == NULL)
		return p;
	if (ver > GS_PROCADDR_KNOWN && again != NULL && again(symbol, GS_PROCADDR_KNOWN, flags) != p) {
		gs_log_once(&said_newer,
			    "cuGetProcAddress(%s, %d): the driver has a variant newer than CUDA 12.6 that libgpuslice "
			    "does not know; it is not intercepted",
			    symbol, ver);
		return p;
	}
	return by_name; /* a pointer of the driver's own (a trampoline): the name decides */
}
