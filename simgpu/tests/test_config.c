/* SPDX-License-Identifier: Apache-2.0
 * Device file and env parsing (tables + a seeded mutation fuzz over a corpus),
 * and end to end: a bad configuration or state file gives one clear line on
 * stderr and cuInit CUDA_ERROR_NO_DEVICE, never a crash. */
#include <fcntl.h>

#include "config.h"
#include "testutil.h"

struct parse_case {
	const char *text;
	int ndev; /* -1: must fail */
	const char *err_has;
};

static const struct parse_case cases[] = {
	{"name=A memory=1GiB\n", 1, NULL},
	{"name=\"NVIDIA H100 80GB HBM3\" uuid=GPU-11111111-2222-3333-4444-555555555555 memory=80GiB sms=132", 1, NULL},
	{"# comment\n\n  name=A\r\nname=B memory=2048MiB\n", 2, NULL},
	{"memory=24000000000\n", 1, NULL},
	{"memory=1GB sms=1\n", 1, NULL},
	{"", -1, "no devices"},
	{"# only comments\n", -1, "no devices"},
	{"name=A colour=red\n", -1, "unknown key \"colour\""},
	{"name=A name=B\n", -1, "given twice"},
	{"name=A memory=lots\n", -1, "bad value for memory"},
	{"name=A memory=1.5GiB\n", -1, "bad value for memory"},
	{"name=A memory=99999999999999999999\n", -1, "bad value for memory"},
	{"name=A memory=17179869184GiB\n", -1, "bad value for memory"},
	{"name=A memory=1KiB\n", -1, "bad value for memory"},
	{"name=A sms=0\n", -1, "bad value for sms"},
	{"name=A sms=-3\n", -1, "bad value for sms"},
	{"name=A sms=12x\n", -1, "bad value for sms"},
	{"uuid=GPU-1234\n", -1, "bad value for uuid"},
	{"uuid=GPU-11111111-2222-3333-4444-55555555555g\n", -1, "bad value for uuid"},
	{"uuid=11111111-2222-3333-4444-555555555555\n", -1, "bad value for uuid"},
	{"name=\"unterminated\n", -1, "unterminated quote"},
	{"name=\"x\"y\n", -1, "garbage after quoted value"},
	{"name\n", -1, "expected key=value"},
	{"=x\n", -1, "expected key=value"},
	{"name=\"\"\n", -1, "bad value for name"},
	{"uuid=GPU-11111111-2222-3333-4444-555555555555\nuuid=GPU-11111111-2222-3333-4444-555555555555\n", -1,
	 "same uuid"},
	{"name=a\nname=b\nname=c\nname=d\nname=e\nname=f\nname=g\nname=h\nname=i\nname=j\nname=k\nname=l\n"
	 "name=m\nname=n\nname=o\nname=p\nname=q\n",
	 -1, "more than 16 devices"},
	{"minor=7\nminor=0\n", 2, NULL},
	{"minor=254\n", 1, NULL},
	{"minor=255\n", -1, "bad value for minor"},
	{"minor=-1\n", -1, "bad value for minor"},
	{"minor=1x\n", -1, "bad value for minor"},
	{"minor=1\nname=B\n", -1, "devices 0 and 1 have the same minor"},
	{"minor=3 minor=4\n", -1, "given twice"},
	{"mig=on\nmig=off\nmig=none\n", 3, NULL},
	{"mig=yes\n", -1, "bad value for mig"},
	{"mig=\n", -1, "bad value for mig"},
	{"mig=on mig=off\n", -1, "given twice"},
};

