/* SPDX-License-Identifier: Apache-2.0
 *
 * gs-tenant: a synthetic GPU tenant for the time-slice end-to-end tests and
 * benchmarks (internal/timeslice/e2e_test.go). It runs the busy kernel through the
 * hooked launch path (dlsym of libcuda.so.1, as apps/ do) in one of three modes
 * from --t0 (CLOCK_REALTIME ns) for --seconds:
 *   busy      launch kernels back to back, never synchronizing
 *   sync      launch one kernel, synchronize, repeat
 *   requests  every --gap-ms (+ up to --jitter-ms) from t0 + gap a request of --n kernels,
 *             then synchronize; prints "lat <ns>" per request; with --gap-spin 1 the thread
 *             spins on its CPU between requests (CPU work between launches) instead of sleeping
 *   job       --n kernels, synchronize, exit; prints "job <ns from t0 to done> <longest launch call ns>"
 *   copy      as busy, with device memsets (cuMemsetD8Async on the legacy stream) of --copy-bytes
 *             (default --kernel-us x 1000: --kernel-us of engine time at GPUSLICE_SIM_COPY_GBPS=1)
 *             instead of kernels
 *   ptcapture --n kernels captured on the per-thread default stream (cuLaunchKernel_ptsz with
 *             NULL), the graph launched there and synchronized; prints "ptcapture <EndCapture
 *             result> <graph launch result>" (the gate's markers must not touch the legacy stream)
 * busy and sync print "win <second> <kernels launched> <run delay ns>" per 1 s
 * window: the run delay is the longest time one thread of this process spent
 * runnable but waiting for a CPU in that window (/proc/self/task/<tid>/schedstat),
 * so that the tests can tell a scheduling result from CPU starvation.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../apps/cuapi.h"

struct opts {
	const char *mode;
	unsigned long long kernel_us, t0, n, gap_ms, jitter_ms, copy_bytes, gap_spin;
	double seconds;
};

static unsigned long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static void sleep_until(unsigned long long t)
{
	struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ull), .tv_nsec = (long)(t % 1000000000ull)};
	while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) != 0)
		;
}

/* Run delays (ns) of this process's threads, by thread id. */
#define MAX_THREADS 64
struct delays {
	int n;
	long tid[MAX_THREADS];
	unsigned long long ns[MAX_THREADS];
};

static void read_delays(struct delays *d)
{
	DIR *dir = opendir("/proc/self/task");
	struct dirent *de;
	d->n = 0;
	if (dir == NULL)
		return;
	while ((de = readdir(dir)) != NULL && d->n < MAX_THREADS) {
		char path[300];
		unsigned long long run, delay;
		FILE *f;
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat", de->d_name);
		if ((f = fopen(path, "r")) == NULL)
			continue;
		if (fscanf(f, "%llu %llu", &run, &delay) == 2) {
			d->tid[d->n] = atol(de->d_name);
			d->ns[d->n++] = delay;
		}
		fclose(f);
	}
	closedir(dir);
}

/* The longest any one thread waited for a CPU since *prev, which becomes now. */
static unsigned long long max_delay(struct delays *prev)
{
	struct delays cur;
	unsigned long long most = 0;
	read_delays(&cur);
	for (int i = 0; i < cur.n; i++) {
		unsigned long long before = 0;
		for (int j = 0; j < prev->n; j++)
			if (prev->tid[j] == cur.tid[i])
				before = prev->ns[j];
		if (cur.ns[i] - before > most)
			most = cur.ns[i] - before;
	}
	*prev = cur;
	return most;
}

static int parse(int argc, char **argv, struct opts *o)
{
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];
		if (strcmp(k, "--mode") == 0)
			o->mode = v;
		else if (strcmp(k, "--kernel-us") == 0)
			o->kernel_us = strtoull(v, NULL, 10);
		else if (strcmp(k, "--t0") == 0)
			o->t0 = strtoull(v, NULL, 10);
		else if (strcmp(k, "--seconds") == 0)
			o->seconds = strtod(v, NULL);
		else if (strcmp(k, "--n") == 0)
			o->n = strtoull(v, NULL, 10);
		else if (strcmp(k, "--gap-ms") == 0)
			o->gap_ms = strtoull(v, NULL, 10);
		else if (strcmp(k, "--gap-spin") == 0)
			o->gap_spin = strtoull(v, NULL, 10);
		else if (strcmp(k, "--jitter-ms") == 0)
			o->jitter_ms = strtoull(v, NULL, 10);
		else if (strcmp(k, "--copy-bytes") == 0)
			o->copy_bytes = strtoull(v, NULL, 10);
		else
			return -1;
	}
	return o->kernel_us > 0 && o->seconds > 0 ? 0 : -1;
}

