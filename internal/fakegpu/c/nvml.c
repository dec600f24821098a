/*
 * libnvidia-ml.so.1: the NVML calls Fathom's GPU-state reader makes, answered from a
 * board directory that stands for the node's GPUs, so tests and the fake device can
 * throttle a GPU, train its link down, wear its memory or raise an XID.
 *
 * FAKEGPU_BOARD names the directory (no board: nvmlInit succeeds and finds no GPU, as
 * on a node whose driver sees none). In it:
 *   gpu<N>        one GPU per file, N = 0, 1, ... without gaps: "key=value" lines, read
 *                 again on every call, so a test changes a GPU by rewriting its file.
 *                 Keys and defaults (an H100 SXM at rest) are in read_gpu below.
 *   gpu<N>.procs/ one file per process with a context on the GPU, named by its pid,
 *                 holding the device memory it uses in bytes (empty: 0).
 *   gpu<N>.xid    appended lines "XID [DATA]": each is one critical-error event for the
 *                 event sets that registered the GPU, delivered in order once.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_nvml.h"

#define MAX_GPUS 16
#define MAX_EVENT_SETS 16

static __attribute__((noinline)) void enter(void) { __asm__ volatile("" ::: "memory"); }

struct nvmlDevice_st {
	unsigned int index;
};

struct gpu {
	char uuid[96], bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE], name[96];
	unsigned int sm_clock, sm_clock_max, mem_clock, mem_clock_max;
	unsigned long long reasons;
	unsigned int power_mw, power_limit_mw, temperature_c, util_gpu, util_memory;
	unsigned long long memory_total, memory_used;
	unsigned int pcie_gen, pcie_gen_max, pcie_width, pcie_width_max, pcie_replays;
	unsigned long long ecc_corrected, ecc_uncorrected;
	unsigned int remapped_correctable, remapped_uncorrectable, remap_pending, remap_failed;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized; /* nvmlInit calls not yet matched by nvmlShutdown */
static struct nvmlDevice_st handles[MAX_GPUS];

static const char *board(void)
{
	const char *b = getenv("FAKEGPU_BOARD");
	return b && *b ? b : NULL;
}

static unsigned int gpu_count(void)
{
	const char *b = board();
	unsigned int n = 0;
	char path[4096];
	while (b && n < MAX_GPUS) {
		snprintf(path, sizeof path, "%s/gpu%u", b, n);
		if (access(path, R_OK) != 0)
			break;
		n++;
	}
	return n;
}

static const struct {
	const char *name;
	unsigned long long bit;
} reason_names[] = {
	{"gpu_idle", FAKENVML_REASON_GPU_IDLE},       {"sw_power_cap", FAKENVML_REASON_SW_POWER_CAP},
	{"hw_slowdown", FAKENVML_REASON_HW_SLOWDOWN}, {"sw_thermal", FAKENVML_REASON_SW_THERMAL},
	{"hw_thermal", FAKENVML_REASON_HW_THERMAL},   {"hw_power_brake", FAKENVML_REASON_HW_POWER_BRAKE},
};