static void test_parse_table(void)
{
	struct sim_config c;
	char err[SIM_ERR_LEN];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		err[0] = '\0';
		int rc = sim_config_parse(cases[i].text, strlen(cases[i].text), &c, err, sizeof(err));
		int got = rc == 0 ? c.ndev : -1;
		if (got != cases[i].ndev || (cases[i].err_has && strstr(err, cases[i].err_has) == NULL) ||
		    strchr(err, '\n') != NULL) {
			fprintf(stderr, "case %zu %.30s: got %d \"%s\", want %d \"%s\"\n", i, cases[i].text, got, err,
				cases[i].ndev, cases[i].err_has ? cases[i].err_has : "");
			t_failures++;
		}
	}
	MUST(sim_config_parse(cases[1].text, strlen(cases[1].text), &c, err, sizeof(err)) == 0);
	CHECK(strcmp(c.dev[0].name, "NVIDIA H100 80GB HBM3") == 0);
	CHECK_EQ(c.dev[0].memory, 80ull << 30);
	CHECK_EQ(c.dev[0].sms, 132);
	CHECK_EQ(c.dev[0].mig, SIM_MIG_UNSET); /* GPUSLICE_SIM_MIG decides (sim_config_from_env) */
	CHECK_EQ(c.dev[0].uuid[0], 0x11);
	CHECK_EQ(c.dev[0].uuid[15], 0x55);
	MUST(sim_config_parse(cases[0].text, strlen(cases[0].text), &c, err, sizeof(err)) == 0);
	CHECK_EQ(c.dev[0].sms, SIM_DEFAULT_SMS); /* omitted keys take defaults */
	CHECK_EQ(c.dev[0].minor, 0);
	MUST(sim_config_parse("minor=7\nminor=0\n", 16, &c, err, sizeof(err)) == 0);
	CHECK(c.dev[0].minor == 7 && c.dev[1].minor == 0);
	MUST(sim_config_parse("name=a\nname=b\n", 14, &c, err, sizeof(err)) == 0);
	CHECK(c.dev[0].minor == 0 && c.dev[1].minor == 1); /* default minor: the index */
	/* A NUL inside the text is rejected, never read past len. */
	CHECK(sim_config_parse("name=A\0x", 8, &c, err, sizeof(err)) != 0);
	CHECK(sim_config_parse("name=ABCDEF", 6, &c, err, sizeof(err)) == 0 && strcmp(c.dev[0].name, "A") == 0);
}

static void test_sizes_and_uuids(void)
{
	uint64_t v = 0;
	unsigned char u[16];
	char s[64];

	CHECK(sim_parse_size("24GiB", &v) == 0 && v == 24ull << 30);
	CHECK(sim_parse_size("512Mi", &v) == 0 && v == 512ull << 20);
	CHECK(sim_parse_size("3GB", &v) == 0 && v == 3000000000ull);
	CHECK(sim_parse_size("18446744073709551615", &v) == 0 && v == UINT64_MAX);
	CHECK(sim_parse_size("18446744073709551616", &v) != 0);
	CHECK(sim_parse_size("16777216TiB", &v) != 0);
	CHECK(sim_parse_size("", &v) != 0);
	CHECK(sim_parse_size("GiB", &v) != 0);
	CHECK(sim_parse_size(" 1GiB", &v) != 0);
	CHECK(sim_parse_size("1gib", &v) != 0);
	for (int i = 0; i < 3; i++) {
		unsigned char back[16];
		sim_default_uuid(i, u);
		sim_format_uuid(u, s, sizeof(s));
		CHECK(strlen(s) == 40 && sim_parse_uuid(s, back) == 0 && memcmp(u, back, 16) == 0);
	}
}

struct access_case {
	const char *devnodes, *devdir; /* NULL: unset */
	int rc;
	bool on;
	const char *dir_or_err;
};

static const struct access_case access_cases[] = {
	{NULL, NULL, 0, false, "/dev"},
	{"", "", 0, false, "/dev"},
	{"0", NULL, 0, false, "/dev"},
	{"1", NULL, 0, true, "/dev"},
	{"1", "/tmp/x", 0, true, "/tmp/x"},
	{"yes", NULL, -1, false, "GPUSLICE_SIM_DEVNODES=\"yes\": want 0 or 1"},
	{"10", NULL, -1, false, "want 0 or 1"},
	{"1", "dev", -1, false, "GPUSLICE_SIM_DEVDIR=\"dev\": want an absolute path"},
};

static void set_or_unset(const char *name, const char *v)
{
	if (v != NULL)
		setenv(name, v, 1);
	else
		unsetenv(name);
}

