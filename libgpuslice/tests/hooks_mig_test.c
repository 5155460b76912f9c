/* SPDX-License-Identifier: Apache-2.0
 * Hook test: MIG (issues 26 and 35). On a simulated H100 80GB in MIG mode with
 * two 3g.40gb instances made through NVML (as a driver would; root), a
 * process given one instance (CUDA_VISIBLE_DEVICES=MIG-<uuid>, one MIG device
 * per process) holds its group's limit on that instance: the group file has a
 * slot per instance, keyed on the instance's "MIG-" UUID as NVML spells it,
 * so filling one leaves the other whole; cuMemGetInfo and NVML's memory of
 * the instance show the quota; NVML's process list of the instance shows the
 * group's processes only.
 */
#include <errno.h>

#include "../src/internal.h"
#include "hooktest.h"

#define LIMIT (1 * GiB)

static char uuid[2][96];
static int ready[2], go[2]; /* pipes: holder -> test, test -> holder */

static nvmlDevice_t mig_handle(struct drv *d, const char *u)
{
	nvmlReturn_t (*by_uuid)(const char *, nvmlDevice_t *);
	(void)drv_nvml(d);
	*(void **)&by_uuid = drv_sym(d->nvml, "nvmlDeviceGetHandleByUUID");
	nvmlDevice_t h;
	CHECK_EQ(by_uuid(u, &h), NVML_SUCCESS);
	return h;
}

/* The group's process on instance 0: 800 MiB held until the test says go. */
static int holder(void *arg)
{
	(void)arg;
	setenv("CUDA_VISIBLE_DEVICES", uuid[0], 1);
	ht_group("mig", "1073741824");
	struct drv d;
	CUcontext c;
	drv_open(&d, &c);
	CUdeviceptr p;
	CHECK_EQ(cuMemAlloc_v2(&p, 800 * MiB), CUDA_SUCCESS);
	CHECK_EQ(cuMemAlloc_v2(&p, 300 * MiB), CUDA_ERROR_OUT_OF_MEMORY); /* the limit, on this instance */
	char b = 1;
	CHECK(write(ready[1], &b, 1) == 1);
	CHECK(read(go[0], &b, 1) == 1);
	return 0;
}

/* Another group's process on instance 1. */
static int stranger(void *arg)
{
	(void)arg;
	setenv("CUDA_VISIBLE_DEVICES", uuid[1], 1);
	ht_group("other", NULL);
	struct drv d;
	CUcontext c;
	drv_open(&d, &c);
	CUdeviceptr p;
	CHECK_EQ(cuMemAlloc_v2(&p, 2 * GiB), CUDA_SUCCESS);
	char b = 1;
	CHECK(write(ready[1], &b, 1) == 1);
	CHECK(read(go[0], &b, 1) == 1);
	return 0;
}

