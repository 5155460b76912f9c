/* SPDX-License-Identifier: Apache-2.0
 * Devices -> group GPU slots, by UUID ("GPU-...", or "MIG-..." for a MIG
 * instance: a limit holds per instance), for CUDA ordinals and NVML handles alike. */
#ifndef GS_DEVICE_H
#define GS_DEVICE_H

#include <gpuslice/shm.h>

#include "group.h"
#include "internal.h"

enum { GS_SLOT_UNKNOWN_DEVICE = -1, GS_SLOT_TABLE_FULL = -2 };

/* prefix ("GPU-" or "MIG-", 4 characters) + "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
 * (lower case) from 16 bytes. */
GS_HIDDEN void gs_uuid_format(const char *prefix, const unsigned char b[16], char out[GS_SHM_UUID_LEN]);
/* A CUDA device's UUID string as NVML spells it: its MIG instance's
 * ("MIG-...") when it is one, else its GPU's ("GPU-..."). 0, or -1. */
GS_HIDDEN int gs_cuda_uuid(CUdevice dev, char out[GS_SHM_UUID_LEN]);
/* Its 16 bytes: the MIG device's (*mig = 1) or the GPU's. 0, or -1. */
GS_HIDDEN int gs_cuda_uuid_bytes(CUdevice dev, unsigned char out[16], int *mig);
/* Lower-cases the hex digits of an NVML UUID string in place. */
GS_HIDDEN void gs_uuid_normalize(char *s);
/* The device of the calling thread's current context: 0, or -1 if none. */
GS_HIDDEN int gs_current_device(CUdevice *dev);
/* Slot of a CUDA device (cached per ordinal), or GS_SLOT_*. */
GS_HIDDEN int gs_slot_cuda(struct gs_group *g, CUdevice dev);
/* Slot of an NVML device handle, or GS_SLOT_*. */
GS_HIDDEN int gs_slot_nvml(struct gs_group *g, nvmlDevice_t dev);
/* The group an NVML device's processes are listed from: its device group in
 * a container of several groups, else g (the process's). */
GS_HIDDEN struct gs_group *gs_group_nvml(struct gs_group *g, nvmlDevice_t dev);

#endif /* GS_DEVICE_H */