/* GPUSLICE_SIM_DEVNODES / _DEVDIR, with env devices and with a device file. */
static void test_access_env(void)
{
	struct sim_config c;
	char err[SIM_ERR_LEN], longdir[300];

	for (size_t i = 0; i < sizeof(access_cases) / sizeof(access_cases[0]); i++) {
		const struct access_case *k = &access_cases[i];
		set_or_unset("GPUSLICE_SIM_DEVNODES", k->devnodes);
		set_or_unset("GPUSLICE_SIM_DEVDIR", k->devdir);
		err[0] = '\0';
		int rc = sim_config_from_env(&c, err, sizeof(err));
		bool good = rc != 0 ? rc == k->rc && strstr(err, k->dir_or_err) != NULL
				    : rc == k->rc && c.access.devnodes == k->on &&
					      strcmp(c.access.devdir, k->dir_or_err) == 0;
		if (!good) {
			fprintf(stderr, "access case %zu: rc %d err \"%s\"\n", i, rc, err);
			t_failures++;
		}
	}
	memset(longdir, 'a', sizeof(longdir) - 1);
	longdir[0] = '/';
	longdir[sizeof(longdir) - 1] = '\0';
	setenv("GPUSLICE_SIM_DEVDIR", longdir, 1);
	CHECK(sim_config_from_env(&c, err, sizeof(err)) != 0 && strstr(err, "GPUSLICE_SIM_DEVDIR") != NULL);
	unsetenv("GPUSLICE_SIM_DEVDIR");
	/* Also with a device file: the check is per process, not per device. */
	char path[128];
	snprintf(path, sizeof(path), "/tmp/gpuslice-simtest-access-%d.conf", (int)getpid());
	FILE *f = fopen(path, "w");
	MUST(f != NULL);
	fputs("minor=4\nminor=2\n", f);
	fclose(f);
	setenv("GPUSLICE_SIM_CONFIG", path, 1);
	setenv("GPUSLICE_SIM_DEVNODES", "1", 1);
	CHECK(sim_config_from_env(&c, err, sizeof(err)) == 0 && c.access.devnodes && c.ndev == 2 &&
	      c.dev[0].minor == 4 && c.dev[1].minor == 2 && strcmp(c.access.devdir, "/dev") == 0);
	unsetenv("GPUSLICE_SIM_CONFIG");
	unsetenv("GPUSLICE_SIM_DEVNODES");
	/* GPUSLICE_SIM_MIG: every device without a mig= key; a bad value is refused with its name. */
	f = fopen(path, "w");
	MUST(f != NULL);
	fputs("mig=none\nminor=1\n", f);
	fclose(f);
	setenv("GPUSLICE_SIM_CONFIG", path, 1);
	setenv("GPUSLICE_SIM_MIG", "on", 1);
	CHECK(sim_config_from_env(&c, err, sizeof(err)) == 0 && c.dev[0].mig == SIM_MIG_NONE &&
	      c.dev[1].mig == SIM_MIG_ON);
	setenv("GPUSLICE_SIM_MIG", "2", 1); /* the old instances-per-GPU form */
	CHECK(sim_config_from_env(&c, err, sizeof(err)) != 0 && strstr(err, "GPUSLICE_SIM_MIG") != NULL);
	unsetenv("GPUSLICE_SIM_CONFIG");
	unsetenv("GPUSLICE_SIM_MIG");
	CHECK(sim_config_from_env(&c, err, sizeof(err)) == 0 &&
	      c.dev[0].mig == SIM_MIG_NONE); /* default: not capable */
	unlink(path);
}

/* Seeded mutation fuzzing over the table's texts: the parser must return 0
 * or -1 with a one-line message, never crash or read out of bounds (ASan). */
static void test_fuzz(void)
{
	struct sim_config c;
	char buf[512], err[SIM_ERR_LEN];
	uint64_t x = 0x9e3779b97f4a7c15ull;
	const char alphabet[] = "=\" \n#\tGPU-0123456789abcdefKMGTiBnameuuidmemorysmsminor\r\0\xff";

	for (int it = 0; it < 100000; it++) {
		const char *seed = cases[it % (sizeof(cases) / sizeof(cases[0]))].text;
		size_t n = strlen(seed);
		memcpy(buf, seed, n);
		for (int k = 0; k < 1 + it % 4; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			size_t pos = n ? x % (n + 1) : 0;
			char ch = alphabet[(x >> 32) % (sizeof(alphabet) - 1)];
			if ((x >> 60) & 1 && n < sizeof(buf) - 1)
				memmove(buf + pos + 1, buf + pos, n++ - pos), buf[pos] = ch;
			else if (pos < n)
				buf[pos] = ch;
		}
		err[0] = '\0';
		int rc = sim_config_parse(buf, n, &c, err, sizeof(err));
		if (rc == 0)
			CHECK(c.ndev >= 1 && c.ndev <= SIM_MAX_DEVICES && c.dev[0].memory >= (1u << 20));
		else
			CHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
	}
}

/* CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: a table, then seeded mutations of its
 * valid entries (0 or -1 with a one-line message, never a crash). */
