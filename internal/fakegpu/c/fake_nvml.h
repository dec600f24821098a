/*
 * The part of NVML's ABI (nvml.h, driver 550+) that libnvidia-ml.so.1's fake implements:
 * the types and constants of the calls Fathom's GPU-state reader makes through go-nvml.
 * Layouts and values follow NVIDIA's header, so the real go-nvml binding loads the fake.
 */
#ifndef FAKEGPU_NVML_H
#define FAKEGPU_NVML_H

#define FAKEGPU_API __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_TIMEOUT = 10,
	NVML_ERROR_UNKNOWN = 999,
};

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16

typedef struct {
	char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
	unsigned int domain;
	unsigned int bus;
	unsigned int device;
	unsigned int pciDeviceId;
	unsigned int pciSubSystemId;
	char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_t;

typedef struct {
	unsigned int gpu;
	unsigned int memory;
} nvmlUtilization_t;

/* nvmlProcessInfo_v2_t, which the _v3 running-process calls fill. */
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
	nvmlDevice_t device;
	unsigned long long eventType;
	unsigned long long eventData;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlEventData_t;

enum { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_CLOCK_VIDEO = 3 };
enum { NVML_TEMPERATURE_GPU = 0 };
enum { NVML_MEMORY_ERROR_TYPE_CORRECTED = 0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 };
enum { NVML_VOLATILE_ECC = 0, NVML_AGGREGATE_ECC = 1 };

/* Clock event (throttle) reasons, a bit mask. */
#define FAKENVML_REASON_GPU_IDLE 0x1ULL
#define FAKENVML_REASON_SW_POWER_CAP 0x4ULL
#define FAKENVML_REASON_HW_SLOWDOWN 0x8ULL
#define FAKENVML_REASON_SW_THERMAL 0x20ULL
#define FAKENVML_REASON_HW_THERMAL 0x40ULL
#define FAKENVML_REASON_HW_POWER_BRAKE 0x80ULL

#define FAKENVML_EVENT_XID 0x8ULL

#endif
