/* SPDX-License-Identifier: Apache-2.0
 * NVML's compute instance calls and MIG device handles: a MIG device is a
 * compute instance, reached from its GPU by index (nvmlDeviceGetMigDeviceHandleByIndex)
 * or by its "MIG-" UUID; its handle answers the device queries (memory, processes,
 * UUID, name) for its instance. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "nvml.h"

static nvmlReturn_t bad(void)
{
	return sim_nvml_check() != NVML_SUCCESS ? NVML_ERROR_UNINITIALIZED : NVML_ERROR_INVALID_ARGUMENT;
}

static void ci_info(const struct sim_mig_gi *gi, unsigned prof, unsigned *id, unsigned *slices, unsigned *count,
		    unsigned *sms, unsigned *ce, unsigned *dec, unsigned *enc, unsigned *jpeg, unsigned *ofa)
{
	const struct sim_mig_profile *p = sim_mig_profile(gi->profile);
	unsigned starts[SIM_MIG_MAX_CI];
	int s = sim_mig_ci_profile_slices(prof);
	*id = prof;
	*slices = (unsigned)s;
	*count = sim_mig_ci_placements(p->slices, (unsigned)s, starts);
	*sms = sim_mig_ci_sms(sim_nvml.st, gi, prof);
	*ce = p->ce; /* the GPU instance's engines, shared by its compute instances */
	*dec = p->dec;
	*enc = p->enc;
	*jpeg = p->jpeg;
	*ofa = p->ofa;
}

