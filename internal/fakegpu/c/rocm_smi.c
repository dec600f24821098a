/*
 * librocm_smi64.so.1: the ROCm SMI calls Fathom's AMD GPU-state reader
 * (internal/gpustate/rocmsmi) makes, with rocm_smi.h's layouts and return codes as of
 * ROCm 5.2, answered from the same board directory the fake NVML reads (FAKEGPU_BOARD;
 * see nvml.c), so one board stands for the node's GPUs whichever vendor's library reads
 * it, and the fake HIP device (engine.c) is paced by the same clocks this reports.
 *
 * The board's keys mean the same here, in ROCm SMI's units: sm_clock/sm_clock_max and
 * mem_clock/mem_clock_max become the shader and memory clock's levels (in Hz, the
 * current one among them), power_mw/power_limit_mw microwatts, temperature_c the
 * junction sensor's millidegrees, util_gpu/util_memory the busy percentages, pcie_gen,
 * pcie_width and their maxima the link's transfer-rate levels with their lanes,
 * ecc_corrected/ecc_uncorrected the memory controller's (UMC) counts. AMD's own keys:
 * unique_id (default 0xfa7a0000000000NN) and amd_name (default "AMD Instinct
 * MI300X"). uuid, name and the clock event reasons and remapped rows are NVML's only.
 *
 * No board: rsmi_init succeeds and finds no GPU. FAKEGPU_ROCM_SMI_INIT=N makes rsmi_init
 * return N, for a node whose driver is missing.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAKEGPU_API __attribute__((visibility("default")))

/* rocm_smi.h (5.2) */
typedef enum {
	RSMI_STATUS_SUCCESS = 0,
	RSMI_STATUS_INVALID_ARGS = 1,
	RSMI_STATUS_NOT_SUPPORTED = 2,
	RSMI_STATUS_INIT_ERROR = 8,
	RSMI_STATUS_NOT_FOUND = 10,
	RSMI_STATUS_INSUFFICIENT_SIZE = 11,
	RSMI_STATUS_UNKNOWN_ERROR = 0xFFFFFFFF,
} rsmi_status_t;

enum { RSMI_CLK_TYPE_SYS = 0, RSMI_CLK_TYPE_MEM = 4 };
enum { RSMI_TEMP_TYPE_EDGE = 0, RSMI_TEMP_TYPE_JUNCTION = 1 };
enum { RSMI_TEMP_CURRENT = 0 };
enum { RSMI_MEM_TYPE_VRAM = 0 };
#define RSMI_GPU_BLOCK_UMC 0x1ULL
#define RSMI_MAX_NUM_FREQUENCIES 32

typedef struct {
	uint32_t num_supported;
	uint32_t current;
	uint64_t frequency[RSMI_MAX_NUM_FREQUENCIES];
} rsmi_frequencies_t;

typedef struct {
	rsmi_frequencies_t transfer_rate;
	uint32_t lanes[RSMI_MAX_NUM_FREQUENCIES];
} rsmi_pcie_bandwidth_t;

typedef struct {
	uint64_t correctable_err;
	uint64_t uncorrectable_err;
} rsmi_error_count_t;

typedef struct {
	uint32_t process_id;
	uint32_t pasid;
	uint64_t vram_usage;
	uint64_t sdma_usage;
	uint32_t cu_occupancy;
} rsmi_process_info_t;

#define MAX_GPUS 16

static __attribute__((noinline)) void enter(void) { __asm__ volatile("" ::: "memory"); }

