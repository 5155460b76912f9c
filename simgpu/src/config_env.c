/* SPDX-License-Identifier: Apache-2.0
 * Device configuration from the environment: GPUSLICE_SIM_CONFIG (a device
 * file, config.c) or the GPUSLICE_SIM_* variables (pure logic: no globals, no
 * output). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int env_uint(const char *name, const char *v, uint64_t max, uint64_t *out, char *err, size_t errlen)
{
	if (sim_parse_size(v, out) != 0 || strspn(v, "0123456789") != strlen(v) || *out > max) {
		sim_config_err(err, errlen, "%s=\"%s\": want an integer 0..%llu", name, v, (unsigned long long)max);
		return -1;
	}
	return 0;
}

/* GPUSLICE_SIM_DEVNODES (unset, empty or 0: off; 1: on) and GPUSLICE_SIM_DEVDIR
 * (an absolute directory, default /dev). */
static int access_from_env(struct sim_access *a, char *err, size_t errlen)
{
	const char *on = getenv("GPUSLICE_SIM_DEVNODES");
	const char *dir = getenv("GPUSLICE_SIM_DEVDIR");

	memset(a, 0, sizeof(*a));
	if (on != NULL && *on != '\0' && strcmp(on, "0") != 0 && strcmp(on, "1") != 0) {
		sim_config_err(err, errlen, "GPUSLICE_SIM_DEVNODES=\"%.40s\": want 0 or 1", on);
		return -1;
	}
	a->devnodes = on != NULL && strcmp(on, "1") == 0;
	if (dir == NULL || *dir == '\0')
		dir = "/dev";
	if (*dir != '/' || strlen(dir) >= sizeof(a->devdir)) {
		sim_config_err(err, errlen, "GPUSLICE_SIM_DEVDIR=\"%.40s\": want an absolute path under %d bytes", dir,
			       SIM_DEVDIR_LEN);
		return -1;
	}
	snprintf(a->devdir, sizeof(a->devdir), "%s", dir);
	return 0;
}

static int devices_from_env(struct sim_config *out, char *err, size_t errlen)
{
	const char *v;
	uint64_t n = 1, mem = SIM_DEFAULT_MEMORY, sms = SIM_DEFAULT_SMS;
	const char *name = SIM_DEFAULT_NAME;

	if ((v = getenv("GPUSLICE_SIM_GPUS")) != NULL &&
	    env_uint("GPUSLICE_SIM_GPUS", v, SIM_MAX_GPUS, &n, err, errlen) != 0)
		return -1;
	if ((v = getenv("GPUSLICE_SIM_MEMORY")) != NULL && (sim_parse_size(v, &mem) != 0 || mem < (1ull << 20))) {
		sim_config_err(err, errlen, "GPUSLICE_SIM_MEMORY=\"%s\": want a size like 24GiB", v);
		return -1;
	}
	if ((v = getenv("GPUSLICE_SIM_SMS")) != NULL &&
	    (env_uint("GPUSLICE_SIM_SMS", v, 1024, &sms, err, errlen) != 0 || sms == 0)) {
		sim_config_err(err, errlen, "GPUSLICE_SIM_SMS=\"%s\": want an integer 1..1024", v);
		return -1;
	}
	if ((v = getenv("GPUSLICE_SIM_NAME")) != NULL) {
		if (*v == '\0' || strlen(v) >= SIM_NAME_LEN) {
			sim_config_err(err, errlen, "GPUSLICE_SIM_NAME: want 1..%d characters", SIM_NAME_LEN - 1);
			return -1;
		}
		name = v;
	}
	out->ndev = (int)n;
	for (int i = 0; i < out->ndev; i++) {
		sim_dev_defaults(&out->dev[i], i);
		snprintf(out->dev[i].name, sizeof(out->dev[i].name), "%s", name);
		out->dev[i].memory = mem;
		out->dev[i].sms = (uint32_t)sms;
	}
	return 0;
}

/* GPUSLICE_SIM_LATENCY_US: how long cuMemAlloc and context creation take
 * before the memory is the process's (0 by default; on a real driver large
 * allocations take milliseconds, a context hundreds). Tests use it to catch a
 * thread mid-call. */
static int latency_from_env(struct sim_config *out, char *err, size_t errlen)
{
	const char *v = getenv("GPUSLICE_SIM_LATENCY_US");
	char *end = NULL;
	unsigned long long us = 0;

	if (v != NULL && *v != '\0') {
		errno = 0;
		us = strtoull(v, &end, 10);
		if (errno != 0 || end == v || *end != '\0' || us > 10000000) {
			sim_config_err(err, errlen, "GPUSLICE_SIM_LATENCY_US=\"%s\": want microseconds, 0 to 10000000",
				       v);
			return -1;
		}
	}
	out->latency_ns = us * 1000ull;
	return 0;
}

static int copy_from_env(struct sim_config *out, char *err, size_t errlen)
{
	const char *v = getenv("GPUSLICE_SIM_COPY_GBPS");
	char *end = NULL;
	unsigned long long g = SIM_DEFAULT_COPY_GBPS;

	if (v != NULL && *v != '\0') {
		errno = 0;
		g = strtoull(v, &end, 10);
		if (errno != 0 || end == v || *end != '\0' || g == 0 || g > 1000000) {
			sim_config_err(err, errlen, "GPUSLICE_SIM_COPY_GBPS=\"%s\": want GB/s, 1 to 1000000", v);
			return -1;
		}
	}
	out->copy_bps = g * 1000000000ull;
	return latency_from_env(out, err, errlen);
}

int sim_parse_mig(const char *v)
{
	if (strcmp(v, "on") == 0)
		return SIM_MIG_ON;
	if (strcmp(v, "off") == 0)
		return SIM_MIG_OFF;
	return strcmp(v, "none") == 0 ? SIM_MIG_NONE : -1;
}

/* GPUSLICE_SIM_MIG=on|off|none: every device without a mig= key. */
static int mig_from_env(struct sim_config *out, char *err, size_t errlen)
{
	const char *v = getenv("GPUSLICE_SIM_MIG");
	int m = SIM_MIG_NONE;

	if (v != NULL && *v != '\0' && (m = sim_parse_mig(v)) < 0) {
		sim_config_err(err, errlen,
			       "GPUSLICE_SIM_MIG=\"%.20s\": want on, off or none (instances are made through NVML)", v);
		return -1;
	}
	for (int i = 0; i < out->ndev; i++)
		if (out->dev[i].mig == SIM_MIG_UNSET)
			out->dev[i].mig = (uint32_t)m;
	return 0;
}

int sim_config_from_env(struct sim_config *out, char *err, size_t errlen)
{
	const char *path = getenv("GPUSLICE_SIM_CONFIG");
	int rc;

	memset(out, 0, sizeof(*out));
	if (path != NULL && *path != '\0')
		rc = sim_config_from_file(path, out, err, errlen);
	else
		rc = devices_from_env(out, err, errlen);
	if (rc == 0)
		rc = access_from_env(&out->access, err, errlen);
	if (rc == 0)
		rc = mig_from_env(out, err, errlen);
	const char *v = getenv("GPUSLICE_SIM_CONTEXT_MEMORY");
	out->ctx_mem = SIM_DEFAULT_CONTEXT_MEMORY;
	if (rc == 0 && v != NULL && sim_parse_size(v, &out->ctx_mem) != 0) {
		sim_config_err(err, errlen, "GPUSLICE_SIM_CONTEXT_MEMORY=\"%s\": want a size like 512MiB", v);
		rc = -1;
	}
	return rc == 0 ? copy_from_env(out, err, errlen) : rc;
}
