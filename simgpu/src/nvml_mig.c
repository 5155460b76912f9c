/* SPDX-License-Identifier: Apache-2.0
 * NVML's MIG management calls: mode, GPU instance profiles and placements,
 * GPU and compute instances (create, list, info, destroy), with the return
 * codes nvml.h documents. The state and its rules are mig.c's; changing it
 * needs root, as on a driver. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "nvml.h"

static nvmlReturn_t mig_gpu(nvmlDevice_t h, int *gpu)
{
	nvmlReturn_t rc = sim_nvml_parent(h, gpu);
	if (rc == NVML_SUCCESS && !sim_mig_on(sim_nvml.st, *gpu))
		return NVML_ERROR_NOT_SUPPORTED;
	return rc;
}

static nvmlReturn_t root(void)
{
	return geteuid() == 0 ? NVML_SUCCESS : NVML_ERROR_NO_PERMISSION;
}

nvmlGpuInstance_t sim_nvml_gi_handle(int gpu, unsigned id)
{
	struct sim_nvml_dev *d = &sim_nvml.gi[gpu][id % SIM_MIG_IDS];
	pthread_mutex_lock(&sim_nvml.mu);
	*d = (struct sim_nvml_dev){SIM_NVML_GI_MAGIC, gpu, id, 0};
	pthread_mutex_unlock(&sim_nvml.mu);
	return (nvmlGpuInstance_t)d;
}

nvmlComputeInstance_t sim_nvml_ci_handle(int gpu, unsigned gi, unsigned id)
{
	struct sim_nvml_dev *d = &sim_nvml.ci[gpu][gi % SIM_MIG_IDS][id % SIM_MIG_IDS];
	pthread_mutex_lock(&sim_nvml.mu);
	*d = (struct sim_nvml_dev){SIM_NVML_CI_MAGIC, gpu, gi, id};
	pthread_mutex_unlock(&sim_nvml.mu);
	return (nvmlComputeInstance_t)d;
}

struct sim_mig_gi *sim_nvml_gi_of(nvmlGpuInstance_t h, int *gpu)
{
	const struct sim_nvml_dev *d = (const struct sim_nvml_dev *)h;
	const struct sim_nvml_dev *lo = &sim_nvml.gi[0][0], *hi = lo + SIM_MAX_GPUS * SIM_MIG_IDS;
	if (sim_nvml_check() != NVML_SUCCESS || d < lo || d >= hi || d->magic != SIM_NVML_GI_MAGIC ||
	    !sim_mig_on(sim_nvml.st, d->index))
		return NULL;
	*gpu = d->index;
	return sim_mig_gi_by_id(sim_nvml.st, d->index, d->gi);
}

struct sim_mig_ci *sim_nvml_ci_of(nvmlComputeInstance_t h, int *gpu, struct sim_mig_gi **gi)
{
	const struct sim_nvml_dev *d = (const struct sim_nvml_dev *)h;
	const struct sim_nvml_dev *lo = &sim_nvml.ci[0][0][0], *hi = lo + SIM_MAX_GPUS * SIM_MIG_IDS * SIM_MIG_IDS;
	if (sim_nvml_check() != NVML_SUCCESS || d < lo || d >= hi || d->magic != SIM_NVML_CI_MAGIC ||
	    !sim_mig_on(sim_nvml.st, d->index))
		return NULL;
	*gpu = d->index;
	*gi = sim_mig_gi_by_id(sim_nvml.st, d->index, d->gi);
	return sim_mig_ci_by_id(*gi, d->ci);
}

NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned int *current, unsigned int *pending)
{
	int gpu;
	nvmlReturn_t rc = sim_nvml_parent(h, &gpu);

	if (rc != NVML_SUCCESS)
		return rc;
	if (current == NULL || pending == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!sim_nvml.st->mig[gpu].capable)
		return NVML_ERROR_NOT_SUPPORTED;
	*current = sim_nvml.st->mig[gpu].current;
	*pending = sim_nvml.st->mig[gpu].pending;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t h, unsigned int mode, nvmlReturn_t *activation)
{
	int gpu;
	nvmlReturn_t rc = sim_nvml_parent(h, &gpu);

	if (rc != NVML_SUCCESS)
		return rc;
	if (activation == NULL || mode > NVML_DEVICE_MIG_ENABLE)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!sim_nvml.st->mig[gpu].capable)
		return NVML_ERROR_NOT_SUPPORTED;
	if ((rc = root()) != NVML_SUCCESS)
		return rc;
	return sim_mig_set_mode(sim_nvml.st, gpu, mode, activation);
}

/* Fills the fields every profile info version shares. */
static void gi_info(int gpu, const struct sim_mig_profile *p, unsigned *id, unsigned *slices, unsigned *count,
		    unsigned *sms, unsigned *ce, unsigned *dec, unsigned *enc, unsigned *jpeg, unsigned *ofa,
		    unsigned long long *mib)
{
	*id = p->id;
	*slices = p->slices;
	*count = p->count;
	*sms = sim_mig_profile_sms(sim_nvml.st, gpu, p);
	*ce = p->ce;
	*dec = p->dec;
	*enc = p->enc;
	*jpeg = p->jpeg;
	*ofa = p->ofa;
	*mib = sim_mig_profile_mib(sim_nvml.st, gpu, p);
}