struct gpu {
	char name[96];
	unsigned long long unique_id;
	unsigned int domain, bus, dev, fn;
	unsigned int sm_clock, sm_clock_max, mem_clock, mem_clock_max;
	unsigned int power_mw, power_limit_mw, temperature_c, util_gpu, util_memory;
	unsigned long long memory_total, memory_used;
	unsigned int pcie_gen, pcie_gen_max, pcie_width, pcie_width_max, pcie_replays;
	unsigned long long ecc_corrected, ecc_uncorrected;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized; /* rsmi_init calls not yet matched by rsmi_shut_down */

static const char *board(void)
{
	const char *b = getenv("FAKEGPU_BOARD");
	return b && *b ? b : NULL;
}

static int is_initialized(void)
{
	pthread_mutex_lock(&lock);
	int ok = initialized > 0;
	pthread_mutex_unlock(&lock);
	return ok;
}

static uint32_t gpu_count(void)
{
	const char *b = board();
	uint32_t n = 0;
	char path[4096];
	while (b && n < MAX_GPUS) {
		snprintf(path, sizeof path, "%s/gpu%u", b, n);
		if (access(path, R_OK) != 0)
			break;
		n++;
	}
	return n;
}

/* read_gpu fills g from gpu<index> with the board's defaults (nvml.c's); 0 on success,
 * -1 when there is no such GPU. */
static int read_gpu(uint32_t index, struct gpu *g)
{
	*g = (struct gpu){
		.unique_id = 0xfa7a000000000000ULL | index, .bus = 0x18 + index * 0x10,
		.sm_clock = 1980, .sm_clock_max = 1980, .mem_clock = 2619, .mem_clock_max = 2619,
		.power_mw = 350000, .power_limit_mw = 700000, .temperature_c = 45,
		.memory_total = 80ULL << 30, .pcie_gen = 5, .pcie_gen_max = 5, .pcie_width = 16, .pcie_width_max = 16,
	};
	snprintf(g->name, sizeof g->name, "AMD Instinct MI300X");
	const char *b = board();
	if (!b || index >= MAX_GPUS)
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
		if (strcmp(line, "bus_id") == 0)
			sscanf(v, "%x:%x:%x.%x", &g->domain, &g->bus, &g->dev, &g->fn);
		else if (strcmp(line, "amd_name") == 0)
			snprintf(g->name, sizeof g->name, "%s", v);
		ULL_KEY(unique_id);
		UINT_KEY(sm_clock); UINT_KEY(sm_clock_max); UINT_KEY(mem_clock); UINT_KEY(mem_clock_max);
		UINT_KEY(power_mw); UINT_KEY(power_limit_mw); UINT_KEY(temperature_c);
		UINT_KEY(util_gpu); UINT_KEY(util_memory);
		ULL_KEY(memory_total); ULL_KEY(memory_used);
		UINT_KEY(pcie_gen); UINT_KEY(pcie_gen_max); UINT_KEY(pcie_width); UINT_KEY(pcie_width_max);
		UINT_KEY(pcie_replays);
		ULL_KEY(ecc_corrected); ULL_KEY(ecc_uncorrected);
#undef UINT_KEY
#undef ULL_KEY
	}
	fclose(f);
	return 0;
}

/* with_gpu checks the library state and reads device dv. */
static rsmi_status_t with_gpu(uint32_t dv, struct gpu *g)
{
	if (!is_initialized())
		return RSMI_STATUS_INIT_ERROR;
	if (dv >= gpu_count() || read_gpu(dv, g) != 0)
		return RSMI_STATUS_INVALID_ARGS; /* as ROCm SMI answers an index past the count */
	return RSMI_STATUS_SUCCESS;
}

#define GPU_OR_RETURN(dv, g)                                                                                           \
	struct gpu g;                                                                                                  \
	do {                                                                                                           \
		rsmi_status_t r_ = with_gpu(dv, &g);                                                                   \
		if (r_ != RSMI_STATUS_SUCCESS)                                                                         \
			return r_;                                                                                     \
	} while (0)

FAKEGPU_API rsmi_status_t rsmi_init(uint64_t flags)
{
	enter();
	(void)flags;
	const char *forced = getenv("FAKEGPU_ROCM_SMI_INIT");
	if (forced && *forced)
		return (rsmi_status_t)strtoul(forced, NULL, 0);
	pthread_mutex_lock(&lock);
	initialized++;
	pthread_mutex_unlock(&lock);
	return RSMI_STATUS_SUCCESS;
}

FAKEGPU_API rsmi_status_t rsmi_shut_down(void)
{
	enter();
	pthread_mutex_lock(&lock);
	rsmi_status_t r = initialized > 0 ? RSMI_STATUS_SUCCESS : RSMI_STATUS_INIT_ERROR;
	if (initialized > 0)
		initialized--;
	pthread_mutex_unlock(&lock);
	return r;
}

