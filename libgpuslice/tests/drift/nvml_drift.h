/* SPDX-License-Identifier: Apache-2.0 */
#ifndef GS_NVML_DRIFT_H
#define GS_NVML_DRIFT_H
struct drift_row {
	const char *name;
	unsigned long long value;
};
extern const struct drift_row drift_ours[], drift_nvml[];
#endif
