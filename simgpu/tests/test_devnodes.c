/* SPDX-License-Identifier: Apache-2.0
 * Device nodes (GPUSLICE_SIM_DEVNODES=1): a process sees only the devices
 * whose <devdir>/nvidia<minor> opens or fails with ENXIO; a device that
 * becomes accessible appears on the next count query after the listed ones,
 * which keep their ordinals. Any user: plain files in a temporary directory.
 * Root: character nodes c 195:N on a tmpfs in a private mount namespace, and a
 * cgroup v1 devices controller denying, then allowing, one of them for a
 * process moved into a child cgroup. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "testutil.h"

#define NODES 3 /* the observer reports open() of nvidia0..2 */

/* ---- observer child: answers each command byte on stdin with one line ---- */

struct obs_state {
	bool started, cuda;
	CUcontext ctx;
	unsigned char uuid0[16];
	nvmlDevice_t h0;
	char nvml_uuid0[64];
	char out[512];
};

__attribute__((format(printf, 2, 3))) static void put(struct obs_state *s, const char *fmt, ...)
{
	size_t n = strlen(s->out);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->out + n, sizeof(s->out) - n, fmt, ap);
	va_end(ap);
}

/* cuda=<device index of each ordinal>; errno must survive the count query. */
static void list_cuda(struct obs_state *s)
{
	CUuuid u;
	int n = 0, e;

	errno = 4242;
	if (!s->cuda || cuDeviceGetCount(&n) != CUDA_SUCCESS) {
		put(s, "cuda=none");
		return;
	}
	e = errno;
	put(s, n ? "cuda=" : "cuda=-");
	for (int o = 0; o < n; o++)
		if (cuDeviceGetUuid_v2(&u, o) == CUDA_SUCCESS)
			put(s, o ? ",%d" : "%d", (unsigned char)u.bytes[15]);
	put(s, " cuda_errno=%s", e == 4242 ? "kept" : "lost");
}

/* nvml=<device index>:<minor> of each NVML index. */
static void list_nvml(struct obs_state *s)
{
	unsigned n = 0, minor;
	char u[64];
	nvmlDevice_t h;
	int e;

	errno = 4242;
	if (nvmlDeviceGetCount_v2(&n) != NVML_SUCCESS) {
		put(s, " nvml=err");
		return;
	}
	e = errno;
	put(s, n ? " nvml=" : " nvml=-");
	for (unsigned i = 0; i < n; i++)
		if (nvmlDeviceGetHandleByIndex_v2(i, &h) == NVML_SUCCESS &&
		    nvmlDeviceGetUUID(h, u, sizeof(u)) == NVML_SUCCESS &&
		    nvmlDeviceGetMinorNumber(h, &minor) == NVML_SUCCESS)
			put(s, i ? ",%ld:%u" : "%ld:%u", strtol(u + 38, NULL, 16), minor);
	put(s, " nvml_errno=%s", e == 4242 ? "kept" : "lost");
}

/* ctx=ok: the context made at the first query is still on ordinal 0, the
 * same device, and allocates; NVML handle 0 still names the same device
 * (unless NVML was re-initialized). */
static void check_ctx(struct obs_state *s, bool reinit)
{
	CUdeviceptr p;
	CUdevice d = -1;
	CUuuid u;
	char a[64] = "";
	nvmlDevice_t h;
	bool ok;

	if (!s->cuda) {
		put(s, " ctx=none");
		return;
	}
	if (s->ctx == NULL) {
		CU_MUST(cuDevicePrimaryCtxRetain(&s->ctx, 0));
		CU_MUST(cuCtxSetCurrent(s->ctx));
		CU_MUST(cuDeviceGetUuid_v2(&u, 0));
		memcpy(s->uuid0, u.bytes, 16);
		MUST(nvmlDeviceGetHandleByIndex_v2(0, &s->h0) == NVML_SUCCESS);
		MUST(nvmlDeviceGetUUID(s->h0, s->nvml_uuid0, sizeof(s->nvml_uuid0)) == NVML_SUCCESS);
	}
	ok = cuCtxGetDevice(&d) == CUDA_SUCCESS && d == 0 && cuDeviceGetUuid_v2(&u, 0) == CUDA_SUCCESS &&
	     memcmp(u.bytes, s->uuid0, 16) == 0 && cuMemAlloc_v2(&p, 1 << 20) == CUDA_SUCCESS &&
	     cuMemFree_v2(p) == CUDA_SUCCESS;
	if (!reinit)
		ok = ok && nvmlDeviceGetHandleByIndex_v2(0, &h) == NVML_SUCCESS && h == s->h0 &&
		     nvmlDeviceGetUUID(h, a, sizeof(a)) == NVML_SUCCESS && strcmp(a, s->nvml_uuid0) == 0;
	put(s, " ctx=%s", ok ? "ok" : "bad");
}

