/* SPDX-License-Identifier: Apache-2.0
 *
 * gs-memfill: fills GPU memory through one allocation path until the driver
 * refuses, then reports (one JSON line) what it saw: the total and free memory
 * the driver reports, how much it got, and the error that stopped it.
 *
 *   gs-memfill [--via dlsym|procaddr|procaddr_v2] [--path PATH] [--chunk SIZE]
 *              [--max SIZE] [--hold-ms N]
 * PATH: alloc (cuMemAlloc_v2), pitch, managed, async, pool, vmm (cuMemCreate), array,
 * module (cuModuleLoadData of PTX modules each holding one .global array of the
 * chunk's size, loaded eagerly: CUDA_MODULE_LOADING=EAGER unless set).
 * Exit status: 0 if it stopped on CUDA_ERROR_OUT_OF_MEMORY or reached --max, 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuapi.h"

struct opts {
	enum cuapi_via via;
	const char *path;
	size_t chunk, max;
	long hold_ms;
};

/* A module whose only content is an n-byte global array (kept: .visible). */
static CUresult load_globals(const struct cuapi *api, size_t n)
{
	char ptx[256];
	CUmodule m;

	snprintf(ptx, sizeof(ptx),
		 ".version 7.0\n.target sm_50\n.address_size 64\n"
		 ".visible .global .align 8 .b8 gs_fill[%zu];\n",
		 n);
	return api->ModuleLoadData(&m, ptx);
}

static CUresult alloc_one(const struct cuapi *api, const struct opts *o, CUdevice dev, size_t n)
{
	CUdeviceptr p;
	size_t pitch;

	if (strcmp(o->path, "alloc") == 0)
		return api->MemAlloc(&p, n);
	if (strcmp(o->path, "pitch") == 0)
		return api->MemAllocPitch(&p, &pitch, n / 1024, 1024, 4);
	if (strcmp(o->path, "managed") == 0)
		return api->MemAllocManaged(&p, n, CU_MEM_ATTACH_GLOBAL);
	if (strcmp(o->path, "async") == 0)
		return api->MemAllocAsync(&p, n, NULL);
	if (strcmp(o->path, "pool") == 0) {
		CUmemoryPool pool;
		CUresult r = api->DeviceGetDefaultMemPool(&pool, dev);
		return r != CUDA_SUCCESS ? r : api->MemAllocFromPoolAsync(&p, n, pool, NULL);
	}
	if (strcmp(o->path, "vmm") == 0) {
		CUmemAllocationProp prop = {0};
		CUmemGenericAllocationHandle h;
		prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		prop.location.id = dev;
		return api->MemCreate(&h, n, &prop, 0);
	}
	if (strcmp(o->path, "module") == 0)
		return load_globals(api, n);
	if (strcmp(o->path, "array") == 0) {
		CUarray a;
		CUDA_ARRAY_DESCRIPTOR d = {
			.Width = 1024, .Height = n / 4096, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
		return api->ArrayCreate(&a, &d);
	}
	return CUDA_ERROR_NOT_SUPPORTED;
}

static int parse(int argc, char **argv, struct opts *o)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v) {
			fprintf(stderr, "gs-memfill: %s needs a value\n", a);
			return -1;
		}
		if (strcmp(a, "--via") == 0) {
			int via = cuapi_parse_via(v);
			if (via < 0) {
				fprintf(stderr, "gs-memfill: unknown --via %s\n", v);
				return -1;
			}
			o->via = (enum cuapi_via)via;
		} else if (strcmp(a, "--path") == 0) {
			o->path = v;
		} else if (strcmp(a, "--chunk") == 0 || strcmp(a, "--max") == 0) {
			size_t s = cuapi_parse_size(v);
			if (s == 0) {
				fprintf(stderr, "gs-memfill: bad size %s\n", v);
				return -1;
			}
			*(strcmp(a, "--chunk") == 0 ? &o->chunk : &o->max) = s;
		} else if (strcmp(a, "--hold-ms") == 0) {
			o->hold_ms = atol(v);
		} else {
			fprintf(stderr, "gs-memfill: unknown flag %s\n", a);
			return -1;
		}
		i++;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = {.via = CUAPI_DLSYM, .path = "alloc", .chunk = 64u << 20, .max = (size_t)-1};
	struct cuapi api;
	char err[256];
	CUdevice dev;
	size_t free_b = 0, total_b = 0, dev_total = 0, got = 0;
	CUresult r;

	if (parse(argc, argv, &o) != 0)
		return 2;
	if (strcmp(o.path, "module") == 0)
		setenv("CUDA_MODULE_LOADING", "EAGER", 0); /* globals at load, not at first use */
	if (cuapi_load(&api, o.via, err, sizeof(err)) != 0) {
		fprintf(stderr, "gs-memfill: %s\n", err);
		return 1;
	}
	r = cuapi_open_device0(&api, &dev);
	if (r == CUDA_SUCCESS)
		r = api.MemGetInfo(&free_b, &total_b);
	if (r == CUDA_SUCCESS)
		r = api.DeviceTotalMem(&dev_total, dev);
	while (r == CUDA_SUCCESS && got < o.max) {
		size_t n = o.max - got < o.chunk ? o.max - got : o.chunk;
		r = alloc_one(&api, &o, dev, n);
		if (r == CUDA_SUCCESS)
			got += n;
	}
	printf("{\"via\":\"%s\",\"path\":\"%s\",\"total\":%zu,\"free\":%zu,\"device_total\":%zu,"
	       "\"allocated\":%zu,\"stopped_by\":\"%s\"}\n",
	       cuapi_via_name(o.via), o.path, total_b, free_b, dev_total, got,
	       r == CUDA_SUCCESS ? "max" : cuapi_err(&api, r));
	fflush(stdout);
	if (o.hold_ms > 0) {
		struct timespec ts = {o.hold_ms / 1000, (o.hold_ms % 1000) * 1000000L};
		nanosleep(&ts, NULL);
	}
	return r == CUDA_SUCCESS || r == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 1;
}