static void test_pinned_limits(void)
{
	static const struct {
		const char *in;
		int rc, ord;
		uint64_t want;
	} tab[] = {
		{"", 0, 0, 0},
		{"0=1G", 0, 0, 1ull << 30},
		{"0=512M,1=2g", 0, 1, 2ull << 30},
		{"3=4096", 0, 3, 4096},
		{"15=1T", 0, 15, 1ull << 40},
		{"0=1k", 0, 0, 1024},
		{"32=1G", -1, 0, 0}, /* past the last device slot */
		{"0=0", -1, 0, 0},
		{"0=1G,0=2G", -1, 0, 0},
		{"0=1GB", -1, 0, 0},
		{"0=1.5G", -1, 0, 0},
		{"0=", -1, 0, 0},
		{"=1G", -1, 0, 0},
		{"0=1G,", -1, 0, 0},
		{"GPU-1=1G", -1, 0, 0},
		{"0=99999999999999999999", -1, 0, 0},
		{"0=17179869184T", -1, 0, 0},
		{"0=1X", -1, 0, 0},
	};
	uint64_t lim[SIM_MAX_DEVICES];
	char err[SIM_ERR_LEN], buf[64];
	uint64_t x = 0x243f6a8885a308d3ull;
	const char alphabet[] = "0123456789=,KMGTkmgtB.-x ";

	for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
		err[0] = '\0';
		int rc = sim_parse_pinned_limits(tab[i].in, lim, err, sizeof(err));
		CHECK_EQ(rc, tab[i].rc);
		if (rc == 0)
			CHECK_EQ(lim[tab[i].ord], tab[i].want);
		else
			CHECK(err[0] != '\0');
		if (rc != tab[i].rc)
			fprintf(stderr, "pinned limit \"%s\": rc %d (%s)\n", tab[i].in, rc, err);
	}
	CHECK_EQ(sim_parse_pinned_limits(NULL, lim, err, sizeof(err)), 0);
	for (int it = 0; it < 50000; it++) {
		const char *seed = tab[1 + it % 5].in;
		size_t n = strlen(seed);
		memcpy(buf, seed, n + 1);
		for (int k = 0; k < 1 + it % 3; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			size_t pos = x % (n + 1);
			char ch = alphabet[(x >> 32) % (sizeof(alphabet) - 1)];
			if ((x >> 60) & 1 && n < sizeof(buf) - 2)
				memmove(buf + pos + 1, buf + pos, n++ - pos + 1), buf[pos] = ch;
			else if (pos < n)
				buf[pos] = ch;
		}
		err[0] = '\0';
		if (sim_parse_pinned_limits(buf, lim, err, sizeof(err)) != 0)
			CHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
	}
}

/* Child: cuInit and nvmlInit must fail cleanly (exit 0), stderr captured by the parent. */
static int child_bad(void)
{
	int n;

	if (cuInit(0) != CUDA_ERROR_NO_DEVICE || cuDeviceGetCount(&n) != CUDA_ERROR_NO_DEVICE)
		return 1;
	if (nvmlInit_v2() != NVML_ERROR_DRIVER_NOT_LOADED)
		return 2;
	return 0;
}

/* Runs child_bad with stderr to a file; checks the one line it printed. */
static void expect_bad(const char *want)
{
	char path[128], out[1024] = {0};
	pid_t pid;
	int fd;

	snprintf(path, sizeof(path), "/tmp/gpuslice-simtest-stderr-%d", (int)getpid());
	pid = fork();
	MUST(pid >= 0);
	if (pid == 0) {
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(fd, 2);
		setenv("SIM_TEST_CHILD", "1", 1);
		execl("/proc/self/exe", "simtest-child", "child", "bad", "-", (char *)NULL);
		_exit(127);
	}
	CHECK_EQ(t_wait(pid), 0);
	fd = open(path, O_RDONLY);
	MUST(fd >= 0);
	CHECK(read(fd, out, sizeof(out) - 1) > 0);
	close(fd);
	unlink(path);
	/* One line per library (CUDA, NVML), each naming the problem. */
	char *nl = strchr(out, '\n');
	CHECK(strncmp(out, "gpuslice: simulated GPU: ", 25) == 0);
	CHECK(strstr(out, want) != NULL);
	CHECK(nl != NULL && strchr(nl + 1, '\n') != NULL && strchr(strchr(nl + 1, '\n') + 1, '\n') == NULL);
	if (strstr(out, want) == NULL)
		fprintf(stderr, "stderr was: %s", out);
}

