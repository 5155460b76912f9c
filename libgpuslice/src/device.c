/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <string.h>

#include "device.h"

#define CACHED_ORDINALS 64

/* slot + 1 per CUDA ordinal; 0 = not looked up yet. Ordinal -> UUID is fixed
 * for the life of a process. */
static _Atomic int cuda_slot_cache[CACHED_ORDINALS];

GS_HIDDEN void gs_uuid_format(const char *prefix, const unsigned char b[16], char out[GS_SHM_UUID_LEN])
{
	static const char hex[] = "0123456789abcdef";
	char *o = out;
	memcpy(o, prefix, 4);
	o += 4;
	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*o++ = '-';
		*o++ = hex[b[i] >> 4];
		*o++ = hex[b[i] & 15];
	}
	*o = '\0';
}

GS_HIDDEN void gs_uuid_normalize(char *s)
{
	for (; *s; s++)
		if (*s >= 'A' && *s <= 'F')
			*s = (char)(*s - 'A' + 'a');
}

GS_HIDDEN int gs_current_device(CUdevice *dev)
{
	gs_fn_cuCtxGetDevice fn = GS_REAL(cuCtxGetDevice);
	int saved = errno;
	int rc = fn != NULL && fn(dev) == CUDA_SUCCESS ? 0 : -1;
	errno = saved;
	return rc;
}

GS_HIDDEN int gs_cuda_uuid_bytes(CUdevice dev, unsigned char out[16], int *mig)
{
	gs_fn_cuDeviceGetUuid v1 = GS_REAL(cuDeviceGetUuid);
	gs_fn_cuDeviceGetUuid_v2 v2 = (gs_fn_cuDeviceGetUuid_v2)gs_real_peek(GS_ID_cuDeviceGetUuid_v2);
	CUuuid gpu, own;
	int saved = errno;
	int ok = v1 != NULL && v1(&gpu, dev) == CUDA_SUCCESS;
	*mig = ok && v2 != NULL && v2(&own, dev) == CUDA_SUCCESS && memcmp(gpu.bytes, own.bytes, 16) != 0;
	errno = saved;
	if (!ok)
		return -1;
	/* Under MIG, v1 names the parent GPU and v2 the instance the device is. */
	memcpy(out, *mig ? own.bytes : gpu.bytes, 16);
	return 0;
}

GS_HIDDEN int gs_cuda_uuid(CUdevice dev, char out[GS_SHM_UUID_LEN])
{
	unsigned char b[16];
	int mig;
	if (gs_cuda_uuid_bytes(dev, b, &mig) != 0)
		return -1;
	gs_uuid_format(mig ? "MIG-" : "GPU-", b, out);
	return 0;
}

static int slot_for_uuid(struct gs_group *g, const char *uuid)
{
	int slot = gs_group_gpu(g, uuid);
	return slot >= 0 ? slot : GS_SLOT_TABLE_FULL;
}

GS_HIDDEN int gs_slot_cuda(struct gs_group *g, CUdevice dev)
{
	if (dev >= 0 && dev < CACHED_ORDINALS) {
		int cached = atomic_load_explicit(&cuda_slot_cache[dev], memory_order_relaxed);
		if (cached > 0)
			return cached - 1;
	}
	char uuid[GS_SHM_UUID_LEN];
	if (gs_cuda_uuid(dev, uuid) != 0)
		return GS_SLOT_UNKNOWN_DEVICE;
	int slot = slot_for_uuid(g, uuid);
	if (slot >= 0 && dev >= 0 && dev < CACHED_ORDINALS)
		atomic_store_explicit(&cuda_slot_cache[dev], slot + 1, memory_order_relaxed);
	return slot;
}

GS_HIDDEN int gs_slot_nvml(struct gs_group *g, nvmlDevice_t dev)
{
	gs_fn_nvmlDeviceGetUUID fn = GS_REAL(nvmlDeviceGetUUID);
	char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	int saved = errno;
	int ok = fn != NULL && fn(dev, uuid, sizeof(uuid)) == NVML_SUCCESS;
	errno = saved;
	if (!ok)
		return GS_SLOT_UNKNOWN_DEVICE;
	uuid[sizeof(uuid) - 1] = '\0';
	if (strlen(uuid) >= GS_SHM_UUID_LEN)
		return GS_SLOT_UNKNOWN_DEVICE;
	gs_uuid_normalize(uuid);
	return slot_for_uuid(g, uuid);
}

GS_HIDDEN struct gs_group *gs_group_nvml(struct gs_group *g, nvmlDevice_t dev)
{
	if (!gs_group_in_container())
		return g;
	int slot = gs_slot_nvml(g, dev);
	return slot >= 0 ? gs_group_of(slot) : g;
}
