/* SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>
#include <string.h>

#include "ptrtab.h"

static size_t hash_key(enum gs_kind kind, uint64_t key)
{
	uint64_t v = key ^ ((uint64_t)kind << 56);
	v ^= v >> 33;
	v *= 0xff51afd7ed558ccdull;
	v ^= v >> 33;
	return (size_t)v;
}

static void insert_raw(struct gs_ptrent *ent, size_t cap, const struct gs_ptrent *e)
{
	size_t i = hash_key(e->kind, e->key) & (cap - 1);
	while (ent[i].kind != GS_KIND_NONE && ent[i].kind != GS_KIND_DEAD)
		i = (i + 1) & (cap - 1);
	ent[i] = *e;
}

static int grow(struct gs_ptrtab *t)
{
	size_t cap = t->cap == 0 ? 64 : t->cap;
	while ((t->live + 1) * 2 > cap)
		cap *= 2;
	struct gs_ptrent *ent = calloc(cap, sizeof(*ent));
	if (ent == NULL)
		return -1;
	for (size_t i = 0; i < t->cap; i++)
		if (t->ent[i].kind != GS_KIND_NONE && t->ent[i].kind != GS_KIND_DEAD)
			insert_raw(ent, cap, &t->ent[i]);
	free(t->ent);
	t->ent = ent;
	t->cap = cap;
	t->used = t->live;
	return 0;
}

static size_t find(const struct gs_ptrtab *t, enum gs_kind kind, uint64_t key)
{
	if (t->cap == 0)
		return SIZE_MAX;
	size_t i = hash_key(kind, key) & (t->cap - 1);
	for (size_t n = 0; n < t->cap; n++, i = (i + 1) & (t->cap - 1)) {
		if (t->ent[i].kind == GS_KIND_NONE)
			return SIZE_MAX;
		if (t->ent[i].kind == kind && t->ent[i].key == key)
			return i;
	}
	return SIZE_MAX;
}

/* Removes the entry at i without a tombstone (backward-shift deletion for
 * linear probing): each later entry of the run that may sit earlier moves
 * into the hole, so lookups and inserts never walk over dead slots. */
static void remove_at(struct gs_ptrtab *t, size_t i)
{
	size_t mask = t->cap - 1, j = i;
	for (;;) {
		j = (j + 1) & mask;
		if (t->ent[j].kind == GS_KIND_NONE)
			break;
		size_t k = hash_key(t->ent[j].kind, t->ent[j].key) & mask; /* its home */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue; /* its home lies after the hole: it stays */
		t->ent[i] = t->ent[j];
		i = j;
	}
	memset(&t->ent[i], 0, sizeof(t->ent[i]));
	t->used--;
	t->live--;
}

GS_HIDDEN int gs_ptrtab_insert(struct gs_ptrtab *t, const struct gs_ptrent *e)
{
	int rc = 0;
	pthread_mutex_lock(&t->mu);
	size_t at = find(t, e->kind, e->key);
	if (at != SIZE_MAX) {
		t->ent[at] = *e; /* the driver reused a key we missed the release of */
	} else if ((t->used + 1) * 4 > t->cap * 3 && grow(t) != 0) {
		rc = -1;
	} else {
		size_t i = hash_key(e->kind, e->key) & (t->cap - 1);
		while (t->ent[i].kind != GS_KIND_NONE && t->ent[i].kind != GS_KIND_DEAD)
			i = (i + 1) & (t->cap - 1);
		if (t->ent[i].kind == GS_KIND_NONE)
			t->used++;
		t->ent[i] = *e;
		t->live++;
	}
	pthread_mutex_unlock(&t->mu);
	return rc;
}

GS_HIDDEN int gs_ptrtab_put(struct gs_ptrtab *t, enum gs_kind kind, uint64_t key, uint64_t size, int slot)
{
	struct gs_ptrent e = {.key = key, .size = size, .kind = (uint8_t)kind, .slot = (uint8_t)slot};
	return gs_ptrtab_insert(t, &e);
}