FAKEGPU_API rsmi_status_t rsmi_status_string(rsmi_status_t status, const char **out)
{
	enter();
	if (!out)
		return RSMI_STATUS_INVALID_ARGS;
	switch (status) {
	case RSMI_STATUS_SUCCESS: *out = "RSMI_STATUS_SUCCESS: fake"; break;
	case RSMI_STATUS_NOT_SUPPORTED: *out = "RSMI_STATUS_NOT_SUPPORTED: fake"; break;
	case RSMI_STATUS_INIT_ERROR: *out = "fake: rsmi_init was told to fail (FAKEGPU_ROCM_SMI_INIT)"; break;
	default: *out = "An unknown error occurred"; break;
	}
	return RSMI_STATUS_SUCCESS;
}

FAKEGPU_API rsmi_status_t rsmi_num_monitor_devices(uint32_t *n)
{
	enter();
	if (!n)
		return RSMI_STATUS_INVALID_ARGS;
	*n = is_initialized() ? gpu_count() : 0;
	return RSMI_STATUS_SUCCESS;
}

FAKEGPU_API rsmi_status_t rsmi_version_str_get(uint32_t component, char *s, uint32_t len)
{
	enter();
	if (component != 0 || !s || len == 0)
		return RSMI_STATUS_INVALID_ARGS;
	snprintf(s, len, "6.8.5-fakegpu");
	return strlen("6.8.5-fakegpu") >= len ? RSMI_STATUS_INSUFFICIENT_SIZE : RSMI_STATUS_SUCCESS;
}

FAKEGPU_API rsmi_status_t rsmi_dev_name_get(uint32_t dv, char *name, size_t len)
{
	enter();
	GPU_OR_RETURN(dv, g);
	if (!name || len == 0)
		return RSMI_STATUS_INVALID_ARGS;
	snprintf(name, len, "%s", g.name);
	return strlen(g.name) >= len ? RSMI_STATUS_INSUFFICIENT_SIZE : RSMI_STATUS_SUCCESS;
}

FAKEGPU_API rsmi_status_t rsmi_dev_unique_id_get(uint32_t dv, uint64_t *id)
{
	enter();
	GPU_OR_RETURN(dv, g);
	if (!id)
		return RSMI_STATUS_INVALID_ARGS;
	*id = g.unique_id;
	return RSMI_STATUS_SUCCESS;
}

FAKEGPU_API rsmi_status_t rsmi_dev_pci_id_get(uint32_t dv, uint64_t *bdfid)
{
	enter();
	GPU_OR_RETURN(dv, g);
	if (!bdfid)
		return RSMI_STATUS_INVALID_ARGS;
	*bdfid = ((uint64_t)g.domain << 32) | ((g.bus & 0xff) << 8) | ((g.dev & 0x1f) << 3) | (g.fn & 0x7);
	return RSMI_STATUS_SUCCESS;
}

/* levels writes a clock's levels as amdgpu's pp_dpm files list them, lowest first: a
 * floor, the clock now, the most; current is the one it runs at. */
static void levels(rsmi_frequencies_t *f, unsigned int now_mhz, unsigned int most_mhz)
{
	unsigned int floor = now_mhz < 500 ? now_mhz : 500;
	unsigned int l[3] = {floor, now_mhz, most_mhz};
	memset(f, 0, sizeof *f);
	for (int i = 0; i < 3; i++) {
		if (f->num_supported > 0 && f->frequency[f->num_supported - 1] == (uint64_t)l[i] * 1000000)
			continue;
		f->frequency[f->num_supported++] = (uint64_t)l[i] * 1000000;
	}
	for (uint32_t i = 0; i < f->num_supported; i++)
		if (f->frequency[i] == (uint64_t)now_mhz * 1000000)
			f->current = i;
}

FAKEGPU_API rsmi_status_t rsmi_dev_gpu_clk_freq_get(uint32_t dv, uint32_t clk_type, rsmi_frequencies_t *f)
{
	enter();
	GPU_OR_RETURN(dv, g);
	if (!f)
		return RSMI_STATUS_INVALID_ARGS;
	switch (clk_type) {
	case RSMI_CLK_TYPE_SYS: levels(f, g.sm_clock, g.sm_clock_max); return RSMI_STATUS_SUCCESS;
	case RSMI_CLK_TYPE_MEM: levels(f, g.mem_clock, g.mem_clock_max); return RSMI_STATUS_SUCCESS;
	default: return RSMI_STATUS_NOT_SUPPORTED;
	}
}

