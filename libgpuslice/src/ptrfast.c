/* SPDX-License-Identifier: Apache-2.0
 *
 * The allocation hooks' record of what this process allocated (ptrfast.h):
 * a fixed table without locks, and the locked, growing table (ptrtab.c) for
 * what does not fit it. An entry goes to the first free slot of its near line
 * (neighbouring keys share it: a run of allocations touches few cache lines),
 * else of its far window (FAR_LINES hashed lines), else to the locked table.
 *
 * A slot's key word is its state: EMPTY (never used), BUSY (one thread owns
 * the slot: it is filling, reading or restoring it), TOMB (freed, reusable),
 * or a live key. Only a CAS to BUSY gives a thread the slot, and the payload
 * is written only while BUSY and decided on only while BUSY, so each entry is
 * taken once. A slot is never made EMPTY again while threads run, so a lookup
 * may stop at an EMPTY slot: an insert would have taken it.
 *
 * A live entry is claimed only by a thread that will take it: a take of its
 * kind, a drain that matches it. Whether it matches is first decided on a
 * copy read without claiming (checked again once claimed, in case the slot
 * was refilled meanwhile), because a live slot that is BUSY is invisible to
 * everyone else: a drain that claimed every entry to look at it hid them from
 * a free (which then passed uncounted: the group kept counting memory the
 * driver had freed) and from another context's drain (which then left it in
 * the table, counted for good).
 */
#include <string.h>

#include "ctxmap.h"
#include "hot.h"
#include "ptrfast.h"

#define LINE_SLOTS 4u /* 16-byte entries: one cache line */
#define LINES 1024u   /* power of two: 64 KiB */
#define FAR_LINES 4u  /* the window past the second line */
#define K_EMPTY 0ull
#define K_BUSY 1ull
#define K_TOMB 2ull

/* val: size (38 bits) | context index (8, ctxmap.h) | refs (8: a pool's record,
 * pool.c) | process slot (6: group.h, GS_PROC_SLOTS) | kind (4). */
_Static_assert(GS_MAX_CONTAINER_GROUPS *GS_SHM_MAX_GPUS <= 64, "a process slot fits 6 bits");
struct fent {
	_Atomic uint64_t key;
	_Atomic uint64_t val; /* relaxed: published by the release store of key */
};

struct fline {
	struct fent e[LINE_SLOTS];
} __attribute__((aligned(64)));

static struct {
	struct fline line[LINES];
	/* gs_hot.ptrs_spilled: entries in the locked table (an upper bound while one
	 * is added); gs_hot.ptrs_touched: the table was used */
} ft;

static struct gs_ptrtab spill_tab = GS_PTRTAB_INIT;

/* The near line: keys a few KiB apart share it (a driver hands out
 * neighbouring addresses), so a run of allocations touches few lines; the
 * higher bits are folded in so that keys 2 MiB apart differ too. */
static inline size_t line_near(enum gs_kind kind, uint64_t key)
{
	uint64_t v = (key >> 14) ^ ((uint64_t)kind << 7);
	return (size_t)(v ^ (v >> 10) ^ (v >> 20) ^ (v >> 30)) & (LINES - 1);
}

/* The far window, for what the near line has no room for: hashed. */
static inline size_t line_far(enum gs_kind kind, uint64_t key)
{
	uint64_t v = key ^ ((uint64_t)kind << 56);
	v ^= v >> 33;
	v *= 0xff51afd7ed558ccdull;
	v ^= v >> 33;
	return (size_t)v & (LINES - 1);
}

static inline int claim(struct fent *s, uint64_t *seen)
{
	return atomic_compare_exchange_strong_explicit(&s->key, seen, K_BUSY, memory_order_acquire,
						       memory_order_relaxed);
}

/* 0, or -1 if e does not fit an entry (then it goes to the locked table).
 * ci: e->aux's index in the context map, or -1 to look it up. */
static inline int pack(const struct gs_ptrent *e, int ci, uint64_t *val)
{
	if (ci < 0)
		ci = gs_ctx_index(e->aux);
	if ((e->size >> 38) != 0 || e->slot >= 64 || e->kind >= 16 || e->refs > 255 || ci < 0 || ci > 255)
		return -1;
	*val = e->size | (uint64_t)ci << 38 | (uint64_t)e->refs << 46 | (uint64_t)e->slot << 54 |
	       (uint64_t)e->kind << 60;
	return 0;
}