/* The profile an index names on a GPU in MIG mode. */
static nvmlReturn_t profile_at(nvmlDevice_t h, unsigned index, int *gpu, const struct sim_mig_profile **p)
{
	nvmlReturn_t rc = mig_gpu(h, gpu);
	if (rc != NVML_SUCCESS)
		return rc;
	if (index >= NVML_GPU_INSTANCE_PROFILE_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT; /* the end of the profiles, for callers that enumerate */
	*p = sim_mig_profile(index);
	return *p == NULL ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t h, unsigned int profile,
							  nvmlGpuInstanceProfileInfo_t *o)
{
	const struct sim_mig_profile *p;
	int gpu;
	nvmlReturn_t rc = profile_at(h, profile, &gpu, &p);

	if (rc != NVML_SUCCESS)
		return rc;
	if (o == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	memset(o, 0, sizeof(*o));
	o->isP2pSupported = 0;
	gi_info(gpu, p, &o->id, &o->sliceCount, &o->instanceCount, &o->multiprocessorCount, &o->copyEngineCount,
		&o->decoderCount, &o->encoderCount, &o->jpegCount, &o->ofaCount, &o->memorySizeMB);
	return NVML_SUCCESS;
}

/* v2 or v3, by the caller's version field. */
static nvmlReturn_t gi_info_v(int gpu, const struct sim_mig_profile *p, nvmlGpuInstanceProfileInfo_v2_t *o)
{
	char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
	if (o == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	snprintf(name, sizeof(name), "MIG %s", p->name);
	if (o->version == nvmlGpuInstanceProfileInfo_v3) {
		nvmlGpuInstanceProfileInfo_v3_t *v = (nvmlGpuInstanceProfileInfo_v3_t *)o;
		memset(v, 0, sizeof(*v));
		v->version = nvmlGpuInstanceProfileInfo_v3;
		gi_info(gpu, p, &v->id, &v->sliceCount, &v->instanceCount, &v->multiprocessorCount, &v->copyEngineCount,
			&v->decoderCount, &v->encoderCount, &v->jpegCount, &v->ofaCount, &v->memorySizeMB);
		memcpy(v->name, name, sizeof(name));
		return NVML_SUCCESS;
	}
	if (o->version != nvmlGpuInstanceProfileInfo_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	memset(o, 0, sizeof(*o));
	o->version = nvmlGpuInstanceProfileInfo_v2;
	gi_info(gpu, p, &o->id, &o->sliceCount, &o->instanceCount, &o->multiprocessorCount, &o->copyEngineCount,
		&o->decoderCount, &o->encoderCount, &o->jpegCount, &o->ofaCount, &o->memorySizeMB);
	memcpy(o->name, name, sizeof(name));
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t h, unsigned int profile,
							   nvmlGpuInstanceProfileInfo_v2_t *o)
{
	const struct sim_mig_profile *p;
	int gpu;
	nvmlReturn_t rc = profile_at(h, profile, &gpu, &p);

	return rc != NVML_SUCCESS ? rc : gi_info_v(gpu, p, o);
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t h, unsigned int id,
							       nvmlGpuInstanceProfileInfo_v2_t *o)
{
	int gpu;
	nvmlReturn_t rc = mig_gpu(h, &gpu);
	const struct sim_mig_profile *p = sim_mig_profile_by_id(id);

	if (rc != NVML_SUCCESS)
		return rc;
	return p == NULL ? NVML_ERROR_INVALID_ARGUMENT : gi_info_v(gpu, p, o);
}

/* Regardless of the mode, on a MIG-capable GPU. */
NVML_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t h, unsigned int id,
								    nvmlGpuInstancePlacement_t *out,
								    unsigned int *count)
{
	int gpu;
	nvmlReturn_t rc = sim_nvml_parent(h, &gpu);
	const struct sim_mig_profile *p = sim_mig_profile_by_id(id);

	if (rc != NVML_SUCCESS)
		return rc;
	if (!sim_nvml.st->mig[gpu].capable)
		return NVML_ERROR_NOT_SUPPORTED;
	if (count == NULL || p == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (out != NULL && *count < p->nstarts)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	for (unsigned i = 0; out != NULL && i < p->nstarts; i++)
		out[i] = (nvmlGpuInstancePlacement_t){p->starts[i], p->mem_slices};
	*count = p->nstarts;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t h, unsigned int id, unsigned int *count)
{
	int gpu;
	nvmlReturn_t rc = mig_gpu(h, &gpu);
	const struct sim_mig_profile *p = sim_mig_profile_by_id(id);

	if (rc != NVML_SUCCESS)
		return rc;
	if (count == NULL || p == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*count = sim_mig_remaining(sim_nvml.st, gpu, p);
	return NVML_SUCCESS;
}

static nvmlReturn_t create_gi(nvmlDevice_t h, unsigned id, const nvmlGpuInstancePlacement_t *pl, nvmlGpuInstance_t *out)
{
	int gpu;
	unsigned gid, start;
	nvmlReturn_t rc = mig_gpu(h, &gpu);
	const struct sim_mig_profile *p = sim_mig_profile_by_id(id);

	if (rc != NVML_SUCCESS)
		return rc;
	if (out == NULL || p == NULL || (pl != NULL && pl->size != p->mem_slices))
		return NVML_ERROR_INVALID_ARGUMENT;
	if ((rc = root()) != NVML_SUCCESS)
		return rc;
	start = pl != NULL ? pl->start : 0;
	rc = sim_mig_gi_create(sim_nvml.st, gpu, id, pl != NULL ? &start : NULL, &gid);
	if (rc == NVML_SUCCESS)
		*out = sim_nvml_gi_handle(gpu, gid);
	return rc;
}

NVML_API nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t h, unsigned int id, nvmlGpuInstance_t *out)
{
	return create_gi(h, id, NULL, out);
}

NVML_API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t h, unsigned int id,
							       const nvmlGpuInstancePlacement_t *pl,
							       nvmlGpuInstance_t *out)
{
	if (pl == NULL)
		return sim_nvml_check() != NVML_SUCCESS ? NVML_ERROR_UNINITIALIZED : NVML_ERROR_INVALID_ARGUMENT;
	return create_gi(h, id, pl, out);
}

NVML_API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t h)
{
	int gpu;
	struct sim_mig_gi *gi = sim_nvml_gi_of(h, &gpu);

	if (gi == NULL)
		return sim_nvml_check() != NVML_SUCCESS ? NVML_ERROR_UNINITIALIZED : NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t rc = root();
	return rc != NVML_SUCCESS ? rc : sim_mig_gi_destroy(sim_nvml.st, gpu, gi->id);
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t h, unsigned int id, nvmlGpuInstance_t *out,
						unsigned int *count)
{
	int gpu;
	unsigned n = 0;
	nvmlReturn_t rc = mig_gpu(h, &gpu);
	const struct sim_mig_profile *p = sim_mig_profile_by_id(id);

	if (rc != NVML_SUCCESS)
		return rc;
	if (out == NULL || count == NULL || p == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned g = 0; g < SIM_MIG_IDS; g++) {
		struct sim_mig_gi *gi = sim_mig_gi_by_id(sim_nvml.st, gpu, g);
		if (gi == NULL || gi->profile != p->index)
			continue;
		if (n >= *count)
			return NVML_ERROR_INSUFFICIENT_SIZE;
		out[n++] = sim_nvml_gi_handle(gpu, g);
	}
	*count = n;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t h, unsigned int id, nvmlGpuInstance_t *out)
{
	int gpu;
	nvmlReturn_t rc = mig_gpu(h, &gpu);

	if (rc != NVML_SUCCESS)
		return rc;
	if (out == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (sim_mig_gi_by_id(sim_nvml.st, gpu, id) == NULL)
		return NVML_ERROR_NOT_FOUND;
	*out = sim_nvml_gi_handle(gpu, id);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t h, nvmlGpuInstanceInfo_t *o)
{
	int gpu;
	struct sim_mig_gi *gi = sim_nvml_gi_of(h, &gpu);

	if (gi == NULL || o == NULL)
		return sim_nvml_check() != NVML_SUCCESS ? NVML_ERROR_UNINITIALIZED : NVML_ERROR_INVALID_ARGUMENT;
	memset(o, 0, sizeof(*o));
	o->device = sim_nvml_gpu_handle(gpu);
	o->id = gi->id;
	o->profileId = sim_mig_profile(gi->profile)->id;
	o->placement = (nvmlGpuInstancePlacement_t){gi->start, gi->size};
	return NVML_SUCCESS;
}
