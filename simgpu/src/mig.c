/* SPDX-License-Identifier: Apache-2.0
 * MIG like an H100 80GB: the GPU instance profiles, their placements on the
 * GPU's eight memory slices, and the state changes (mode, GPU and compute
 * instances) that NVML (nvml_mig.c) and gpuslice-sim-ctl make. Everything
 * lives in the shared state file (simstate.h) under its lock; a GPU instance
 * takes a device slot of its own (its memory and engine). Answers are NVML
 * return codes, as the driver gives them. */
#include <stdio.h>
#include <string.h>

#include "gpuslice/nvml_abi.h"
#include "state.h"

/* nvidia-smi mig -lgip / -lgipp on an H100 80GB HBM3 (MIG User Guide,
 * "H100 MIG Profiles"): profile index, driver profile id, name, compute
 * slices, memory slices (placement size), instances, SMs, copy engines,
 * decoders, encoders, JPEG, OFA, memory MiB, placement starts. */
static const struct sim_mig_profile gi_profiles[] = {
	{NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, "1g.10gb", 1, 1, 7, 16, 1, 1, 0, 1, 0, 9984, 7, {0, 1, 2, 3, 4, 5, 6}},
	{NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, "1g.20gb", 1, 2, 4, 26, 1, 1, 0, 1, 0, 20096, 4, {0, 2, 4, 6}},
	{NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, "2g.20gb", 2, 2, 3, 32, 2, 2, 0, 2, 0, 20096, 3, {0, 2, 4}},
	{NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, "3g.40gb", 3, 4, 2, 60, 3, 3, 0, 3, 0, 40448, 2, {0, 4}},
	{NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, "4g.40gb", 4, 4, 1, 64, 4, 4, 0, 4, 0, 40448, 1, {0}},
	{NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, "7g.80gb", 7, 8, 1, 132, 8, 7, 0, 7, 1, 81152, 1, {0}},
};
#define N_GI_PROFILES (sizeof(gi_profiles) / sizeof(gi_profiles[0]))
#define H100_MIB 81920ull /* the table's GPU: 80 GiB, 132 SMs */
#define H100_SMS 132u

/* Compute instance profiles (index = profile id): compute slices. */
static const unsigned ci_slices[] = {1, 2, 3, 4, 7};

const struct sim_mig_profile *sim_mig_profile(unsigned index)
{
	for (size_t i = 0; i < N_GI_PROFILES; i++)
		if (gi_profiles[i].index == index)
			return &gi_profiles[i];
	return NULL;
}

const struct sim_mig_profile *sim_mig_profile_by_id(unsigned id)
{
	for (size_t i = 0; i < N_GI_PROFILES; i++)
		if (gi_profiles[i].id == id)
			return &gi_profiles[i];
	return NULL;
}

/* A profile on a GPU configured otherwise than the table's: its memory and
 * SMs scale with the GPU's (an 80 GiB, 132-SM GPU gets the table's). */
uint64_t sim_mig_profile_mib(const struct sim_state *st, int gpu, const struct sim_mig_profile *p)
{
	return p->mem_mib * (st->dev[gpu].total >> 20) / H100_MIB;
}

unsigned sim_mig_profile_sms(const struct sim_state *st, int gpu, const struct sim_mig_profile *p)
{
	unsigned n = p->sms * st->dev[gpu].sms / H100_SMS;
	return n > 0 ? n : 1;
}

int sim_mig_ci_profile_slices(unsigned index)
{
	return index < sizeof(ci_slices) / sizeof(ci_slices[0]) ? (int)ci_slices[index] : -1;
}

unsigned sim_mig_ci_sms(const struct sim_state *st, const struct sim_mig_gi *gi, unsigned ci_profile)
{
	const struct sim_mig_profile *p = sim_mig_profile(gi->profile);
	unsigned sms = st->dev[gi->slot].sms, s = (unsigned)sim_mig_ci_profile_slices(ci_profile);
	if (p == NULL || s >= p->slices)
		return sms;
	return sms * s / p->slices > 0 ? sms * s / p->slices : 1;
}

struct sim_mig_gi *sim_mig_gi_by_id(struct sim_state *st, int gpu, unsigned id)
{
	if (gpu < 0 || gpu >= SIM_MAX_GPUS)
		return NULL;
	for (int k = 0; k < SIM_MIG_MAX_GI; k++)
		if (st->mig[gpu].gi[k].live && st->mig[gpu].gi[k].id == id)
			return &st->mig[gpu].gi[k];
	return NULL;
}

struct sim_mig_ci *sim_mig_ci_by_id(struct sim_mig_gi *gi, unsigned id)
{
	for (int k = 0; gi != NULL && k < SIM_MIG_MAX_CI; k++)
		if (gi->ci[k].live && gi->ci[k].id == id)
			return &gi->ci[k];
	return NULL;
}