typedef CUresult (*memset_fn)(CUdeviceptr, unsigned char, size_t, CUstream);

/* copy mode: the memset that stands for a kernel (NULL: kernels). */
static struct {
	memset_fn fn;
	CUdeviceptr buf;
	size_t bytes;
} copy_work;

static CUresult work(const struct cuapi *api, CUfunction fn, unsigned long long us)
{
	if (copy_work.fn != NULL)
		return copy_work.fn(copy_work.buf, 0, copy_work.bytes, NULL);
	return cuapi_launch_busy(api, fn, us);
}

static int copy_setup(const struct cuapi *api, const struct opts *o)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	copy_work.fn = lib ? (memset_fn)dlsym(lib, "cuMemsetD8Async") : NULL;
	copy_work.bytes = o->copy_bytes != 0 ? (size_t)o->copy_bytes : (size_t)o->kernel_us * 1000;
	return copy_work.fn != NULL && api->MemAlloc(&copy_work.buf, copy_work.bytes) == CUDA_SUCCESS ? 0 : -1;
}

static int run_windows(const struct cuapi *api, CUfunction fn, const struct opts *o, int sync)
{
	unsigned long long end = o->t0 + (unsigned long long)(o->seconds * 1e9), count = 0;
	struct delays delays;
	long win = 0;
	read_delays(&delays);
	for (unsigned long long t = now_ns(); t < end; t = now_ns()) {
		long w = (long)((t - o->t0) / 1000000000ull);
		if (w != win) {
			printf("win %ld %llu %llu\n", win, count, max_delay(&delays));
			win = w;
			count = 0;
		}
		if (work(api, fn, o->kernel_us) != CUDA_SUCCESS || (sync && api->CtxSynchronize() != CUDA_SUCCESS))
			return 1;
		count++;
	}
	printf("win %ld %llu %llu\n", win, count, max_delay(&delays)); /* the last, partial window */
	return api->CtxSynchronize() == CUDA_SUCCESS ? 0 : 1;
}

static int run_requests(const struct cuapi *api, CUfunction fn, const struct opts *o)
{
	/* The first request comes one gap after t0, as later ones do. */
	unsigned long long end = o->t0 + (unsigned long long)(o->seconds * 1e9),
			   arrival = o->t0 + o->gap_ms * 1000000ull;
	unsigned seed = 12345;
	while (arrival < end) {
		if (o->gap_spin)
			while (now_ns() < arrival)
				;
		else
			sleep_until(arrival);
		for (unsigned long long i = 0; i < o->n; i++)
			if (cuapi_launch_busy(api, fn, o->kernel_us) != CUDA_SUCCESS)
				return 1;
		if (api->CtxSynchronize() != CUDA_SUCCESS)
			return 1;
		printf("lat %llu\n", now_ns() - arrival);
		seed = seed * 1103515245u + 12345u;
		arrival += (o->gap_ms + (o->jitter_ms ? (seed >> 8) % o->jitter_ms : 0)) * 1000000ull;
		if (arrival < now_ns())
			arrival = now_ns();
	}
	return 0;
}

static int run_job(const struct cuapi *api, CUfunction fn, const struct opts *o)
{
	unsigned long long longest = 0;
	for (unsigned long long i = 0; i < o->n; i++) {
		unsigned long long t = now_ns();
		if (cuapi_launch_busy(api, fn, o->kernel_us) != CUDA_SUCCESS)
			return 1;
		if (now_ns() - t > longest)
			longest = now_ns() - t;
	}
	if (api->CtxSynchronize() != CUDA_SUCCESS)
		return 1;
	printf("job %llu %llu\n", now_ns() - o->t0, longest);
	return 0;
}

