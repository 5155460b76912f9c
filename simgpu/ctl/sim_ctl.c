/* SPDX-License-Identifier: Apache-2.0
 * gpuslice-sim-ctl: acts on a running simulation (the state file named by
 * GPUSLICE_SIM_STATE, or the default) the way a failing board would:
 *
 *   gpuslice-sim-ctl xid GPU XID   post an XID critical error event on GPU
 *   gpuslice-sim-ctl lost GPU      GPU's NVML measurements fail (GPU_IS_LOST)
 *   gpuslice-sim-ctl found GPU     they answer again
 *   gpuslice-sim-ctl mig GPU on|off  sets GPU's MIG mode, as nvidia-smi -mig 1|0
 *                                  (pending while a process uses the GPU: exit 3)
 *
 * GPU is a simulator device index or its UUID. Exit 0 done, 1 no usable state
 * file or the change failed, 2 bad arguments, 3 MIG mode pending. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuslice/nvml_abi.h"
#include "state.h"

static int usage(const char *why)
{
	fprintf(stderr,
		"gpuslice-sim-ctl: %s\nusage: gpuslice-sim-ctl xid GPU XID | lost GPU | found GPU | mig GPU on|off "
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

	if (parse_u64(arg, SIM_MAX_GPUS - 1, &i) == 0)
		return i < st->ndev ? (int)i : -1;
	if (sim_parse_uuid(arg, uuid) != 0)
		return -1;
	for (uint32_t d = 0; d < st->ndev && d < SIM_MAX_GPUS; d++)
		if (memcmp(st->dev[d].uuid, uuid, 16) == 0)
			return (int)d;
	return -1;
}

/* As nvidia-smi -i GPU -mig 1|0: the mode is set now, or pending while the GPU is in use. */
static int set_mig(struct sim_state *st, int dev, const char *mode)
{
	nvmlReturn_t activation = NVML_SUCCESS;
	nvmlReturn_t rc = sim_mig_set_mode(st, dev, strcmp(mode, "on") == 0, &activation);

	if (rc == NVML_ERROR_NOT_SUPPORTED) {
		fprintf(stderr, "gpuslice-sim-ctl: GPU %d is not MIG-capable (mig=on|off in its device file)\n", dev);
		return 1;
	}
	if (rc != NVML_SUCCESS) {
		fprintf(stderr, "gpuslice-sim-ctl: setting MIG mode failed (NVML error %d)\n", rc);
		return 1;
	}
	if (activation == NVML_ERROR_IN_USE) {
		fprintf(stderr, "gpuslice-sim-ctl: MIG mode is pending on GPU %d: in use by another process\n", dev);
		return 3;
	}
	return 0;
}

int main(int argc, char **argv)
{
	unsigned long long xid = 0;
	char err[4200];
	int dev, rc = 0;

	if (argc < 3)
		return usage("missing arguments");
	bool is_xid = strcmp(argv[1], "xid") == 0, is_mig = strcmp(argv[1], "mig") == 0;
	if (!is_xid && !is_mig && strcmp(argv[1], "lost") != 0 && strcmp(argv[1], "found") != 0)
		return usage("unknown command");
	if (argc != (is_xid || is_mig ? 4 : 3))
		return usage("wrong number of arguments");
	if (is_mig && strcmp(argv[3], "on") != 0 && strcmp(argv[3], "off") != 0)
		return usage("MIG mode must be on or off");
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
	if (is_mig)
		rc = set_mig(st, dev, argv[3]);
	else if (is_xid)
		rc = sim_event_post(st, (uint32_t)dev, nvmlEventTypeXidCriticalError, xid) == 0 ? 0 : 1;
	else
		sim_set_lost(st, (uint32_t)dev, strcmp(argv[1], "lost") == 0);
	if (rc != 0 && is_xid)
		fprintf(stderr, "gpuslice-sim-ctl: posting the event failed\n");
	sim_state_close(st);
	return rc;
}