/* open=<result of open(2) on nvidia0..2 in this process>. */
static void list_opens(struct obs_state *s)
{
	const char *dir = getenv("GPUSLICE_SIM_DEVDIR");
	char path[256];

	put(s, " open=");
	for (int m = 0; m < NODES; m++) {
		snprintf(path, sizeof(path), "%s/nvidia%d", dir, m);
		int fd = open(path, O_RDONLY | O_CLOEXEC), e = errno;
		if (fd >= 0)
			close(fd);
		put(s, "%s%s", m ? "," : "",
		    fd >= 0       ? "ok"
		    : e == ENXIO  ? "ENXIO"
		    : e == EPERM  ? "EPERM"
		    : e == ENOENT ? "ENOENT"
				  : "other");
	}
}

/* Commands: q = query, r = nvmlShutdown + nvmlInit, then query. The first
 * command initializes CUDA and NVML (so a parent can move it first). */
static int observer(void)
{
	struct obs_state s = {0};
	char cmd;

	while (read(0, &cmd, 1) == 1 && (cmd == 'q' || cmd == 'r')) {
		if (!s.started) {
			s.started = true;
			s.cuda = cuInit(0) == CUDA_SUCCESS;
			if (nvmlInit_v2() != NVML_SUCCESS)
				return 2;
		} else if (cmd == 'r' && (nvmlShutdown() != NVML_SUCCESS || nvmlInit_v2() != NVML_SUCCESS)) {
			return 3;
		}
		s.out[0] = '\0';
		list_cuda(&s);
		list_nvml(&s);
		check_ctx(&s, cmd == 'r');
		list_opens(&s);
		put(&s, "\n");
		if (write(1, s.out, strlen(s.out)) != (ssize_t)strlen(s.out))
			return 4;
	}
	return t_failures == 0 ? 0 : 5;
}

/* ---- parent side ---- */

struct obs {
	pid_t pid;
	int to;
	FILE *from;
};

