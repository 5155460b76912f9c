/* SPDX-License-Identifier: Apache-2.0
 * Hook test: a container of two groups (two DRA claims, one GPU each). The
 * node mounts each claim's group directory read-only at
 * GS_CONTAINER_DEVICE_GROUPS/<UUID of its GPU> (its state file writable) and
 * one of them at the container's path (GS_CONTAINER_GROUP_FILE). A process
 * using both GPUs is charged on each GPU to that GPU's group and held to
 * that group's limit (1 GiB on GPU 0, 512 MiB on GPU 1), its views show each
 * group's limit, and it has an entry in both groups. A directory at that path
 * the container made itself (not a read-only mount: writable, or on a
 * read-only root) is not the node's: the GPU stays
 * in the container's group. Each member runs in a private mount namespace
 * (root only), as in hooks' reliability_container_test.
 */
#include <errno.h>
#include <sched.h>
#include <sys/mount.h>

#include "../src/internal.h"
#include "hooktest.h"

static char dir_a[320], dir_b[320], dir_c[320], uuids[2][GS_SHM_UUID_LEN];

/* A group directory <name> holding a managed state file of that limit. */
static void group_dir(char *dir, size_t n, const char *name, uint64_t limit)
{
	snprintf(dir, n, "%s/%s", ht_dir, name);
	CHECK(mkdir(dir, 0755) == 0);
	char state[400];
	snprintf(state, sizeof(state), "%s/" GS_STATE_FILE_NAME, dir);
	CHECK(rename(ht_managed_group(name, limit), state) == 0);
}

static void touch(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT, 0600);
	CHECK(fd >= 0);
	close(fd);
}

/* Mounts group directory dir at at as the node does: read-only, its state
 * file writable on top. */
static void mount_group(const char *dir, const char *at)
{
	char src[400], dst[480];
	CHECK(mkdir(at, 0755) == 0);
	CHECK(mount(dir, at, NULL, MS_BIND, NULL) == 0);
	CHECK(mount(NULL, at, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) == 0);
	snprintf(src, sizeof(src), "%s/" GS_STATE_FILE_NAME, dir);
	snprintf(dst, sizeof(dst), "%s/" GS_STATE_FILE_NAME, at);
	CHECK(mount(src, dst, NULL, MS_BIND, NULL) == 0);
}

/* A container's /run: B at the container's path; GPU 0 in A (or, forged:
 * in C, a directory the container made: writable, or 2: on a read-only
 * filesystem, as an image's on a read-only root, but no mount); GPU 1 in B. */
static void mount_container(int forged)
{
	char at[400];
	CHECK(unshare(CLONE_NEWNS) == 0);
	CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0);
	CHECK(mkdir("/run", 0755) == 0 || errno == EEXIST);
	CHECK(mount("tmpfs", "/run", "tmpfs", 0, "size=64k") == 0);
	CHECK(mkdir(GS_CONTAINER_DEVICE_GROUPS, 0755) == 0);
	mount_group(dir_b, GS_CONTAINER_GROUP_DIR);
	snprintf(at, sizeof(at), "%s/%s", GS_CONTAINER_DEVICE_GROUPS, uuids[0]);
	if (forged) {
		char state[480], src[400];
		CHECK(mkdir(at, 0755) == 0);
		snprintf(state, sizeof(state), "%s/" GS_STATE_FILE_NAME, at);
		snprintf(src, sizeof(src), "%s/" GS_STATE_FILE_NAME, dir_c);
		touch(state);
		CHECK(mount(src, state, NULL, MS_BIND, NULL) == 0);
	} else {
		mount_group(dir_a, at);
	}
	snprintf(at, sizeof(at), "%s/%s", GS_CONTAINER_DEVICE_GROUPS, uuids[1]);
	mount_group(dir_b, at);
	if (forged == 2)
		CHECK(mount(NULL, "/run", NULL, MS_REMOUNT | MS_RDONLY, NULL) == 0);
}

static const struct gs_shm_file *map_group(const char *dir)
{
	char state[400];
	snprintf(state, sizeof(state), "%s/" GS_STATE_FILE_NAME, dir);
	const struct gs_shm_file *f = ht_map(state);
	CHECK(f != NULL);
	return f;
}

