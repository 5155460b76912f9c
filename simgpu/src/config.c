/* SPDX-License-Identifier: Apache-2.0
 * Device configuration parsing (pure logic: no globals, no output). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void sim_config_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

struct unit {
	const char *suffix;
	uint64_t mult;
};

static const struct unit units[] = {
	{"KiB", 1ull << 10},
	{"MiB", 1ull << 20},
	{"GiB", 1ull << 30},
	{"TiB", 1ull << 40},
	{"Ki", 1ull << 10},
	{"Mi", 1ull << 20},
	{"Gi", 1ull << 30},
	{"Ti", 1ull << 40},
	{"KB", 1000ull},
	{"MB", 1000000ull},
	{"GB", 1000000000ull},
	{"TB", 1000000000000ull},
	{"B", 1},
	{"", 1},
};

int sim_parse_size(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	const char *p = s;

	if (s == NULL || *s < '0' || *s > '9')
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(p, units[i].suffix) != 0)
			continue;
		if (v != 0 && units[i].mult > UINT64_MAX / v)
			return -1;
		*out = v * units[i].mult;
		return 0;
	}
	return -1;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int sim_parse_uuid(const char *s, unsigned char out[16])
{
	static const int dash_at[] = {8, 13, 18, 23};
	int n = 0, d = 0;

	if (s == NULL || strncmp(s, "GPU-", 4) != 0 || strlen(s) != 40)
		return -1;
	s += 4;
	for (int i = 0; i < 36; i++) {
		if (d < 4 && i == dash_at[d]) {
			if (s[i] != '-')
				return -1;
			d++;
			continue;
		}
		int hi = hexval(s[i]), lo = hexval(s[i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		out[n++] = (unsigned char)(hi << 4 | lo);
		i++;
	}
	return n == 16 ? 0 : -1;
}

void sim_format_uuid(const unsigned char u[16], char *buf, size_t len)
{
	snprintf(buf, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
		 u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

void sim_default_uuid(int index, unsigned char out[16])
{
	static const unsigned char base[16] = {0x5e, 0x1a, 0xc0, 0xde, 0x67, 0x70, 0x75, 0x73,
					       0x6c, 0x69, 0x63, 0x65, 0x00, 0x00, 0x00, 0x00};
	memcpy(out, base, 16);
	out[15] = (unsigned char)index;
}

void sim_dev_defaults(struct sim_dev_config *d, int index)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->name, sizeof(d->name), "%s", SIM_DEFAULT_NAME);
	sim_default_uuid(index, d->uuid);
	d->memory = SIM_DEFAULT_MEMORY;
	d->sms = SIM_DEFAULT_SMS;
	d->minor = (uint32_t)index;
}

static int parse_sms(const char *v, uint32_t *out)
{
	uint64_t n;

	if (sim_parse_size(v, &n) != 0 || strspn(v, "0123456789") != strlen(v) || n == 0 || n > 1024)
		return -1;
	*out = (uint32_t)n;
	return 0;
}

static int parse_minor(const char *v, uint32_t *out)
{
	uint64_t n;

	if (sim_parse_size(v, &n) != 0 || strspn(v, "0123456789") != strlen(v) || n > SIM_MAX_MINOR)
		return -1;
	*out = (uint32_t)n;
	return 0;
}

static int apply_value(struct sim_dev_config *d, unsigned key, const char *val)
{
	switch (key) {
	case 0:
		if (*val == '\0' || strlen(val) >= sizeof(d->name))
			return -1;
		snprintf(d->name, sizeof(d->name), "%s", val);
		return 0;
	case 1:
		return sim_parse_uuid(val, d->uuid);
	case 2:
		return (sim_parse_size(val, &d->memory) != 0 || d->memory < (1ull << 20)) ? -1 : 0;
	case 3:
		return parse_sms(val, &d->sms);
	case 4:
		return parse_minor(val, &d->minor);
	default: {
		int m = sim_parse_mig(val);
		d->mig = m < 0 ? SIM_MIG_UNSET : (uint32_t)m;
		return m < 0 ? -1 : 0;
	}
	}
}

/* Applies one key=value to a device. Returns 0 or -1 with err set. */
static int apply_kv(struct sim_dev_config *d, const char *key, const char *val, unsigned *seen, char *err,
		    size_t errlen)
{
	static const char *const keys[] = {"name", "uuid", "memory", "sms", "minor", "mig"};
	unsigned k = 0;

	while (k < sizeof(keys) / sizeof(keys[0]) && strcmp(key, keys[k]) != 0)
		k++;
	if (k == sizeof(keys) / sizeof(keys[0])) {
		sim_config_err(err, errlen, "unknown key \"%s\" (want name, uuid, memory, sms, minor, mig)", key);
		return -1;
	}
	if (*seen & (1u << k)) {
		sim_config_err(err, errlen, "key \"%s\" given twice", key);
		return -1;
	}
	*seen |= 1u << k;
	if (apply_value(d, k, val) != 0) {
		sim_config_err(err, errlen, "bad value for %s: \"%s\"", key, val);
		return -1;
	}
	return 0;
}