FAKEGPU_API rsmi_status_t rsmi_dev_power_ave_get(uint32_t dv, uint32_t sensor, uint64_t *power)
{
	enter();
	GPU_OR_RETURN(dv, g);
	if (!power || sensor != 0)
		return RSMI_STATUS_INVALID_ARGS;
	*power = (uint64_t)g.power_mw * 1000;
	return RSMI_STATUS_SUCCESS;
}

FAKEGPU_API rsmi_status_t rsmi_dev_power_cap_get(uint32_t dv, uint32_t sensor, uint64_t *cap)
{
	enter();
	GPU_OR_RETURN(dv, g);
	if (!cap || sensor != 0)
		return RSMI_STATUS_INVALID_ARGS;
	*cap = (uint64_t)g.power_limit_mw * 1000;
	return RSMI_STATUS_SUCCESS;
}

FAKEGPU_API rsmi_status_t rsmi_dev_temp_metric_get(uint32_t dv, uint32_t sensor, uint32_t metric, int64_t *temp)
{
	enter();
	GPU_OR_RETURN(dv, g);
	if (!temp)
		return RSMI_STATUS_INVALID_ARGS;
	if (sensor != RSMI_TEMP_TYPE_JUNCTION || metric != RSMI_TEMP_CURRENT)
		return RSMI_STATUS_NOT_SUPPORTED;
	*temp = (int64_t)g.temperature_c * 1000;
	return RSMI_STATUS_SUCCESS;
}

FAKEGPU_API rsmi_status_t rsmi_dev_busy_percent_get(uint32_t dv, uint32_t *busy)
{
	enter();
	GPU_OR_RETURN(dv, g);
	if (!busy)
		return RSMI_STATUS_INVALID_ARGS;
	*busy = g.util_gpu;
	return RSMI_STATUS_SUCCESS;
}

FAKEGPU_API rsmi_status_t rsmi_dev_memory_busy_percent_get(uint32_t dv, uint32_t *busy)
{
	enter();
	GPU_OR_RETURN(dv, g);
	if (!busy)
		return RSMI_STATUS_INVALID_ARGS;
	*busy = g.util_memory;
	return RSMI_STATUS_SUCCESS;
}

FAKEGPU_API rsmi_status_t rsmi_dev_memory_usage_get(uint32_t dv, uint32_t type, uint64_t *used)
{
	enter();
	GPU_OR_RETURN(dv, g);
	if (!used)
		return RSMI_STATUS_INVALID_ARGS;
	if (type != RSMI_MEM_TYPE_VRAM)
		return RSMI_STATUS_NOT_SUPPORTED;
	*used = g.memory_used;
	return RSMI_STATUS_SUCCESS;
}

FAKEGPU_API rsmi_status_t rsmi_dev_memory_total_get(uint32_t dv, uint32_t type, uint64_t *total)
{
	enter();
	GPU_OR_RETURN(dv, g);
	if (!total)
		return RSMI_STATUS_INVALID_ARGS;
	if (type != RSMI_MEM_TYPE_VRAM)
		return RSMI_STATUS_NOT_SUPPORTED;
	*total = g.memory_total;
	return RSMI_STATUS_SUCCESS;
}

/* gen_rate is a PCIe generation's per-lane rate in transfers a second. */
static uint64_t gen_rate(unsigned int gen)
{
	static const uint64_t rate[] = {0, 2500000000ULL, 5000000000ULL, 8000000000ULL, 16000000000ULL, 32000000000ULL, 64000000000ULL};
	return gen < sizeof rate / sizeof rate[0] ? rate[gen] : 0;
}

FAKEGPU_API rsmi_status_t rsmi_dev_pci_bandwidth_get(uint32_t dv, rsmi_pcie_bandwidth_t *bw)
{
	enter();
	GPU_OR_RETURN(dv, g);
	if (!bw)
		return RSMI_STATUS_INVALID_ARGS;
	memset(bw, 0, sizeof *bw);
	/* Two levels, as amdgpu's pp_dpm_pcie lists them: the link as trained, and the most
	 * it could train to; one where they are the same. */
	bw->transfer_rate.frequency[0] = gen_rate(g.pcie_gen);
	bw->lanes[0] = g.pcie_width;
	bw->transfer_rate.num_supported = 1;
	if (g.pcie_gen != g.pcie_gen_max || g.pcie_width != g.pcie_width_max) {
		bw->transfer_rate.frequency[1] = gen_rate(g.pcie_gen_max);
		bw->lanes[1] = g.pcie_width_max;
		bw->transfer_rate.num_supported = 2;
	}
	bw->transfer_rate.current = 0;
	return RSMI_STATUS_SUCCESS;
}

