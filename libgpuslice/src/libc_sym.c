/* SPDX-License-Identifier: Apache-2.0
 *
 * Finds libc's own dlsym and dlvsym by reading libc.so.6's dynamic symbol
 * table in memory (GNU hash, or SysV hash as a fallback). We interpose both
 * dlsym and dlvsym, so asking either of them (even dlvsym(RTLD_NEXT, ...))
 * would land back in our own hooks; this lookup never goes through the global
 * symbol scope. It walks the loader's list of objects (_r_debug) and calls no
 * function at all, because a sanitizer runtime calls dlsym while it is still
 * initialising (before any interceptor or shadow memory works); for the same
 * reason nothing here is instrumented (GS_NOSAN).
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

struct gs_elf {
	ElfW(Addr) base;
	const ElfW(Sym) * symtab;
	const char *strtab;
	const uint32_t *gnu_hash;
	const uint32_t *sysv_hash;
	const ElfW(Half) * versym;
	const ElfW(Verdef) * verdef;
};

GS_NOSAN static int str_eq(const char *a, const char *b)
{
	while (*a && *a == *b) {
		a++;
		b++;
	}
	return *a == *b;
}

GS_NOSAN static int is_libc_name(const char *path)
{
	const char *base = path;
	for (const char *p = path; *p; p++)
		if (*p == '/')
			base = p + 1;
	return str_eq(base, "libc.so.6");
}

/* glibc relocates d_ptr in place on most architectures, not on all. */
GS_NOSAN static const void *dyn_ptr(ElfW(Addr) base, ElfW(Addr) v)
{
	return (const void *)(v < base ? base + v : v);
}

GS_NOSAN static int find_libc(struct gs_elf *e)
{
	for (const struct link_map *l = _r_debug.r_map; l != NULL; l = l->l_next) {
		if (l->l_name == NULL || !is_libc_name(l->l_name) || l->l_ld == NULL)
			continue;
		e->base = l->l_addr;
		for (const ElfW(Dyn) *d = l->l_ld; d->d_tag != DT_NULL; d++) {
			const void *p = dyn_ptr(e->base, d->d_un.d_ptr);
			switch (d->d_tag) {
			case DT_SYMTAB:
				e->symtab = p;
				break;
			case DT_STRTAB:
				e->strtab = p;
				break;
			case DT_GNU_HASH:
				e->gnu_hash = p;
				break;
			case DT_HASH:
				e->sysv_hash = p;
				break;
			case DT_VERSYM:
				e->versym = p;
				break;
			case DT_VERDEF:
				e->verdef = p;
				break;
			default:
				break;
			}
		}
		return 1;
	}
	return 0;
}

GS_NOSAN static int version_matches(const struct gs_elf *e, uint32_t idx, const char *version)
{
	if (e->versym == NULL)
		return version == NULL;
	ElfW(Half) vs = e->versym[idx];
	if (version == NULL)
		return (vs & 0x8000) == 0; /* the default version */
	const ElfW(Verdef) *vd = e->verdef;
	while (vd != NULL) {
		if ((vd->vd_ndx & 0x7fff) == (vs & 0x7fff)) {
			const ElfW(Verdaux) *aux = (const void *)((const char *)vd + vd->vd_aux);
			return str_eq(e->strtab + aux->vda_name, version);
		}
		if (vd->vd_next == 0)
			break;
		vd = (const void *)((const char *)vd + vd->vd_next);
	}
	return 0;
}

GS_NOSAN static int sym_matches(const struct gs_elf *e, uint32_t i, const char *name, const char *version)
{
	const ElfW(Sym) *s = &e->symtab[i];
	return s->st_value != 0 && s->st_shndx != SHN_UNDEF && str_eq(e->strtab + s->st_name, name) &&
	       version_matches(e, i, version);
}

GS_NOSAN static void *lookup_gnu(const struct gs_elf *e, const char *name, const char *version)
{
	const uint32_t *h = e->gnu_hash;
	uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2];
	const ElfW(Addr) *bloom = (const void *)(h + 4);
	const uint32_t *buckets = (const void *)(bloom + bloom_size);
	const uint32_t *chain = buckets + nbuckets;
	uint32_t hash = 5381;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		hash = hash * 33 + *p;
	if (nbuckets == 0)
		return NULL;
	uint32_t i = buckets[hash % nbuckets];
	if (i < symoffset)
		return NULL;
	for (;; i++) {
		uint32_t h2 = chain[i - symoffset];
		if ((hash | 1) == (h2 | 1) && sym_matches(e, i, name, version))
			return (void *)(e->base + e->symtab[i].st_value);
		if (h2 & 1)
			return NULL;
	}
}

GS_NOSAN static void *lookup_sysv(const struct gs_elf *e, const char *name, const char *version)
{
	uint32_t nchain = e->sysv_hash[1];
	for (uint32_t i = 1; i < nchain; i++)
		if (sym_matches(e, i, name, version))
			return (void *)(e->base + e->symtab[i].st_value);
	return NULL;
}

GS_NOSAN GS_HIDDEN void *gs_elf_lookup_libc(const char *name, const char *version)
{
	struct gs_elf e = {0};
	if (!find_libc(&e) || e.symtab == NULL || e.strtab == NULL)
		return NULL;
	if (e.gnu_hash != NULL)
		return lookup_gnu(&e, name, version);
	if (e.sysv_hash != NULL)
		return lookup_sysv(&e, name, version);
	return NULL;
}

/* Versions tried in order: glibc >= 2.34 (libc), then the original x86-64 and
 * aarch64 versions, then whatever is the default. */
GS_NOSAN static void *lookup_any(const char *name)
{
	static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
		void *p = gs_elf_lookup_libc(name, versions[i]);
		if (p != NULL)
			return p;
	}
	return gs_elf_lookup_libc(name, NULL);
}

static struct {
	pthread_once_t once;
	gs_dlsym_fn dlsym;
	gs_dlvsym_fn dlvsym;
} libc_fns = {.once = PTHREAD_ONCE_INIT};

GS_NOSAN static void libc_init(void)
{
	libc_fns.dlsym = (gs_dlsym_fn)lookup_any("dlsym");
	libc_fns.dlvsym = (gs_dlvsym_fn)lookup_any("dlvsym");
}

GS_NOSAN GS_HIDDEN gs_dlsym_fn gs_libc_dlsym(void)
{
	pthread_once(&libc_fns.once, libc_init);
	return libc_fns.dlsym;
}

GS_NOSAN GS_HIDDEN gs_dlvsym_fn gs_libc_dlvsym(void)
{
	pthread_once(&libc_fns.once, libc_init);
	return libc_fns.dlvsym;
}
