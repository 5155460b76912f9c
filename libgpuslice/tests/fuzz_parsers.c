/* SPDX-License-Identifier: Apache-2.0
 * libFuzzer target for the parsers that read outside input: /proc/<pid>/stat,
 * /proc/<pid>/task/<tid>/schedstat, /proc/self/timens_offsets, GPUSLICE_MEMORY_LIMIT and a group file header. `make fuzz-lib` (needs
 * clang); the seeded loop in unit_parse_test.c covers the same code in
 * `make test-lib`. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/account.h"
#include "../src/config.h"
#include "../src/procfs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char state;
	uint64_t start, v;
	(void)gs_parse_stat((const char *)data, size, &state, &start);
	uint64_t exec, delay;
	(void)gs_parse_schedstat((const char *)data, size, &exec, &delay);
	int64_t sec, nsec;
	if (gs_parse_timens_monotonic((const char *)data, size, &sec, &nsec) == 0 && (nsec < 0 || nsec >= 1000000000))
		abort(); /* an offset the kernel never writes */
	char *s = malloc(size + 1);
	if (s == NULL)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	if (gs_parse_u64(s, &v) == 0 && strspn(s, "0123456789") != strlen(s))
		abort(); /* accepted something that is not all digits */
	free(s);
	struct gs_shm_header h;
	memset(&h, 0, sizeof(h));
	memcpy(&h, data, size < sizeof(h) ? size : sizeof(h));
	char err[200];
	enum gs_shm_status st = gs_shm_check(size >= sizeof(h) ? &h : NULL, size, err, sizeof(err));
	if (st == GS_SHM_OK && (h.magic != GS_SHM_MAGIC || size != GS_SHM_FILE_SIZE))
		abort(); /* accepted a file that is not a valid group file */
	return 0;
}