FAKEGPU_API rsmi_status_t rsmi_dev_pci_replay_counter_get(uint32_t dv, uint64_t *counter)
{
	enter();
	GPU_OR_RETURN(dv, g);
	if (!counter)
		return RSMI_STATUS_INVALID_ARGS;
	*counter = g.pcie_replays;
	return RSMI_STATUS_SUCCESS;
}

FAKEGPU_API rsmi_status_t rsmi_dev_ecc_count_get(uint32_t dv, uint64_t block, rsmi_error_count_t *ec)
{
	enter();
	GPU_OR_RETURN(dv, g);
	if (!ec)
		return RSMI_STATUS_INVALID_ARGS;
	if (block != RSMI_GPU_BLOCK_UMC)
		return RSMI_STATUS_NOT_SUPPORTED;
	ec->correctable_err = g.ecc_corrected;
	ec->uncorrectable_err = g.ecc_uncorrected;
	return RSMI_STATUS_SUCCESS;
}

/* proc_on reports whether live process pid is listed on GPU gpu, and its memory. */
static int proc_on(uint32_t gpu, uint32_t pid, uint64_t *bytes)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/gpu%u.procs/%u", board(), gpu, pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	unsigned long long n = 0;
	if (fscanf(f, "%llu", &n) != 1)
		n = 0;
	fclose(f);
	if (bytes)
		*bytes += n;
	return 1;
}

static int alive(uint32_t pid) { return kill((pid_t)pid, 0) == 0 || errno == EPERM; }

/* Every live process listed on any GPU, once, as ROCm SMI lists them node-wide from the
 * kernel's kfd. */
FAKEGPU_API rsmi_status_t rsmi_compute_process_info_get(rsmi_process_info_t *procs, uint32_t *num)
{
	enter();
	if (!num)
		return RSMI_STATUS_INVALID_ARGS;
	if (!is_initialized())
		return RSMI_STATUS_INIT_ERROR;
	uint32_t found = 0, room = procs ? *num : 0, gpus = gpu_count();
	uint32_t seen[1024];
	for (uint32_t gpu = 0; gpu < gpus; gpu++) {
		char dir[4096];
		snprintf(dir, sizeof dir, "%s/gpu%u.procs", board(), gpu);
		DIR *d = opendir(dir);
		if (!d)
			continue;
		for (struct dirent *e; (e = readdir(d));) {
			char *end;
			unsigned long pid = strtoul(e->d_name, &end, 10);
			if (*end || pid == 0 || !alive((uint32_t)pid))
				continue;
			int dup = 0;
			for (uint32_t i = 0; i < found && i < 1024; i++)
				dup |= seen[i] == pid;
			if (dup || found == 1024)
				continue;
			seen[found] = (uint32_t)pid;
			if (procs && found < room) {
				uint64_t bytes = 0;
				for (uint32_t g = 0; g < gpus; g++)
					proc_on(g, (uint32_t)pid, &bytes);
				procs[found] = (rsmi_process_info_t){.process_id = (uint32_t)pid, .vram_usage = bytes};
			}
			found++;
		}
		closedir(d);
	}
	if (procs && found > room) {
		*num = room;
		return RSMI_STATUS_INSUFFICIENT_SIZE;
	}
	*num = found;
	return RSMI_STATUS_SUCCESS;
}

FAKEGPU_API rsmi_status_t rsmi_compute_process_gpus_get(uint32_t pid, uint32_t *devices, uint32_t *num)
{
	enter();
	if (!num)
		return RSMI_STATUS_INVALID_ARGS;
	if (!is_initialized())
		return RSMI_STATUS_INIT_ERROR;
	uint32_t found = 0, room = devices ? *num : 0;
	for (uint32_t gpu = 0, gpus = gpu_count(); gpu < gpus; gpu++) {
		if (!proc_on(gpu, pid, NULL))
			continue;
		if (devices && found < room)
			devices[found] = gpu;
		found++;
	}
	if (!found && !alive(pid))
		return RSMI_STATUS_NOT_FOUND;
	if (devices && found > room) {
		*num = room;
		return RSMI_STATUS_INSUFFICIENT_SIZE;
	}
	*num = found;
	return RSMI_STATUS_SUCCESS;
}