/* Splits the next key=value token off *p (within a NUL-terminated line).
 * Values may be double-quoted (no escapes). Returns 1 token, 0 end, -1 error. */
static int next_token(char **p, char **key, char **val, char *err, size_t errlen)
{
	char *s = *p + strspn(*p, " \t\r");
	char *eq;

	if (*s == '\0')
		return 0;
	*key = s;
	eq = s + strcspn(s, "= \t\r");
	if (*eq != '=' || eq == s) {
		sim_config_err(err, errlen, "expected key=value near \"%.20s\"", s);
		return -1;
	}
	*eq = '\0';
	s = eq + 1;
	if (*s == '"') {
		char *end = strchr(s + 1, '"');
		if (end == NULL) {
			sim_config_err(err, errlen, "unterminated quote for %s", *key);
			return -1;
		}
		*val = s + 1;
		*end = '\0';
		s = end + 1;
		if (*s != '\0' && *s != ' ' && *s != '\t' && *s != '\r') {
			sim_config_err(err, errlen, "garbage after quoted value of %s", *key);
			return -1;
		}
	} else {
		*val = s;
		s += strcspn(s, " \t\r");
	}
	if (*s != '\0')
		*s++ = '\0';
	*p = s;
	return 1;
}

static int parse_line(char *line, struct sim_dev_config *d, char *err, size_t errlen)
{
	unsigned seen = 0;
	char *key, *val;
	int rc;

	while ((rc = next_token(&line, &key, &val, err, errlen)) == 1)
		if (apply_kv(d, key, val, &seen, err, errlen) != 0)
			return -1;
	return rc;
}

static bool blank_or_comment(const char *line)
{
	line += strspn(line, " \t\r");
	return *line == '\0' || *line == '#';
}

static int check_unique(const struct sim_config *c, char *err, size_t errlen)
{
	for (int i = 0; i < c->ndev; i++)
		for (int j = i + 1; j < c->ndev; j++)
			if (memcmp(c->dev[i].uuid, c->dev[j].uuid, 16) == 0) {
				sim_config_err(err, errlen, "devices %d and %d have the same uuid", i, j);
				return -1;
			} else if (c->dev[i].minor == c->dev[j].minor) {
				sim_config_err(err, errlen, "devices %d and %d have the same minor", i, j);
				return -1;
			}
	return 0;
}

int sim_config_parse(const char *text, size_t len, struct sim_config *out, char *err, size_t errlen)
{
	char line[1024];
	size_t pos = 0;
	int lineno = 0;
	char msg[SIM_ERR_LEN];

	memset(out, 0, sizeof(*out));
	while (pos < len) {
		size_t n = 0;
		lineno++;
		while (pos < len && text[pos] != '\n') {
			if (text[pos] == '\0' || n + 1 >= sizeof(line)) {
				sim_config_err(err, errlen, "line %d: %s", lineno,
					       text[pos] == '\0' ? "NUL byte" : "line too long");
				return -1;
			}
			line[n++] = text[pos++];
		}
		pos++; /* skip '\n' */
		line[n] = '\0';
		if (blank_or_comment(line))
			continue;
		if (out->ndev == SIM_MAX_GPUS) {
			sim_config_err(err, errlen, "line %d: more than %d devices", lineno, SIM_MAX_GPUS);
			return -1;
		}
		sim_dev_defaults(&out->dev[out->ndev], out->ndev);
		if (parse_line(line, &out->dev[out->ndev], msg, sizeof(msg)) != 0) {
			sim_config_err(err, errlen, "line %d: %s", lineno, msg);
			return -1;
		}
		out->ndev++;
	}
	if (out->ndev == 0) {
		sim_config_err(err, errlen, "no devices");
		return -1;
	}
	return check_unique(out, err, errlen);
}

static int read_file(const char *path, char *buf, size_t cap, size_t *len, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t n = 0;

	if (fd < 0) {
		sim_config_err(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	for (;;) {
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			sim_config_err(err, errlen, "%s: %s", path, strerror(errno));
			close(fd);
			return -1;
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (n == cap) {
			sim_config_err(err, errlen, "%s: larger than %u bytes", path, SIM_CONFIG_MAX_BYTES);
			close(fd);
			return -1;
		}
	}
	close(fd);
	*len = n;
	return 0;
}

int sim_config_from_file(const char *path, struct sim_config *out, char *err, size_t errlen)
{
	char *buf = malloc(SIM_CONFIG_MAX_BYTES);
	char msg[SIM_ERR_LEN];
	size_t len = 0;
	int rc;

	if (buf == NULL) {
		sim_config_err(err, errlen, "out of host memory");
		return -1;
	}
	rc = read_file(path, buf, SIM_CONFIG_MAX_BYTES, &len, err, errlen);
	if (rc == 0) {
		rc = sim_config_parse(buf, len, out, msg, sizeof(msg));
		if (rc != 0)
			sim_config_err(err, errlen, "%s: %s", path, msg);
	}
	free(buf);
	return rc;
}
