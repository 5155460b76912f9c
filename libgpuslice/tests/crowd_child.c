/* SPDX-License-Identifier: Apache-2.0
 * The members crowd_test starts (itself, re-executed with LD_PRELOAD of the
 * library under test, or bare): programs that know nothing of gpuslice and
 * reach the driver through dlopen + dlsym, as the CUDA runtime does.
 *   job     sleep until CROWD_T0 (CLOCK_REALTIME ns), then cuInit, the primary
 *           context, 4 MiB, one 1 ms kernel, synchronize; prints
 *           "job 0 <ns from t0 to done> <bytes the group file charges this
 *           process> <ns of each step...>", or "job <step> <error>".
 *   stress  CROWD_THREADS threads for CROWD_SECONDS, each on one path in turn
 *           by its index: cuMemAlloc, cuMemAllocPitch, cuMemAllocAsync,
 *           cuMemCreate, cuCtxCreate+cuCtxDestroy; refusals are expected
 *           (the group is full); prints "stress <ok> <refused> <failed>" per
 *           path. Any error but CUDA_ERROR_OUT_OF_MEMORY counts as failed.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <gpuslice/shm.h>

#include "../../apps/cuapi.h"
#include "crowd.h"

static uint64_t env_u64(const char *name, uint64_t def)
{
	const char *v = getenv(name);
	return v != NULL && *v != '\0' ? strtoull(v, NULL, 10) : def;
}

/* What this process's entry in its group file charges it (all GPUs). */
static uint64_t charged_self(void)
{
	const char *path = getenv("GPUSLICE_GROUP_FILE");
	int fd = path != NULL ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	if (fd < 0)
		return 0;
	const struct gs_shm_file *f = mmap(NULL, GS_SHM_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (f == MAP_FAILED)
		return 0;
	uint64_t sum = 0;
	for (int i = 0; i < GS_SHM_MAX_PROCS; i++) {
		const struct gs_shm_proc *p = &f->proc[i];
		if (__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != GS_PROC_LIVE || p->pid != (int32_t)getpid())
			continue;
		for (int g = 0; g < GS_SHM_MAX_GPUS; g++)
			sum += __atomic_load_n(&p->used[g], __ATOMIC_ACQUIRE);
	}
	munmap((void *)f, GS_SHM_FILE_SIZE);
	return sum;
}

/* Each step of a job, timed: the phases after the result on the job's line. */
struct job {
	struct cuapi api;
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr p;
	CUfunction fn;
	uint64_t t[7];
};

static CUresult job_step(struct job *j, int i)
{
	switch (i) {
	case 0:
		return j->api.Init(0);
	case 1:
		return j->api.DeviceGet(&j->dev, 0);
	case 2:
		CUresult rc = j->api.PrimaryCtxRetain(&j->ctx, j->dev);
		return rc != CUDA_SUCCESS ? rc : j->api.CtxSetCurrent(j->ctx);
	case 3:
		return j->api.MemAlloc(&j->p, 4 << 20);
	case 4:
		return cuapi_busy_kernel(&j->api, &j->fn);
	default:
		rc = cuapi_launch_busy(&j->api, j->fn, 1000);
		return rc != CUDA_SUCCESS ? rc : j->api.CtxSynchronize();
	}
}

int crowd_job(void)
{
	static const char *const steps[] = {"init", "device", "context", "alloc", "module", "kernel"};
	static struct job j;
	char err[256];
	uint64_t t0 = env_u64("CROWD_T0", 0);
	crowd_sleep_until(t0);
	if (cuapi_load(&j.api, CUAPI_DLSYM, err, sizeof(err)) != 0) {
		printf("job load %s\n", err);
		return 1;
	}
	j.t[0] = crowd_now_ns();
	for (int i = 0; i < 6; i++) {
		CUresult rc = job_step(&j, i);
		j.t[i + 1] = crowd_now_ns();
		if (rc != CUDA_SUCCESS) {
			printf("job %s %s\n", steps[i], cuapi_err(&j.api, rc));
			return 1;
		}
	}
	/* job 0 <t0 to done> <charged> <start> <init> <device> <context> <alloc> <module> <kernel> (ns) */
	printf("job 0 %llu %llu %llu", (unsigned long long)(j.t[6] - t0), (unsigned long long)charged_self(),
	       (unsigned long long)(j.t[0] - t0));
	for (int i = 0; i < 6; i++)
		printf(" %llu", (unsigned long long)(j.t[i + 1] - j.t[i]));
	printf("\n");
	return 0;
}

/* The driver calls the stress threads make beyond struct cuapi. */
struct more {
	CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream);
	CUresult (*free_async)(CUdeviceptr, CUstream);
	CUresult (*stream_create)(CUstream *, unsigned int);
	CUresult (*stream_sync)(CUstream);
	CUresult (*ctx_create)(CUcontext *, unsigned int, CUdevice);
	CUresult (*ctx_destroy)(CUcontext);
};

