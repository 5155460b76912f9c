/* SPDX-License-Identifier: Apache-2.0
 * Hook tests (issue 36): a group's first contexts reserved at what the node
 * measured a context takes on that kind of device (the header's device seeds,
 * written by the time-slice daemon from its own probe, bin/gpuslice-ctxprobe;
 * here written as the daemon writes them). The simulator's contexts take
 * their default, 300 MiB, as the probe measures them.
 */
#include <sys/mman.h>

#include "../../simgpu/src/config.h"
#include "race.h"

#define CTX_MEM (300 * MiB)
_Static_assert(CTX_MEM == SIM_DEFAULT_CONTEXT_MEMORY, "the simulator's default context memory");

struct seeds {
	uint64_t limit;
	uint32_t node_kib;  /* the header seed gathered from groups' measurements (1 + KiB; 0: none) */
	uint32_t total_mib; /* the simulated device's memory */
	uint32_t dev_kib;   /* the device seed (1 + KiB; 0: the probe's figure, CTX_MEM) */
};

static void set_seeds(struct gs_shm_header *h, const void *arg)
{
	const struct seeds *s = arg;
	h->limit = s->limit;
	h->limit_set = 1;
	h->context_seed_kib = s->node_kib;
	h->device_seed_mib[0] = 9999; /* another kind of device: not this one's figure */
	h->device_seed_kib[0] = 1;
	h->device_seed_mib[1] = s->total_mib;
	h->device_seed_kib[1] =
		s->dev_kib != 0 ? s->dev_kib : (uint32_t)(CTX_MEM >> 10) + 1; /* as the probe measured it */
}

/* A group of limit bytes whose file the node made with the probe's seed for
 * the simulated device (and node_kib as the seed the groups' measurements
 * gave), on a simulated device of its own (nothing the other tests' members
 * held is on it). */
static void seeded_group_kib(const char *name, uint64_t limit, uint32_t node_kib, uint32_t dev_kib)
{
	char state[300];
	snprintf(state, sizeof(state), "%s/sim-state-%s", ht_dir, name);
	setenv("GPUSLICE_SIM_STATE", state, 1);
	const char *path = ht_group(name, NULL);
	struct seeds s = {limit, node_kib, 24u << 10, dev_kib}; /* ht_setup's GPUSLICE_SIM_MEMORY, 24 GiB */
	shm_write_managed(path, set_seeds, &s);
}

static void seeded_group(const char *name, uint64_t limit, uint32_t node_kib)
{
	seeded_group_kib(name, limit, node_kib, 0);
}

/* (a) The node's very first contexts: a group no context was measured in,
 * on a node where no group measured one (no header seed), three first
 * contexts at once in 1000 MiB, 3 s each in the driver. Reserved at the guess
 * (512 MiB) the second and third do not fit beside the first: they wait for
 * its measurement, a whole call (with the former 2 s wait, shorter than the
 * call, they then shared the 488 MiB left: one refused). Reserved at the probe's 300 MiB, all three
 * fit at once: none waits, all three are made, the device never holds more
 * than the limit. */
static int cold_node(void *arg)
{
	(void)arg;
	setenv("GPUSLICE_SIM_LATENCY_US", "3000000", 1);
	seeded_group("seedcold", 1048576000ull, 0);
	int made, refused;
	uint64_t most = race_run(3, first_create, &made, &refused);
	if (made != 3 || most > 1048576000ull) {
		fprintf(stderr,
			"the node's first contexts: %d of 3 made (want 3), the device held %.1f MiB of 1000 MiB\n",
			made, (double)most / MiB);
		return 1;
	}
	return 0;
}

/* (b) A first context larger than every context the groups measured on the
 * node (their seed: 100 MiB, another kind of card) in a 250 MiB group: at
 * the groups' seed it fits, reaches the driver, and the device holds 300 MiB
 * past the group's 250 MiB until it is measured and undone. At the probe's
 * figure for this device it is refused before the driver is asked. */
static int larger_than_groups_seed(void *arg)
{
	(void)arg;
	setenv("GPUSLICE_SIM_LATENCY_US", "100000", 1);
	seeded_group("seedlarger", 262144000ull, (100u << 10) + 1);
	int made, refused;
	uint64_t most = race_run(1, first_create, &made, &refused);
	if (refused != 1 || most > 262144000ull) {
		fprintf(stderr,
			"a 300 MiB first context in 250 MiB: %s, the device held %.1f MiB (want refused before the "
			"driver, at most 250 MiB)\n",
			refused ? "refused"
			: made  ? "made"
				: "failed otherwise",
			(double)most / MiB);
		return 1;
	}
	return 0;
}

