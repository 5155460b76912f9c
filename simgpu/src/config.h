/* SPDX-License-Identifier: Apache-2.0
 * Simulator device configuration: pure parsing, no global state. */
#ifndef GPUSLICE_SIM_CONFIG_H
#define GPUSLICE_SIM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "simstate.h"

#define SIM_DEFAULT_MEMORY (24ull << 30)
/* Device memory each context takes unless GPUSLICE_SIM_CONTEXT_MEMORY says
 * otherwise: a real card's order (about 300 MB per process with CUDA's lazy
 * loading, pytorch/pytorch#86509 and #107667; an H100's may be more). Tests
 * about other figures set the variable to 0. */
#define SIM_DEFAULT_CONTEXT_MEMORY (300ull << 20)
/* Device-side copies, memsets and prefetches run on the engine for their
 * bytes at this bandwidth (GB/s, 10^9 bytes; about an H100's HBM3 copy rate);
 * GPUSLICE_SIM_COPY_GBPS sets it. */
#define SIM_DEFAULT_COPY_GBPS 1500ull
#define SIM_DEFAULT_SMS 108u
#define SIM_DEFAULT_NAME "gpuslice simulated GPU"
#define SIM_CONFIG_MAX_BYTES (64u << 10)
#define SIM_ERR_LEN 256
#define SIM_MAX_MINOR 254u /* 255 is /dev/nvidiactl */
#define SIM_DEVDIR_LEN 200

struct sim_dev_config {
	char name[SIM_NAME_LEN];
	unsigned char uuid[16];
	uint64_t memory;
	uint32_t sms;
	uint32_t minor; /* device node <devdir>/nvidia<minor> */
	uint32_t mig;   /* SIM_MIG_*: MIG-capable and its mode when the state file is made */
};

/* sim_dev_config.mig: not said (GPUSLICE_SIM_MIG decides), not MIG-capable,
 * capable with MIG off, capable with MIG on. */
enum { SIM_MIG_UNSET, SIM_MIG_NONE, SIM_MIG_OFF, SIM_MIG_ON };

/* How this process checks device access (per process, not shared). */
struct sim_access {
	bool devnodes;               /* GPUSLICE_SIM_DEVNODES=1: open <devdir>/nvidia<minor> */
	char devdir[SIM_DEVDIR_LEN]; /* GPUSLICE_SIM_DEVDIR, default /dev */
};

struct sim_config {
	int ndev;
	struct sim_dev_config dev[SIM_MAX_GPUS];
	struct sim_access access;
	uint64_t ctx_mem;  /* GPUSLICE_SIM_CONTEXT_MEMORY: device bytes per context (per process) */
	uint64_t copy_bps; /* GPUSLICE_SIM_COPY_GBPS: device-side copy/memset bandwidth, bytes per second */
	uint64_t
		latency_ns; /* GPUSLICE_SIM_LATENCY_US: cuMemAlloc's and context creation's time before they take memory */
};

/* Parses a device file (one device per line, see README.md). Returns 0, or -1
 * with a one-line message in err. Never reads past len. */
int sim_config_parse(const char *text, size_t len, struct sim_config *out, char *err, size_t errlen);

/* Builds the configuration from GPUSLICE_SIM_CONFIG or the GPUSLICE_SIM_GPUS /
 * _MEMORY / _NAME / _SMS variables, and the access check from
 * GPUSLICE_SIM_DEVNODES / _DEVDIR. Returns 0, or -1 with a message in err. */
int sim_config_from_env(struct sim_config *out, char *err, size_t errlen);

/* "24GiB", "512MiB", "1.5GiB" is rejected; "1000000" bytes; KB/MB/GB/TB decimal. */
int sim_parse_size(const char *s, uint64_t *out);
/* CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=1G,1=512M"): limits[ordinal] in bytes,
 * 0 for none. NULL or empty: no limits. Returns 0, or -1 with a message in err. */
int sim_parse_pinned_limits(const char *s, uint64_t limits[SIM_MAX_DEVICES], char *err, size_t errlen);
/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" -> 16 bytes. */
int sim_parse_uuid(const char *s, unsigned char out[16]);
/* Writes "GPU-..." (41 bytes with NUL); buf must hold at least 41 bytes. */
void sim_format_uuid(const unsigned char u[16], char *buf, size_t len);
void sim_default_uuid(int index, unsigned char out[16]);
/* "on", "off" or "none" -> SIM_MIG_ON / _OFF / _NONE; -1 otherwise. */
int sim_parse_mig(const char *v);

/* config.c's, for config_env.c: a message into err (printf format); device
 * index's defaults; the device file at path parsed (a message naming it). */
void sim_config_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void sim_dev_defaults(struct sim_dev_config *d, int index);
int sim_config_from_file(const char *path, struct sim_config *out, char *err, size_t errlen);

#endif