typedef CUresult (*begin_fn)(CUstream, CUstreamCaptureMode);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			      CUstream, void **, void **);
typedef CUresult (*end_fn)(CUstream, CUgraph *);
typedef CUresult (*inst_fn)(CUgraphExec *, CUgraph, unsigned long long);
typedef CUresult (*glaunch_fn)(CUgraphExec, CUstream);
typedef CUresult (*sync_fn)(CUstream);

static int run_ptcapture(const struct cuapi *api, CUfunction fn, const struct opts *o)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	begin_fn begin = lib ? (begin_fn)dlsym(lib, "cuStreamBeginCapture_v2_ptsz") : NULL;
	launch_fn launch = lib ? (launch_fn)dlsym(lib, "cuLaunchKernel_ptsz") : NULL;
	end_fn end = lib ? (end_fn)dlsym(lib, "cuStreamEndCapture_ptsz") : NULL;
	inst_fn inst = lib ? (inst_fn)dlsym(lib, "cuGraphInstantiateWithFlags") : NULL;
	glaunch_fn glaunch = lib ? (glaunch_fn)dlsym(lib, "cuGraphLaunch_ptsz") : NULL;
	sync_fn sync = lib ? (sync_fn)dlsym(lib, "cuStreamSynchronize_ptsz") : NULL;
	unsigned long long us = o->kernel_us;
	void *args[] = {&us};
	CUgraph g = NULL;
	CUgraphExec x = NULL;
	CUresult ended, ran = CUDA_ERROR_NOT_FOUND;
	if (!begin || !launch || !end || !inst || !glaunch || !sync)
		return 1;
	if (cuapi_launch_busy(api, fn, o->kernel_us) != CUDA_SUCCESS || api->CtxSynchronize() != CUDA_SUCCESS)
		return 1; /* the grant is held from here */
	if (begin(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS)
		return 1;
	for (unsigned long long i = 0; i < o->n; i++)
		(void)launch(fn, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL); /* the capture's state tells */
	ended = end(NULL, &g);
	if (ended == CUDA_SUCCESS && inst(&x, g, 0) == CUDA_SUCCESS && (ran = glaunch(x, NULL)) == CUDA_SUCCESS)
		ran = sync(NULL);
	printf("ptcapture %s %s\n", cuapi_err(api, ended), cuapi_err(api, ran));
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = {.mode = "busy", .kernel_us = 500, .seconds = 1, .n = 1, .gap_ms = 100};
	struct cuapi api;
	char err[256];
	CUdevice dev;
	CUfunction fn;
	if (parse(argc, argv, &o) != 0) {
		fprintf(stderr,
			"usage: gs-tenant --mode busy|sync|copy|requests|job|ptcapture --kernel-us N --seconds S [--t0 NS] "
			"[--n N --gap-ms MS --gap-spin 0|1 --jitter-ms MS --copy-bytes B]\n");
		return 2;
	}
	if (cuapi_load(&api, CUAPI_DLSYM, err, sizeof(err)) != 0) {
		fprintf(stderr, "gs-tenant: %s\n", err);
		return 1;
	}
	if (cuapi_open_device0(&api, &dev) != CUDA_SUCCESS || cuapi_busy_kernel(&api, &fn) != CUDA_SUCCESS) {
		fprintf(stderr, "gs-tenant: cannot open the GPU\n");
		return 1;
	}
	if (strcmp(o.mode, "copy") == 0 && copy_setup(&api, &o) != 0) {
		fprintf(stderr, "gs-tenant: cannot set up the copies\n");
		return 1;
	}
	if (o.t0 == 0)
		o.t0 = now_ns();
	sleep_until(o.t0);
	setvbuf(stdout, NULL, _IOLBF, 0);
	int rc = strcmp(o.mode, "requests") == 0    ? run_requests(&api, fn, &o)
		 : strcmp(o.mode, "job") == 0       ? run_job(&api, fn, &o)
		 : strcmp(o.mode, "ptcapture") == 0 ? run_ptcapture(&api, fn, &o)
						    : run_windows(&api, fn, &o, strcmp(o.mode, "sync") == 0);
	if (rc != 0)
		fprintf(stderr, "gs-tenant: a launch failed\n");
	return rc;
}
