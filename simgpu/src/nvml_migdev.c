/* SPDX-License-Identifier: Apache-2.0
 * MIG device handles: a GPU in MIG mode lists its MIG devices (compute
 * instances) by index, ordered by GPU instance id then compute instance id. */
#include <string.h>

#include "nvml.h"

nvmlDevice_t sim_nvml_gpu_handle(int gpu)
{
	for (int k = 0, n = atomic_load(&sim_nvml.ndev); k < n; k++)
		if (sim_nvml.dev[k].index == gpu)
			return (nvmlDevice_t)&sim_nvml.dev[k];
	return NULL;
}

nvmlDevice_t sim_nvml_mig_handle(int gpu, unsigned gi, unsigned ci)
{
	struct sim_nvml_dev *d = &sim_nvml.mig[gpu][gi % SIM_MIG_IDS][ci % SIM_MIG_IDS];
	pthread_mutex_lock(&sim_nvml.mu);
	*d = (struct sim_nvml_dev){SIM_NVML_MIG_MAGIC, gpu, gi, ci};
	pthread_mutex_unlock(&sim_nvml.mu);
	return (nvmlDevice_t)d;
}

bool sim_nvml_mig(nvmlDevice_t h, int *gpu, struct sim_mig_gi **gi, struct sim_mig_ci **ci)
{
	const struct sim_nvml_dev *d = (const struct sim_nvml_dev *)h;
	const struct sim_nvml_dev *lo = &sim_nvml.mig[0][0][0], *hi = lo + SIM_MAX_GPUS * SIM_MIG_IDS * SIM_MIG_IDS;
	if (d < lo || d >= hi || d->magic != SIM_NVML_MIG_MAGIC || !sim_mig_on(sim_nvml.st, d->index))
		return false;
	struct sim_mig_gi *g = sim_mig_gi_by_id(sim_nvml.st, d->index, d->gi);
	struct sim_mig_ci *c = sim_mig_ci_by_id(g, d->ci);
	if (c == NULL)
		return false;
	*gpu = d->index;
	*gi = g;
	*ci = c;
	return true;
}

/* The n-th MIG device of a GPU (ids in *gi, *ci); false past the last. */
static bool nth(int gpu, int n, unsigned *gi, unsigned *ci)
{
	for (unsigned g = 0; g < SIM_MIG_IDS; g++) {
		struct sim_mig_gi *x = sim_mig_gi_by_id(sim_nvml.st, gpu, g);
		for (unsigned c = 0; x != NULL && c < SIM_MIG_IDS; c++)
			if (sim_mig_ci_by_id(x, c) != NULL && n-- == 0) {
				*gi = g;
				*ci = c;
				return true;
			}
	}
	return false;
}

int sim_nvml_mig_index(int gpu, unsigned gi, unsigned ci)
{
	unsigned g, c;
	for (int n = 0; nth(gpu, n, &g, &c); n++)
		if (g == gi && c == ci)
			return n;
	return -1;
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h, unsigned int *count)
{
	int gpu;
	nvmlReturn_t rc = sim_nvml_parent(h, &gpu);

	if (rc != NVML_SUCCESS)
		return rc;
	if (count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*count = sim_mig_on(sim_nvml.st, gpu) ? SIM_MIG_MAX_GI : 0;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h, unsigned int index, nvmlDevice_t *out)
{
	int gpu;
	unsigned gi, ci;
	nvmlReturn_t rc = sim_nvml_parent(h, &gpu);

	if (rc != NVML_SUCCESS)
		return rc;
	if (out == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!sim_mig_on(sim_nvml.st, gpu))
		return NVML_ERROR_NOT_SUPPORTED;
	if (index >= SIM_MIG_MAX_GI)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!nth(gpu, (int)index, &gi, &ci))
		return NVML_ERROR_NOT_FOUND;
	*out = sim_nvml_mig_handle(gpu, gi, ci);
	return NVML_SUCCESS;
}

/* The MIG device of a handle, with NVML's answers when it is not one. */
static nvmlReturn_t mig_of(nvmlDevice_t h, int *gpu, struct sim_mig_gi **gi, struct sim_mig_ci **ci)
{
	int idx;
	nvmlReturn_t rc = sim_nvml_check();
	if (rc != NVML_SUCCESS)
		return rc;
	if (sim_nvml_mig(h, gpu, gi, ci))
		return NVML_SUCCESS;
	return sim_nvml_dev(h, &idx) != NULL ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
}

NVML_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t h, nvmlDevice_t *out)
{
	struct sim_mig_gi *gi;
	struct sim_mig_ci *ci;
	int gpu;
	nvmlReturn_t rc = mig_of(h, &gpu, &gi, &ci);

	if (rc != NVML_SUCCESS)
		return rc;
	if (out == NULL || (*out = sim_nvml_gpu_handle(gpu)) == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	return NVML_SUCCESS;
}

/* A MIG device's GPU instance id (ci false) or compute instance id. */
static nvmlReturn_t instance_id(nvmlDevice_t h, unsigned int *id, bool ci_id)
{
	struct sim_mig_gi *gi;
	struct sim_mig_ci *ci;
	int gpu;
	nvmlReturn_t rc = mig_of(h, &gpu, &gi, &ci);

	if (rc != NVML_SUCCESS)
		return rc;
	if (id == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*id = ci_id ? ci->id : gi->id;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t h, unsigned int *id)
{
	return instance_id(h, id, false);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t h, unsigned int *id)
{
	return instance_id(h, id, true);
}
