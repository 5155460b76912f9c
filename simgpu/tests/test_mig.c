/* SPDX-License-Identifier: Apache-2.0
 * MIG management through NVML on a simulated H100 80GB: the mode (not
 * capable, off, on, pending), the GPU instance profiles and placements of the
 * real card (table-tested, with NVML's error codes for a profile that does
 * not fit), compute instances, MIG device handles and UUIDs, state seen from
 * another process, root only, and gpuslice-sim-ctl mig. Creating instances
 * needs root, as on a driver: as another user the test says why it skips. */
#include <libgen.h>
#include <limits.h>

#include "testutil.h"

#define H100 "NVIDIA H100 80GB HBM3"
#define OK NVML_SUCCESS
#define FULL NVML_ERROR_INSUFFICIENT_RESOURCES
#define BAD NVML_ERROR_INVALID_ARGUMENT

static char ctl_bin[PATH_MAX];

static int ctl(const char *a, const char *b, const char *c)
{
	pid_t pid = fork();

	MUST(pid >= 0);
	if (pid == 0) {
		execl(ctl_bin, "gpuslice-sim-ctl", a, b, c, (char *)NULL);
		_exit(127);
	}
	return t_wait(pid);
}

/* nvidia-smi mig -lgip / -lgipp on an H100 80GB HBM3. */
static const struct want_profile {
	unsigned index, id, slices, count, sms, ce;
	unsigned long long mib;
	const char *name;
	unsigned nstarts, starts[7], size;
} profiles[] = {
	{NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, 1, 7, 16, 1, 9984, "MIG 1g.10gb", 7, {0, 1, 2, 3, 4, 5, 6}, 1},
	{NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, 1, 4, 26, 1, 20096, "MIG 1g.20gb", 4, {0, 2, 4, 6}, 2},
	{NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, 2, 3, 32, 2, 20096, "MIG 2g.20gb", 3, {0, 2, 4}, 2},
	{NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, 3, 2, 60, 3, 40448, "MIG 3g.40gb", 2, {0, 4}, 4},
	{NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, 4, 1, 64, 4, 40448, "MIG 4g.40gb", 1, {0}, 4},
	{NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, 1, 132, 8, 81152, "MIG 7g.80gb", 1, {0}, 8},
};
#define NPROF (sizeof(profiles) / sizeof(profiles[0]))

