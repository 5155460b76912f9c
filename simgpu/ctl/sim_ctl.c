/* SPDX-License-Identifier: Apache-2.0
 * gpuslice-sim-ctl: acts on a running simulation (the state file named by
 * GPUSLICE_SIM_STATE, or the default) the way a failing board would:
 *
 *   gpuslice-sim-ctl xid GPU XID   post an XID critical error event on GPU
 *   gpuslice-sim-ctl lost GPU      GPU's NVML measurements fail (GPU_IS_LOST)
 *   gpuslice-sim-ctl found GPU     they answer again
 *
 * GPU is a simulator device index or its UUID. Exit 0 done, 1 no usable state
 * file, 2 bad arguments. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuslice/nvml_abi.h"
#include "state.h"

static int usage(const char *why)
{
	fprintf(stderr,
		"gpuslice-sim-ctl: %s\nusage: gpuslice-sim-ctl xid GPU XID | lost GPU | found GPU "
		"(GPU: index or UUID)\n",
		why);
	return 2;
}

static int parse_u64(const char *s, unsigned long long max, unsigned long long *out)
{
	char *end;

	if (s[0] < '0' || s[0] > '9')
		return -1;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return errno != 0 || *end != '\0' || *out > max ? -1 : 0;
}

/* Device index of an index or UUID argument, or -1. */
static int device_of(const struct sim_state *st, const char *arg)
{
	unsigned char uuid[16];
	unsigned long long i;

	if (parse_u64(arg, SIM_MAX_DEVICES - 1, &i) == 0)
		return i < st->ndev ? (int)i : -1;
	if (sim_parse_uuid(arg, uuid) != 0)
		return -1;
	for (uint32_t d = 0; d < st->ndev && d < SIM_MAX_DEVICES; d++)
		if (memcmp(st->dev[d].uuid, uuid, 16) == 0)
			return (int)d;
	return -1;
}

int main(int argc, char **argv)
{
	unsigned long long xid = 0;
	char err[4200];
	int dev, rc = 0;

	if (argc < 3)
		return usage("missing arguments");
	bool is_xid = strcmp(argv[1], "xid") == 0;
	if (!is_xid && strcmp(argv[1], "lost") != 0 && strcmp(argv[1], "found") != 0)
		return usage("unknown command");
	if (argc != (is_xid ? 4 : 3))
		return usage("wrong number of arguments");
	if (is_xid && parse_u64(argv[3], UINT32_MAX, &xid) != 0)
		return usage("XID must be a number");
	struct sim_state *st = sim_state_attach(err, sizeof(err));
	if (st == NULL) {
		fprintf(stderr, "gpuslice-sim-ctl: %s\n", err);
		return 1;
	}
	if ((dev = device_of(st, argv[2])) < 0) {
		sim_state_close(st);
		return usage("no such GPU in the simulation");
	}
	if (is_xid)
		rc = sim_event_post(st, (uint32_t)dev, nvmlEventTypeXidCriticalError, xid) == 0 ? 0 : 1;
	else
		sim_set_lost(st, (uint32_t)dev, strcmp(argv[1], "lost") == 0);
	if (rc != 0)
		fprintf(stderr, "gpuslice-sim-ctl: posting the event failed\n");
	sim_state_close(st);
	return rc;
}