static unsigned long long parse_reasons(char *v)
{
	unsigned long long mask = 0;
	for (char *save = NULL, *tok = strtok_r(v, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
		for (size_t i = 0; i < sizeof reason_names / sizeof reason_names[0]; i++)
			if (strcmp(tok, reason_names[i].name) == 0)
				mask |= reason_names[i].bit;
	return mask;
}

/* read_gpu fills g from gpu<index>; 0 on success, -1 when the GPU is gone. */
static int read_gpu(unsigned int index, struct gpu *g)
{
	*g = (struct gpu){
		.sm_clock = 1980, .sm_clock_max = 1980, .mem_clock = 2619, .mem_clock_max = 2619,
		.power_mw = 350000, .power_limit_mw = 700000, .temperature_c = 45,
		.memory_total = 80ULL << 30, .pcie_gen = 5, .pcie_gen_max = 5, .pcie_width = 16, .pcie_width_max = 16,
	};
	snprintf(g->uuid, sizeof g->uuid, "GPU-fa7a0000-0000-4000-8000-%012x", index);
	snprintf(g->bus_id, sizeof g->bus_id, "00000000:%02X:00.0", 0x18 + index * 0x10);
	snprintf(g->name, sizeof g->name, "NVIDIA H100 80GB HBM3");

	const char *b = board();
	if (!b)
		return -1;
	char path[4096], line[512];
	snprintf(path, sizeof path, "%s/gpu%u", b, index);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\r\n")] = 0;
		char *v = strchr(line, '=');
		if (!v || line[0] == '#')
			continue;
		*v++ = 0;
		unsigned long long n = strtoull(v, NULL, 0);
#define UINT_KEY(k)                                                                                                    \
	else if (strcmp(line, #k) == 0) g->k = (unsigned int)n
#define ULL_KEY(k)                                                                                                     \
	else if (strcmp(line, #k) == 0) g->k = n
#define STR_KEY(k)                                                                                                     \
	else if (strcmp(line, #k) == 0) snprintf(g->k, sizeof g->k, "%s", v)
		if (strcmp(line, "clock_event_reasons") == 0)
			g->reasons = parse_reasons(v);
		UINT_KEY(sm_clock); UINT_KEY(sm_clock_max); UINT_KEY(mem_clock); UINT_KEY(mem_clock_max);
		UINT_KEY(power_mw); UINT_KEY(power_limit_mw); UINT_KEY(temperature_c);
		UINT_KEY(util_gpu); UINT_KEY(util_memory);
		ULL_KEY(memory_total); ULL_KEY(memory_used);
		UINT_KEY(pcie_gen); UINT_KEY(pcie_gen_max); UINT_KEY(pcie_width); UINT_KEY(pcie_width_max);
		UINT_KEY(pcie_replays);
		ULL_KEY(ecc_corrected); ULL_KEY(ecc_uncorrected);
		UINT_KEY(remapped_correctable); UINT_KEY(remapped_uncorrectable);
		UINT_KEY(remap_pending); UINT_KEY(remap_failed);
		STR_KEY(uuid); STR_KEY(bus_id); STR_KEY(name);
#undef UINT_KEY
#undef ULL_KEY
#undef STR_KEY
	}
	fclose(f);
	return 0;
}

/* with_gpu checks the library state and the handle and reads the GPU behind it. */
static nvmlReturn_t with_gpu(nvmlDevice_t device, struct gpu *g)
{
	pthread_mutex_lock(&lock);
	int ok = initialized > 0;
	pthread_mutex_unlock(&lock);
	if (!ok)
		return NVML_ERROR_UNINITIALIZED;
	if (!device || device < handles || device >= handles + MAX_GPUS)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (read_gpu(device->index, g) != 0)
		return NVML_ERROR_NOT_FOUND; /* removed since the handle was taken */
	return NVML_SUCCESS;
}

#define GPU_OR_RETURN(device, g)                                                                                       \
	struct gpu g;                                                                                                  \
	do {                                                                                                           \
		nvmlReturn_t r_ = with_gpu(device, &g);                                                                \
		if (r_ != NVML_SUCCESS)                                                                                \
			return r_;                                                                                     \
	} while (0)

static nvmlReturn_t copy_string(const char *s, char *out, unsigned int length)
{
	if (!out)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(s) + 1 > length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(out, s, strlen(s) + 1);
	return NVML_SUCCESS;
}

FAKEGPU_API nvmlReturn_t nvmlInit_v2(void)
{
	enter();
	pthread_mutex_lock(&lock);
	for (unsigned int i = 0; i < MAX_GPUS; i++)
		handles[i].index = i;
	initialized++;
	pthread_mutex_unlock(&lock);
	return NVML_SUCCESS;
}

FAKEGPU_API nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

FAKEGPU_API nvmlReturn_t nvmlShutdown(void)
{
	enter();
	pthread_mutex_lock(&lock);
	nvmlReturn_t r = initialized > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
	if (initialized > 0)
		initialized--;
	pthread_mutex_unlock(&lock);
	return r;
}

FAKEGPU_API const char *nvmlErrorString(nvmlReturn_t result)
{
	enter();
	switch (result) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_TIMEOUT: return "Timeout";
	default: return "Unknown Error";
	}
}

FAKEGPU_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	enter();
	return copy_string("550.90.07-fakegpu", version, length);
}

FAKEGPU_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	enter();
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	pthread_mutex_lock(&lock);
	int ok = initialized > 0;
	pthread_mutex_unlock(&lock);
	if (!ok)
		return NVML_ERROR_UNINITIALIZED;
	*count = gpu_count();
	return NVML_SUCCESS;
}

FAKEGPU_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	enter();
	if (!device || index >= MAX_GPUS)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct gpu g;
	nvmlReturn_t r = with_gpu(&handles[index], &g);
	if (r == NVML_ERROR_NOT_FOUND)
		return NVML_ERROR_INVALID_ARGUMENT; /* as NVML answers an index past the count */
	if (r == NVML_SUCCESS)
		*device = &handles[index];
	return r;
}

FAKEGPU_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
	enter();
	GPU_OR_RETURN(device, g);
	if (!index)
		return NVML_ERROR_INVALID_ARGUMENT;
	*index = device->index;
	return NVML_SUCCESS;
}

FAKEGPU_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	enter();
	GPU_OR_RETURN(device, g);
	return copy_string(g.uuid, uuid, length);
}

FAKEGPU_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	enter();
	GPU_OR_RETURN(device, g);
	return copy_string(g.name, name, length);
}