static void test_profiles(nvmlDevice_t h)
{
	for (size_t i = 0; i < NPROF; i++) {
		const struct want_profile *w = &profiles[i];
		nvmlGpuInstanceProfileInfo_t v1;
		nvmlGpuInstanceProfileInfo_v3_t v3 = {.version = nvmlGpuInstanceProfileInfo_v3};
		nvmlGpuInstancePlacement_t pl[8];
		unsigned n = 0, left = 99;
		CHECK_EQ(nvmlDeviceGetGpuInstanceProfileInfo(h, w->index, &v1), OK);
		CHECK_EQ(v1.id, w->id);
		CHECK_EQ(v1.sliceCount, w->slices);
		CHECK_EQ(v1.instanceCount, w->count);
		CHECK_EQ(v1.multiprocessorCount, w->sms);
		CHECK_EQ(v1.copyEngineCount, w->ce);
		CHECK_EQ(v1.memorySizeMB, w->mib);
		CHECK_EQ(nvmlDeviceGetGpuInstanceProfileInfoV(h, w->index, (nvmlGpuInstanceProfileInfo_v2_t *)&v3), OK);
		CHECK_EQ(v3.id, w->id);
		CHECK_EQ(v3.memorySizeMB, w->mib);
		CHECK(strcmp(v3.name, w->name) == 0);
		CHECK_EQ(nvmlDeviceGetGpuInstancePossiblePlacements_v2(h, w->id, NULL, &n), OK);
		CHECK_EQ(n, w->nstarts);
		n = 8;
		CHECK_EQ(nvmlDeviceGetGpuInstancePossiblePlacements_v2(h, w->id, pl, &n), OK);
		for (unsigned k = 0; k < n && k < w->nstarts; k++) {
			CHECK_EQ(pl[k].start, w->starts[k]);
			CHECK_EQ(pl[k].size, w->size);
		}
		CHECK_EQ(nvmlDeviceGetGpuInstanceRemainingCapacity(h, w->id, &left), OK);
		CHECK_EQ(left, w->count);
	}
	nvmlGpuInstanceProfileInfo_v2_t v2 = {.version = 7};
	nvmlGpuInstanceProfileInfo_t v1;
	CHECK_EQ(nvmlDeviceGetGpuInstanceProfileInfoV(h, 0, &v2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
	CHECK_EQ(nvmlDeviceGetGpuInstanceProfileInfo(h, NVML_GPU_INSTANCE_PROFILE_8_SLICE, &v1),
		 NVML_ERROR_NOT_SUPPORTED);
	CHECK_EQ(nvmlDeviceGetGpuInstanceProfileInfo(h, NVML_GPU_INSTANCE_PROFILE_COUNT, &v1), BAD); /* the end */
}

/* One placement rule: creations in order (start -1: any placement), each
 * with the code a driver answers. */
struct step {
	unsigned id;
	int start;
	nvmlReturn_t want;
	int got_start; /* where it landed (-1: don't check) */
};
static const struct rule {
	const char *name;
	struct step s[9];
	int n;
} rules[] = {
	{"two 3g fill the memory", {{9, -1, OK, 0}, {9, -1, OK, 4}, {9, -1, FULL, -1}, {19, -1, FULL, -1}}, 4},
	{"7g takes the card", {{0, -1, OK, 0}, {19, -1, FULL, -1}, {5, -1, FULL, -1}}, 3},
	{"4g + 3g", {{5, -1, OK, 0}, {9, 4, OK, 4}, {19, -1, FULL, -1}, {14, -1, FULL, -1}}, 4},
	{"2g at 4 blocks 3g at 4",
	 {{14, 4, OK, 4}, {9, 4, FULL, -1}, {9, -1, OK, 0}, {19, 6, OK, 6}, {15, 6, FULL, -1}},
	 5},
	{"seven 1g.10gb",
	 {{19, -1, OK, 0},
	  {19, -1, OK, 1},
	  {19, -1, OK, 2},
	  {19, -1, OK, 3},
	  {19, -1, OK, 4},
	  {19, -1, OK, 5},
	  {19, -1, OK, 6},
	  {19, -1, FULL, -1},
	  {15, -1, FULL, -1}},
	 9},
	{"four 1g.20gb", {{15, -1, OK, 0}, {15, -1, OK, 2}, {15, -1, OK, 4}, {15, -1, OK, 6}, {19, -1, FULL, -1}}, 5},
	{"three 2g and a 1g",
	 {{14, -1, OK, 0}, {14, -1, OK, 2}, {14, -1, OK, 4}, {19, -1, OK, 6}, {19, -1, FULL, -1}},
	 5},
	{"placements that are not the profile's", {{9, 1, BAD, -1}, {19, 7, BAD, -1}, {77, -1, BAD, -1}}, 3},
};

static void test_rules(nvmlDevice_t h)
{
	for (size_t r = 0; r < sizeof(rules) / sizeof(rules[0]); r++) {
		nvmlGpuInstance_t made[9];
		int nmade = 0;
		for (int k = 0; k < rules[r].n; k++) {
			const struct step *s = &rules[r].s[k];
			nvmlGpuInstance_t gi = NULL;
			nvmlReturn_t rc;
			const struct want_profile *w = NULL;
			for (size_t i = 0; i < NPROF; i++)
				w = profiles[i].id == s->id ? &profiles[i] : w;
			if (s->start < 0) {
				rc = nvmlDeviceCreateGpuInstance(h, s->id, &gi);
			} else {
				nvmlGpuInstancePlacement_t pl = {(unsigned)s->start, w != NULL ? w->size : 1};
				rc = nvmlDeviceCreateGpuInstanceWithPlacement(h, s->id, &pl, &gi);
			}
			if (rc != s->want)
				fprintf(stderr, "rule \"%s\" step %d: got %d\n", rules[r].name, k, rc);
			CHECK_EQ(rc, s->want);
			if (rc != OK)
				continue;
			made[nmade++] = gi;
			nvmlGpuInstanceInfo_t info;
			CHECK_EQ(nvmlGpuInstanceGetInfo(gi, &info), OK);
			CHECK_EQ(info.profileId, s->id);
			if (s->got_start >= 0)
				CHECK_EQ(info.placement.start, s->got_start);
		}
		while (nmade > 0)
			CHECK_EQ(nvmlGpuInstanceDestroy(made[--nmade]), OK);
	}
}

static void test_capacity(nvmlDevice_t h)
{
	nvmlGpuInstance_t gi;
	unsigned left;
	static const unsigned want[][2] = {{19, 3}, {15, 2}, {14, 1}, {9, 1}, {5, 0}, {0, 0}};
	MUST(nvmlDeviceCreateGpuInstance(h, 9, &gi) == OK); /* 3g.40gb at 0: slices 4..7 left */
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		CHECK_EQ(nvmlDeviceGetGpuInstanceRemainingCapacity(h, want[i][0], &left), OK);
		CHECK_EQ(left, want[i][1]);
	}
	CHECK_EQ(nvmlGpuInstanceDestroy(gi), OK);
	CHECK_EQ(nvmlGpuInstanceDestroy(gi), BAD); /* gone */
}

/* A 3g.40gb GPU instance's compute instance profiles, before any is made. */
static void compute_profiles(nvmlDevice_t h, nvmlGpuInstance_t gi)
{
	nvmlComputeInstanceProfileInfo_t cp;
	unsigned v;
	CHECK_EQ(nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 0, &cp), OK);
	CHECK_EQ(cp.sliceCount, 1);
	CHECK_EQ(cp.instanceCount, 3);
	CHECK_EQ(cp.multiprocessorCount, 20);
	CHECK_EQ(nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, 0, &cp), OK);
	CHECK_EQ(cp.multiprocessorCount, 60);
	CHECK_EQ(nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, 0, &cp),
		 NVML_ERROR_NOT_SUPPORTED);
	CHECK_EQ(nvmlDeviceGetMaxMigDeviceCount(h, &v), OK);
	CHECK_EQ(v, 7);
	nvmlDevice_t mig;
	CHECK_EQ(nvmlDeviceGetMigDeviceHandleByIndex(h, 0, &mig), NVML_ERROR_NOT_FOUND); /* no compute instance yet */
}