bool sim_mig_slot_owner(const struct sim_state *st, int slot, int *gpu, const struct sim_mig_gi **gi)
{
	if (slot < SIM_MAX_GPUS || slot >= SIM_MAX_DEVICES)
		return false;
	for (int g = 0; g < (int)st->ndev && g < SIM_MAX_GPUS; g++)
		for (int k = 0; k < SIM_MIG_MAX_GI; k++)
			if (st->mig[g].gi[k].live && st->mig[g].gi[k].slot == (uint32_t)slot) {
				if (gpu != NULL)
					*gpu = g;
				if (gi != NULL)
					*gi = &st->mig[g].gi[k];
				return true;
			}
	return false;
}

bool sim_mig_on(const struct sim_state *st, int gpu)
{
	return gpu >= 0 && gpu < SIM_MAX_GPUS && (uint32_t)gpu < st->ndev && st->mig[gpu].capable &&
	       st->mig[gpu].current == NVML_DEVICE_MIG_ENABLE;
}

/* Whether [start, start + size) of a GPU's memory slices is free. */
static bool fits(const struct sim_mig_gpu *m, unsigned start, unsigned size)
{
	for (int k = 0; k < SIM_MIG_MAX_GI; k++) {
		const struct sim_mig_gi *g = &m->gi[k];
		if (g->live && start < (unsigned)g->start + g->size && (unsigned)g->start < start + size)
			return false;
	}
	return true;
}

unsigned sim_mig_remaining(const struct sim_state *st, int gpu, const struct sim_mig_profile *p)
{
	unsigned n = 0, live = 0;
	for (int k = 0; k < SIM_MIG_MAX_GI; k++)
		live += st->mig[gpu].gi[k].live;
	for (unsigned i = 0; i < p->nstarts; i++) /* a profile's placements never overlap one another */
		n += fits(&st->mig[gpu], p->starts[i], p->mem_slices);
	return live + n > SIM_MIG_MAX_GI ? SIM_MIG_MAX_GI - live : n;
}

/* Whether a live process has a context or memory on slot (lock held). */
static bool slot_busy_locked(const struct sim_state *st, int slot, int ci)
{
	for (int i = 0; i < SIM_MAX_PROCS; i++) {
		const struct sim_proc_state *p = &st->proc[i];
		if (atomic_load(&p->pid) == 0)
			continue;
		if (!(p->dev_mask & (1u << slot)) && atomic_load(&p->used[slot]) == 0)
			continue;
		if (ci < 0 || p->mig_ci[slot] == 0 || p->mig_ci[slot] == (uint8_t)(ci + 1))
			return true;
	}
	return false;
}

static bool gpu_busy_locked(const struct sim_state *st, int gpu)
{
	if (slot_busy_locked(st, gpu, -1))
		return true;
	for (int k = 0; k < SIM_MIG_MAX_GI; k++)
		if (st->mig[gpu].gi[k].live && slot_busy_locked(st, (int)st->mig[gpu].gi[k].slot, -1))
			return true;
	return false;
}

static void free_gi_locked(struct sim_state *st, struct sim_mig_gi *gi)
{
	struct sim_dev_state *d = &st->dev[gi->slot];
	memset(d, 0, sizeof(*d));
	memset(gi, 0, sizeof(*gi));
}

nvmlReturn_t sim_mig_set_mode(struct sim_state *st, int gpu, unsigned mode, nvmlReturn_t *activation)
{
	if (gpu < 0 || (uint32_t)gpu >= st->ndev || (mode != NVML_DEVICE_MIG_DISABLE && mode != NVML_DEVICE_MIG_ENABLE))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!st->mig[gpu].capable)
		return NVML_ERROR_NOT_SUPPORTED;
	sim_reap(st);
	if (sim_state_lock(st) != 0)
		return NVML_ERROR_UNKNOWN;
	struct sim_mig_gpu *m = &st->mig[gpu];
	m->pending = mode;
	*activation = NVML_SUCCESS;
	if (m->current != mode && gpu_busy_locked(st, gpu)) {
		*activation = NVML_ERROR_IN_USE; /* pending until the GPU is idle and the mode set again */
	} else if (m->current != mode) {
		for (int k = 0; k < SIM_MIG_MAX_GI; k++) /* the reset that applies it clears the instances */
			if (m->gi[k].live)
				free_gi_locked(st, &m->gi[k]);
		m->current = mode;
	}
	sim_state_unlock(st);
	return NVML_SUCCESS;
}

static int free_slot_locked(const struct sim_state *st)
{
	for (int s = SIM_MAX_GPUS; s < SIM_MAX_DEVICES; s++)
		if (!sim_mig_slot_owner(st, s, NULL, NULL))
			return s;
	return -1;
}

