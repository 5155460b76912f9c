/* SPDX-License-Identifier: Apache-2.0
 * MIG mode (GPUSLICE_SIM_MIG=n, 1..7): every configured GPU is split into n
 * MIG instances, each its own CUDA device with an nth of the GPU's memory and
 * SMs and a UUID of its own, as a driver in MIG mode exposes them:
 * cuDeviceGetUuid names the parent GPU, cuDeviceGetUuid_v2 the instance, and
 * NVML spells the instance "MIG-<uuid>". Instances share their GPU's device
 * node. Simplification: NVML lists the instances themselves as its devices (a
 * driver lists the parent GPUs and reaches instances through
 * nvmlDeviceGetMigDeviceHandleByIndex). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

/* Per process, filled once by sim_config_from_env (both libraries parse it). */
static struct {
	bool mig[SIM_MAX_DEVICES];
	unsigned char parent[SIM_MAX_DEVICES][16];
} mig_tab;

static int mig_count(unsigned *n, char *err, size_t errlen)
{
	const char *v = getenv("GPUSLICE_SIM_MIG");
	*n = 0;
	if (v == NULL || *v == '\0' || strcmp(v, "0") == 0)
		return 0;
	if (strlen(v) != 1 || v[0] < '1' || v[0] > '7') {
		snprintf(err, errlen, "GPUSLICE_SIM_MIG=\"%.20s\": want instances per GPU, 1..7", v);
		return -1;
	}
	*n = (unsigned)(v[0] - '0');
	return 0;
}

int sim_mig_split(struct sim_config *c, char *err, size_t errlen)
{
	static struct sim_dev_config parents[SIM_MAX_DEVICES];
	unsigned n;

	memset(&mig_tab, 0, sizeof(mig_tab));
	if (mig_count(&n, err, errlen) != 0)
		return -1;
	if (n == 0)
		return 0;
	if ((unsigned)c->ndev * n > SIM_MAX_DEVICES) {
		snprintf(err, errlen, "GPUSLICE_SIM_MIG=%u: %d GPUs make more than %d devices", n, c->ndev,
			 SIM_MAX_DEVICES);
		return -1;
	}
	int np = c->ndev;
	memcpy(parents, c->dev, sizeof(parents[0]) * (size_t)np);
	c->ndev = 0;
	for (int p = 0; p < np; p++)
		for (unsigned j = 0; j < n; j++) {
			int i = c->ndev++;
			struct sim_dev_config *d = &c->dev[i];
			*d = parents[p];
			d->memory = parents[p].memory / n & ~((1ull << 20) - 1);
			d->sms = parents[p].sms / n > 0 ? parents[p].sms / n : 1;
			d->uuid[6] ^= 0x4d; /* the instance's own UUID, derived from its GPU's */
			d->uuid[7] ^= (unsigned char)(0x10 + j);
			mig_tab.mig[i] = true;
			memcpy(mig_tab.parent[i], parents[p].uuid, 16);
		}
	return 0;
}

bool sim_mig_parent(int index, unsigned char out[16])
{
	if (index < 0 || index >= SIM_MAX_DEVICES || !mig_tab.mig[index])
		return false;
	if (out != NULL)
		memcpy(out, mig_tab.parent[index], 16);
	return true;
}

void sim_format_dev_uuid(int index, const unsigned char u[16], char *buf, size_t len)
{
	sim_format_uuid(u, buf, len);
	if (sim_mig_parent(index, NULL) && len > 4)
		memcpy(buf, "MIG-", 4);
}