FAKEGPU_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	enter();
	GPU_OR_RETURN(device, g);
	if (!pci)
		return NVML_ERROR_INVALID_ARGUMENT;
	memset(pci, 0, sizeof *pci);
	unsigned int domain = 0, bus = 0, dev = 0;
	sscanf(g.bus_id, "%x:%x:%x", &domain, &bus, &dev);
	pci->domain = domain;
	pci->bus = bus;
	pci->device = dev;
	pci->pciDeviceId = 0x233010de; /* H100 SXM5, NVIDIA's vendor id */
	snprintf(pci->busId, sizeof pci->busId, "%s", g.bus_id);
	snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", domain & 0xffff, bus, dev);
	return NVML_SUCCESS;
}

static nvmlReturn_t clock_of(const struct gpu *g, int type, int max, unsigned int *clock)
{
	if (!clock)
		return NVML_ERROR_INVALID_ARGUMENT;
	switch (type) {
	case NVML_CLOCK_GRAPHICS:
	case NVML_CLOCK_SM: *clock = max ? g->sm_clock_max : g->sm_clock; return NVML_SUCCESS;
	case NVML_CLOCK_MEM: *clock = max ? g->mem_clock_max : g->mem_clock; return NVML_SUCCESS;
	default: return NVML_ERROR_NOT_SUPPORTED;
	}
}

FAKEGPU_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock)
{
	enter();
	GPU_OR_RETURN(device, g);
	return clock_of(&g, type, 0, clock);
}

FAKEGPU_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, int type, unsigned int *clock)
{
	enter();
	GPU_OR_RETURN(device, g);
	return clock_of(&g, type, 1, clock);
}

FAKEGPU_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
	enter();
	GPU_OR_RETURN(device, g);
	if (!reasons)
		return NVML_ERROR_INVALID_ARGUMENT;
	*reasons = g.reasons;
	return NVML_SUCCESS;
}

/* The name drivers before 535 export for the same call. */
FAKEGPU_API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons)
{
	return nvmlDeviceGetCurrentClocksEventReasons(device, reasons);
}

FAKEGPU_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
	enter();
	GPU_OR_RETURN(device, g);
	if (!power)
		return NVML_ERROR_INVALID_ARGUMENT;
	*power = g.power_mw;
	return NVML_SUCCESS;
}

FAKEGPU_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
	enter();
	GPU_OR_RETURN(device, g);
	if (!limit)
		return NVML_ERROR_INVALID_ARGUMENT;
	*limit = g.power_limit_mw;
	return NVML_SUCCESS;
}

