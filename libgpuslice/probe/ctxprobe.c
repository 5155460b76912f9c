/* SPDX-License-Identifier: Apache-2.0
 *
 * gpuslice-ctxprobe: what a context takes on each device of the node, measured
 * by the node itself (the time-slice daemon runs it at its start and when the
 * driver lists a new GPU; never preloaded with libgpuslice.so, never run by a
 * tenant). For each CUDA device: its primary context is made (as the CUDA
 * runtime makes it) and NVML's used memory of this process on that device is
 * read before and after; the difference is what the driver holds for a context
 * there. A library (dlopen of the driver's own libcuda.so.1 and
 * libnvidia-ml.so.1, or the paths given), so the same program measures a real
 * NVIDIA driver and the simulated GPU.
 *
 *   gpuslice-ctxprobe [-d UUID]... [-s MiB]... [LIBCUDA [LIBNVML]]
 *
 * -d: measure only these devices (none given: every device); -s: a kind of
 * device (its memory in MiB) the node measured already: such a device is
 * skipped without a context. A device whose compute mode is not DEFAULT is
 * skipped too (a context of the node's own there could take the device from,
 * or collide with, a tenant's).
 *
 * One line per device on stdout:
 *   seed <uuid> <device memory MiB> <context bytes>
 *   skip <uuid or #ordinal> <reason...>      (not measured: the node reserves as before)
 * NVML's process list: nvmlDeviceGetComputeRunningProcesses_v3, or _v2 on
 * drivers older than R510.
 * Exit 0 if the driver answered (each device measured or skipped), 1 with one
 * line on stderr if not (no driver, cuInit failed).
 */
#include <dlfcn.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "gpuslice/cuda_abi.h"
#include "gpuslice/nvml_abi.h"

#define PROCS_MAX 4096
#define WANT_MAX 256
#define NOT_AVAILABLE (~0ull) /* nvml.h's NVML_VALUE_NOT_AVAILABLE */

struct drv {
	CUresult (*init)(unsigned int);
	CUresult (*count)(int *);
	CUresult (*get)(CUdevice *, int);
	CUresult (*total)(size_t *, CUdevice);
	CUresult (*uuid)(CUuuid *, CUdevice);
	CUresult (*uuid2)(CUuuid *, CUdevice);
	CUresult (*retain)(CUcontext *, CUdevice);
	CUresult (*release)(CUdevice);
	nvmlReturn_t (*ninit)(void);
	nvmlReturn_t (*by_uuid)(const char *, nvmlDevice_t *);
	nvmlReturn_t (*procs)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
	nvmlReturn_t (*mode)(nvmlDevice_t, int *); /* nvmlDeviceGetComputeMode; NULL: not exported */
};

/* What to measure (-d, -s). */
struct want {
	const char *dev[WANT_MAX];
	unsigned long long mib[WANT_MAX];
	int ndev, nmib;
};

static int wanted(const struct want *w, const char *uuid)
{
	for (int i = 0; i < w->ndev; i++)
		if (strcasecmp(w->dev[i], uuid) == 0)
			return 1;
	return w->ndev == 0;
}

static int measured(const struct want *w, unsigned long long mib)
{
	for (int i = 0; i < w->nmib; i++)
		if (w->mib[i] == mib)
			return 1;
	return 0;
}

static int sym(void *lib, const char *name, void *out)
{
	void *p = dlsym(lib, name);
	memcpy(out, &p, sizeof(p));
	return p != NULL ? 0 : -1;
}

