/* SPDX-License-Identifier: Apache-2.0
 * Simulated NVML device queries: handles, UUID, name, memory, utilization
 * (from the shared engine's busy time) and running compute processes (host
 * PIDs from the shared process table, dead processes reaped first). */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "nvml.h"

struct sim_dev_state *sim_nvml_dev(nvmlDevice_t h, int *index)
{
	struct sim_nvml_dev *d = (struct sim_nvml_dev *)h;
	struct sim_mig_gi *gi;
	struct sim_mig_ci *ci;
	int gpu;

	if (sim_nvml_mig(h, &gpu, &gi, &ci)) { /* a MIG device: its GPU instance's slot */
		if (index != NULL)
			*index = (int)gi->slot;
		return &sim_nvml.st->dev[gi->slot];
	}
	if (d < &sim_nvml.dev[0] || d >= &sim_nvml.dev[atomic_load_explicit(&sim_nvml.ndev, memory_order_acquire)] ||
	    d->magic != SIM_NVML_DEV_MAGIC)
		return NULL;
	if (index != NULL)
		*index = d->index;
	return &sim_nvml.st->dev[d->index];
}

nvmlReturn_t sim_nvml_live(nvmlDevice_t h, int *index)
{
	nvmlReturn_t rc = sim_nvml_check();
	if (rc != NVML_SUCCESS)
		return rc;
	if (sim_nvml_dev(h, index) == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	return sim_is_lost(sim_nvml.st, *index) ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

nvmlReturn_t sim_nvml_parent(nvmlDevice_t h, int *gpu)
{
	nvmlReturn_t rc = sim_nvml_check();
	if (rc != NVML_SUCCESS)
		return rc;
	if (sim_nvml_dev(h, gpu) == NULL || ((struct sim_nvml_dev *)h)->magic != SIM_NVML_DEV_MAGIC)
		return NVML_ERROR_INVALID_ARGUMENT;
	return NVML_SUCCESS;
}

#define DEV_OR_RETURN(h, d, idx)                               \
	do {                                                   \
		nvmlReturn_t rc_ = sim_nvml_check();           \
		if (rc_ != NVML_SUCCESS)                       \
			return rc_;                            \
		if (((d) = sim_nvml_dev((h), &(idx))) == NULL) \
			return NVML_ERROR_INVALID_ARGUMENT;    \
	} while (0)

/* Measurements of a lost device (gpuslice-sim-ctl lost) fail like a GPU
 * that fell off the bus; identity queries still answer. */
#define LIVE_OR_RETURN(h, d, idx)                      \
	do {                                           \
		DEV_OR_RETURN(h, d, idx);              \
		if (sim_is_lost(sim_nvml.st, (idx)))   \
			return NVML_ERROR_GPU_IS_LOST; \
	} while (0)

static nvmlReturn_t get_count(unsigned int *n)
{
	nvmlReturn_t rc = sim_nvml_check();

	if (rc != NVML_SUCCESS)
		return rc;
	if (n == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*n = (unsigned)sim_nvml_rescan();
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *n)
{
	return get_count(n);
}
NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
	return get_count(n);
}

static nvmlReturn_t by_index(unsigned int i, nvmlDevice_t *h)
{
	nvmlReturn_t rc = sim_nvml_check();

	if (rc != NVML_SUCCESS)
		return rc;
	if (h == NULL || i >= (unsigned)atomic_load_explicit(&sim_nvml.ndev, memory_order_acquire))
		return NVML_ERROR_INVALID_ARGUMENT;
	*h = (nvmlDevice_t)&sim_nvml.dev[i];
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *h)
{
	return by_index(i, h);
}
NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *h)
{
	return by_index(i, h);
}

/* A MIG device of GPU gpu by its "MIG-" UUID. */
static bool by_mig_uuid(int gpu, const char *uuid, nvmlDevice_t *h)
{
	char buf[64];

	for (unsigned g = 0; sim_mig_on(sim_nvml.st, gpu) && g < SIM_MIG_IDS; g++) {
		struct sim_mig_gi *gi = sim_mig_gi_by_id(sim_nvml.st, gpu, g);
		for (unsigned c = 0; gi != NULL && c < SIM_MIG_IDS; c++) {
			struct sim_mig_ci *ci = sim_mig_ci_by_id(gi, c);
			if (ci == NULL)
				continue;
			sim_format_uuid(ci->uuid, buf, sizeof(buf));
			if (strcmp(buf + 4, uuid + 4) == 0) {
				*h = sim_nvml_mig_handle(gpu, g, c);
				return true;
			}
		}
	}
	return false;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *h)
{
	char buf[64];
	nvmlReturn_t rc = sim_nvml_check();

	if (rc != NVML_SUCCESS)
		return rc;
	if (uuid == NULL || h == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0, n = atomic_load(&sim_nvml.ndev); i < n; i++) {
		int idx = sim_nvml.dev[i].index;
		sim_format_uuid(sim_nvml.st->dev[idx].uuid, buf, sizeof(buf));
		if (strcmp(buf, uuid) == 0) {
			*h = (nvmlDevice_t)&sim_nvml.dev[i];
			return NVML_SUCCESS;
		}
		if (strncmp(uuid, "MIG-", 4) == 0 && by_mig_uuid(idx, uuid, h))
			return NVML_SUCCESS;
	}
	return NVML_ERROR_NOT_FOUND;
}

NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t h, unsigned int *i)
{
	struct sim_dev_state *d;
	int idx;

	struct sim_mig_gi *gi;
	struct sim_mig_ci *ci;
	int gpu;

	DEV_OR_RETURN(h, d, idx);
	(void)d;
	if (i == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (sim_nvml_mig(h, &gpu, &gi, &ci)) /* its index under its GPU */
		*i = (unsigned)sim_nvml_mig_index(gpu, gi->id, ci->id);
	else
		*i = (unsigned)((struct sim_nvml_dev *)h - sim_nvml.dev);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t h, unsigned int *minor)
{
	struct sim_dev_state *d;
	int idx;

	DEV_OR_RETURN(h, d, idx);
	if (minor == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*minor = d->minor; /* /dev/nvidia<minor> */
	return NVML_SUCCESS;
}

static nvmlReturn_t put(char *buf, unsigned len, const char *s)
{
	if (buf == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (len < strlen(s) + 1)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(buf, s, strlen(s) + 1);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned int len)
{
	struct sim_dev_state *d;
	char buf[SIM_NAME_LEN];
	int idx;

	DEV_OR_RETURN(h, d, idx);
	snprintf(buf, sizeof(buf), "%s", d->name);
	return put(name, len, buf);
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned int len)
{
	struct sim_dev_state *d;
	char buf[64];
	int idx;

	struct sim_mig_gi *gi;
	struct sim_mig_ci *ci;
	int gpu;

	DEV_OR_RETURN(h, d, idx);
	bool mig = sim_nvml_mig(h, &gpu, &gi, &ci);
	sim_format_uuid(mig ? ci->uuid : d->uuid, buf, sizeof(buf));
	if (mig)
		memcpy(buf, "MIG-", 4);
	return put(uuid, len, buf);
}

NVML_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t h, unsigned int *is_mig)
{
	struct sim_dev_state *d;
	int idx;

	struct sim_mig_gi *gi;
	struct sim_mig_ci *ci;
	int gpu;

	DEV_OR_RETURN(h, d, idx);
	(void)d;
	if (is_mig == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*is_mig = sim_nvml_mig(h, &gpu, &gi, &ci);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t h, int *major, int *minor)
{
	struct sim_dev_state *d;
	int idx;

	DEV_OR_RETURN(h, d, idx);
	(void)d;
	if (major == NULL || minor == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*major = 9;
	*minor = 0;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *pci)
{
	struct sim_dev_state *d;
	int idx;

	DEV_OR_RETURN(h, d, idx);
	(void)d;
	if (pci == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	sim_mig_slot_owner(sim_nvml.st, idx, &idx, NULL); /* a MIG device: its GPU's function */
	memset(pci, 0, sizeof(*pci));
	snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02x:00.0", idx + 1);
	snprintf(pci->busId, sizeof(pci->busId), "00000000:%02x:00.0", idx + 1);
	pci->bus = (unsigned)idx + 1;
	pci->pciDeviceId = 0x233010deu;
	pci->pciSubSystemId = 0x16c110deu;
	return NVML_SUCCESS;
}

/* A GPU in MIG mode counts what its instances hold; a MIG device its GPU instance's. */
static void mem_numbers(struct sim_dev_state *d, int idx, unsigned long long *total, unsigned long long *used)
{
	sim_reap(sim_nvml.st);
	*total = d->total;
	*used = atomic_load(&d->used);
	for (int k = 0; sim_mig_on(sim_nvml.st, idx) && k < SIM_MIG_MAX_GI; k++)
		if (sim_nvml.st->mig[idx].gi[k].live)
			*used += atomic_load(&sim_nvml.st->dev[sim_nvml.st->mig[idx].gi[k].slot].used);
	if (*used > *total)
		*used = *total;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m)
{
	struct sim_dev_state *d;
	int idx;

	LIVE_OR_RETURN(h, d, idx);
	if (m == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	mem_numbers(d, idx, &m->total, &m->used);
	m->free = m->total - m->used;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m)
{
	struct sim_dev_state *d;
	int idx;

	LIVE_OR_RETURN(h, d, idx);
	if (m == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (m->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	mem_numbers(d, idx, &m->total, &m->used);
	m->reserved = 0;
	m->free = m->total - m->used;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *u)
{
	struct sim_dev_state *d;
	int idx;

	LIVE_OR_RETURN(h, d, idx);
	if (u == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (idx >= SIM_MAX_GPUS || sim_mig_on(sim_nvml.st, idx))
		return NVML_ERROR_NOT_SUPPORTED; /* "On MIG-enabled GPUs, querying device utilization rates is not currently supported" */
	u->gpu = sim_engine_utilization(&d->engine, sim_now_ns());
	u->memory = u->gpu / 2;
	return NVML_SUCCESS;
}
