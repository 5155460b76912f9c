/* SPDX-License-Identifier: Apache-2.0
 *
 * gs-elastic: holds GPU memory for the elastic memory tests and benchmarks.
 * Allocates --hold bytes in --chunk pieces (cuMemAlloc_v2), stopping at the
 * first refusal; writes a pattern (64 KiB at the start, middle and end of each
 * piece) and then follows commands on stdin, one per line:
 *   check        reads the patterns back: "check ok" or "check bad <piece>"
 *   alloc SIZE   one more allocation: "alloc ..." as below
 *   free         frees the last piece: "free ok"
 *   info         "info total=<bytes> free=<bytes>" (cuMemGetInfo)
 *   bench N SIZE N allocations of SIZE, each freed at once: "bench n=N us_per_op=<alloc+free>"
 *   grow N SIZE  N allocations of SIZE kept, then freed: "grow n=<made> us_per_alloc=<alloc>"
 *   exit
 * Output: "alloc n=<i> bytes=<size> rc=<CUDA error name> us=<latency>" per
 * allocation, then "held bytes=<total>" and "ready". Exit 0 unless the driver
 * could not be opened.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuapi.h"

#define PIECES 4096
#define PAT (64u << 10)

static CUdeviceptr piece[PIECES];
static size_t piece_size[PIECES];
static int npieces;

static long long now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void pattern(unsigned char *buf, int i, int where)
{
	for (size_t k = 0; k < PAT; k++)
		buf[k] = (unsigned char)(k * 31 + (size_t)i * 7 + (size_t)where * 101 + 1);
}

static size_t offset(size_t size, int where)
{
	if (size <= PAT)
		return 0;
	return where == 0 ? 0 : where == 1 ? (size / 2) & ~(size_t)4095 : size - PAT;
}

static CUresult one(const struct cuapi *api, size_t n)
{
	if (npieces == PIECES)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUdeviceptr p;
	long long t = now_us();
	CUresult r = api->MemAlloc(&p, n);
	long long us = now_us() - t;
	printf("alloc n=%d bytes=%zu rc=%s us=%lld\n", npieces, n, cuapi_err(api, r), us);
	if (r != CUDA_SUCCESS)
		return r;
	unsigned char buf[PAT];
	for (int w = 0; w < 3 && r == CUDA_SUCCESS; w++) {
		pattern(buf, npieces, w);
		size_t len = n < PAT ? n : PAT;
		r = api->MemcpyHtoD(p + offset(n, w), buf, len);
	}
	piece[npieces] = p;
	piece_size[npieces++] = n;
	return r;
}

/* Device memory without host backing (the simulator's plain allocations)
 * reads back zeros: only pieces that kept their bytes are compared, and
 * "kept" counts them. */
static void check(const struct cuapi *api)
{
	unsigned char want[PAT], got[PAT];
	int kept = 0;
	for (int i = 0; i < npieces; i++) {
		int zero = 1, same = 1;
		for (int w = 0; w < 3; w++) {
			size_t len = piece_size[i] < PAT ? piece_size[i] : PAT;
			pattern(want, i, w);
			if (api->MemcpyDtoH(got, piece[i] + offset(piece_size[i], w), len) != CUDA_SUCCESS) {
				printf("check bad %d\n", i);
				return;
			}
			for (size_t k = 0; k < len; k++)
				zero &= got[k] == 0;
			same &= memcmp(want, got, len) == 0;
		}
		if (!same && !zero) {
			printf("check bad %d\n", i);
			return;
		}
		kept += same;
	}
	printf("check ok kept=%d\n", kept);
}

/* "bench": alloc+free pairs; "grow": allocations kept (each past the
 * allowance borrows), then freed. */
static void loop(const struct cuapi *api, const char *what, char *args)
{
	char *save = NULL;
	char *ns = strtok_r(args, " \n", &save), *ss = strtok_r(NULL, " \n", &save);
	long n = ns != NULL ? atol(ns) : 0;
	size_t size = ss != NULL ? cuapi_parse_size(ss) : 0;
	if (n <= 0 || n > 1000000 || size == 0) {
		printf("%s bad arguments\n", what);
		return;
	}
	int grow = strcmp(what, "grow") == 0;
	CUdeviceptr *kept = grow ? calloc((size_t)n, sizeof(*kept)) : NULL;
	long made = 0;
	long long t = now_us();
	for (; made < n; made++) {
		CUdeviceptr p;
		if (api->MemAlloc(&p, size) != CUDA_SUCCESS)
			break;
		if (kept != NULL)
			kept[made] = p;
		else
			(void)api->MemFree(p);
	}
	long long us = now_us() - t;
	for (long i = 0; kept != NULL && i < made; i++)
		(void)api->MemFree(kept[i]);
	free(kept);
	printf("%s n=%ld us_per_%s=%.3f\n", what, made, grow ? "alloc" : "op", made > 0 ? (double)us / made : 0.0);
}

int main(int argc, char **argv)
{
	size_t hold = 0, chunk = 1u << 30;
	for (int i = 1; i + 1 < argc; i += 2) {
		size_t *dst = strcmp(argv[i], "--hold") == 0 ? &hold : strcmp(argv[i], "--chunk") == 0 ? &chunk : NULL;
		if (dst == NULL || (*dst = cuapi_parse_size(argv[i + 1])) == 0) {
			fprintf(stderr, "gs-elastic: usage: gs-elastic --hold SIZE [--chunk SIZE]\n");
			return 2;
		}
	}
	struct cuapi api;
	char err[256];
	CUdevice dev;
	if (cuapi_load(&api, CUAPI_DLSYM, err, sizeof(err)) != 0 || cuapi_open_device0(&api, &dev) != CUDA_SUCCESS) {
		fprintf(stderr, "gs-elastic: cannot open the driver: %s\n", err);
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	size_t got = 0;
	while (got < hold) {
		size_t n = hold - got < chunk ? hold - got : chunk;
		if (one(&api, n) != CUDA_SUCCESS)
			break;
		got += n;
	}
	printf("held bytes=%zu\nready\n", got);
	char line[128];
	while (fgets(line, sizeof(line), stdin) != NULL) {
		if (strncmp(line, "check", 5) == 0) {
			check(&api);
		} else if (strncmp(line, "alloc ", 6) == 0) {
			size_t n = cuapi_parse_size(strtok(line + 6, " \n"));
			if (n > 0)
				(void)one(&api, n);
		} else if (strncmp(line, "free", 4) == 0 && npieces > 0) {
			npieces--;
			printf("free %s\n", api.MemFree(piece[npieces]) == CUDA_SUCCESS ? "ok" : "failed");
		} else if (strncmp(line, "info", 4) == 0) {
			size_t f = 0, t = 0;
			CUresult r = api.MemGetInfo(&f, &t);
			printf("info total=%zu free=%zu rc=%s\n", t, f, cuapi_err(&api, r));
		} else if (strncmp(line, "bench ", 6) == 0 || strncmp(line, "grow ", 5) == 0) {
			line[strcspn(line, " ")] = '\0';
			loop(&api, line, line + strlen(line) + 1);
		} else if (strncmp(line, "exit", 4) == 0) {
			break;
		}
	}
	return 0;
}