/* (c) A group smaller than a context (100 MiB) with nothing measured on the
 * node: no guess fits, so today the headroom left is reserved and the driver
 * decides: it makes the 300 MiB context (past the limit while the call runs)
 * and it is undone after. At the probe's figure: refused before the driver,
 * through the primary context's first retain too (the driver never holds it). */
static int smaller_than_context(void *arg)
{
	(void)arg;
	setenv("GPUSLICE_SIM_LATENCY_US", "100000", 1);
	seeded_group("seedsmall", 104857600ull, 0);
	int made, refused;
	uint64_t most = race_run(1, first_create, &made, &refused);
	if (refused != 1 || most > 104857600ull) {
		fprintf(stderr,
			"a 300 MiB first context in 100 MiB: the device held %.1f MiB, %s (want refused "
			"before the driver, at most 100 MiB)\n",
			(double)most / MiB,
			refused ? "refused"
			: made  ? "made"
				: "failed otherwise");
		return 1;
	}
	return 0;
}

static int primary_small(void *arg)
{
	(void)arg;
	setenv("GPUSLICE_SIM_LATENCY_US", "100000", 1);
	seeded_group("seedprim", 104857600ull, 0);
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
	CHECK(cuda != NULL);
	CUresult (*init)(unsigned) = NULL;
	*(void **)&init = drv_sym(cuda, "cuInit");
	CHECK_EQ(init(0), CUDA_SUCCESS);
	const struct sim_state *sim = sv_map();
	ht_capture_stderr("seedprim");
	CUcontext c = (CUcontext)&c;
	CHECK_EQ(cuDevicePrimaryCtxRetain(&c, 0), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK(c == NULL);
	CHECK_EQ(sv_device_used(sim), 0);
	/* The simulator's primary context takes no time to make: what says the
	 * driver was never asked is the refusal itself, at the context's whole
	 * size with nothing of it reserved or charged before. */
	char buf[1024];
	ht_stderr(buf, sizeof(buf));
	if (strstr(buf, "gpuslice: allocation of 300.0 MiB refused on GPU-") != buf ||
	    strstr(buf, ": group \"seedprim\" uses 0 B of its 100.0 MiB limit\n") == NULL) {
		fprintf(stdout, "the primary context: refused, saying: %s", buf);
		return 1;
	}
	return 0;
}

/* A member's own measurement can raise its group's reservation, never lower
 * it below the node's: a group whose file says its contexts took 1 KiB (a
 * member's lie, or a smaller card) in 250 MiB is still refused a 300 MiB
 * context before the driver. */
static int lie_lowers_nothing(void *arg)
{
	(void)arg;
	setenv("GPUSLICE_SIM_LATENCY_US", "100000", 1);
	seeded_group("seedlie", 262144000ull, 0);
	int fd = open(ht_group("seedlie", NULL), O_WRONLY);
	uint32_t kib = 2;
	CHECK(fd >= 0 && pwrite(fd, &kib, sizeof(kib), offsetof(struct gs_shm_header, context_kib)) == sizeof(kib));
	close(fd);
	int made, refused;
	uint64_t most = race_run(1, first_create, &made, &refused);
	if (refused != 1 || most > 262144000ull) {
		fprintf(stderr, "after a 1 KiB measurement: the device held %.1f MiB of 250 MiB, refused %d\n",
			(double)most / MiB, refused);
		return 1;
	}
	return 0;
}

/* A device seed that is no context's figure (a member wrote it, or an older
 * daemon took a failed measurement): 0 B (kib 1), 1 KiB and 100 GiB. None
 * applies: three first 300 MiB contexts at once in 700 MiB are reserved as
 * without it (the guess: two made, one refused after its wait) and the device
 * never holds more than the limit. At 0 B all three reached the driver at once
 * and the device held 900 MiB. */
static int implausible_seed(void *arg)
{
	(void)arg;
	static const uint32_t kibs[] = {1, 2, (100u << 20) + 1};
	setenv("GPUSLICE_SIM_LATENCY_US", "300000", 1);
	for (unsigned i = 0; i < sizeof(kibs) / sizeof(kibs[0]); i++) {
		char name[32];
		snprintf(name, sizeof(name), "seedbad%u", i);
		seeded_group_kib(name, 734003200ull, 0, kibs[i]);
		int made, refused;
		uint64_t most = race_run(3, first_create, &made, &refused);
		if (made != 2 || most > 734003200ull) {
			fprintf(stderr,
				"device seed %u (1 + KiB): %d of 3 made (want 2), the device held %.1f MiB of 700 MiB\n",
				kibs[i], made, (double)most / MiB);
			return 1;
		}
	}
	return 0;
}

/* (late_seed) The first member of the pair guesses (no device seed yet:
 * the daemon's start); the second, once that guess is reserved, finds the
 * node's figure written (as the daemon writes it) and creates its first
 * context: it waits for the guess on its slot to be trued up and is made. */
static int late_member(void *arg)
{
	const struct race *r = arg;
	char role[320];
	snprintf(role, sizeof(role), "%s/late-first", ht_dir);
	int fd = open(role, O_CREAT | O_EXCL | O_WRONLY, 0600);
	if (fd >= 0) {
		close(fd);
		return first_create(arg);
	}
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
	CHECK(cuda != NULL);
	CUresult (*init)(unsigned) = NULL;
	*(void **)&init = drv_sym(cuda, "cuInit");
	CHECK_EQ(init(0), CUDA_SUCCESS);
	race_ready(r);
	int gfd = open(getenv("GPUSLICE_GROUP_FILE"), O_RDWR);
	CHECK(gfd >= 0);
	struct gs_shm_file *f = mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE, MAP_SHARED, gfd, 0);
	CHECK(f != MAP_FAILED);
	for (int i = 0; __atomic_load_n(&f->gpu[0].used, __ATOMIC_ACQUIRE) < 512 * MiB; i++) {
		CHECK(i < 5000); /* the first member's guess reserved, within 5 s */
		usleep(1000);
	}
	__atomic_store_n(&f->hdr.device_seed_kib[1], (uint32_t)(CTX_MEM >> 10) + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&f->hdr.device_seed_mib[1], 24u << 10, __ATOMIC_RELEASE);
	munmap(f, sizeof(*f));
	close(gfd);
	CUcontext c;
	return race_done(r, cuCtxCreate_v2(&c, 0, 0) == CUDA_SUCCESS ? 'M' : 'X');
}