static unsigned free_gi_id(const struct sim_mig_gpu *m)
{
	for (unsigned id = 1;; id++) {
		bool taken = false;
		for (int k = 0; k < SIM_MIG_MAX_GI; k++)
			taken |= m->gi[k].live && m->gi[k].id == id;
		if (!taken)
			return id;
	}
}

static void instance_uuid(const struct sim_state *st, int gpu, uint32_t serial, unsigned char out[16])
{
	memcpy(out, st->dev[gpu].uuid, 16);
	out[6] ^= 0x4d; /* 'M' */
	out[7] ^= 0x47; /* 'G' */
	out[12] = (unsigned char)(serial >> 24);
	out[13] = (unsigned char)(serial >> 16);
	out[14] = (unsigned char)(serial >> 8);
	out[15] ^= (unsigned char)serial;
}

/* Lock held; the placement checked. */
static nvmlReturn_t make_gi_locked(struct sim_state *st, int gpu, const struct sim_mig_profile *p, unsigned start,
				   unsigned *id)
{
	struct sim_mig_gpu *m = &st->mig[gpu];
	int k = 0, slot = free_slot_locked(st);
	while (k < SIM_MIG_MAX_GI && m->gi[k].live)
		k++;
	if (k == SIM_MIG_MAX_GI || slot < 0)
		return NVML_ERROR_INSUFFICIENT_RESOURCES;
	struct sim_mig_gi *gi = &m->gi[k];
	struct sim_dev_state *d = &st->dev[slot];
	memset(gi, 0, sizeof(*gi));
	memset(d, 0, sizeof(*d));
	char name[SIM_NAME_LEN];
	snprintf(name, sizeof(name), "%.60s MIG %s", st->dev[gpu].name, p->name);
	memcpy(d->name, name, sizeof(name));
	instance_uuid(st, gpu, ++m->made, d->uuid);
	d->total = sim_mig_profile_mib(st, gpu, p) << 20;
	d->sms = sim_mig_profile_sms(st, gpu, p);
	d->minor = st->dev[gpu].minor;
	gi->profile = (uint8_t)p->index;
	gi->start = (uint8_t)start;
	gi->size = (uint8_t)p->mem_slices;
	gi->id = free_gi_id(m);
	gi->slot = (uint32_t)slot;
	gi->live = 1;
	*id = gi->id;
	return NVML_SUCCESS;
}