static inline struct gs_ptrent unpack(uint64_t key, uint64_t val)
{
	return (struct gs_ptrent){.key = key,
				  .size = val & ((1ull << 38) - 1),
				  .aux = gs_ctx_at((int)((val >> 38) & 0xff)),
				  .refs = (uint32_t)((val >> 46) & 0xff),
				  .slot = (uint8_t)((val >> 54) & 63),
				  .kind = (uint8_t)(val >> 60)};
}

static int spill_insert(const struct gs_ptrent *e)
{
	atomic_fetch_add_explicit(&gs_hot.ptrs_spilled, 1, memory_order_seq_cst);
	if (gs_ptrtab_insert(&spill_tab, e) == 0)
		return 0;
	atomic_fetch_sub_explicit(&gs_hot.ptrs_spilled, 1, memory_order_relaxed);
	return -1;
}

/* The slot a line's scan starts at: allocations of 4 KiB and more that lie
 * side by side (the near line holds 16 KiB of addresses) each start at a slot
 * of their own, so one probe usually finds or places an entry. */
static inline unsigned first_slot(uint64_t key)
{
	return (unsigned)(key >> 12) & (LINE_SLOTS - 1);
}

/* Fills the first free slot of a line, from key's first slot on: 1 if done. */
static inline int put_line(struct fline *l, uint64_t key, uint64_t val)
{
	for (unsigned n = 0, j = first_slot(key); n < LINE_SLOTS; n++, j = (j + 1) & (LINE_SLOTS - 1)) {
		struct fent *s = &l->e[j];
		uint64_t k = atomic_load_explicit(&s->key, memory_order_relaxed);
		if ((k != K_EMPTY && k != K_TOMB) || !claim(s, &k))
			continue;
		atomic_store_explicit(&s->val, val, memory_order_relaxed);
		atomic_store_explicit(&s->key, key, memory_order_release);
		return 1;
	}
	return 0;
}

/* Where the near line has no room: the far window, then the locked table. */
static __attribute__((noinline, cold)) int insert_far(const struct gs_ptrent *e, uint64_t val)
{
	size_t far = line_far((enum gs_kind)e->kind, e->key);
	for (size_t n = 0; n < FAR_LINES; n++)
		if (put_line(&ft.line[(far + n) & (LINES - 1)], e->key, val))
			return 0;
	return spill_insert(e);
}

GS_HIDDEN int gs_ptrs_insert(const struct gs_ptrent *e)
{
	return gs_ptrs_insert_ci(e, -1);
}

GS_HIDDEN int gs_ptrs_insert_ci(const struct gs_ptrent *e, int ci)
{
	uint64_t val;
	if (GS_UNLIKELY(e->key <= K_TOMB || pack(e, ci, &val) != 0))
		return spill_insert(e);
	if (GS_UNLIKELY(!atomic_load_explicit(&gs_hot.ptrs_touched, memory_order_relaxed)))
		atomic_store_explicit(&gs_hot.ptrs_touched, 1, memory_order_relaxed);
	if (GS_LIKELY(put_line(&ft.line[line_near((enum gs_kind)e->kind, e->key)], e->key, val)))
		return 0;
	return insert_far(e, val);
}

static int spill_take(enum gs_kind kind, uint64_t key, struct gs_ptrent *out)
{
	if (atomic_load_explicit(&gs_hot.ptrs_spilled, memory_order_seq_cst) == 0 ||
	    !gs_ptrtab_take(&spill_tab, kind, key, out))
		return 0;
	atomic_fetch_sub_explicit(&gs_hot.ptrs_spilled, 1, memory_order_relaxed);
	return 1;
}

enum { FOUND = 1, ABSENT = 2, GO_ON = 0 };

/* Looks for key in a line: FOUND (taken into out), ABSENT (the line has an
 * EMPTY slot: a key homed here never went further), or GO_ON. */
static inline int take_line(struct fline *l, enum gs_kind kind, uint64_t key, struct gs_ptrent *out)
{
	int empty = 0;
	for (unsigned n = 0, j = first_slot(key); n < LINE_SLOTS; n++, j = (j + 1) & (LINE_SLOTS - 1)) {
		struct fent *s = &l->e[j];
		uint64_t k = atomic_load_explicit(&s->key, memory_order_acquire);
		if (k != key) {
			empty |= k == K_EMPTY;
			continue;
		}
		/* The same value as another kind's handle: not ours, left unclaimed. */
		if ((atomic_load_explicit(&s->val, memory_order_relaxed) >> 60) != (uint64_t)kind || !claim(s, &k))
			continue;
		struct gs_ptrent e = unpack(key, atomic_load_explicit(&s->val, memory_order_relaxed));
		if (e.kind != (uint8_t)kind) { /* refilled since */
			atomic_store_explicit(&s->key, key, memory_order_release);
			continue;
		}
		atomic_store_explicit(&s->key, K_TOMB, memory_order_release);
		*out = e;
		return FOUND;
	}
	return empty ? ABSENT : GO_ON;
}