/* Two first contexts in 700 MiB while the node's figure arrives between
 * them: the first reserved at the guess (512 MiB, 1 s in the driver), the
 * second at the figure (300 MiB) does not fit beside that guess; it waits
 * for the guess to be trued up to 300 MiB and both are made, the device
 * never past 700 MiB. Before, a seeded creation never waited: refused. */
static int late_seed(void *arg)
{
	(void)arg;
	setenv("GPUSLICE_SIM_LATENCY_US", "1000000", 1);
	char state[300];
	snprintf(state, sizeof(state), "%s/sim-state-seedlate", ht_dir);
	setenv("GPUSLICE_SIM_STATE", state, 1);
	const char *path = ht_group("seedlate", NULL);
	struct seeds s = {734003200ull, 0, 0, 0}; /* no entry for the device yet */
	shm_write_managed(path, set_seeds, &s);
	int made, refused;
	uint64_t most = race_run(2, late_member, &made, &refused);
	if (made != 2 || most > 734003200ull) {
		fprintf(stderr,
			"a seeded first context beside a guess in flight: %d of 2 made, the device held %.1f MiB\n",
			made, (double)most / MiB);
		return 1;
	}
	return 0;
}

int main(void)
{
	ht_setup();
	unsetenv("GPUSLICE_SIM_CONTEXT_MEMORY"); /* the simulator's default: CTX_MEM */
	HT_RUN(cold_node, NULL);
	HT_RUN(larger_than_groups_seed, NULL);
	HT_RUN(smaller_than_context, NULL);
	HT_RUN(primary_small, NULL);
	HT_RUN(lie_lowers_nothing, NULL);
	HT_RUN(implausible_seed, NULL);
	HT_RUN(late_seed, NULL);
	ht_teardown();
	fprintf(stderr, "hooks_ctxseed_test: ok\n");
	return 0;
}