static void test_bad_config_end_to_end(void)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "/tmp/gpuslice-simtest-bad-%d.conf", (int)getpid());
	f = fopen(path, "w");
	MUST(f != NULL);
	fputs("name=A memory=24GiB\nname=B memroy=1GiB\n", f);
	fclose(f);
	setenv("GPUSLICE_SIM_CONFIG", path, 1);
	expect_bad("line 2: unknown key \"memroy\"");
	unlink(path);
	expect_bad("No such file or directory");
	unsetenv("GPUSLICE_SIM_CONFIG");
	setenv("GPUSLICE_SIM_MEMORY", "a lot", 1);
	expect_bad("GPUSLICE_SIM_MEMORY=\"a lot\"");
	unsetenv("GPUSLICE_SIM_MEMORY");
	setenv("GPUSLICE_SIM_GPUS", "17", 1);
	expect_bad("GPUSLICE_SIM_GPUS=\"17\"");
	unsetenv("GPUSLICE_SIM_GPUS");
	setenv("GPUSLICE_SIM_DEVNODES", "on", 1);
	expect_bad("GPUSLICE_SIM_DEVNODES=\"on\": want 0 or 1");
	unsetenv("GPUSLICE_SIM_DEVNODES");
}

/* A version 1 file (minor was padding) nobody uses is rewritten as version 2. */
static void test_v1_state_file(void)
{
	uint32_t version = 1;
	int fd;

	CHECK_EQ(t_run("ok2", "-"), 0);
	fd = open(t_state, O_RDWR);
	MUST(fd >= 0);
	MUST(pwrite(fd, &version, 4, 8) == 4);
	CHECK_EQ(t_run("ok2", "-"), 0);
	MUST(pread(fd, &version, 4, 8) == 4);
	CHECK_EQ(version, SIM_STATE_VERSION);
	close(fd);
	unlink(t_state);
}

static void test_bad_state_file(void)
{
	int fd = open(t_state, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	MUST(fd >= 0);
	CHECK(write(fd, "not a state file", 16) == 16);
	close(fd);
	expect_bad("not a simulator state file");
	unlink(t_state);
}

/* Child "hold": keeps a context on the state file until killed. */
static int child_hold(void)
{
	t_primary(0);
	if (write(1, "R", 1) != 1)
		return 3;
	for (;;)
		pause();
}

/* Child "ok": cuInit works and the device has 2 GiB. */
static int child_ok(void)
{
	size_t total = 0;

	if (cuInit(0) != CUDA_SUCCESS || cuDeviceTotalMem_v2(&total, 0) != CUDA_SUCCESS)
		return 1;
	return total == (2ull << 30) ? 0 : 2;
}

static void test_config_mismatch(void)
{
	int fds[2];
	char c;
	pid_t pid;

	MUST(pipe(fds) == 0);
	pid = fork();
	MUST(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], 1);
		setenv("SIM_TEST_CHILD", "1", 1);
		execl("/proc/self/exe", "simtest-child", "child", "hold", "-", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	MUST(read(fds[0], &c, 1) == 1);
	close(fds[0]);
	setenv("GPUSLICE_SIM_MEMORY", "2GiB", 1);
	expect_bad("with a different device configuration"); /* the holder uses 24 GiB */
	kill(pid, SIGKILL);
	CHECK_EQ(t_wait(pid), 128 + SIGKILL);
	CHECK_EQ(t_run("ok", "-"), 0); /* nobody left: the devices are rewritten */
	unsetenv("GPUSLICE_SIM_MEMORY");
	unlink(t_state);
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "child") == 0) {
		if (strcmp(argv[2], "hold") == 0)
			return child_hold();
		if (strcmp(argv[2], "ok2") == 0)
			return cuInit(0) == CUDA_SUCCESS && nvmlInit_v2() == NVML_SUCCESS ? 0 : 1;
		return strcmp(argv[2], "ok") == 0 ? child_ok() : child_bad();
	}
	t_private_state("config");
	test_parse_table();
	test_sizes_and_uuids();
	test_access_env();
	test_fuzz();
	test_pinned_limits();
	test_bad_config_end_to_end();
	test_bad_state_file();
	test_v1_state_file();
	test_config_mismatch();
	return t_done("configuration parsing, fuzz, pinned memory limits, bad config and state file");
}