/* The far window and the locked table, after the near line (r: its answer). */
static __attribute__((noinline, cold)) int take_far(int r, enum gs_kind kind, uint64_t key, struct gs_ptrent *out)
{
	size_t far = line_far(kind, key);
	for (size_t n = 0; r == GO_ON && n < FAR_LINES; n++)
		r = take_line(&ft.line[(far + n) & (LINES - 1)], kind, key, out);
	return r == FOUND ? 1 : spill_take(kind, key, out);
}

GS_HIDDEN int gs_ptrs_take(enum gs_kind kind, uint64_t key, struct gs_ptrent *out)
{
	if (GS_UNLIKELY(key <= K_TOMB))
		return spill_take(kind, key, out);
	int r = take_line(&ft.line[line_near(kind, key)], kind, key, out);
	if (GS_LIKELY(r == FOUND))
		return 1;
	return take_far(r, kind, key, out);
}

GS_HIDDEN size_t gs_ptrs_drain(int (*match)(const struct gs_ptrent *, void *),
			       void (*each)(const struct gs_ptrent *, void *), void *arg)
{
	size_t n = 0;
	for (size_t i = 0; atomic_load_explicit(&gs_hot.ptrs_touched, memory_order_relaxed) && i < LINES * LINE_SLOTS;
	     i++) {
		struct fent *s = &ft.line[i / LINE_SLOTS].e[i % LINE_SLOTS];
		uint64_t k = atomic_load_explicit(&s->key, memory_order_acquire);
		if (k <= K_TOMB) /* BUSY: being filled, or taken by its owner */
			continue;
		struct gs_ptrent e = unpack(k, atomic_load_explicit(&s->val, memory_order_relaxed));
		if (!match(&e, arg) || !claim(s, &k)) /* not ours, or taken meanwhile */
			continue;
		e = unpack(k, atomic_load_explicit(&s->val, memory_order_relaxed));
		if (!match(&e, arg)) { /* refilled since */
			atomic_store_explicit(&s->key, k, memory_order_release);
			continue;
		}
		each(&e, arg);
		atomic_store_explicit(&s->key, K_TOMB, memory_order_release);
		n++;
	}
	if (atomic_load_explicit(&gs_hot.ptrs_spilled, memory_order_seq_cst) != 0) {
		size_t m = gs_ptrtab_drain(&spill_tab, match, each, arg);
		atomic_fetch_sub_explicit(&gs_hot.ptrs_spilled, m, memory_order_relaxed);
		n += m;
	}
	return n;
}

GS_HIDDEN size_t gs_ptrs_count(void)
{
	size_t n = 0;
	for (size_t i = 0; i < LINES * LINE_SLOTS; i++)
		n += atomic_load_explicit(&ft.line[i / LINE_SLOTS].e[i % LINE_SLOTS].key, memory_order_relaxed) >
		     K_TOMB;
	return n + gs_ptrtab_count(&spill_tab);
}

GS_HIDDEN void gs_ptrs_fork_prepare(void)
{
	pthread_mutex_lock(&spill_tab.mu);
}

GS_HIDDEN void gs_ptrs_fork_parent(void)
{
	pthread_mutex_unlock(&spill_tab.mu);
}

/* The child has one thread and none of the parent's allocations. */
GS_HIDDEN void gs_ptrs_fork_child(void)
{
	if (atomic_load_explicit(&gs_hot.ptrs_touched, memory_order_relaxed))
		memset(ft.line, 0, sizeof(ft.line));
	atomic_store_explicit(&gs_hot.ptrs_spilled, 0, memory_order_relaxed);
	if (spill_tab.cap != 0)
		memset(spill_tab.ent, 0, spill_tab.cap * sizeof(*spill_tab.ent));
	spill_tab.used = spill_tab.live = 0;
	pthread_mutex_unlock(&spill_tab.mu);
}