FAKEGPU_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp)
{
	enter();
	GPU_OR_RETURN(device, g);
	if (!temp)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (sensor != NVML_TEMPERATURE_GPU)
		return NVML_ERROR_NOT_SUPPORTED;
	*temp = g.temperature_c;
	return NVML_SUCCESS;
}

FAKEGPU_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u)
{
	enter();
	GPU_OR_RETURN(device, g);
	if (!u)
		return NVML_ERROR_INVALID_ARGUMENT;
	u->gpu = g.util_gpu;
	u->memory = g.util_memory;
	return NVML_SUCCESS;
}

FAKEGPU_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *m)
{
	enter();
	GPU_OR_RETURN(device, g);
	if (!m)
		return NVML_ERROR_INVALID_ARGUMENT;
	m->total = g.memory_total;
	m->used = g.memory_used < g.memory_total ? g.memory_used : g.memory_total;
	m->free = m->total - m->used;
	return NVML_SUCCESS;
}

#define UINT_GETTER(fn, field)                                                                                         \
	FAKEGPU_API nvmlReturn_t fn(nvmlDevice_t device, unsigned int *out)                                            \
	{                                                                                                              \
		enter();                                                                                               \
		GPU_OR_RETURN(device, g);                                                                              \
		if (!out)                                                                                              \
			return NVML_ERROR_INVALID_ARGUMENT;                                                            \
		*out = g.field;                                                                                        \
		return NVML_SUCCESS;                                                                                   \
	}
UINT_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, pcie_gen)
UINT_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, pcie_gen_max)
UINT_GETTER(nvmlDeviceGetCurrPcieLinkWidth, pcie_width)
UINT_GETTER(nvmlDeviceGetMaxPcieLinkWidth, pcie_width_max)
UINT_GETTER(nvmlDeviceGetPcieReplayCounter, pcie_replays)
#undef UINT_GETTER

FAKEGPU_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType,
						     unsigned long long *count)
{
	enter();
	GPU_OR_RETURN(device, g);
	if (!count || (counterType != NVML_VOLATILE_ECC && counterType != NVML_AGGREGATE_ECC))
		return NVML_ERROR_INVALID_ARGUMENT;
	switch (errorType) {
	case NVML_MEMORY_ERROR_TYPE_CORRECTED: *count = g.ecc_corrected; return NVML_SUCCESS;
	case NVML_MEMORY_ERROR_TYPE_UNCORRECTED: *count = g.ecc_uncorrected; return NVML_SUCCESS;
	default: return NVML_ERROR_INVALID_ARGUMENT;
	}
}

FAKEGPU_API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corr, unsigned int *unc,
						   unsigned int *pending, unsigned int *failed)
{
	enter();
	GPU_OR_RETURN(device, g);
	if (!corr || !unc || !pending || !failed)
		return NVML_ERROR_INVALID_ARGUMENT;
	*corr = g.remapped_correctable;
	*unc = g.remapped_uncorrectable;
	*pending = g.remap_pending;
	*failed = g.remap_failed;
	return NVML_SUCCESS;
}

/* Fills up to *count entries from gpu<N>.procs/ and sets *count to how many there are,
 * with NVML's protocol: INSUFFICIENT_SIZE when infos is too small (or NULL with 0). */
FAKEGPU_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
								 nvmlProcessInfo_t *infos)
{
	enter();
	GPU_OR_RETURN(device, g);
	if (!count || (*count > 0 && !infos))
		return NVML_ERROR_INVALID_ARGUMENT;
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/gpu%u.procs", board(), device->index);
	unsigned int n = 0;
	DIR *d = opendir(dir);
	for (struct dirent *e; d && (e = readdir(d));) {
		char *end;
		unsigned long pid = strtoul(e->d_name, &end, 10);
		if (*end || pid == 0 || (kill((pid_t)pid, 0) != 0 && errno != EPERM))
			continue; /* NVML lists live processes; a killed one never took its entry away */
		if (n < *count) {
			char path[8192];
			unsigned long long used = 0;
			snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
			FILE *f = fopen(path, "re");
			if (f) {
				if (fscanf(f, "%llu", &used) != 1)
					used = 0;
				fclose(f);
			}
			infos[n] = (nvmlProcessInfo_t){.pid = (unsigned int)pid, .usedGpuMemory = used,
						       .gpuInstanceId = 0xFFFFFFFF, .computeInstanceId = 0xFFFFFFFF};
		}
		n++;
	}
	if (d)
		closedir(d);
	nvmlReturn_t r = n > *count ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
	*count = n;
	return r;
}

