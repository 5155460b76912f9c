/* SPDX-License-Identifier: Apache-2.0
 * Device queries: an H100-like device (cc 9.0) with the configured SMs/memory. */
#include <stdio.h>
#include <string.h>

#include "cuapi.h"
#include "sim.h"

#define DEV_OR_RETURN(idx, d)                             \
	do {                                              \
		CUresult rc_ = sim_check_init();          \
		if (rc_ != CUDA_SUCCESS)                  \
			return rc_;                       \
		(idx) = sim_device(d);                    \
		if ((idx) < 0)                            \
			return CUDA_ERROR_INVALID_DEVICE; \
	} while (0)

struct attr_value {
	int attr;
	int value;
};

/* Attributes not listed answer 0 (like an unsupported feature). */
static const struct attr_value attrs[] = {
	{CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
	{CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024},
	{CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024},
	{CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
	{CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647},
	{CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535},
	{CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535},
	{CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152},
	{CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536},
	{CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
	{CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2147483647},
	{CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536},
	{CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1980000},
	{CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512},
	{CU_DEVICE_ATTRIBUTE_GPU_OVERLAP, 1},
	{CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
	{CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1},
	{CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 1},
	{CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 2619000},
	{CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 5120},
	{CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 52428800},
	{CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048},
	{CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 3},
	{CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
	{CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
	{CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
	{CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1},
	{CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1},
	{CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1},
	{CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448},
	{CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
	{CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1},
	{78, 1},      /* STREAM_PRIORITIES_SUPPORTED */
	{79, 1},      /* GLOBAL_L1_CACHE_SUPPORTED */
	{80, 1},      /* LOCAL_L1_CACHE_SUPPORTED */
	{81, 233472}, /* MAX_SHARED_MEMORY_PER_MULTIPROCESSOR */
	{82, 65536},  /* MAX_REGISTERS_PER_MULTIPROCESSOR */
	{90, 1},      /* COMPUTE_PREEMPTION_SUPPORTED */
	{103, 1},     /* HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED */
	{106, 32},    /* MAX_BLOCKS_PER_MULTIPROCESSOR */
	{119, 1},     /* MEMPOOL_SUPPORTED_HANDLE_TYPES: posix fd */
};

SIM_API CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (d == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (sim_device(ordinal) < 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*d = ordinal;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetCount(int *n)
{
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (n == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*n = sim_rescan_devices();
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	int i;

	DEV_OR_RETURN(i, d);
	if (name == NULL || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(name, (size_t)len, "%s", sim_g.st->dev[i].name);
	return CUDA_SUCCESS;
}

/* A MIG device's GPU (its PCI function, its UUID for cuDeviceGetUuid) and
 * compute instance; false for a whole GPU. */
static bool mig_device(int i, CUdevice d, int *gpu, const struct sim_mig_gi **gi, struct sim_mig_ci **ci)
{
	int c = sim_device_ci(d);
	if (c < 0 || !sim_mig_slot_owner(sim_g.st, i, gpu, gi))
		return false;
	*ci = sim_mig_ci_by_id((struct sim_mig_gi *)*gi, (unsigned)c);
	return *ci != NULL;
}

/* The GPU whose PCI function a device is: a MIG device's parent. */
static int pci_index(int i)
{
	int gpu;
	return sim_mig_slot_owner(sim_g.st, i, &gpu, NULL) ? gpu : i;
}

/* cuDeviceGetUuid and its _v2 answer alike, but for a MIG device: v1 names
 * its GPU, v2 the MIG device (its compute instance), as the driver does. */
static CUresult device_uuid(CUuuid *u, CUdevice d, bool own)
{
	const struct sim_mig_gi *gi;
	struct sim_mig_ci *ci;
	int i, gpu;

	DEV_OR_RETURN(i, d);
	if (u == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!mig_device(i, d, &gpu, &gi, &ci))
		memcpy(u->bytes, sim_g.st->dev[i].uuid, 16);
	else
		memcpy(u->bytes, own ? ci->uuid : sim_g.st->dev[gpu].uuid, 16);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d)
{
	return device_uuid(u, d, false);
}

SIM_API CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d)
{
	return device_uuid(u, d, true);
}

SIM_API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice d)
{
	uint64_t t;
	int i;

	DEV_OR_RETURN(i, d);
	if (bytes == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	t = sim_g.st->dev[i].total;
	*bytes = t > 0xffffffffull ? 0xffffffffu : (unsigned int)t;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d)
{
	int i;

	DEV_OR_RETURN(i, d);
	if (bytes == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*bytes = (size_t)sim_g.st->dev[i].total;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
	int i;

	DEV_OR_RETURN(i, d);
	if (v == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*v = 0;
	const struct sim_mig_gi *gi;
	struct sim_mig_ci *ci;
	int gpu;
	if (a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) {
		*v = (int)(mig_device(i, d, &gpu, &gi, &ci) ? sim_mig_ci_sms(sim_g.st, gi, ci->profile)
							    : sim_g.st->dev[i].sms);
	} else if (a == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID) {
		*v = pci_index(i) + 1;
	} else {
		for (size_t k = 0; k < sizeof(attrs) / sizeof(attrs[0]); k++)
			if (attrs[k].attr == (int)a)
				*v = attrs[k].value;
	}
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice d)
{
	int i;

	DEV_OR_RETURN(i, d);
	if (major == NULL || minor == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*major = 9;
	*minor = 0;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d)
{
	int i;

	DEV_OR_RETURN(i, d);
	if (id == NULL || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(id, (size_t)len, "0000:%02x:00.0", pci_index(i) + 1);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetByPCIBusId(CUdevice *d, const char *id)
{
	unsigned dom, bus, dv, fn;
	CUresult rc = sim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (d == NULL || id == NULL || sscanf(id, "%x:%x:%x.%x", &dom, &bus, &dv, &fn) != 4)
		return CUDA_ERROR_INVALID_VALUE;
	for (int o = 0, n = atomic_load(&sim_g.nvis); o < n; o++)
		if (dom == 0 && dv == 0 && fn == 0 && bus == (unsigned)pci_index(sim_g.vis[o]) + 1) {
			*d = o;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_DEVICE;
}

SIM_API CUresult cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice peer)
{
	int i, j;

	DEV_OR_RETURN(i, d);
	DEV_OR_RETURN(j, peer);
	if (can == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*can = i != j;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetP2PAttribute(int *v, CUdevice_P2PAttribute a, CUdevice s, CUdevice d)
{
	int i, j;

	DEV_OR_RETURN(i, s);
	DEV_OR_RETURN(j, d);
	if (v == NULL || i == j)
		return CUDA_ERROR_INVALID_DEVICE;
	*v = a == 1 /* PERFORMANCE_RANK */ ? 0 : 1;
	return CUDA_SUCCESS;
}