struct stress {
	struct cuapi api;
	struct more m;
	CUcontext primary;
	CUdevice dev;
	uint64_t end;
	_Atomic unsigned long long n[CROWD_PATHS][3]; /* ok, refused, failed */
};

static size_t rnd_size(unsigned *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return ((size_t)((*seed >> 8) % 60) + 4) << 20; /* 4..63 MiB */
}

static CUresult one_vmm(struct stress *s, size_t size)
{
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = s->dev;
	size_t gran = 0;
	CUmemGenericAllocationHandle h;
	CUresult rc = s->api.MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (rc != CUDA_SUCCESS)
		return rc;
	size = gran > 0 ? (size + gran - 1) / gran * gran : size;
	if ((rc = s->api.MemCreate(&h, size, &prop, 0)) != CUDA_SUCCESS)
		return rc;
	usleep(500);
	return s->api.MemRelease(h);
}

/* One operation on path k; CUDA_SUCCESS once it was made and undone. */
static CUresult one(struct stress *s, int k, CUstream st, unsigned *seed)
{
	size_t size = rnd_size(seed), pitch = 0;
	CUdeviceptr p;
	CUcontext c;
	CUresult rc;
	switch (k) {
	case 0:
		rc = s->api.MemAlloc(&p, size);
		break;
	case 1:
		rc = s->api.MemAllocPitch(&p, &pitch, 1000, size / 1024, 4);
		break;
	case 2:
		if ((rc = s->m.alloc_async(&p, size, st)) != CUDA_SUCCESS)
			return rc;
		usleep(500);
		if ((rc = s->m.free_async(p, st)) != CUDA_SUCCESS)
			return rc;
		return s->m.stream_sync(st);
	case 3:
		return one_vmm(s, size);
	default:
		if ((rc = s->m.ctx_create(&c, 0, s->dev)) != CUDA_SUCCESS)
			return rc;
		usleep(500);
		rc = s->m.ctx_destroy(c);
		CUresult back = s->api.CtxSetCurrent(s->primary);
		return rc != CUDA_SUCCESS ? rc : back;
	}
	if (rc != CUDA_SUCCESS)
		return rc;
	usleep(500);
	return s->api.MemFree(p);
}

struct stress_arg {
	struct stress *s;
	int k;
};

static void *stress_thread(void *arg)
{
	struct stress *s = ((struct stress_arg *)arg)->s;
	int k = ((struct stress_arg *)arg)->k;
	unsigned seed = (unsigned)getpid() * 31u + (unsigned)k;
	CUstream st = NULL;
	if (s->api.CtxSetCurrent(s->primary) != CUDA_SUCCESS || s->m.stream_create(&st, 1) != CUDA_SUCCESS) {
		s->n[k][2]++;
		return NULL;
	}
	while (crowd_now_ns() < s->end) {
		CUresult rc = one(s, k, st, &seed);
		s->n[k][rc == CUDA_SUCCESS ? 0 : rc == CUDA_ERROR_OUT_OF_MEMORY ? 1 : 2]++;
		if (rc != CUDA_SUCCESS)
			usleep(200);
	}
	return NULL;
}

