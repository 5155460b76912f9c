/* SPDX-License-Identifier: Apache-2.0
 *
 * gs-trainer: a stand-in for a training job. Like TensorFlow's default it sizes
 * itself from the free memory the driver reports, grows its memory pool in
 * chunks up to that size, then runs steps of kernels with a synchronize after
 * each step. Prints one JSON line with what happened.
 *
 *   gs-trainer [--name T] [--steps N] [--kernels K] [--kernel-us U]
 *              [--fraction F | --need SIZE] [--chunk SIZE] [--init-ms MS] [--via dlsym|procaddr|procaddr_v2]
 * --need: the model needs exactly SIZE (instead of a fraction of the free memory).
 * --duration-ms trains for that long instead of a number of steps (tasks started
 * together then contend for the GPU the whole time they are measured).
 * --init-ms is the framework's start-up time between sizing and allocating (building
 * the model): tasks started together all size themselves before any allocates.
 * Exit status: 0 finished, 3 out of memory, 1 other CUDA error, 2 bad flags.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuapi.h"

struct opts {
	const char *name;
	long steps, kernels;
	unsigned long long kernel_us;
	double fraction;
	size_t chunk, need;
	long init_ms, duration_ms;
	enum cuapi_via via;
};

struct result {
	size_t free_start, total, peak;
	long steps;
	double seconds;
	CUresult err;
	const char *phase;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int parse(int argc, char **argv, struct opts *o)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v) {
			fprintf(stderr, "gs-trainer: %s needs a value\n", a);
			return -1;
		}
		if (strcmp(a, "--name") == 0)
			o->name = v;
		else if (strcmp(a, "--steps") == 0)
			o->steps = atol(v);
		else if (strcmp(a, "--kernels") == 0)
			o->kernels = atol(v);
		else if (strcmp(a, "--kernel-us") == 0)
			o->kernel_us = strtoull(v, NULL, 10);
		else if (strcmp(a, "--fraction") == 0)
			o->fraction = atof(v);
		else if (strcmp(a, "--chunk") == 0)
			o->chunk = cuapi_parse_size(v);
		else if (strcmp(a, "--need") == 0)
			o->need = cuapi_parse_size(v);
		else if (strcmp(a, "--init-ms") == 0)
			o->init_ms = atol(v);
		else if (strcmp(a, "--duration-ms") == 0)
			o->duration_ms = atol(v);
		else if (strcmp(a, "--via") == 0 && cuapi_parse_via(v) >= 0)
			o->via = (enum cuapi_via)cuapi_parse_via(v);
		else {
			fprintf(stderr, "gs-trainer: bad flag %s %s\n", a, v);
			return -1;
		}
		i++;
	}
	if (o->steps <= 0 || o->kernels <= 0 || o->fraction <= 0 || o->fraction > 1 || o->chunk == 0) {
		fprintf(stderr, "gs-trainer: --steps, --kernels, --chunk must be > 0 and --fraction in (0,1]\n");
		return -1;
	}
	return 0;
}

/* Grows the pool to fraction * free in chunks, like a caching allocator. */
static void grow_pool(const struct cuapi *api, const struct opts *o, struct result *res)
{
	size_t target;
	CUdeviceptr p;

	res->phase = "sizing";
	res->err = api->MemGetInfo(&res->free_start, &res->total);
	if (res->err != CUDA_SUCCESS)
		return;
	target = o->need > 0 ? o->need : (size_t)((double)res->free_start * o->fraction);
	if (o->init_ms > 0) {
		struct timespec ts = {o->init_ms / 1000, (o->init_ms % 1000) * 1000000L};
		nanosleep(&ts, NULL);
	}
	res->phase = "allocating";
	while (res->peak < target) {
		size_t n = target - res->peak < o->chunk ? target - res->peak : o->chunk;
		res->err = api->MemAlloc(&p, n);
		if (res->err != CUDA_SUCCESS)
			return;
		res->peak += n;
	}
}

static void train(const struct cuapi *api, const struct opts *o, struct result *res)
{
	CUfunction fn;
	double start;

	res->phase = "loading";
	res->err = cuapi_busy_kernel(api, &fn);
	if (res->err != CUDA_SUCCESS)
		return;
	res->phase = "training";
	start = now_s();
	for (res->steps = 0;
	     o->duration_ms > 0 ? now_s() - start < (double)o->duration_ms / 1000 : res->steps < o->steps;
	     res->steps++) {
		for (long k = 0; k < o->kernels && res->err == CUDA_SUCCESS; k++)
			res->err = cuapi_launch_busy(api, fn, o->kernel_us);
		if (res->err == CUDA_SUCCESS)
			res->err = api->CtxSynchronize();
		if (res->err != CUDA_SUCCESS)
			break;
	}
	res->seconds = now_s() - start;
}

int main(int argc, char **argv)
{
	struct opts o = {.name = "task",
			 .steps = 50,
			 .kernels = 4,
			 .kernel_us = 2000,
			 .fraction = 0.9,
			 .chunk = 512u << 20,
			 .via = CUAPI_DLSYM};
	struct result res = {.phase = "init"};
	struct cuapi api;
	char err[256];
	CUdevice dev;

	if (parse(argc, argv, &o) != 0)
		return 2;
	if (cuapi_load(&api, o.via, err, sizeof(err)) != 0) {
		fprintf(stderr, "gs-trainer: %s\n", err);
		return 1;
	}
	res.err = cuapi_open_device0(&api, &dev);
	if (res.err == CUDA_SUCCESS)
		grow_pool(&api, &o, &res);
	if (res.err == CUDA_SUCCESS)
		train(&api, &o, &res);
	printf("{\"task\":\"%s\",\"total\":%zu,\"free_at_start\":%zu,\"peak\":%zu,\"steps\":%ld,"
	       "\"seconds\":%.4f,\"steps_per_s\":%.3f,\"result\":\"%s\",\"phase\":\"%s\"}\n",
	       o.name, res.total, res.free_start, res.peak, res.steps, res.seconds,
	       res.seconds > 0 ? (double)res.steps / res.seconds : 0.0,
	       res.err == CUDA_SUCCESS ? "ok" : cuapi_err(&api, res.err), res.phase);
	if (res.err == CUDA_ERROR_OUT_OF_MEMORY)
		return 3;
	return res.err == CUDA_SUCCESS ? 0 : 1;
}