static int open_driver(struct drv *d, const char *cuda_path, const char *nvml_path)
{
	void *cuda = dlopen(cuda_path, RTLD_NOW | RTLD_LOCAL), *nvml = dlopen(nvml_path, RTLD_NOW | RTLD_LOCAL);
	if (cuda == NULL || nvml == NULL) {
		fprintf(stderr, "gpuslice-ctxprobe: no driver: %s\n", dlerror());
		return -1;
	}
	if (sym(cuda, "cuInit", &d->init) || sym(cuda, "cuDeviceGetCount", &d->count) ||
	    sym(cuda, "cuDeviceGet", &d->get) || sym(cuda, "cuDeviceTotalMem_v2", &d->total) ||
	    sym(cuda, "cuDeviceGetUuid", &d->uuid) || sym(cuda, "cuDevicePrimaryCtxRetain", &d->retain) ||
	    sym(cuda, "cuDevicePrimaryCtxRelease_v2", &d->release) || sym(nvml, "nvmlInit_v2", &d->ninit) ||
	    sym(nvml, "nvmlDeviceGetHandleByUUID", &d->by_uuid) ||
	    /* _v3 from R510; older drivers' _v2 fills the same 24-byte entries */
	    (sym(nvml, "nvmlDeviceGetComputeRunningProcesses_v3", &d->procs) &&
	     sym(nvml, "nvmlDeviceGetComputeRunningProcesses_v2", &d->procs))) {
		fprintf(stderr, "gpuslice-ctxprobe: the driver lacks a function this probe needs\n");
		return -1;
	}
	(void)sym(cuda, "cuDeviceGetUuid_v2", &d->uuid2); /* newer drivers: a MIG device's own UUID */
	(void)sym(nvml, "nvmlDeviceGetComputeMode", &d->mode);
	CUresult rc = d->init(0);
	nvmlReturn_t nrc = d->ninit();
	if (rc != CUDA_SUCCESS || nrc != NVML_SUCCESS) {
		fprintf(stderr, "gpuslice-ctxprobe: cuInit: %d, nvmlInit: %d\n", (int)rc, (int)nrc);
		return -1;
	}
	return 0;
}

/* The UUID string of dev as NVML spells it; *mig 1 for a MIG device. */
static int uuid_of(const struct drv *d, CUdevice dev, char out[96], int *mig)
{
	CUuuid gpu, own;
	if (d->uuid(&gpu, dev) != CUDA_SUCCESS)
		return -1;
	*mig = d->uuid2 != NULL && d->uuid2(&own, dev) == CUDA_SUCCESS && memcmp(gpu.bytes, own.bytes, 16) != 0;
	const unsigned char *b = (const unsigned char *)(*mig ? own.bytes : gpu.bytes);
	snprintf(out, 96, "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 *mig ? "MIG" : "GPU", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
		 b[13], b[14], b[15]);
	return 0;
}

/* NVML's process list of h: the entries (n of them), or NULL. */
static nvmlProcessInfo_t *list(const struct drv *d, nvmlDevice_t h, unsigned int *n)
{
	static nvmlProcessInfo_t procs[PROCS_MAX];
	*n = PROCS_MAX;
	return d->procs(h, n, procs) == NVML_SUCCESS ? procs : NULL;
}

/* What process pid uses on h: 0 and *v, or -1 (no figure). With a pid NVML
 * does not know (this probe in a pid namespace of its own), the process that
 * is listed now and was not in before[0..nb) when it is the only such one. */
static int used(const struct drv *d, nvmlDevice_t h, unsigned pid, const unsigned *before, unsigned nb,
		unsigned long long *v)
{
	unsigned int n;
	const nvmlProcessInfo_t *p = list(d, h, &n);
	if (p == NULL)
		return -1;
	int found = -1, fresh = -1, fresh_n = 0;
	for (unsigned int i = 0; i < n; i++) {
		if (p[i].pid == pid)
			found = (int)i;
		int old = 0;
		for (unsigned j = 0; j < nb; j++)
			old |= before[j] == p[i].pid;
		if (!old && before != NULL) {
			fresh = (int)i;
			fresh_n++;
		}
	}
	if (found < 0 && before != NULL && fresh_n == 1)
		found = fresh;
	*v = 0;
	if (found >= 0 && p[found].usedGpuMemory == NOT_AVAILABLE)
		return -1;
	if (found >= 0)
		*v = p[found].usedGpuMemory;
	return found >= 0 || before == NULL ? 0 : -1;
}