/* Makes the GPU instance's one 3-slice compute instance (a 1-slice one
 * first, which leaves no room for it until destroyed) and checks its listing
 * and both instances' info. */
static nvmlComputeInstance_t compute_instance(nvmlDevice_t h, nvmlGpuInstance_t gi, nvmlComputeInstanceInfo_t *ci_info,
					      nvmlGpuInstanceInfo_t *gi_info)
{
	nvmlComputeInstance_t ci, c1, list[4];
	unsigned n = 4, v;
	MUST(nvmlGpuInstanceCreateComputeInstance(gi, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, &c1) == OK);
	CHECK_EQ(nvmlGpuInstanceCreateComputeInstance(gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, &ci), FULL);
	CHECK_EQ(nvmlComputeInstanceDestroy(c1), OK);
	MUST(nvmlGpuInstanceCreateComputeInstance(gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, &ci) == OK);
	CHECK_EQ(nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, &v), OK);
	CHECK_EQ(v, 0);
	CHECK_EQ(nvmlGpuInstanceGetComputeInstances(gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, list, &n), OK);
	CHECK_EQ(n, 1);
	CHECK_EQ(nvmlComputeInstanceGetInfo_v2(ci, ci_info), OK);
	CHECK_EQ(nvmlGpuInstanceGetInfo(gi, gi_info), OK);
	CHECK(ci_info->device == h && gi_info->device == h);
	CHECK_EQ(ci_info->placement.size, 3);
	CHECK_EQ(nvmlGpuInstanceDestroy(gi), NVML_ERROR_IN_USE); /* a compute instance in it */
	return ci;
}

/* The compute instance's MIG device (the only one of GPU h): its handle,
 * ids, parent, UUID (into uuid), name, memory and utilization. */
