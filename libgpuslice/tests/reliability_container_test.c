/* SPDX-License-Identifier: Apache-2.0
 * A container's group file where the device plugin mounts it
 * (GS_CONTAINER_GROUP_FILE): every member is held to the group's limit
 * whatever its environment says: GPUSLICE_GROUP_FILE and
 * GPUSLICE_MEMORY_LIMIT unset, or naming another file and a larger limit.
 * Each member runs in a private mount namespace with the group file
 * bind-mounted at that path, as in a container (root only); without that
 * path (a single node) the environment decides as before. The same for the
 * launch gate: GPUSLICE_GATE=off is not read there, only the node's file.
 */
#include <errno.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "../src/internal.h"
#include "hooktest.h"

static struct drv d;
static CUcontext primary;
static const char *group_path;

/* Shows this process GS_CONTAINER_GROUP_FILE as the group file, in a mount
 * namespace of its own (a tmpfs on /run, the file bound on the path): the
 * host's /run is not changed. */
static void mount_container_group(void)
{
	CHECK(unshare(CLONE_NEWNS) == 0);
	CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0);
	CHECK(strncmp("/run/gpuslice-group/", GS_CONTAINER_GROUP_FILE, strlen("/run/gpuslice-group/")) == 0);
	CHECK(mkdir("/run", 0755) == 0 || errno == EEXIST);
	CHECK(mount("tmpfs", "/run", "tmpfs", 0, "size=64k") == 0);
	CHECK(mkdir("/run/gpuslice-group", 0755) == 0);
	int fd = open(GS_CONTAINER_GROUP_FILE, O_WRONLY | O_CREAT, 0600);
	CHECK(fd >= 0);
	close(fd);
	CHECK(mount(group_path, GS_CONTAINER_GROUP_FILE, NULL, MS_BIND, NULL) == 0);
}

/* env: "unset" drops GPUSLICE_GROUP_FILE and GPUSLICE_MEMORY_LIMIT; "other"
 * names a file of the member's own and an 8 GiB limit. Either way the
 * group's 1 GiB holds, and the group's file counts what the member holds. */
static int member(void *env)
{
	mount_container_group();
	unsetenv("GPUSLICE_GROUP_MANAGED");
	if (strcmp(env, "unset") == 0) {
		unsetenv("GPUSLICE_GROUP_FILE");
		unsetenv("GPUSLICE_MEMORY_LIMIT");
	}
	char own[320];
	snprintf(own, sizeof(own), "%s/own-group", ht_dir);
	if (strcmp(env, "other") == 0) {
		setenv("GPUSLICE_GROUP_FILE", own, 1);
		setenv("GPUSLICE_MEMORY_LIMIT", "8589934592", 1);
	}
	drv_open(&d, &primary);
	const struct gs_shm_file *grp = ht_map(group_path);
	CHECK(grp != NULL);
	CUdeviceptr p, q;
	CHECK_EQ(cuMemAlloc_v2(&p, 600 * MiB), CUDA_SUCCESS);
	CHECK_EQ(ht_used(grp), 600 * MiB);
	CHECK_EQ(cuMemAlloc_v2(&q, 600 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
	CHECK_EQ(ht_used(grp), 0);
	CHECK(access(own, F_OK) != 0 && errno == ENOENT); /* never opened, never made */
	return 0;
}

/* A member that says GPUSLICE_GATE=off launches a kernel with a node socket
 * named; arg "marker": the node put GS_CONTAINER_GATE_OFF in place (an MPS
 * client). The test's socket then says whether its gate asked the daemon. */
static int gate_member(void *arg)
{
	mount_container_group();
	if (strcmp(arg, "marker") == 0) {
		int fd = open(GS_CONTAINER_GATE_OFF, O_WRONLY | O_CREAT, 0644);
		CHECK(fd >= 0);
		close(fd);
	}
	setenv("GPUSLICE_GATE", "off", 1);
	setenv("GPUSLICE_GATE_TIMEOUT_MS", "100", 1);
	setenv("GPUSLICE_GATE_ON_LOSS", "run", 1);
	drv_open(&d, &primary);
	CUmodule mod;
	CUfunction fn;
	CHECK_EQ(d.cuModuleLoadData(&mod, "any image"), CUDA_SUCCESS);
	CHECK_EQ(d.cuModuleGetFunction(&fn, mod, "gpuslice_sim_busy"), CUDA_SUCCESS);
	unsigned long long us = 10;
	void *params[] = {&us};
	CHECK_EQ(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
	return 0;
}

/* How many connections a member made to a daemon at a socket of the test's
 * (which never answers: the gate runs after its timeout). */
static int gate_asked(const char *arg)
{
	char path[300];
	snprintf(path, sizeof(path), "%s/gate.sock", ht_dir);
	unlink(path);
	int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0);
	CHECK(l >= 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	CHECK(strlen(path) < sizeof(a.sun_path));
	strcpy(a.sun_path, path);
	CHECK(bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(l, 16) == 0);
	setenv("GPUSLICE_NODE_SOCKET", path, 1);
	HT_RUN(gate_member, (void *)arg);
	unsetenv("GPUSLICE_NODE_SOCKET");
	int asked = 0, c;
	while ((c = accept(l, NULL, NULL)) >= 0) {
		asked++;
		close(c);
	}
	CHECK(errno == EAGAIN || errno == EWOULDBLOCK);
	close(l);
	return asked;
}

/* No such path: the environment's group and limit, as on a single node. */
static int single_node(void *arg)
{
	(void)arg;
	ht_group("single", "8589934592");
	drv_open(&d, &primary);
	CUdeviceptr p, q;
	CHECK_EQ(cuMemAlloc_v2(&p, 600 * MiB), CUDA_SUCCESS);
	CHECK_EQ(cuMemAlloc_v2(&q, 600 * MiB), CUDA_SUCCESS);
	return 0;
}

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "reliability_container_test: SKIP: needs root (a private mount namespace)\n");
		return 0;
	}
	ht_setup();
	group_path = strdup(ht_managed_group("container", 1 * GiB));
	CHECK(group_path != NULL);
	HT_RUN(member, "unset");
	HT_RUN(member, "other");
	HT_RUN(single_node, NULL);
	/* In a container GPUSLICE_GATE=off is not the member's to say: gated
	 * unless the node's file says otherwise. */
	/* Both members say hello once to learn their host pid (the module load
	 * charges the driver's memory to their slot); only the gated one also
	 * asks for GPU time, once or more (it tries the silent daemon again
	 * after its timeout, as often as the launch takes). */
	int gated = gate_asked("no marker"), off = gate_asked("marker");
	CHECK_EQ(off, 1);
	CHECK(gated >= 2);
	free((void *)group_path);
	ht_teardown();
	fprintf(stderr, "reliability_container_test: ok\n");
	return 0;
}