/* What group f holds on GPU uuid. */
static uint64_t used_on(const struct gs_shm_file *f, const char *uuid)
{
	for (int i = 0; i < GS_SHM_MAX_GPUS; i++)
		if (strcmp(f->gpu[i].uuid, uuid) == 0)
			return __atomic_load_n(&f->gpu[i].used, __ATOMIC_ACQUIRE);
	return 0;
}

/* Our live entries in f. */
static int entries(const struct gs_shm_file *f)
{
	int n = 0;
	for (int i = 0; i < GS_SHM_MAX_PROCS; i++)
		n += f->proc[i].state == GS_PROC_LIVE && f->proc[i].pid == getpid();
	return n;
}

/* What our live entry in f holds on its GPU slot gpu (0: none). */
static uint64_t ours(const struct gs_shm_file *f, int gpu)
{
	for (int i = 0; i < GS_SHM_MAX_PROCS; i++)
		if (f->proc[i].state == GS_PROC_LIVE && f->proc[i].pid == getpid())
			return __atomic_load_n(&f->proc[i].used[gpu], __ATOMIC_ACQUIRE);
	return 0;
}

/* Writes the two simulated GPUs' UUID strings to uuids (a child: the
 * library must not be set up in the test's own process). */
static int read_uuids(void *arg)
{
	(void)arg;
	struct drv d;
	CUcontext c;
	ht_group("uuids", NULL);
	drv_open(&d, &c);
	CUresult (*get)(CUuuid *, CUdevice);
	*(void **)&get = drv_sym(d.cuda, "cuDeviceGetUuid");
	char path[400];
	snprintf(path, sizeof(path), "%s/uuids", ht_dir);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	for (int i = 0; i < 2; i++) {
		CUuuid u;
		CHECK_EQ(get(&u, i), CUDA_SUCCESS);
		const unsigned char *b = (const unsigned char *)u.bytes;
		fprintf(f, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n", b[0], b[1],
			b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
	}
	CHECK(fclose(f) == 0);
	return 0;
}

static void on_device(struct drv *d, CUdevice dev)
{
	CUcontext c;
	CHECK_EQ(d->cuDevicePrimaryCtxRetain(&c, dev), CUDA_SUCCESS);
	CHECK_EQ(d->cuCtxSetCurrent(c), CUDA_SUCCESS);
}

static int two_groups(void *arg)
{
	(void)arg;
	mount_container(0);
	struct drv d;
	CUcontext c0;
	drv_open(&d, &c0);
	const struct gs_shm_file *a = map_group(dir_a), *b = map_group(dir_b);
	CUdeviceptr p0, p1, x;
	size_t fr, tot;
	CHECK_EQ(cuMemAlloc_v2(&p0, 800 * MiB), CUDA_SUCCESS); /* GPU 0: A's 1 GiB */
	CHECK_EQ(used_on(a, uuids[0]), 800 * MiB);
	CHECK_EQ(used_on(b, uuids[0]) + used_on(b, uuids[1]), 0);
	CHECK_EQ(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
	CHECK_EQ(tot, 1 * GiB);
	CHECK_EQ(cuMemAlloc_v2(&x, 300 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
	on_device(&d, 1);
	CHECK_EQ(cuMemAlloc_v2(&p1, 400 * MiB), CUDA_SUCCESS); /* GPU 1: B's 512 MiB */
	CHECK_EQ(used_on(b, uuids[1]), 400 * MiB);
	CHECK_EQ(used_on(a, uuids[0]), 800 * MiB);
	CHECK_EQ(used_on(a, uuids[1]), 0);
	CHECK_EQ(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
	CHECK_EQ(tot, 512 * MiB);
	CHECK_EQ(fr, 112 * MiB);
	CHECK_EQ(cuMemAlloc_v2(&x, 200 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(entries(a), 1);
	CHECK_EQ(entries(b), 1);
	CHECK_EQ(ours(a, 0) + ours(b, 0), 1200 * MiB);
	CHECK_EQ(cuMemFree_v2(p0), CUDA_SUCCESS); /* freed from GPU 1's context: A's all the same */
	CHECK_EQ(used_on(a, uuids[0]), 0);
	CHECK_EQ(cuMemFree_v2(p1), CUDA_SUCCESS);
	CHECK_EQ(used_on(b, uuids[1]), 0);
	return 0;
}

/* Contexts that take 200 MiB, measured through NVML (issue 34): GPU 0's in
 * A (a device group: process slot past the first 16), GPU 1's in B, each
 * counted in its group and in our entry there (the measurement reads our
 * entry of the slot's group at the GPU's index in that file). */
static int measured(void *arg)
{
	(void)arg;
	setenv("GPUSLICE_SIM_CONTEXT_MEMORY", "209715200", 1);
	mount_container(0);
	struct drv d;
	CUcontext c0;
	drv_nvml(&d);
	drv_open(&d, &c0);
	const struct gs_shm_file *a = map_group(dir_a), *b = map_group(dir_b);
	CHECK_EQ(used_on(a, uuids[0]), 200 * MiB);
	CHECK_EQ(ours(a, 0), 200 * MiB);
	CUdeviceptr p0, x;
	CHECK_EQ(cuMemAlloc_v2(&p0, 800 * MiB), CUDA_SUCCESS);
	CHECK_EQ(cuMemAlloc_v2(&x, 100 * MiB), CUDA_ERROR_OUT_OF_MEMORY); /* 1000 MiB of A's 1 GiB used */
	on_device(&d, 1);
	CHECK_EQ(used_on(b, uuids[1]), 200 * MiB);
	CHECK_EQ(used_on(a, uuids[0]), 1000 * MiB);
	CHECK_EQ(cuMemFree_v2(p0), CUDA_SUCCESS);
	CHECK_EQ(used_on(a, uuids[0]), 200 * MiB);
	return 0;
}

/* A device group's file truncated under us (by a co-member of A, issue 34)
 * breaks A only: GPU 0's allocations are refused with one line naming A's
 * file (its path in the container names GPU 0), GPU 1's (group B) go on.
 * A's file is gone after it. */
static int truncated_other(void *arg)
{
	(void)arg;
	mount_container(0);
	struct drv d;
	CUcontext c0;
	drv_open(&d, &c0);
	ht_capture_stderr("truncated");
	CUdeviceptr p0, p1, x;
	CHECK_EQ(cuMemAlloc_v2(&p0, 100 * MiB), CUDA_SUCCESS);
	char state[400];
	snprintf(state, sizeof(state), "%s/" GS_STATE_FILE_NAME, dir_a);
	CHECK(truncate(state, 0) == 0);
	CHECK_EQ(cuMemAlloc_v2(&x, 1 * MiB), CUDA_ERROR_OPERATING_SYSTEM);
	on_device(&d, 1);
	const struct gs_shm_file *b = map_group(dir_b);
	CHECK_EQ(cuMemAlloc_v2(&p1, 100 * MiB), CUDA_SUCCESS);
	CHECK_EQ(used_on(b, uuids[1]), 100 * MiB);
	CHECK_EQ(cuMemFree_v2(p1), CUDA_SUCCESS);
	CHECK_EQ(used_on(b, uuids[1]), 0);
	CHECK_EQ(cuMemFree_v2(p0), CUDA_SUCCESS); /* the driver's memory is still freed */
	char err[2048];
	ht_stderr(err, sizeof(err));
	CHECK_EQ(ht_count_lines(err), 1);
	CHECK(strstr(err, "was truncated") != NULL && strstr(err, uuids[0]) != NULL);
	return 0;
}

/* The container's own group's file (B, at the container's path, holding
 * GPU 1) truncated under us: B breaks only; GPU 1's allocations and view are
 * refused with one line naming the container's file, GPU 0's (device group A)
 * go on and are counted in A (reviewer's leftover of issue 34: the own
 * group's truncation stopped every group of the process). B's file is gone
 * after it. */
static int truncated_own(void *arg)
{
	(void)arg;
	mount_container(0);
	struct drv d;
	CUcontext c0;
	drv_open(&d, &c0);
	ht_capture_stderr("truncated_own");
	const struct gs_shm_file *a = map_group(dir_a);
	CUdeviceptr p0, p1, x;
	on_device(&d, 1);
	CHECK_EQ(cuMemAlloc_v2(&p1, 100 * MiB), CUDA_SUCCESS);
	char state[400];
	snprintf(state, sizeof(state), "%s/" GS_STATE_FILE_NAME, dir_b);
	CHECK(truncate(state, 0) == 0);
	CHECK_EQ(cuMemAlloc_v2(&x, 1 * MiB), CUDA_ERROR_OPERATING_SYSTEM);
	size_t fr, tot;
	CHECK_EQ(cuMemGetInfo_v2(&fr, &tot), CUDA_ERROR_OPERATING_SYSTEM);
	on_device(&d, 0);
	CHECK_EQ(cuMemAlloc_v2(&p0, 100 * MiB), CUDA_SUCCESS);
	CHECK_EQ(used_on(a, uuids[0]), 100 * MiB);
	CHECK_EQ(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
	CHECK_EQ(tot, 1 * GiB);
	CHECK_EQ(cuMemFree_v2(p0), CUDA_SUCCESS);
	CHECK_EQ(used_on(a, uuids[0]), 0);
	CHECK_EQ(cuMemFree_v2(p1), CUDA_SUCCESS); /* the driver's memory is still freed */
	char err[2048];
	ht_stderr(err, sizeof(err));
	CHECK_EQ(ht_count_lines(err), 1);
	CHECK(strstr(err, "was truncated") != NULL && strstr(err, GS_CONTAINER_GROUP_FILE) != NULL);
	return 0;
}

/* A directory at GPU 0's path that is no read-only mount of the node's
 * (arg "rw": writable; "ro": on a read-only filesystem): GPU 0 stays in B
 * (512 MiB), C's file is never used. */
static int forged_dir(void *arg)
{
	mount_container(strcmp(arg, "ro") == 0 ? 2 : 1);
	ht_capture_stderr("forged");
	struct drv d;
	CUcontext c0;
	drv_open(&d, &c0);
	const struct gs_shm_file *b = map_group(dir_b), *c = map_group(dir_c);
	CUdeviceptr p, x;
	CHECK_EQ(cuMemAlloc_v2(&p, 400 * MiB), CUDA_SUCCESS);
	CHECK_EQ(used_on(b, uuids[0]), 400 * MiB);
	CHECK_EQ(cuMemAlloc_v2(&x, 200 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(used_on(c, uuids[0]), 0);
	CHECK_EQ(entries(c), 0);
	char err[2048];
	CHECK(strstr(ht_stderr(err, sizeof(err)), "is not a read-only mount (not the node's)") != NULL);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
	return 0;
}

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "hooks_groups_test: SKIP: needs root (a private mount namespace)\n");
		return 0;
	}
	ht_setup();
	setenv("GPUSLICE_SIM_GPUS", "2", 1);
	HT_RUN(read_uuids, NULL);
	char path[400];
	snprintf(path, sizeof(path), "%s/uuids", ht_dir);
	FILE *f = fopen(path, "r");
	CHECK(f != NULL && fscanf(f, "%63s %63s", uuids[0], uuids[1]) == 2);
	fclose(f);
	group_dir(dir_a, sizeof(dir_a), "a", 1 * GiB);
	group_dir(dir_b, sizeof(dir_b), "b", 512 * MiB);
	group_dir(dir_c, sizeof(dir_c), "c", 8 * GiB);
	HT_RUN(two_groups, NULL);
	HT_RUN(measured, NULL);
	HT_RUN(forged_dir, "rw");
	HT_RUN(forged_dir, "ro");
	HT_RUN(truncated_other, NULL);
	group_dir(dir_a, sizeof(dir_a), "a2", 1 * GiB); /* fresh files: A's was truncated */
	group_dir(dir_b, sizeof(dir_b), "b2", 512 * MiB);
	HT_RUN(truncated_own, NULL);
	ht_teardown();
	fprintf(stderr, "hooks_groups_test: ok\n");
	return 0;
}