static nvmlDevice_t mig_device(nvmlDevice_t h, const nvmlGpuInstanceInfo_t *gi_info,
			       const nvmlComputeInstanceInfo_t *ci_info, char uuid[96])
{
	nvmlDevice_t mig, none, back = NULL, again = NULL;
	unsigned is_mig = 9, gid = 99, cid = 99;
	char name[96];
	CHECK_EQ(nvmlDeviceGetMigDeviceHandleByIndex(h, 0, &mig), OK);
	CHECK_EQ(nvmlDeviceGetMigDeviceHandleByIndex(h, 1, &none), NVML_ERROR_NOT_FOUND);
	CHECK_EQ(nvmlDeviceGetMigDeviceHandleByIndex(h, 7, &none), BAD);
	CHECK_EQ(nvmlDeviceIsMigDeviceHandle(mig, &is_mig), OK);
	CHECK_EQ(is_mig, 1);
	CHECK_EQ(nvmlDeviceIsMigDeviceHandle(h, &is_mig), OK);
	CHECK_EQ(is_mig, 0);
	CHECK_EQ(nvmlDeviceGetGpuInstanceId(mig, &gid), OK);
	CHECK_EQ(nvmlDeviceGetComputeInstanceId(mig, &cid), OK);
	CHECK_EQ(gid, gi_info->id);
	CHECK_EQ(cid, ci_info->id);
	CHECK_EQ(nvmlDeviceGetGpuInstanceId(h, &gid), NVML_ERROR_NOT_SUPPORTED); /* not a MIG device */
	CHECK_EQ(nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig, &back), OK);
	CHECK(back == h);
	CHECK_EQ(nvmlDeviceGetUUID(mig, uuid, 96), OK);
	CHECK(strncmp(uuid, "MIG-", 4) == 0 && strlen(uuid) == 40);
	CHECK_EQ(nvmlDeviceGetHandleByUUID(uuid, &again), OK);
	CHECK(again == mig);
	CHECK_EQ(nvmlDeviceGetName(mig, name, sizeof(name)), OK);
	CHECK(strcmp(name, H100 " MIG 3g.40gb") == 0);
	nvmlMemory_t m;
	CHECK_EQ(nvmlDeviceGetMemoryInfo(mig, &m), OK);
	CHECK_EQ(m.total, 40448ull << 20);
	CHECK_EQ(m.used, 0);
	nvmlUtilization_t u;
	CHECK_EQ(nvmlDeviceGetUtilizationRates(mig, &u), NVML_ERROR_NOT_SUPPORTED);
	CHECK_EQ(nvmlDeviceGetUtilizationRates(h, &u), NVML_ERROR_NOT_SUPPORTED);
	return mig;
}

/* A 3g.40gb GPU instance, its compute instances and its MIG device. */
static void test_compute(nvmlDevice_t h)
{
	nvmlGpuInstance_t gi;
	nvmlComputeInstanceInfo_t ci_info;
	nvmlGpuInstanceInfo_t gi_info;
	unsigned is_mig;
	char uuid[96], uuid2[96];
	MUST(nvmlDeviceCreateGpuInstance(h, 9, &gi) == OK);
	compute_profiles(h, gi);
	nvmlComputeInstance_t ci = compute_instance(h, gi, &ci_info, &gi_info);
	nvmlDevice_t mig = mig_device(h, &gi_info, &ci_info, uuid);
	/* Another process sees the same instances (the state file). */
	CHECK_EQ(t_run("sees", uuid), 0);
	CHECK_EQ(nvmlComputeInstanceDestroy(ci), OK);
	CHECK_EQ(nvmlDeviceIsMigDeviceHandle(mig, &is_mig), BAD); /* its instance is gone */
	MUST(nvmlGpuInstanceCreateComputeInstance(gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, &ci) == OK);
	CHECK_EQ(nvmlDeviceGetUUID(mig, uuid2, sizeof(uuid2)), OK); /* the handle is reused... */
	CHECK(strcmp(uuid, uuid2) != 0);                            /* ...for a new instance */
	CHECK_EQ(nvmlComputeInstanceDestroy(ci), OK);
	CHECK_EQ(nvmlGpuInstanceDestroy(gi), OK);
}

static int child_sees(const char *uuid)
{
	nvmlDevice_t mig;
	nvmlGpuInstance_t gis[2];
	unsigned n = 2;
	MUST(nvmlInit_v2() == OK);
	CHECK_EQ(nvmlDeviceGetHandleByUUID(uuid, &mig), OK);
	nvmlDevice_t h;
	MUST(nvmlDeviceGetHandleByIndex_v2(0, &h) == OK);
	CHECK_EQ(nvmlDeviceGetGpuInstances(h, 9, gis, &n), OK);
	CHECK_EQ(n, 1);
	return t_failures;
}

/* As another user: changes are refused (they need root on a driver). */
static int child_user(void)
{
	nvmlDevice_t h;
	nvmlGpuInstance_t gi;
	nvmlReturn_t act;
	MUST(nvmlInit_v2() == OK); /* the state file is root's: mapped first, then the user changes */
	MUST(nvmlDeviceGetHandleByIndex_v2(0, &h) == OK);
	MUST(setgid(65534) == 0 && setuid(65534) == 0);
	CHECK_EQ(nvmlDeviceCreateGpuInstance(h, 9, &gi), NVML_ERROR_NO_PERMISSION);
	CHECK_EQ(nvmlDeviceSetMigMode(h, NVML_DEVICE_MIG_DISABLE, &act), NVML_ERROR_NO_PERMISSION);
	return t_failures;
}

