/* SPDX-License-Identifier: Apache-2.0
 * The environment contract (docs/contracts.md), read once on first use. */
#ifndef GS_CONFIG_H
#define GS_CONFIG_H

#include <limits.h>
#include <stdint.h>

#include <gpuslice/shm.h>

#include "internal.h"

struct gs_config {
	int log;                     /* GPUSLICE_LOG != "0" */
	int limit_bad;               /* GPUSLICE_MEMORY_LIMIT is malformed */
	uint64_t limit;              /* GPUSLICE_MEMORY_LIMIT, bytes; 0 = none */
	char limit_raw[64];          /* for the error message */
	char group[GS_SHM_NAME_LEN]; /* GPUSLICE_GROUP */
	char group_file[PATH_MAX];   /* GS_CONTAINER_GROUP_FILE, else GPUSLICE_GROUP_FILE; "": private */
	int group_managed;           /* GPUSLICE_GROUP_MANAGED=1: a manager made the file; never create it */
	char node_socket[108];       /* GPUSLICE_NODE_SOCKET; "" = unset or too long */
	uint32_t elastic;            /* GPUSLICE_MEMORY_ELASTIC: "on", "spill" -> GS_ELASTIC_* bits */
	uint32_t context_wait_ms;    /* GPUSLICE_CONTEXT_WAIT_MS (0..GS_CONTEXT_WAIT_MAX_MS), else GS_CONTEXT_WAIT_MS */
};

/* How long a context's creation waits at most for other members' guesses in
 * flight, while they live (drvmem.h), unless GPUSLICE_CONTEXT_WAIT_MS says. */
#define GS_CONTEXT_WAIT_MS 30000u
#define GS_CONTEXT_WAIT_MAX_MS 600000u

GS_HIDDEN const struct gs_config *gs_config(void);

/* Parses a decimal byte count ("0".."18446744073709551615", no sign, no
 * suffix, no spaces). Returns 0, or -1 for anything else. */
GS_HIDDEN int gs_parse_u64(const char *s, uint64_t *out);

#endif /* GS_CONFIG_H */