static nvmlReturn_t ci_profile(nvmlGpuInstance_t h, unsigned prof, unsigned eng, struct sim_mig_gi **gi, int *gpu)
{
	if ((*gi = sim_nvml_gi_of(h, gpu)) == NULL || eng != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED ||
	    prof >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
		return bad();
	int s = sim_mig_ci_profile_slices(prof);
	return s < 0 || (unsigned)s > sim_mig_profile((*gi)->profile)->slices ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t h, unsigned int prof,
								   unsigned int eng,
								   nvmlComputeInstanceProfileInfo_t *o)
{
	struct sim_mig_gi *gi;
	int gpu;
	nvmlReturn_t rc = ci_profile(h, prof, eng, &gi, &gpu);

	if (rc != NVML_SUCCESS)
		return rc;
	if (o == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	memset(o, 0, sizeof(*o));
	ci_info(gi, prof, &o->id, &o->sliceCount, &o->instanceCount, &o->multiprocessorCount, &o->sharedCopyEngineCount,
		&o->sharedDecoderCount, &o->sharedEncoderCount, &o->sharedJpegCount, &o->sharedOfaCount);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t h, unsigned int prof,
								    unsigned int eng,
								    nvmlComputeInstanceProfileInfo_v2_t *o)
{
	struct sim_mig_gi *gi;
	int gpu;
	char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
	nvmlReturn_t rc = ci_profile(h, prof, eng, &gi, &gpu);

	if (rc != NVML_SUCCESS)
		return rc;
	if (o == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	const struct sim_mig_profile *p = sim_mig_profile(gi->profile);
	int s = sim_mig_ci_profile_slices(prof);
	if ((unsigned)s == p->slices)
		snprintf(name, sizeof(name), "MIG %s", p->name);
	else
		snprintf(name, sizeof(name), "MIG %dc.%s", s, p->name);
	unsigned version = o->version;
	if (version != nvmlComputeInstanceProfileInfo_v2 && version != nvmlComputeInstanceProfileInfo_v3)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	if (version == nvmlComputeInstanceProfileInfo_v3)
		memset(o, 0, sizeof(nvmlComputeInstanceProfileInfo_v3_t));
	else
		memset(o, 0, sizeof(*o));
	o->version = version;
	ci_info(gi, prof, &o->id, &o->sliceCount, &o->instanceCount, &o->multiprocessorCount, &o->sharedCopyEngineCount,
		&o->sharedDecoderCount, &o->sharedEncoderCount, &o->sharedJpegCount, &o->sharedOfaCount);
	memcpy(o->name, name, sizeof(name)); /* v2 and v3 have it at the same offset */
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t h, unsigned int prof,
									 unsigned int *count)
{
	struct sim_mig_gi *gi;
	int gpu;
	nvmlReturn_t rc = ci_profile(h, prof, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &gi, &gpu);

	if (rc != NVML_SUCCESS)
		return rc;
	if (count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*count = sim_mig_ci_remaining(gi, prof);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t h, unsigned int prof,
									  nvmlComputeInstancePlacement_t *out,
									  unsigned int *count)
{
	struct sim_mig_gi *gi;
	int gpu;
	unsigned starts[SIM_MIG_MAX_CI];
	nvmlReturn_t rc = ci_profile(h, prof, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &gi, &gpu);

	if (rc != NVML_SUCCESS)
		return rc;
	if (count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	unsigned s = (unsigned)sim_mig_ci_profile_slices(prof);
	unsigned n = sim_mig_ci_placements(sim_mig_profile(gi->profile)->slices, s, starts);
	if (out != NULL && *count < n)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	for (unsigned i = 0; out != NULL && i < n; i++)
		out[i] = (nvmlComputeInstancePlacement_t){starts[i], s};
	*count = n;
	return NVML_SUCCESS;
}

static nvmlReturn_t create_ci(nvmlGpuInstance_t h, unsigned prof, const nvmlComputeInstancePlacement_t *pl,
			      nvmlComputeInstance_t *out)
{
	struct sim_mig_gi *gi;
	int gpu;
	unsigned id, start = pl != NULL ? pl->start : 0;
	nvmlReturn_t rc = ci_profile(h, prof, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &gi, &gpu);

	if (rc != NVML_SUCCESS)
		return rc;
	if (out == NULL || (pl != NULL && pl->size != (unsigned)sim_mig_ci_profile_slices(prof)))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (geteuid() != 0)
		return NVML_ERROR_NO_PERMISSION;
	unsigned gid = gi->id;
	rc = sim_mig_ci_create(sim_nvml.st, gpu, gid, prof, pl != NULL ? &start : NULL, &id);
	if (rc == NVML_SUCCESS)
		*out = sim_nvml_ci_handle(gpu, gid, id);
	return rc;
}

NVML_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t h, unsigned int prof,
							   nvmlComputeInstance_t *out)
{
	return create_ci(h, prof, NULL, out);
}

NVML_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(nvmlGpuInstance_t h, unsigned int prof,
									const nvmlComputeInstancePlacement_t *pl,
									nvmlComputeInstance_t *out)
{
	return pl == NULL ? bad() : create_ci(h, prof, pl, out);
}

NVML_API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t h)
{
	struct sim_mig_gi *gi;
	int gpu;
	struct sim_mig_ci *ci = sim_nvml_ci_of(h, &gpu, &gi);

	if (ci == NULL)
		return bad();
	if (geteuid() != 0)
		return NVML_ERROR_NO_PERMISSION;
	return sim_mig_ci_destroy(sim_nvml.st, gpu, gi->id, ci->id);
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t h, unsigned int prof,
							 nvmlComputeInstance_t *out, unsigned int *count)
{
	struct sim_mig_gi *gi;
	int gpu;
	unsigned n = 0;
	nvmlReturn_t rc = ci_profile(h, prof, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &gi, &gpu);

	if (rc != NVML_SUCCESS)
		return rc;
	if (out == NULL || count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned c = 0; c < SIM_MIG_IDS; c++) {
		struct sim_mig_ci *ci = sim_mig_ci_by_id(gi, c);
		if (ci == NULL || ci->profile != prof)
			continue;
		if (n >= *count)
			return NVML_ERROR_INSUFFICIENT_SIZE;
		out[n++] = sim_nvml_ci_handle(gpu, gi->id, c);
	}
	*count = n;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t h, unsigned int id,
							    nvmlComputeInstance_t *out)
{
	int gpu;
	struct sim_mig_gi *gi = sim_nvml_gi_of(h, &gpu);

	if (gi == NULL || out == NULL)
		return bad();
	if (sim_mig_ci_by_id(gi, id) == NULL)
		return NVML_ERROR_NOT_FOUND;
	*out = sim_nvml_ci_handle(gpu, gi->id, id);
	return NVML_SUCCESS;
}

static nvmlReturn_t ci_get_info(nvmlComputeInstance_t h, nvmlComputeInstanceInfo_t *o, bool placement)
{
	struct sim_mig_gi *gi;
	int gpu;
	struct sim_mig_ci *ci = sim_nvml_ci_of(h, &gpu, &gi);

	if (ci == NULL || o == NULL)
		return bad();
	memset(o, 0, sizeof(*o));
	o->device = sim_nvml_gpu_handle(gpu);
	o->gpuInstance = sim_nvml_gi_handle(gpu, gi->id);
	o->id = ci->id;
	o->profileId = ci->profile;
	if (placement)
		o->placement = (nvmlComputeInstancePlacement_t){ci->start, ci->size};
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t h, nvmlComputeInstanceInfo_t *o)
{
	return ci_get_info(h, o, false);
}

NVML_API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t h, nvmlComputeInstanceInfo_t *o)
{
	return ci_get_info(h, o, true);
}