static int stress_load(struct stress *s)
{
	char err[256];
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL || cuapi_load(&s->api, CUAPI_DLSYM, err, sizeof(err)) != 0)
		return -1;
	*(void **)&s->m.alloc_async = dlsym(lib, "cuMemAllocAsync");
	*(void **)&s->m.free_async = dlsym(lib, "cuMemFreeAsync");
	*(void **)&s->m.stream_create = dlsym(lib, "cuStreamCreate");
	*(void **)&s->m.stream_sync = dlsym(lib, "cuStreamSynchronize");
	*(void **)&s->m.ctx_create = dlsym(lib, "cuCtxCreate_v2");
	*(void **)&s->m.ctx_destroy = dlsym(lib, "cuCtxDestroy_v2");
	if (!s->m.alloc_async || !s->m.free_async || !s->m.stream_create || !s->m.stream_sync || !s->m.ctx_create ||
	    !s->m.ctx_destroy)
		return -1;
	return 0;
}

int crowd_stress(void)
{
	static struct stress s;
	int threads = (int)env_u64("CROWD_THREADS", 16);
	if (threads < 1 || threads > 64 || stress_load(&s) != 0) {
		printf("stress start failed\n");
		return 1;
	}
	CUresult rc = cuapi_open_device0(&s.api, &s.dev);
	if (rc == CUDA_SUCCESS)
		rc = s.api.PrimaryCtxRetain(&s.primary, s.dev);
	if (rc == CUDA_ERROR_OUT_OF_MEMORY) { /* the group has no room for this member's context */
		printf("stress refused\n");
		return 0;
	}
	if (rc != CUDA_SUCCESS) {
		printf("stress start failed: %s\n", cuapi_err(&s.api, rc));
		return 1;
	}
	s.end = crowd_now_ns() + env_u64("CROWD_SECONDS", 10) * 1000000000ull;
	struct stress_arg args[64];
	pthread_t t[64];
	for (int i = 0; i < threads; i++) {
		args[i] = (struct stress_arg){&s, i % CROWD_PATHS};
		if (pthread_create(&t[i], NULL, stress_thread, &args[i]) != 0)
			return 1;
	}
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	for (int k = 0; k < CROWD_PATHS; k++)
		printf("stress %d %llu %llu %llu\n", k, s.n[k][0], s.n[k][1], s.n[k][2]);
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* CROWD_PAIRS cuCtxCreate_v2 + cuCtxDestroy_v2 pairs on device 0 (the primary
 * context current, as a program has); prints "ctxcost <median ns per pair>". */
int crowd_ctxcost(void)
{
	static struct stress s;
	int pairs = (int)env_u64("CROWD_PAIRS", 200);
	uint64_t *t = calloc((size_t)pairs, sizeof(*t));
	if (t == NULL || pairs < 1 || stress_load(&s) != 0 || cuapi_open_device0(&s.api, &s.dev) != CUDA_SUCCESS ||
	    s.api.PrimaryCtxRetain(&s.primary, s.dev) != CUDA_SUCCESS) {
		printf("ctxcost start failed\n");
		return 1;
	}
	for (int i = 0; i < pairs; i++) {
		CUcontext c;
		uint64_t t0 = crowd_now_ns();
		if (s.m.ctx_create(&c, 0, s.dev) != CUDA_SUCCESS || s.m.ctx_destroy(c) != CUDA_SUCCESS) {
			printf("ctxcost pair %d failed\n", i);
			return 1;
		}
		t[i] = crowd_now_ns() - t0;
		if (s.api.CtxSetCurrent(s.primary) != CUDA_SUCCESS)
			return 1;
	}
	qsort(t, (size_t)pairs, sizeof(*t), cmp_u64);
	printf("ctxcost %llu\n", (unsigned long long)t[pairs / 2]);
	free(t);
	return 0;
}