static void obs_start(struct obs *o)
{
	int in[2], out[2];

	MUST(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
	o->pid = fork();
	MUST(o->pid >= 0);
	if (o->pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		setenv("SIM_TEST_CHILD", "1", 1);
		execl("/proc/self/exe", "simtest-child", "child", "observer", "-", (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	o->to = in[1];
	o->from = fdopen(out[0], "r");
	MUST(o->from != NULL);
}

static void obs_stop(struct obs *o)
{
	close(o->to);
	fclose(o->from);
	CHECK_EQ(t_wait(o->pid), 0);
	o->pid = 0;
}

/* Every blank-separated field of want must appear as a field of the line. */
static void expect_fields(const char *line, const char *want, int src_line)
{
	char w[512], l[520], *save = NULL;

	snprintf(w, sizeof(w), "%s", want);
	snprintf(l, sizeof(l), " %s", line);
	l[strcspn(l, "\n")] = ' ';
	for (char *f = strtok_r(w, " ", &save); f != NULL; f = strtok_r(NULL, " ", &save)) {
		char needle[128];
		snprintf(needle, sizeof(needle), " %s ", f);
		if (strstr(l, needle) == NULL) {
			fprintf(stderr, "test_devnodes.c:%d: want %s in: %s", src_line, f, line);
			t_failures++;
		}
	}
}

static void obs_cmd(struct obs *o, char cmd, const char *want, int src_line)
{
	char line[512] = "";

	MUST(write(o->to, &cmd, 1) == 1);
	MUST(fgets(line, sizeof(line), o->from) != NULL);
	expect_fields(line, want, src_line);
}

#define QUERY(o, want) obs_cmd((o), 'q', (want), __LINE__)
#define REINIT(o, want) obs_cmd((o), 'r', (want), __LINE__)

/* A new process: what it sees at cuInit / nvmlInit. */
static void fresh_expect(const char *want, int src_line)
{
	struct obs o;

	obs_start(&o);
	obs_cmd(&o, 'q', want, src_line);
	obs_stop(&o);
}

#define FRESH(want) fresh_expect((want), __LINE__)

static char devdir[128];

static void node_file(int minor, bool present)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/nvidia%d", devdir, minor);
	if (present) {
		int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
		MUST(fd >= 0);
		close(fd);
	} else {
		MUST(unlink(path) == 0 || errno == ENOENT);
	}
}

/* Plain files: open succeeds = accessible, missing = hidden. Hot add, then
 * removal, in one running process; new processes; CUDA_VISIBLE_DEVICES. */
static void test_files(void)
{
	struct obs o;

	node_file(0, true);
	node_file(2, true);
	FRESH("cuda=0,2 nvml=0:0,2:2 open=ok,ENOENT,ok cuda_errno=kept nvml_errno=kept");
	obs_start(&o);
	QUERY(&o, "cuda=0,2 nvml=0:0,2:2 ctx=ok");
	node_file(1, true); /* hot add: appended after the listed devices */
	QUERY(&o, "cuda=0,2,1 nvml=0:0,2:2,1:1 ctx=ok cuda_errno=kept nvml_errno=kept");
	node_file(0, false); /* removal: listed devices stay (the driver holds them open) */
	QUERY(&o, "cuda=0,2,1 nvml=0:0,2:2,1:1 ctx=ok open=ENOENT,ok,ok");
	REINIT(&o, "cuda=0,2,1 nvml=1:1,2:2 ctx=ok"); /* NVML re-enumerates at a fresh init */
	obs_stop(&o);
	FRESH("cuda=1,2 nvml=1:1,2:2");
	setenv("CUDA_VISIBLE_DEVICES", "1", 1); /* an index among the accessible devices */
	FRESH("cuda=2 nvml=1:1,2:2");
	obs_start(&o);
	QUERY(&o, "cuda=2 nvml=1:1,2:2");
	node_file(0, true); /* accessible now [0,1,2]: CUDA_VISIBLE_DEVICES=1 names device 1 */
	QUERY(&o, "cuda=2,1 nvml=1:1,2:2,0:0 ctx=ok");
	obs_stop(&o);
	unsetenv("CUDA_VISIBLE_DEVICES");
	for (int m = 0; m < NODES; m++)
		node_file(m, false);
	FRESH("cuda=none nvml=- ctx=none");      /* nothing accessible: cuInit CUDA_ERROR_NO_DEVICE */
	setenv("GPUSLICE_SIM_DEVNODES", "0", 1); /* off: nodes are not looked at */
	FRESH("cuda=0,1,2 nvml=0:0,1:1,2:2");
	unsetenv("GPUSLICE_SIM_DEVNODES");
	FRESH("cuda=0,1,2 nvml=0:0,1:1,2:2");
	setenv("GPUSLICE_SIM_DEVNODES", "1", 1);
}

/* Per-device minor numbers from the device file: nodes nvidia<minor>, and
 * nvmlDeviceGetMinorNumber reports them. */
static void test_minor_config(void)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/sim.conf", devdir);
	f = fopen(path, "w");
	MUST(f != NULL);
	fputs("minor=2\nminor=0 memory=1GiB\nminor=1\n", f);
	fclose(f);
	setenv("GPUSLICE_SIM_CONFIG", path, 1);
	node_file(0, true);
	node_file(1, true);
	FRESH("cuda=1,2 nvml=1:0,2:1");
	node_file(0, false);
	node_file(1, false);
	unsetenv("GPUSLICE_SIM_CONFIG");
	unlink(path);
}

static bool skip(const char *what, const char *why)
{
	printf("skip %s: %s\n", what, why);
	return false;
}

/* Root: a tmpfs on devdir in a private mount namespace (this process and its
 * children only) holding character nodes c 195:0..2. With no NVIDIA driver
 * bound to major 195, opening them fails with ENXIO. */
static bool mount_char_nodes(void)
{
	char buf[4096] = "", path[256];
	int fd;

	if (geteuid() != 0)
		return skip("character nodes and devices cgroup", "needs root (mknod, mount, cgroups)");
	fd = open("/proc/devices", O_RDONLY | O_CLOEXEC);
	MUST(fd >= 0);
	MUST(read(fd, buf, sizeof(buf) - 1) > 0);
	close(fd);
	if (strstr(buf, "\n195 ") != NULL)
		return skip("character nodes", "a real driver owns major 195 here");
	if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		return skip("character nodes", strerror(errno));
	if (mount("gpuslice-simtest", devdir, "tmpfs", 0, "mode=0755") != 0)
		return skip("character nodes", strerror(errno));
	for (int m = 0; m < NODES; m++) {
		snprintf(path, sizeof(path), "%s/nvidia%d", devdir, m);
		if (mknod(path, S_IFCHR | 0666, makedev(195, (unsigned)m)) != 0)
			return skip("character nodes", strerror(errno));
	}
	return true;
}

static void test_char_nodes(void)
{
	char path[256];

	FRESH("cuda=0,1,2 nvml=0:0,1:1,2:2 open=ENXIO,ENXIO,ENXIO");
	snprintf(path, sizeof(path), "%s/nvidia1", devdir);
	MUST(unlink(path) == 0);
	FRESH("cuda=0,2 nvml=0:0,2:2 open=ENXIO,ENOENT,ENXIO");
	MUST(mknod(path, S_IFCHR | 0666, makedev(195, 1)) == 0);
}

static char cgdir[256];
static struct obs cg_obs;

static void cg_write(const char *file, const char *text)
{
	char path[512];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", cgdir, file);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	MUST(fd >= 0);
	MUST(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
}

static void cg_cleanup(void)
{
	if (cg_obs.pid > 0) {
		kill(cg_obs.pid, SIGKILL);
		t_wait(cg_obs.pid);
	}
	if (cgdir[0] != '\0' && rmdir(cgdir) != 0)
		fprintf(stderr, "rmdir %s: %s\n", cgdir, strerror(errno));
}

/* This process's cgroup in the v1 devices hierarchy, plus a new child. */
static bool make_cgroup(void)
{
	char line[512], own[160] = "";
	FILE *f = fopen("/proc/self/cgroup", "r");

	if (access("/sys/fs/cgroup/devices/devices.deny", W_OK) != 0 && access("/sys/fs/cgroup/devices", F_OK) != 0)
		return skip("devices cgroup", "no cgroup v1 devices controller at /sys/fs/cgroup/devices");
	MUST(f != NULL);
	while (fgets(line, sizeof(line), f) != NULL) {
		char *p = strstr(line, ":devices:");
		if (p != NULL)
			snprintf(own, sizeof(own), "%s", p + 9);
	}
	fclose(f);
	own[strcspn(own, "\n")] = '\0';
	if (own[0] == '\0')
		return skip("devices cgroup", "this process has no devices cgroup (v1)");
	snprintf(cgdir, sizeof(cgdir), "/sys/fs/cgroup/devices%s%sgpuslice-simtest-%d", own,
		 own[strlen(own) - 1] == '/' ? "" : "/", (int)getpid());
	if (mkdir(cgdir, 0755) != 0) {
		cgdir[0] = '\0';
		return skip("devices cgroup", strerror(errno));
	}
	atexit(cg_cleanup);
	return true;
}

/* A process moved into a cgroup that denies c 195:1 does not see device 1
 * (open fails with EPERM); allowed again, it appears on the next count query. */
static void test_cgroup(void)
{
	char pid[32];

	obs_start(&cg_obs);
	snprintf(pid, sizeof(pid), "%d\n", (int)cg_obs.pid);
	cg_write("cgroup.procs", pid);
	cg_write("devices.deny", "c 195:1 rwm\n");
	QUERY(&cg_obs, "cuda=0,2 nvml=0:0,2:2 ctx=ok open=ENXIO,EPERM,ENXIO");
	cg_write("devices.allow", "c 195:1 rwm\n");
	QUERY(&cg_obs, "cuda=0,2,1 nvml=0:0,2:2,1:1 ctx=ok open=ENXIO,ENXIO,ENXIO");
	cg_write("devices.deny", "c 195:0 rwm\n");
	QUERY(&cg_obs, "cuda=0,2,1 nvml=0:0,2:2,1:1 ctx=ok open=EPERM,ENXIO,ENXIO");
	REINIT(&cg_obs, "cuda=0,2,1 nvml=1:1,2:2 ctx=ok");
	obs_stop(&cg_obs);
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "child") == 0)
		return observer();
	t_private_state("devnodes");
	snprintf(devdir, sizeof(devdir), "/tmp/gpuslice-simtest-devnodes-XXXXXX");
	MUST(mkdtemp(devdir) != NULL);
	setenv("GPUSLICE_SIM_DEVDIR", devdir, 1);
	setenv("GPUSLICE_SIM_DEVNODES", "1", 1);
	setenv("GPUSLICE_SIM_GPUS", "3", 1);
	unsetenv("CUDA_VISIBLE_DEVICES");
	test_files();
	test_minor_config();
	if (mount_char_nodes()) {
		test_char_nodes();
		if (make_cgroup())
			test_cgroup();
		umount2(devdir, MNT_DETACH);
	}
	rmdir(devdir);
	return t_done("device nodes: open check, hot add, removal, minors, devices cgroup");
}
