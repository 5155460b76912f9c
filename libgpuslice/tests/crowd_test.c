/* SPDX-License-Identifier: Apache-2.0
 * Many members of a group at once, each a separate program that knows nothing
 * of gpuslice (crowd_child.c: this binary re-executed, under LD_PRELOAD of the
 * library, or bare). This process is never preloaded: it reads the simulated
 * device through NVML as the driver reports it, from outside the groups.
 *
 *   crowd_test limit PRELOAD [RUNS [SECONDS [seeded]]]
 *     Issue 36: 4 processes x 16 threads (cuMemAlloc, cuMemAllocPitch,
 *     cuMemAllocAsync, cuMemCreate, cuCtxCreate/Destroy) in one 1 GiB group,
 *     300 MiB contexts, the device's used memory sampled every 2 ms: no sample
 *     above the limit, in each of RUNS runs (3) of SECONDS (10), each run a
 *     new group (its first contexts too); every path ran, none failed but by a
 *     refusal, and allocations were made. seeded: each group's file made
 *     by the node with its probe's figure for the device (300 MiB).
 *   crowd_test jobs PRELOAD N GROUPS LIMIT CONTEXT
 *     Issue 38: N jobs (crowd_child.c) started at one instant in GROUPS
 *     groups of LIMIT bytes, contexts of CONTEXT bytes: all succeed, as they
 *     do bare, and each is charged exactly its own context and 4 MiB.
 *   crowd_test bench PRELOAD N TRIALS LIMIT CONTEXT
 *     Issue 36: N jobs at one instant in one group, bare and under the
 *     library (which goes first alternates), TRIALS times; the slowest job of each and the
 *     jobs that took 1 s or more (a benchmark: prints, fails only on errors);
 *     and under the library in a group whose file the node made seeded (the
 *     time-slice daemon's context seed, CONTEXT measured, in its header).
 *   crowd_test ctxcost BASELINE PRELOAD [ROUNDS]
 *     The cost of a context's creation and destruction (300 MiB contexts)
 *     through a baseline library and this one, and bare: one process each
 *     per round, alternating; medians and the ratio (a benchmark).
 * PRELOAD is LD_PRELOAD's value for the members. LD_LIBRARY_PATH: the driver.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gpuslice/cuda_abi.h>
#include <gpuslice/nvml_abi.h>
#include <gpuslice/shm.h>

#include "check.h"
#include "crowd.h"
#include "shmfile.h"

#define MiB (1024ull * 1024ull)
#define MAX_KIDS 1024

static char dir[] = "/tmp/gs-crowd-test-XXXXXX";

struct kid {
	pid_t pid;
	int out;
	char line[8][96];
	int lines;
};

/* Starts this binary as a member (role "job" or "stress") in group g
 * (NULL: bare, no library), stdout to a pipe. */