/* The group's process on instance 1, while the holder fills instance 0. */
static int sibling(void *arg)
{
	(void)arg;
	setenv("CUDA_VISIBLE_DEVICES", uuid[1], 1);
	const char *path = ht_group("mig", "1073741824");
	struct drv d;
	CUcontext c;
	drv_open(&d, &c);
	CUdeviceptr p;
	CHECK_EQ(cuMemAlloc_v2(&p, 800 * MiB), CUDA_SUCCESS); /* its own 1 GiB on this instance */
	size_t fr, tot;
	CHECK_EQ(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
	CHECK_EQ(tot, LIMIT);
	CHECK_EQ(fr, LIMIT - 800 * MiB);
	nvmlDevice_t h = mig_handle(&d, uuid[1]);
	nvmlMemory_t m;
	CHECK_EQ(nvmlDeviceGetMemoryInfo(h, &m), NVML_SUCCESS); /* the instance's memory, as the quota */
	CHECK_EQ(m.total, LIMIT);
	CHECK_EQ(m.used, 800 * MiB);
	nvmlProcessInfo_t procs[8];
	unsigned n = 8;
	CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, procs), NVML_SUCCESS);
	CHECK_EQ(n, 1); /* the stranger's process on this instance is not shown */
	CHECK_EQ(procs[0].pid, (unsigned)getpid());
	const struct gs_shm_file *f = ht_map(path);
	CHECK(f != NULL);
	int found = 0;
	for (int i = 0; i < GS_SHM_MAX_GPUS; i++) {
		if (f->gpu[i].uuid[0] == '\0')
			continue;
		CHECK(strncmp(f->gpu[i].uuid, "MIG-", 4) == 0);
		CHECK_EQ(f->gpu[i].used, 800 * MiB); /* one slot per instance */
		found += (strcmp(f->gpu[i].uuid, uuid[0]) == 0) + 10 * (strcmp(f->gpu[i].uuid, uuid[1]) == 0);
	}
	CHECK_EQ(found, 11);
	CHECK_EQ(cuMemAlloc_v2(&p, 300 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
	return 0;
}

/* Two 3g.40gb instances with a compute instance each; their MIG UUIDs. */
static int make_instances(void *arg)
{
	(void)arg;
	struct drv d;
	nvmlDevice_t gpu = drv_nvml(&d), mig;
	nvmlReturn_t (*create_gi)(nvmlDevice_t, unsigned, nvmlGpuInstance_t *);
	nvmlReturn_t (*create_ci)(nvmlGpuInstance_t, unsigned, nvmlComputeInstance_t *);
	nvmlReturn_t (*by_index)(nvmlDevice_t, unsigned, nvmlDevice_t *);
	nvmlReturn_t (*get_uuid)(nvmlDevice_t, char *, unsigned);
	*(void **)&create_gi = drv_sym(d.nvml, "nvmlDeviceCreateGpuInstance");
	*(void **)&create_ci = drv_sym(d.nvml, "nvmlGpuInstanceCreateComputeInstance");
	*(void **)&by_index = drv_sym(d.nvml, "nvmlDeviceGetMigDeviceHandleByIndex");
	*(void **)&get_uuid = drv_sym(d.nvml, "nvmlDeviceGetUUID");
	char out[2][96];
	for (int i = 0; i < 2; i++) {
		nvmlGpuInstance_t gi;
		nvmlComputeInstance_t ci;
		CHECK_EQ(create_gi(gpu, 9 /* 3g.40gb */, &gi), NVML_SUCCESS);
		CHECK_EQ(create_ci(gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, &ci), NVML_SUCCESS);
		CHECK_EQ(by_index(gpu, (unsigned)i, &mig), NVML_SUCCESS);
		CHECK_EQ(get_uuid(mig, out[i], 96), NVML_SUCCESS);
	}
	CHECK(write(ready[1], out, sizeof(out)) == (ssize_t)sizeof(out));
	return 0;
}

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "hooks_mig_test: skip: MIG instances are made through NVML, which needs root\n");
		return 0;
	}
	ht_setup();
	char conf[300];
	snprintf(conf, sizeof(conf), "%s/h100.conf", ht_dir);
	FILE *cf = fopen(conf, "w");
	CHECK(cf != NULL && fputs("name=\"NVIDIA H100 80GB HBM3\" memory=80GiB sms=132 mig=on\n", cf) >= 0);
	fclose(cf);
	setenv("GPUSLICE_SIM_CONFIG", conf, 1);
	CHECK(pipe(ready) == 0 && pipe(go) == 0);
	HT_RUN(make_instances, NULL);
	CHECK(read(ready[0], uuid, sizeof(uuid)) == (ssize_t)sizeof(uuid));
	char b = 1;
	fprintf(stderr, "--- holder, stranger, sibling\n");
	pid_t h = ht_spawn(holder, NULL);
	CHECK(read(ready[0], &b, 1) == 1);
	pid_t s = ht_spawn(stranger, NULL);
	CHECK(read(ready[0], &b, 1) == 1);
	CHECK_EQ(ht_wait(ht_spawn(sibling, NULL)), 0);
	CHECK(write(go[1], "gg", 2) == 2);
	CHECK_EQ(ht_wait(h), 0);
	CHECK_EQ(ht_wait(s), 0);
	ht_teardown();
	fprintf(stderr, "hooks_mig_test: ok\n");
	return 0;
}
