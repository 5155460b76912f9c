/* SPDX-License-Identifier: Apache-2.0
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: "<ordinal>=<size>[,...]", a size in bytes
 * or with K, M, G, T (binary multiples, either case), e.g. "0=1G,1=512M".
 * Pure parsing, no global state. */
#include <stdio.h>
#include <string.h>

#include "config.h"

static int fail(char *err, size_t errlen, const char *what, const char *entry, size_t len)
{
	if (errlen > 0)
		snprintf(err, errlen, "%s in \"%.*s\"", what, (int)(len > 64 ? 64 : len), entry);
	return -1;
}

/* Decimal digits in [s, end) into *out (no overflow); the rest in *rest. */
static int digits(const char *s, const char *end, uint64_t *out, const char **rest)
{
	uint64_t v = 0;
	const char *p = s;

	for (; p < end && *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (p == s)
		return -1;
	*out = v;
	*rest = p;
	return 0;
}

static int entry(const char *s, const char *end, uint64_t limits[SIM_MAX_DEVICES], char *err, size_t errlen)
{
	static const char suffix[] = "KMGT";
	uint64_t ord, size, mult = 1;
	const char *p;

	if (digits(s, end, &ord, &p) != 0 || p == end || *p != '=')
		return fail(err, errlen, "want <device ordinal>=<size>", s, (size_t)(end - s));
	if (ord >= SIM_MAX_DEVICES)
		return fail(err, errlen, "device ordinal out of range", s, (size_t)(end - s));
	if (digits(p + 1, end, &size, &p) != 0)
		return fail(err, errlen, "bad size", s, (size_t)(end - s));
	if (p < end) {
		const char *u = strchr(suffix, *p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
		if (*p == '\0' || u == NULL || p + 1 != end)
			return fail(err, errlen, "bad size unit (want K, M, G or T)", s, (size_t)(end - s));
		mult = 1ull << (10 * (u - suffix + 1));
	}
	if (size == 0 || size > UINT64_MAX / mult)
		return fail(err, errlen, "size zero or too large", s, (size_t)(end - s));
	if (limits[ord] != 0)
		return fail(err, errlen, "device ordinal given twice", s, (size_t)(end - s));
	limits[ord] = size * mult;
	return 0;
}

int sim_parse_pinned_limits(const char *s, uint64_t limits[SIM_MAX_DEVICES], char *err, size_t errlen)
{
	memset(limits, 0, SIM_MAX_DEVICES * sizeof(limits[0]));
	if (s == NULL || s[0] == '\0')
		return 0;
	for (;;) {
		const char *end = strchr(s, ',');
		if (end == NULL)
			end = s + strlen(s);
		if (entry(s, end, limits, err, errlen) != 0)
			return -1;
		if (*end == '\0')
			return 0;
		s = end + 1;
	}
}