/* Event sets: each remembers, per GPU it registered, how far into gpu<N>.xid it read. */
struct nvmlEventSet_st {
	int live;
	unsigned long long types[MAX_GPUS];
	long offset[MAX_GPUS];
};
static struct nvmlEventSet_st event_sets[MAX_EVENT_SETS];

FAKEGPU_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
	enter();
	if (!set)
		return NVML_ERROR_INVALID_ARGUMENT;
	pthread_mutex_lock(&lock);
	nvmlReturn_t r = NVML_ERROR_UNKNOWN;
	for (int i = 0; i < MAX_EVENT_SETS; i++) {
		if (!event_sets[i].live) {
			event_sets[i] = (struct nvmlEventSet_st){.live = 1};
			*set = &event_sets[i];
			r = NVML_SUCCESS;
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	return r;
}

FAKEGPU_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
	enter();
	if (!set || set < event_sets || set >= event_sets + MAX_EVENT_SETS)
		return NVML_ERROR_INVALID_ARGUMENT;
	pthread_mutex_lock(&lock);
	set->live = 0;
	pthread_mutex_unlock(&lock);
	return NVML_SUCCESS;
}

FAKEGPU_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types)
{
	enter();
	GPU_OR_RETURN(device, g);
	if (!types)
		return NVML_ERROR_INVALID_ARGUMENT;
	*types = FAKENVML_EVENT_XID;
	return NVML_SUCCESS;
}

static long xid_file_size(unsigned int index)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/gpu%u.xid", board(), index);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fclose(f);
	return n;
}

FAKEGPU_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set)
{
	enter();
	GPU_OR_RETURN(device, g);
	if (!set || set < event_sets || set >= event_sets + MAX_EVENT_SETS || !set->live)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (types & ~FAKENVML_EVENT_XID)
		return NVML_ERROR_NOT_SUPPORTED;
	pthread_mutex_lock(&lock);
	set->types[device->index] = types;
	set->offset[device->index] = xid_file_size(device->index); /* events from now on */
	pthread_mutex_unlock(&lock);
	return NVML_SUCCESS;
}

/* next_xid reads the set's next unread line of GPU index's XID file. */
static int next_xid(nvmlEventSet_t set, unsigned int index, nvmlEventData_t *data)
{
	char path[4096], line[128];
	snprintf(path, sizeof path, "%s/gpu%u.xid", board(), index);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	int found = 0;
	if (fseek(f, set->offset[index], SEEK_SET) == 0 && fgets(line, sizeof line, f) && strchr(line, '\n')) {
		set->offset[index] = ftell(f);
		unsigned long long xid = 0, extra = 0;
		if (sscanf(line, "%llu %llu", &xid, &extra) >= 1) {
			*data = (nvmlEventData_t){.device = &handles[index], .eventType = FAKENVML_EVENT_XID,
						  .eventData = xid, .gpuInstanceId = 0xFFFFFFFF,
						  .computeInstanceId = 0xFFFFFFFF};
			found = 1;
		}
	}
	fclose(f);
	return found;
}

FAKEGPU_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
	enter();
	if (!set || set < event_sets || set >= event_sets + MAX_EVENT_SETS || !data)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		pthread_mutex_lock(&lock);
		int found = 0;
		for (unsigned int i = 0; set->live && i < MAX_GPUS && !found; i++)
			if (set->types[i] & FAKENVML_EVENT_XID)
				found = next_xid(set, i, data);
		pthread_mutex_unlock(&lock);
		if (found)
			return NVML_SUCCESS;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long elapsed = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
		if (elapsed >= (long)timeoutms)
			return NVML_ERROR_TIMEOUT;
		usleep(10000); /* the driver wakes the waiter; a fake polls its file */
	}
}