GS_HIDDEN int gs_ptrtab_get(struct gs_ptrtab *t, enum gs_kind kind, uint64_t key, struct gs_ptrent *out)
{
	pthread_mutex_lock(&t->mu);
	size_t at = find(t, kind, key);
	if (at != SIZE_MAX)
		*out = t->ent[at];
	pthread_mutex_unlock(&t->mu);
	return at != SIZE_MAX;
}

GS_HIDDEN int gs_ptrtab_ref(struct gs_ptrtab *t, enum gs_kind kind, uint64_t key, int delta, struct gs_ptrent *out)
{
	int n = -1;
	pthread_mutex_lock(&t->mu);
	size_t at = find(t, kind, key);
	if (at != SIZE_MAX) {
		struct gs_ptrent *e = &t->ent[at];
		int64_t v = (int64_t)e->refs + delta;
		e->refs = v > 0 ? (uint32_t)v : 0;
		n = (int)e->refs;
		*out = *e;
		if (n == 0)
			remove_at(t, at);
	}
	pthread_mutex_unlock(&t->mu);
	return n;
}

GS_HIDDEN size_t gs_ptrtab_drain(struct gs_ptrtab *t, int (*match)(const struct gs_ptrent *, void *),
				 void (*each)(const struct gs_ptrent *, void *), void *arg)
{
	size_t n = 0;
	pthread_mutex_lock(&t->mu);
	for (size_t i = 0; i < t->cap; i++) {
		struct gs_ptrent *e = &t->ent[i];
		if (e->kind == GS_KIND_NONE || e->kind == GS_KIND_DEAD || !match(e, arg))
			continue;
		each(e, arg);
		e->kind = GS_KIND_DEAD;
		t->live--;
		n++;
	}
	if (n > 0)
		(void)grow(t); /* rehash without the tombstones (out of memory: they stay, still correct) */
	pthread_mutex_unlock(&t->mu);
	return n;
}

GS_HIDDEN int gs_ptrtab_take(struct gs_ptrtab *t, enum gs_kind kind, uint64_t key, struct gs_ptrent *out)
{
	pthread_mutex_lock(&t->mu);
	size_t at = find(t, kind, key);
	if (at != SIZE_MAX) {
		*out = t->ent[at];
		remove_at(t, at);
	}
	pthread_mutex_unlock(&t->mu);
	return at != SIZE_MAX;
}

GS_HIDDEN size_t gs_ptrtab_count(struct gs_ptrtab *t)
{
	pthread_mutex_lock(&t->mu);
	size_t n = t->live;
	pthread_mutex_unlock(&t->mu);
	return n;
}

GS_HIDDEN void gs_ptrtab_free(struct gs_ptrtab *t)
{
	free(t->ent);
	t->ent = NULL;
	t->cap = t->used = t->live = 0;
}

static struct gs_ptrtab vmm_tab = GS_PTRTAB_INIT;
static pthread_mutex_t vmm_mu = PTHREAD_MUTEX_INITIALIZER;

GS_HIDDEN void gs_vmm_lock(void)
{
	pthread_mutex_lock(&vmm_mu);
}

GS_HIDDEN void gs_vmm_unlock(void)
{
	pthread_mutex_unlock(&vmm_mu);
}

GS_HIDDEN struct gs_ptrtab *gs_ptrtab_vmm(void)
{
	return &vmm_tab;
}

GS_HIDDEN void gs_ptrtab_fork_prepare(void)
{
	pthread_mutex_lock(&vmm_mu);
	pthread_mutex_lock(&vmm_tab.mu);
}

GS_HIDDEN void gs_ptrtab_fork_parent(void)
{
	pthread_mutex_unlock(&vmm_tab.mu);
	pthread_mutex_unlock(&vmm_mu);
}

static void clear_child(struct gs_ptrtab *t)
{
	if (t->cap != 0)
		memset(t->ent, 0, t->cap * sizeof(*t->ent));
	t->used = t->live = 0;
	pthread_mutex_unlock(&t->mu);
}

GS_HIDDEN void gs_ptrtab_fork_child(void)
{
	clear_child(&vmm_tab);
	pthread_mutex_unlock(&vmm_mu);
}
