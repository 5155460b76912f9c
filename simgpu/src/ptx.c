/* SPDX-License-Identifier: Apache-2.0
 * The device memory a PTX module's globals take: every `.global` variable
 * (`.global .align 8 .b8 buf[1048576];`, `.global .f32 x[64][64];`,
 * `.global .u32 n;`) costs its element size times its extents, as a driver
 * allocates them at load. Only PTX text is read (a NUL-terminated image that
 * starts like text); cubins and fat binaries cost nothing here. Sums saturate. */
#include <ctype.h>
#include <stdint.h>
#include <string.h>

#include "sim.h"

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
	uint64_t r;
	return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Bytes of a type token like ".b8", ".u32", ".f64" (0: not a type). */
static uint64_t type_size(const char *t, size_t n)
{
	if (n < 3 || t[0] != '.' || strchr("busf", t[1]) == NULL)
		return 0;
	if (n == 3 && t[2] == '8')
		return 1;
	if (n == 4 && strncmp(t + 2, "16", 2) == 0)
		return 2;
	if (n == 4 && strncmp(t + 2, "32", 2) == 0)
		return 4;
	if (n == 4 && strncmp(t + 2, "64", 2) == 0)
		return 8;
	return 0;
}

/* One `.global` declaration starting after the keyword at p: its bytes. */
static uint64_t one_global(const char *p)
{
	uint64_t elem = 0;
	while (*p != '\0' && *p != ';' && *p != '\n') {
		while (*p == ' ' || *p == '\t')
			p++;
		const char *t = p;
		while (*p != '\0' && !isspace((unsigned char)*p) && *p != ';' && *p != '[')
			p++;
		size_t n = (size_t)(p - t);
		if (n == 0 && *p != '[')
			break;
		if (elem == 0) {
			elem = type_size(t, n);
			continue;
		}
		if (t[0] == '.' || n == 0)
			continue;
		uint64_t bytes = elem; /* the name: its extents follow */
		while (*p == '[') {
			uint64_t d = 0;
			for (p++; isdigit((unsigned char)*p); p++)
				d = sat_add(sat_mul(d, 10), (uint64_t)(*p - '0'));
			bytes = sat_mul(bytes, d);
			while (*p != '\0' && *p != ']' && *p != ';' && *p != '\n')
				p++;
			if (*p == ']')
				p++;
		}
		return bytes;
	}
	return 0;
}

/* Back from p over blanks, not past s. */
static const char *skip_back(const char *s, const char *p)
{
	while (p > s && (p[-1] == ' ' || p[-1] == '\t'))
		p--;
	return p;
}

uint64_t sim_ptx_globals(const void *image)
{
	const char *s = image;
	if (s == NULL || !(s[0] == '/' || s[0] == '.' || isspace((unsigned char)s[0])))
		return 0; /* not PTX text */
	uint64_t total = 0;
	for (const char *p = s; (p = strstr(p, ".global")) != NULL; p += 7) {
		const char *b = skip_back(s, p);
		if (b - s >= 8 && strncmp(b - 8, ".visible", 8) == 0) /* linkage: still a definition */
			b = skip_back(s, b - 8);
		else if (b - s >= 5 && strncmp(b - 5, ".weak", 5) == 0)
			b = skip_back(s, b - 5);
		int starts = b == s || b[-1] == '\n'; /* a declaration opens its line (comments do not count) */
		if (starts && (p[7] == ' ' || p[7] == '\t'))
			total = sat_add(total, one_global(p + 7));
	}
	return total;
}