static void spawn(struct kid *k, const char *role, const char *preload, const char *g, uint64_t limit)
{
	int fds[2];
	CHECK(pipe(fds) == 0);
	fflush(NULL);
	k->pid = fork();
	CHECK(k->pid >= 0);
	if (k->pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		if (g != NULL) {
			char path[300], lim[32];
			snprintf(path, sizeof(path), "%s/group-%s", dir, g);
			snprintf(lim, sizeof(lim), "%llu", (unsigned long long)limit);
			setenv("GPUSLICE_GROUP_FILE", path, 1);
			setenv("GPUSLICE_GROUP", g, 1);
			setenv("GPUSLICE_MEMORY_LIMIT", lim, 1);
			setenv("LD_PRELOAD", preload, 1);
		}
		execl("/proc/self/exe", "crowd-member", role, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	k->out = fds[0];
	k->lines = 0;
}

/* Waits for the member; its exit status, its output in k->line. */
static int reap(struct kid *k)
{
	char buf[1024];
	size_t len = 0;
	ssize_t r;
	while (len < sizeof(buf) - 1 && (r = read(k->out, buf + len, sizeof(buf) - 1 - len)) != 0)
		if (r > 0)
			len += (size_t)r;
		else if (errno != EINTR)
			break;
	buf[len] = '\0';
	close(k->out);
	for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l != NULL && k->lines < 8;
	     l = strtok_r(NULL, "\n", &save))
		snprintf(k->line[k->lines++], sizeof(k->line[0]), "%s", l);
	int st;
	CHECK(waitpid(k->pid, &st, 0) == k->pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void set_env_u64(const char *name, uint64_t v)
{
	char s[32];
	snprintf(s, sizeof(s), "%llu", (unsigned long long)v);
	setenv(name, s, 1);
}

#define PHASES 7 /* start (t0 to running), init, device, context, alloc, module, kernel */
static const char *const phase_names[PHASES] = {"start", "init", "device", "context", "alloc", "module", "kernel"};

struct jobs_result {
	uint64_t phase_max[PHASES], phase_sum[PHASES];
	int failed;
	uint64_t slowest_ns;
	int slow; /* jobs of 1 s or more */
	int wrong_charge;
};

struct seed {
	uint64_t pidns, ctx;
	const char *group;
	uint32_t total_mib; /* the device's memory as the driver reports it: the key of the node's probe figure */
};

static void set_seed(struct gs_shm_header *h, const void *arg)
{
	const struct seed *sd = arg;
	h->host_pidns = sd->pidns;
	snprintf(h->group, sizeof(h->group), "%s", sd->group);
	h->context_seed_kib = (uint32_t)((sd->ctx + 1023) >> 10) + 1;
	h->device_seed_mib[0] = sd->total_mib;
	h->device_seed_kib[0] = (uint32_t)((sd->ctx + 1023) >> 10) + 1;
}

/* The device's memory in MiB as CUDA reports it (this process is never
 * preloaded: the driver's own figure, as the node's probe reads it). */
static uint32_t device_mib(void)
{
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	CHECK(cuda != NULL);
	CUresult (*init)(unsigned int) = (CUresult(*)(unsigned int))dlsym(cuda, "cuInit");
	CUresult (*total)(size_t *, CUdevice) = (CUresult(*)(size_t *, CUdevice))dlsym(cuda, "cuDeviceTotalMem_v2");
	size_t bytes = 0;
	CHECK(init != NULL && total != NULL && init(0) == CUDA_SUCCESS && total(&bytes, 0) == CUDA_SUCCESS);
	return (uint32_t)(bytes >> 20);
}

/* Makes group g's file as the node makes a new group's where contexts of ctx
 * bytes were measured: the time-slice daemon's context seeds (1 + KiB) in its
 * header, the node's probe figure for the device and the groups' seed; no
 * limit there (the members' GPUSLICE_MEMORY_LIMIT). */
static void seed_group(const char *g, uint64_t ctx)
{
	struct stat ns;
	char path[300];
	CHECK(stat("/proc/self/ns/pid", &ns) == 0);
	static uint32_t mib;
	if (mib == 0)
		mib = device_mib();
	struct seed sd = {ns.st_ino, ctx, g, mib};
	snprintf(path, sizeof(path), "%s/group-%s", dir, g);
	shm_write_managed(path, set_seed, &sd);
}

/* n jobs at one instant over `groups` groups (NULL preload: bare), the
 * groups' files made seeded by the node first where seeded. */
static struct jobs_result run_jobs(const char *preload, int n, int groups, uint64_t limit, uint64_t ctx, int run,
				   int seeded)
{
	static struct kid kids[MAX_KIDS];
	struct jobs_result res = {0};
	for (int i = 0; i < groups && preload != NULL && seeded; i++) {
		char g[32];
		snprintf(g, sizeof(g), "r%d-p%d", run, i);
		seed_group(g, ctx);
	}
	set_env_u64("CROWD_T0", crowd_now_ns() + 300000000ull + (uint64_t)n * 5000000ull);
	for (int i = 0; i < n; i++) {
		char g[32];
		snprintf(g, sizeof(g), "r%d-p%d", run, i % groups);
		spawn(&kids[i], "job", preload, preload != NULL ? g : NULL, limit);
	}
	for (int i = 0; i < n; i++) {
		int rc = reap(&kids[i]);
		unsigned long long ns = 0, charged = 0, ph[PHASES] = {0};
		int ok = rc == 0 && kids[i].lines == 1 &&
			 sscanf(kids[i].line[0], "job 0 %llu %llu %llu %llu %llu %llu %llu %llu %llu", &ns, &charged,
				&ph[0], &ph[1], &ph[2], &ph[3], &ph[4], &ph[5], &ph[6]) == 2 + PHASES;
		if (!ok) {
			if (res.failed++ < 5)
				fprintf(stderr, "  job %d: exit %d: %s\n", i, rc, kids[i].lines ? kids[i].line[0] : "");
			continue;
		}
		res.slowest_ns = ns > res.slowest_ns ? ns : res.slowest_ns;
		for (int k = 0; k < PHASES; k++) {
			res.phase_sum[k] += ph[k];
			res.phase_max[k] = ph[k] > res.phase_max[k] ? ph[k] : res.phase_max[k];
		}
		res.slow += ns >= 1000000000ull;
		if (preload != NULL && charged != ctx + 4 * MiB && res.wrong_charge++ < 5)
			fprintf(stderr, "  job %d charged %llu bytes, its context and 4 MiB are %llu\n", i, charged,
				(unsigned long long)(ctx + 4 * MiB));
	}
	return res;
}

static int jobs(const char *preload, int n, int groups, uint64_t limit, uint64_t ctx)
{
	CHECK(n > 0 && n <= MAX_KIDS && groups > 0);
	struct jobs_result bare = run_jobs(NULL, n, groups, limit, ctx, 0, 0);
	struct jobs_result lib = run_jobs(preload, n, groups, limit, ctx, 1, 0);
	printf("crowd jobs: %d at once in %d groups of %llu MiB, contexts %llu MiB: bare %d failed; gpuslice %d "
	       "failed, %d charged other than their own context and 4 MiB\n",
	       n, groups, (unsigned long long)(limit / MiB), (unsigned long long)(ctx / MiB), bare.failed, lib.failed,
	       lib.wrong_charge);
	CHECK_EQ(bare.failed, 0);
	CHECK_EQ(lib.failed, 0);
	CHECK_EQ(lib.wrong_charge, 0);
	return 0;
}

static int bench(const char *preload, int n, int trials, uint64_t limit, uint64_t ctx)
{
	CHECK(n > 0 && n <= MAX_KIDS && trials > 0);
	double worst = -1e9;
	double seed_worst = -1e9;
	int slow = 0, bare_slow = 0, failed = 0, seed_slow = 0;
	for (int t = 0; t < trials; t++) {
		struct jobs_result bare, lib, seed; /* which goes first alternates */
		if (t % 2 == 0)
			bare = run_jobs(NULL, n, 1, limit, ctx, 3 * t, 0),
			lib = run_jobs(preload, n, 1, limit, ctx, 3 * t + 1, 0),
			seed = run_jobs(preload, n, 1, limit, ctx, 3 * t + 2, 1);
		else
			seed = run_jobs(preload, n, 1, limit, ctx, 3 * t + 2, 1),
			lib = run_jobs(preload, n, 1, limit, ctx, 3 * t + 1, 0),
			bare = run_jobs(NULL, n, 1, limit, ctx, 3 * t, 0);
		double b = (double)bare.slowest_ns / 1e9, l = (double)lib.slowest_ns / 1e9;
		printf("crowd starts trial %d: %d jobs, slowest bare %.3f s, gpuslice %.3f s (%.2fx, bound 1.5x + 0.5 s "
		       "= %.3f s); jobs of 1 s or more: bare %d, gpuslice %d; failed: bare %d, gpuslice %d\n",
		       t + 1, n, b, l, b > 0 ? l / b : 0, 1.5 * b + 0.5, bare.slow, lib.slow, bare.failed, lib.failed);
		printf("  per step, mean/max ms, bare | gpuslice:");
		for (int k = 0; k < PHASES; k++)
			printf(" %s %.1f/%.1f | %.1f/%.1f", phase_names[k], bare.phase_sum[k] / 1e6 / n,
			       bare.phase_max[k] / 1e6, lib.phase_sum[k] / 1e6 / n, lib.phase_max[k] / 1e6);
		printf("\n");
		double sd = (double)seed.slowest_ns / 1e9;
		printf("  gpuslice in a group the node seeded (its probe's figure for the device in its header): slowest %.3f s "
		       "(%.2fx); jobs of 1 s or more %d; failed %d; context step mean/max %.1f/%.1f ms\n",
		       sd, b > 0 ? sd / b : 0, seed.slow, seed.failed, seed.phase_sum[3] / 1e6 / n,
		       seed.phase_max[3] / 1e6);
		printf("  per step, mean/max ms, seeded:");
		for (int k = 0; k < PHASES; k++)
			printf(" %s %.1f/%.1f", phase_names[k], seed.phase_sum[k] / 1e6 / n, seed.phase_max[k] / 1e6);
		printf("\n");
		seed_worst = sd - (1.5 * b + 0.5) > seed_worst ? sd - (1.5 * b + 0.5) : seed_worst;
		seed_slow += seed.slow;
		failed += seed.failed;
		worst = l - (1.5 * b + 0.5) > worst ? l - (1.5 * b + 0.5) : worst;
		slow += lib.slow;
		bare_slow += bare.slow;
		failed += lib.failed + bare.failed;
	}
	printf("crowd starts: %d trials, slowest gpuslice run %s its bound (worst margin %+.3f s), jobs of 1 s or "
	       "more: gpuslice %d (bare %d), failed %d\n",
	       trials, worst > 0 ? "PAST" : "within", -worst, slow, bare_slow, failed);
	printf("crowd starts, seeded groups: slowest run %s its bound (worst margin %+.3f s), jobs of 1 s or more %d\n",
	       seed_worst > 0 ? "PAST" : "within", -seed_worst, seed_slow);
	return failed != 0;
}

/* The device's used memory every 2 ms, through the simulated driver's NVML
 * (this process has no library): samples, samples above limit, highest. */
struct sampler {
	uint64_t limit, end;
	unsigned long long n, above, max, fail;
};

static void *sample(void *arg)
{
	struct sampler *s = arg;
	void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	CHECK(nvml != NULL);
	nvmlReturn_t (*init)(void) = (nvmlReturn_t(*)(void))dlsym(nvml, "nvmlInit_v2");
	nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t *) =
		(nvmlReturn_t(*)(unsigned, nvmlDevice_t *))dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2");
	nvmlReturn_t (*info)(nvmlDevice_t, nvmlMemory_t *) =
		(nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))dlsym(nvml, "nvmlDeviceGetMemoryInfo");
	nvmlDevice_t h;
	CHECK(init != NULL && by_index != NULL && info != NULL);
	CHECK(init() == NVML_SUCCESS && by_index(0, &h) == NVML_SUCCESS);
	while (crowd_now_ns() < s->end) {
		nvmlMemory_t m;
		if (info(h, &m) != NVML_SUCCESS) {
			s->fail++;
		} else {
			s->n++;
			s->above += m.used > s->limit;
			s->max = m.used > s->max ? m.used : s->max;
		}
		usleep(2000);
	}
	return NULL;
}

static const char *const path_names[CROWD_PATHS] = {"alloc", "pitch", "async", "vmm", "context"};

/* One run: 4 stress members in one group of 1 GiB, sampled from outside;
 * seeded: the group's file made by the node with its probe's figure for the
 * device (300 MiB), as the time-slice daemon gives every group. */
static int limit_run(const char *preload, int run, unsigned seconds, int seeded)
{
	const uint64_t limit = 1024 * MiB;
	struct kid kids[4];
	unsigned long long n[CROWD_PATHS][3] = {{0}};
	char g[32];
	snprintf(g, sizeof(g), "limit%d%s", run, seeded ? "s" : "");
	if (seeded)
		seed_group(g, 300 * MiB);
	set_env_u64("CROWD_SECONDS", seconds);
	struct sampler s = {.limit = limit, .end = crowd_now_ns() + (seconds + 1) * 1000000000ull};
	pthread_t t;
	CHECK(pthread_create(&t, NULL, sample, &s) == 0);
	for (int i = 0; i < 4; i++)
		spawn(&kids[i], "stress", preload, g, limit);
	int bad = 0, no_room = 0;
	for (int i = 0; i < 4; i++) {
		int rc = reap(&kids[i]), k;
		unsigned long long ok, refused, failed;
		bad |= rc != 0;
		for (int l = 0; l < kids[i].lines; l++)
			if (strcmp(kids[i].line[l], "stress refused") == 0)
				no_room++;
			else if (sscanf(kids[i].line[l], "stress %d %llu %llu %llu", &k, &ok, &refused, &failed) == 4 &&
				 k >= 0 && k < CROWD_PATHS)
				n[k][0] += ok, n[k][1] += refused, n[k][2] += failed;
			else
				bad = 1, fprintf(stderr, "  member %d: %s\n", i, kids[i].line[l]);
	}
	CHECK(pthread_join(t, NULL) == 0);
	printf("crowd limit run %d%s: %d of 4 members refused their context; %llu samples every 2 ms, %llu above 1 GiB "
	       "(highest %.1f MiB);",
	       run, seeded ? " (seeded)" : "", no_room, s.n, s.above, (double)s.max / MiB);
	bad |= no_room == 4;
	unsigned long long made = 0;
	for (int k = 0; k < CROWD_PATHS; k++) {
		printf(" %s %llu/%llu/%llu", path_names[k], n[k][0], n[k][1], n[k][2]);
		bad |= n[k][0] + n[k][1] == 0 || n[k][2] != 0; /* each path ran, none failed but by a refusal */
		made += k < CROWD_PATHS - 1 ? n[k][0] : 0;
	}
	bad |= made == 0;
	printf(" (ok/refused/failed)\n");
	fflush(stdout);
	return bad || s.above != 0 || s.n < seconds * 100 || s.fail != 0;
}

static int limit(const char *preload, int runs, unsigned seconds, int seeded)
{
	setenv("GPUSLICE_SIM_CONTEXT_MEMORY", "314572800", 1); /* 300 MiB */
	set_env_u64("CROWD_THREADS", 16);
	for (int r = 1; r <= runs; r++)
		if (limit_run(preload, r, seconds, seeded) != 0) {
			printf("crowd limit: run %d of %d failed\n", r, runs);
			return 1;
		}
	printf("crowd limit%s: %d runs in a row, no sample above the limit\n", seeded ? " (seeded)" : "", runs);
	return 0;
}

/* One member's median ns per context create+destroy pair (preload NULL: bare). */
static double ctx_pair_ns(const char *preload, int round)
{
	struct kid k;
	char g[32];
	unsigned long long ns = 0;
	snprintf(g, sizeof(g), "ctx%d", round);
	spawn(&k, "ctxloop", preload, preload != NULL ? g : NULL, 8ull << 30);
	int rc = reap(&k);
	CHECK(rc == 0 && k.lines == 1 && sscanf(k.line[0], "ctxcost %llu", &ns) == 1);
	return (double)ns;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Context creation cost through two libraries (a baseline and this one)
 * and bare, one process per round each, alternating which goes first. */
static int ctxcost(const char *base, const char *lib, int rounds)
{
	double b[64], o[64], n[64], ratio[64];
	CHECK(rounds > 0 && rounds <= 64);
	set_env_u64("CROWD_PAIRS", 200);
	for (int r = 0; r < rounds; r++) {
		if (r % 2 == 0)
			o[r] = ctx_pair_ns(base, 2 * r), n[r] = ctx_pair_ns(lib, 2 * r + 1);
		else
			n[r] = ctx_pair_ns(lib, 2 * r + 1), o[r] = ctx_pair_ns(base, 2 * r);
		b[r] = ctx_pair_ns(NULL, 0);
		ratio[r] = n[r] / o[r];
	}
	qsort(b, (size_t)rounds, sizeof(double), cmp_double);
	qsort(o, (size_t)rounds, sizeof(double), cmp_double);
	qsort(n, (size_t)rounds, sizeof(double), cmp_double);
	qsort(ratio, (size_t)rounds, sizeof(double), cmp_double);
	printf("context creation (cuCtxCreate_v2 + cuCtxDestroy_v2, 300 MiB contexts, 200 pairs per process), median "
	       "of %d processes each: bare %.1f us, baseline %.1f us, this library %.1f us; this / baseline x%.3f "
	       "(median of the rounds' ratios)\n",
	       rounds, b[rounds / 2] / 1e3, o[rounds / 2] / 1e3, n[rounds / 2] / 1e3, ratio[rounds / 2]);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "job") == 0)
		return crowd_job();
	if (argc >= 2 && strcmp(argv[1], "stress") == 0)
		return crowd_stress();
	if (argc == 2 && strcmp(argv[1], "ctxloop") == 0)
		return crowd_ctxcost();
	if (argc < 3) {
		fprintf(stderr, "usage: crowd_test limit|jobs|bench PRELOAD ...\n");
		return 2;
	}
	CHECK(mkdtemp(dir) != NULL);
	char p[300];
	snprintf(p, sizeof(p), "%s/sim-state", dir);
	setenv("GPUSLICE_SIM_STATE", p, 1);
	setenv("GPUSLICE_SIM_MEMORY", "24GiB", 1);
	unsetenv("GPUSLICE_NODE_SOCKET");
	int rc = 2;
	if (strcmp(argv[1], "limit") == 0)
		rc = limit(argv[2], argc > 3 ? atoi(argv[3]) : 3, argc > 4 ? (unsigned)atoi(argv[4]) : 10,
			   argc > 5 && strcmp(argv[5], "seeded") == 0);
	else if (strcmp(argv[1], "ctxcost") == 0 && argc >= 4)
		setenv("GPUSLICE_SIM_CONTEXT_MEMORY", "314572800", 1),
			rc = ctxcost(argv[2], argv[3], argc > 4 ? atoi(argv[4]) : 9);
	else if (argc == 7) {
		uint64_t lim = strtoull(argv[5], NULL, 10), ctx = strtoull(argv[6], NULL, 10);
		set_env_u64("GPUSLICE_SIM_CONTEXT_MEMORY", ctx);
		if (strcmp(argv[1], "jobs") == 0)
			rc = jobs(argv[2], atoi(argv[3]), atoi(argv[4]), lim, ctx);
		else if (strcmp(argv[1], "bench") == 0)
			rc = bench(argv[2], atoi(argv[3]), atoi(argv[4]), lim, ctx);
	}
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		rc = rc ? rc : 1;
	return rc;
}