static void test_modes(nvmlDevice_t h, nvmlDevice_t plain)
{
	unsigned cur = 9, pend = 9;
	nvmlReturn_t act = 99;
	nvmlGpuInstance_t gi;
	nvmlGpuInstanceProfileInfo_t v1;
	CHECK_EQ(nvmlDeviceGetMigMode(plain, &cur, &pend), NVML_ERROR_NOT_SUPPORTED); /* not MIG-capable */
	CHECK_EQ(nvmlDeviceSetMigMode(plain, NVML_DEVICE_MIG_ENABLE, &act), NVML_ERROR_NOT_SUPPORTED);
	CHECK_EQ(nvmlDeviceGetMigMode(h, &cur, &pend), OK);
	CHECK_EQ(cur, NVML_DEVICE_MIG_DISABLE);
	CHECK_EQ(pend, NVML_DEVICE_MIG_DISABLE);
	CHECK_EQ(nvmlDeviceCreateGpuInstance(h, 9, &gi), NVML_ERROR_NOT_SUPPORTED); /* MIG mode off */
	CHECK_EQ(nvmlDeviceGetGpuInstanceProfileInfo(h, 0, &v1), NVML_ERROR_NOT_SUPPORTED);
	CHECK_EQ(nvmlDeviceSetMigMode(h, 2, &act), BAD);
	CHECK_EQ(nvmlDeviceSetMigMode(h, NVML_DEVICE_MIG_ENABLE, &act), OK);
	CHECK_EQ(act, OK);
	CHECK_EQ(nvmlDeviceGetMigMode(h, &cur, &pend), OK);
	CHECK_EQ(cur, NVML_DEVICE_MIG_ENABLE);
	CHECK_EQ(pend, NVML_DEVICE_MIG_ENABLE);
	/* gpuslice-sim-ctl mig, like nvidia-smi -mig: off and on again. */
	CHECK_EQ(ctl("mig", "0", "off"), 0);
	CHECK_EQ(nvmlDeviceGetMigMode(h, &cur, &pend), OK);
	CHECK_EQ(cur, NVML_DEVICE_MIG_DISABLE);
	CHECK_EQ(ctl("mig", "0", "on"), 0);
	CHECK_EQ(ctl("mig", "1", "on"), 1); /* not MIG-capable */
	CHECK_EQ(ctl("mig", "0", "maybe"), 2);
	CHECK_EQ(nvmlDeviceGetMigMode(h, &cur, &pend), OK);
	CHECK_EQ(cur, NVML_DEVICE_MIG_ENABLE);
}

int main(int argc, char **argv)
{
	if (argc >= 3 && strcmp(argv[1], "child") == 0)
		return strcmp(argv[2], "sees") == 0 ? child_sees(argv[3]) : child_user();
	char self[PATH_MAX];
	snprintf(self, sizeof(self), "%s", argv[0]);
	snprintf(ctl_bin, sizeof(ctl_bin), "%s/gpuslice-sim-ctl", dirname(self));
	t_private_state("mig");
	char conf[] = "/tmp/gpuslice-simtest-mig-XXXXXX";
	int fd = mkstemp(conf);
	MUST(fd >= 0);
	const char *text = "name=\"" H100 "\" memory=80GiB sms=132 mig=off\nmemory=24GiB\n";
	MUST(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
	setenv("GPUSLICE_SIM_CONFIG", conf, 1);
	nvmlDevice_t h, plain;
	MUST(nvmlInit_v2() == OK);
	MUST(nvmlDeviceGetHandleByIndex_v2(0, &h) == OK && nvmlDeviceGetHandleByIndex_v2(1, &plain) == OK);
	if (geteuid() != 0) {
		printf("skip test_mig: changing MIG mode and instances needs root (as on a driver)\n");
		unlink(conf);
		return 0;
	}
	test_modes(h, plain);
	test_profiles(h);
	test_rules(h);
	test_capacity(h);
	test_compute(h);
	CHECK_EQ(t_run("user", "-"), 0);
	unlink(conf);
	return t_done("test_mig");
}