nvmlReturn_t sim_mig_gi_create(struct sim_state *st, int gpu, unsigned profile_id, const unsigned *start, unsigned *id)
{
	const struct sim_mig_profile *p = sim_mig_profile_by_id(profile_id);
	nvmlReturn_t rc = NVML_ERROR_INSUFFICIENT_RESOURCES;

	if (!sim_mig_on(st, gpu))
		return NVML_ERROR_NOT_SUPPORTED;
	if (p == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	bool valid = start == NULL;
	for (unsigned i = 0; start != NULL && i < p->nstarts; i++)
		valid |= p->starts[i] == *start;
	if (!valid)
		return NVML_ERROR_INVALID_ARGUMENT; /* not one of the profile's placements */
	if (sim_state_lock(st) != 0)
		return NVML_ERROR_UNKNOWN;
	for (unsigned i = 0; i < p->nstarts && rc == NVML_ERROR_INSUFFICIENT_RESOURCES; i++) {
		unsigned s = start != NULL ? *start : p->starts[i];
		if (fits(&st->mig[gpu], s, p->mem_slices))
			rc = make_gi_locked(st, gpu, p, s, id);
		if (start != NULL)
			break;
	}
	sim_state_unlock(st);
	return rc;
}

nvmlReturn_t sim_mig_gi_destroy(struct sim_state *st, int gpu, unsigned id)
{
	nvmlReturn_t rc = NVML_SUCCESS;

	sim_reap(st);
	if (sim_state_lock(st) != 0)
		return NVML_ERROR_UNKNOWN;
	struct sim_mig_gi *gi = sim_mig_gi_by_id(st, gpu, id);
	bool has_ci = false;
	for (int k = 0; gi != NULL && k < SIM_MIG_MAX_CI; k++)
		has_ci |= gi->ci[k].live;
	if (gi == NULL)
		rc = NVML_ERROR_INVALID_ARGUMENT;
	else if (has_ci || slot_busy_locked(st, (int)gi->slot, -1))
		rc = NVML_ERROR_IN_USE; /* compute instances or processes on it */
	else
		free_gi_locked(st, gi);
	sim_state_unlock(st);
	return rc;
}

/* Compute instance placements of a profile inside a GPU instance of g
 * compute slices: starts aligned to its size. Returns how many (<= 7). */
unsigned sim_mig_ci_placements(unsigned g, unsigned s, unsigned starts[SIM_MIG_MAX_CI])
{
	unsigned n = 0;
	for (unsigned b = 0; s > 0 && b + s <= g && n < SIM_MIG_MAX_CI; b += s)
		starts[n++] = b;
	return n;
}

static bool ci_fits(const struct sim_mig_gi *gi, unsigned start, unsigned size)
{
	for (int k = 0; k < SIM_MIG_MAX_CI; k++) {
		const struct sim_mig_ci *c = &gi->ci[k];
		if (c->live && start < (unsigned)c->start + c->size && (unsigned)c->start < start + size)
			return false;
	}
	return true;
}

unsigned sim_mig_ci_remaining(const struct sim_mig_gi *gi, unsigned ci_profile)
{
	const struct sim_mig_profile *p = sim_mig_profile(gi->profile);
	unsigned starts[SIM_MIG_MAX_CI], n = 0;
	int s = sim_mig_ci_profile_slices(ci_profile);
	if (p == NULL || s < 0)
		return 0;
	unsigned k = sim_mig_ci_placements(p->slices, (unsigned)s, starts);
	for (unsigned i = 0; i < k; i++)
		n += ci_fits(gi, starts[i], (unsigned)s);
	return n;
}

static nvmlReturn_t make_ci_locked(struct sim_state *st, int gpu, struct sim_mig_gi *gi, unsigned prof, unsigned start,
				   unsigned *id)
{
	int k = 0;
	while (k < SIM_MIG_MAX_CI && gi->ci[k].live)
		k++;
	if (k == SIM_MIG_MAX_CI)
		return NVML_ERROR_INSUFFICIENT_RESOURCES;
	unsigned cid = 0;
	while (sim_mig_ci_by_id(gi, cid) != NULL)
		cid++;
	struct sim_mig_ci *c = &gi->ci[k];
	memset(c, 0, sizeof(*c));
	c->profile = (uint8_t)prof;
	c->start = (uint8_t)start;
	c->size = (uint8_t)sim_mig_ci_profile_slices(prof);
	c->id = cid;
	instance_uuid(st, gpu, ++st->mig[gpu].made, c->uuid);
	c->live = 1;
	*id = cid;
	return NVML_SUCCESS;
}

nvmlReturn_t sim_mig_ci_create(struct sim_state *st, int gpu, unsigned gi_id, unsigned prof, const unsigned *start,
			       unsigned *id)
{
	nvmlReturn_t rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
	unsigned starts[SIM_MIG_MAX_CI];

	if (sim_state_lock(st) != 0)
		return NVML_ERROR_UNKNOWN;
	struct sim_mig_gi *gi = sim_mig_gi_by_id(st, gpu, gi_id);
	const struct sim_mig_profile *p = gi != NULL ? sim_mig_profile(gi->profile) : NULL;
	int s = sim_mig_ci_profile_slices(prof);
	if (p == NULL) {
		rc = NVML_ERROR_INVALID_ARGUMENT;
	} else if (s < 0 || (unsigned)s > p->slices) {
		rc = NVML_ERROR_NOT_SUPPORTED;
	} else {
		unsigned n = sim_mig_ci_placements(p->slices, (unsigned)s, starts);
		bool valid = start == NULL;
		for (unsigned i = 0; start != NULL && i < n; i++)
			valid |= starts[i] == *start;
		if (!valid)
			rc = NVML_ERROR_INVALID_ARGUMENT;
		for (unsigned i = 0; valid && i < n && rc == NVML_ERROR_INSUFFICIENT_RESOURCES; i++) {
			unsigned b = start != NULL ? *start : starts[i];
			if (ci_fits(gi, b, (unsigned)s))
				rc = make_ci_locked(st, gpu, gi, prof, b, id);
			if (start != NULL)
				break;
		}
	}
	sim_state_unlock(st);
	return rc;
}

nvmlReturn_t sim_mig_ci_destroy(struct sim_state *st, int gpu, unsigned gi_id, unsigned ci_id)
{
	nvmlReturn_t rc = NVML_SUCCESS;

	sim_reap(st);
	if (sim_state_lock(st) != 0)
		return NVML_ERROR_UNKNOWN;
	struct sim_mig_gi *gi = sim_mig_gi_by_id(st, gpu, gi_id);
	struct sim_mig_ci *c = sim_mig_ci_by_id(gi, ci_id);
	if (c == NULL)
		rc = NVML_ERROR_INVALID_ARGUMENT;
	else if (slot_busy_locked(st, (int)gi->slot, (int)ci_id))
		rc = NVML_ERROR_IN_USE;
	else
		memset(c, 0, sizeof(*c));
	sim_state_unlock(st);
	return rc;
}
