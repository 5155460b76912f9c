/* SPDX-License-Identifier: Apache-2.0
 * Compares our NVML declarations with nvml.h's (nvml_drift.c). */
#include <stdio.h>
#include <string.h>

#include "nvml_drift.h"

int main(void)
{
	int bad = 0, n = 0;
	for (; drift_ours[n].name != NULL; n++) {
		if (strcmp(drift_ours[n].name, drift_nvml[n].name) != 0 || drift_ours[n].value != drift_nvml[n].value) {
			fprintf(stderr, "nvml drift: %s: ours %llu, nvml.h %llu\n", drift_ours[n].name,
				drift_ours[n].value, drift_nvml[n].value);
			bad++;
		}
	}
	if (bad != 0)
		return 1;
	printf("nvml drift: %d sizes, offsets and constants match nvml.h\n", n);
	return 0;
}