/* Measures device ordinal i if w wants it: prints its line. */
static void probe(const struct drv *d, const struct want *w, int i)
{
	CUdevice dev;
	char uuid[96];
	int mig;
	size_t total;
	nvmlDevice_t h;
	if (d->get(&dev, i) != CUDA_SUCCESS || uuid_of(d, dev, uuid, &mig) != 0) {
		printf("skip #%d the driver did not name the device\n", i);
		return;
	}
	if (!wanted(w, uuid))
		return;
	if (mig) { /* a process makes contexts on one MIG device; NVML's per-process figure needs privileges */
		printf("skip %s a MIG device: not probed\n", uuid);
		return;
	}
	if (d->total(&total, dev) != CUDA_SUCCESS || d->by_uuid(uuid, &h) != NVML_SUCCESS) {
		printf("skip %s NVML does not know the device\n", uuid);
		return;
	}
	if (measured(w, (unsigned long long)(total >> 20))) {
		printf("skip %s its kind (%llu MiB) is measured\n", uuid, (unsigned long long)(total >> 20));
		return;
	}
	int mode = 0;
	if (d->mode != NULL && d->mode(h, &mode) == NVML_SUCCESS && mode != 0) {
		printf("skip %s compute mode %d, not DEFAULT: no context of the node's own beside its tenants\n", uuid,
		       mode);
		return;
	}
	static unsigned before[PROCS_MAX];
	unsigned int nb;
	const nvmlProcessInfo_t *p = list(d, h, &nb);
	unsigned long long b, a;
	for (unsigned j = 0; p != NULL && j < nb; j++)
		before[j] = p[j].pid;
	if (p == NULL || used(d, h, (unsigned)getpid(), NULL, 0, &b) != 0) {
		printf("skip %s NVML has no process list\n", uuid);
		return;
	}
	CUcontext ctx;
	CUresult rc = d->retain(&ctx, dev);
	if (rc != CUDA_SUCCESS) {
		printf("skip %s no context could be made (CUresult %d: exclusive mode, busy or lost)\n", uuid, (int)rc);
		return;
	}
	int ok = used(d, h, (unsigned)getpid(), before, nb, &a);
	(void)d->release(dev);
	if (ok != 0 || a < b)
		printf("skip %s NVML has no figure of this process's memory\n", uuid);
	else
		printf("seed %s %llu %llu\n", uuid, (unsigned long long)(total >> 20), a - b);
}

int main(int argc, char **argv)
{
	struct drv d = {0};
	struct want w = {0};
	for (int c; (c = getopt(argc, argv, "d:s:")) != -1;) {
		char *end;
		if (c == 'd' && w.ndev < WANT_MAX) {
			w.dev[w.ndev++] = optarg;
		} else if (c == 's' && w.nmib < WANT_MAX && (w.mib[w.nmib] = strtoull(optarg, &end, 10), *end == 0)) {
			w.nmib++;
		} else {
			fprintf(stderr, "usage: gpuslice-ctxprobe [-d UUID]... [-s MiB]... [LIBCUDA [LIBNVML]]\n");
			return 1;
		}
	}
	argc -= optind - 1;
	argv += optind - 1;
	if (argc > 3 ||
	    open_driver(&d, argc > 1 ? argv[1] : "libcuda.so.1", argc > 2 ? argv[2] : "libnvidia-ml.so.1") != 0)
		return 1;
	int n;
	if (d.count(&n) != CUDA_SUCCESS) {
		fprintf(stderr, "gpuslice-ctxprobe: cuDeviceGetCount failed\n");
		return 1;
	}
	for (int i = 0; i < n; i++)
		probe(&d, &w, i);
	return fflush(stdout) == 0 ? 0 : 1;
}
