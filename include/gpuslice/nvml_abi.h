/* SPDX-License-Identifier: Apache-2.0
 *
 * Our own declarations of the subset of the NVML ABI (libnvidia-ml.so.1) that
 * gpuslice touches, written from NVIDIA's public documentation.
 */
#ifndef GPUSLICE_NVML_ABI_H
#define GPUSLICE_NVML_ABI_H

#ifdef __cplusplus
extern "C" {
#endif

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_ALREADY_INITIALIZED = 5,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_TIMEOUT = 10,
	NVML_ERROR_LIBRARY_NOT_FOUND = 12,
	NVML_ERROR_FUNCTION_NOT_FOUND = 13,
	NVML_ERROR_GPU_IS_LOST = 15,
	NVML_ERROR_RESET_REQUIRED = 16,
	NVML_ERROR_IN_USE = 19,
	NVML_ERROR_MEMORY = 20,
	NVML_ERROR_NO_DATA = 21,
	NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
	NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
	NVML_ERROR_UNKNOWN = 999,
};

#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16

typedef struct nvmlMemory_st {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
	unsigned int version;
	unsigned long long total;
	unsigned long long reserved;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_v2_t;
#define NVML_STRUCT_VERSION(data, ver) (unsigned int)(sizeof(nvml##data##_v##ver##_t) | ((ver) << 24U))
#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2)

typedef struct nvmlUtilization_st {
	unsigned int gpu;
	unsigned int memory;
} nvmlUtilization_t;

/* nvmlDeviceGetComputeRunningProcesses (v1) */
typedef struct nvmlProcessInfo_v1_st {
	unsigned int pid;
	unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

/* _v2 and _v3 */
typedef struct nvmlProcessInfo_v2_st {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;
typedef nvmlProcessInfo_v2_t nvmlProcessInfo_t;

/* nvmlDeviceGetProcessUtilization */
typedef struct nvmlProcessUtilizationSample_st {
	unsigned int pid;
	unsigned long long timeStamp; /* CPU timestamp, µs */
	unsigned int smUtil;
	unsigned int memUtil;
	unsigned int encUtil;
	unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

/* nvmlDeviceGetProcessesUtilizationInfo (nvmlProcessesUtilizationInfo_v1) */
typedef struct {
	unsigned long long timeStamp; /* CPU timestamp, µs */
	unsigned int pid;
	unsigned int smUtil;
	unsigned int memUtil;
	unsigned int encUtil;
	unsigned int decUtil;
	unsigned int jpgUtil;
	unsigned int ofaUtil;
} nvmlProcessUtilizationInfo_v1_t;

typedef struct {
	unsigned int version;
	unsigned int processSamplesCount; /* in: the array's size; out: the samples */
	unsigned long long lastSeenTimeStamp;
	nvmlProcessUtilizationInfo_v1_t *procUtilArray;
} nvmlProcessesUtilizationInfo_v1_t;
typedef nvmlProcessesUtilizationInfo_v1_t nvmlProcessesUtilizationInfo_t;
#define nvmlProcessesUtilizationInfo_v1 NVML_STRUCT_VERSION(ProcessesUtilizationInfo, 1)

/* nvmlDeviceGetRunningProcessDetailList (nvmlProcessDetailList_v1); mode:
 * 0 compute, 1 graphics, 2 MPS compute. */
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
	unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessDetail_v1_t;

typedef struct {
	unsigned int version;
	unsigned int mode;
	unsigned int numProcArrayEntries; /* in: the array's size; out: the processes */
	nvmlProcessDetail_v1_t *procArray;
} nvmlProcessDetailList_v1_t;
typedef nvmlProcessDetailList_v1_t nvmlProcessDetailList_t;
#define nvmlProcessDetailList_v1 NVML_STRUCT_VERSION(ProcessDetailList, 1)
enum { GS_NVML_PROC_COMPUTE = 0, GS_NVML_PROC_GRAPHICS = 1, GS_NVML_PROC_MPS = 2 };

/* nvmlDeviceGetAccountingStats */
typedef struct nvmlAccountingStats_st {
	unsigned int gpuUtilization;
	unsigned int memoryUtilization;
	unsigned long long maxMemoryUsage;
	unsigned long long time;      /* ms */
	unsigned long long startTime; /* CPU timestamp, µs */
	unsigned int isRunning;
	unsigned int reserved[5];
} nvmlAccountingStats_t;

typedef struct nvmlPciInfo_st {
	char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
	unsigned int domain;
	unsigned int bus;
	unsigned int device;
	unsigned int pciDeviceId;
	unsigned int pciSubSystemId;
	char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

/* Events (nvmlEventSetCreate, nvmlDeviceRegisterEvents, nvmlEventSetWait_v2). */
typedef struct nvmlEventSet_st *nvmlEventSet_t;
#define nvmlEventTypeSingleBitEccError 0x0000000000000001ULL
#define nvmlEventTypeDoubleBitEccError 0x0000000000000002ULL
#define nvmlEventTypeXidCriticalError 0x0000000000000008ULL

typedef struct nvmlEventData_st {
	nvmlDevice_t device;
	unsigned long long eventType;
	unsigned long long eventData; /* the XID for nvmlEventTypeXidCriticalError */
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlEventData_t;

/* Multi-Instance GPU (nvml.h's nvmlMultiInstanceGPU group). */
#define NVML_DEVICE_MIG_DISABLE 0x0
#define NVML_DEVICE_MIG_ENABLE 0x1
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE 0x0
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE 0x1
#define NVML_GPU_INSTANCE_PROFILE_3_SLICE 0x2
#define NVML_GPU_INSTANCE_PROFILE_4_SLICE 0x3
#define NVML_GPU_INSTANCE_PROFILE_7_SLICE 0x4
#define NVML_GPU_INSTANCE_PROFILE_8_SLICE 0x5
#define NVML_GPU_INSTANCE_PROFILE_6_SLICE 0x6
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 0x7
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 0x8
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 0x9
#define NVML_GPU_INSTANCE_PROFILE_COUNT 0x11
#define NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE 0x0
#define NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE 0x1
#define NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE 0x2
#define NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE 0x3
#define NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE 0x4
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT 0x8
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0x0
#define NVML_GPU_INSTANCE_PROFILE_CAPS_P2P 0x1

typedef struct nvmlGpuInstance_st *nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st *nvmlComputeInstance_t;

typedef struct nvmlGpuInstancePlacement_st {
	unsigned int start; /* first memory slice */
	unsigned int size;  /* memory slices */
} nvmlGpuInstancePlacement_t;

typedef struct nvmlGpuInstanceProfileInfo_st {
	unsigned int id;
	unsigned int isP2pSupported;
	unsigned int sliceCount;
	unsigned int instanceCount;
	unsigned int multiprocessorCount;
	unsigned int copyEngineCount;
	unsigned int decoderCount;
	unsigned int encoderCount;
	unsigned int jpegCount;
	unsigned int ofaCount;
	unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct nvmlGpuInstanceProfileInfo_v2_st {
	unsigned int version;
	unsigned int id;
	unsigned int isP2pSupported;
	unsigned int sliceCount;
	unsigned int instanceCount;
	unsigned int multiprocessorCount;
	unsigned int copyEngineCount;
	unsigned int decoderCount;
	unsigned int encoderCount;
	unsigned int jpegCount;
	unsigned int ofaCount;
	unsigned long long memorySizeMB;
	char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlGpuInstanceProfileInfo_v2_t;
#define nvmlGpuInstanceProfileInfo_v2 NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2)

typedef struct nvmlGpuInstanceProfileInfo_v3_st {
	unsigned int version;
	unsigned int id;
	unsigned int sliceCount;
	unsigned int instanceCount;
	unsigned int multiprocessorCount;
	unsigned int copyEngineCount;
	unsigned int decoderCount;
	unsigned int encoderCount;
	unsigned int jpegCount;
	unsigned int ofaCount;
	unsigned long long memorySizeMB;
	char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
	unsigned int capabilities;
} nvmlGpuInstanceProfileInfo_v3_t;
#define nvmlGpuInstanceProfileInfo_v3 NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 3)

typedef struct nvmlGpuInstanceInfo_st {
	nvmlDevice_t device;
	unsigned int id;
	unsigned int profileId;
	nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct nvmlComputeInstancePlacement_st {
	unsigned int start; /* first compute slice within the GPU instance */
	unsigned int size;
} nvmlComputeInstancePlacement_t;

typedef struct nvmlComputeInstanceProfileInfo_st {
	unsigned int id;
	unsigned int sliceCount;
	unsigned int instanceCount;
	unsigned int multiprocessorCount;
	unsigned int sharedCopyEngineCount;
	unsigned int sharedDecoderCount;
	unsigned int sharedEncoderCount;
	unsigned int sharedJpegCount;
	unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

typedef struct nvmlComputeInstanceProfileInfo_v2_st {
	unsigned int version;
	unsigned int id;
	unsigned int sliceCount;
	unsigned int instanceCount;
	unsigned int multiprocessorCount;
	unsigned int sharedCopyEngineCount;
	unsigned int sharedDecoderCount;
	unsigned int sharedEncoderCount;
	unsigned int sharedJpegCount;
	unsigned int sharedOfaCount;
	char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlComputeInstanceProfileInfo_v2_t;
#define nvmlComputeInstanceProfileInfo_v2 NVML_STRUCT_VERSION(ComputeInstanceProfileInfo, 2)

typedef struct nvmlComputeInstanceProfileInfo_v3_st {
	unsigned int version;
	unsigned int id;
	unsigned int sliceCount;
	unsigned int instanceCount;
	unsigned int multiprocessorCount;
	unsigned int sharedCopyEngineCount;
	unsigned int sharedDecoderCount;
	unsigned int sharedEncoderCount;
	unsigned int sharedJpegCount;
	unsigned int sharedOfaCount;
	char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
	unsigned int capabilities;
} nvmlComputeInstanceProfileInfo_v3_t;
#define nvmlComputeInstanceProfileInfo_v3 NVML_STRUCT_VERSION(ComputeInstanceProfileInfo, 3)

typedef struct nvmlComputeInstanceInfo_st {
	nvmlDevice_t device;
	nvmlGpuInstance_t gpuInstance;
	unsigned int id;
	unsigned int profileId;
	nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

#ifdef __cplusplus
}
#endif
#endif /* GPUSLICE_NVML_ABI_H */
