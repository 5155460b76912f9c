/* SPDX-License-Identifier: Apache-2.0
 * Hook test: MIG (issue 26 item 7). With the simulated GPU in MIG mode
 * (GPUSLICE_SIM_MIG=2: two instances of one GPU, two CUDA devices whose
 * cuDeviceGetUuid names the same GPU), the group's limit holds per instance:
 * each instance has a slot of its own, keyed on the instance's "MIG-" UUID as
 * NVML spells it, so filling one leaves the other whole.
 */
#include <errno.h>

#include "../src/internal.h"
#include "hooktest.h"

static int per_instance(void *arg)
{
	(void)arg;
	const char *path = ht_group("mig", "1073741824");
	struct drv d;
	CUcontext c0, c1;
	drv_open(&d, &c0);
	CUresult (*uuid_v1)(CUuuid *, CUdevice), (*uuid_v2)(CUuuid *, CUdevice);
	*(void **)&uuid_v1 = drv_sym(d.cuda, "cuDeviceGetUuid");
	*(void **)&uuid_v2 = drv_sym(d.cuda, "cuDeviceGetUuid_v2");
	CUuuid gpu0, gpu1, own0, own1;
	CHECK_EQ(uuid_v1(&gpu0, 0), CUDA_SUCCESS);
	CHECK_EQ(uuid_v1(&gpu1, 1), CUDA_SUCCESS);
	CHECK(memcmp(gpu0.bytes, gpu1.bytes, 16) == 0); /* one GPU */
	CHECK_EQ(uuid_v2(&own0, 0), CUDA_SUCCESS);
	CHECK_EQ(uuid_v2(&own1, 1), CUDA_SUCCESS);
	CHECK(memcmp(own0.bytes, own1.bytes, 16) != 0); /* two instances */
	CUdeviceptr p0, p1;
	CHECK_EQ(cuMemAlloc_v2(&p0, 800 * MiB), CUDA_SUCCESS);
	CHECK_EQ(d.cuDevicePrimaryCtxRetain(&c1, 1), CUDA_SUCCESS);
	CHECK_EQ(d.cuCtxSetCurrent(c1), CUDA_SUCCESS);
	CHECK_EQ(cuMemAlloc_v2(&p1, 800 * MiB), CUDA_SUCCESS); /* the other instance: its own 1 GiB */
	size_t fr, tot;
	CHECK_EQ(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
	CHECK_EQ(tot, 1 * GiB);
	CHECK_EQ(fr, 224 * MiB);
	CHECK_EQ(cuMemAlloc_v2(&p1, 300 * MiB), CUDA_ERROR_OUT_OF_MEMORY); /* but no more than that */
	const struct gs_shm_file *f = ht_map(path);
	CHECK(f != NULL);
	nvmlDevice_t h = drv_nvml(&d);
	nvmlReturn_t (*get_uuid)(nvmlDevice_t, char *, unsigned int);
	*(void **)&get_uuid = drv_sym(d.nvml, "nvmlDeviceGetUUID");
	char uuid[96];
	CHECK_EQ(get_uuid(h, uuid, sizeof(uuid)), NVML_SUCCESS);
	CHECK(strncmp(uuid, "MIG-", 4) == 0);
	int found = 0;
	for (int i = 0; i < GS_SHM_MAX_GPUS; i++) {
		if (f->gpu[i].uuid[0] == '\0')
			continue;
		CHECK(strncmp(f->gpu[i].uuid, "MIG-", 4) == 0);
		CHECK_EQ(f->gpu[i].used, 800 * MiB);
		found++;
		found += 10 * (strcmp(f->gpu[i].uuid, uuid) == 0); /* instance 0: NVML's spelling */
	}
	CHECK_EQ(found, 12);
	return 0;
}

int main(void)
{
	ht_setup();
	setenv("GPUSLICE_SIM_MIG", "2", 1);
	HT_RUN(per_instance, NULL);
	ht_teardown();
	fprintf(stderr, "hooks_mig_test: ok\n");
	return 0;
}
