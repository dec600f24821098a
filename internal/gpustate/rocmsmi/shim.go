package rocmsmi

// The C side: librocm_smi64.so.1 is opened with dlopen, as go-nvml opens NVML, so that a
// collector built here runs on nodes without ROCm, and every function is looked up by
// name once. A function this version of the library lacks stays NULL and its call
// answers missingSymbol instead of jumping to address 0. The argument layouts are
// rocm_smi.h's as of ROCm 5.2 (rocm-5.2.3): rsmi_status_t is a 4-byte enum (its largest
// value is 0xFFFFFFFF), rsmi_init_flags_t and rsmi_gpu_block_t are 8-byte enums (each has
// a 64-bit member), passed like uint64_t in a register.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FATHOM_RSMI_MISSING 0xFFFFFFFEu
#define FATHOM_RSMI_MAX_FREQUENCIES 32

typedef struct {
	uint32_t num_supported;
	uint32_t current;
	uint64_t frequency[FATHOM_RSMI_MAX_FREQUENCIES];
} fathom_rsmi_frequencies;

typedef struct {
	fathom_rsmi_frequencies transfer_rate;
	uint32_t lanes[FATHOM_RSMI_MAX_FREQUENCIES];
} fathom_rsmi_pcie_bandwidth;

typedef struct {
	uint64_t correctable_err;
	uint64_t uncorrectable_err;
} fathom_rsmi_error_count;

typedef struct {
	uint32_t process_id;
	uint32_t pasid;
	uint64_t vram_usage;
	uint64_t sdma_usage;
	uint32_t cu_occupancy;
} fathom_rsmi_process_info;

typedef struct {
	uint32_t (*init)(uint64_t);
	uint32_t (*shut_down)(void);
	uint32_t (*status_string)(uint32_t, const char **);
	uint32_t (*num_monitor_devices)(uint32_t *);
	uint32_t (*version_str_get)(uint32_t, char *, uint32_t);
	uint32_t (*dev_name_get)(uint32_t, char *, size_t);
	uint32_t (*dev_unique_id_get)(uint32_t, uint64_t *);
	uint32_t (*dev_pci_id_get)(uint32_t, uint64_t *);
	uint32_t (*dev_gpu_clk_freq_get)(uint32_t, uint32_t, fathom_rsmi_frequencies *);
	uint32_t (*dev_power_ave_get)(uint32_t, uint32_t, uint64_t *);
	uint32_t (*dev_power_cap_get)(uint32_t, uint32_t, uint64_t *);
	uint32_t (*dev_temp_metric_get)(uint32_t, uint32_t, uint32_t, int64_t *);
	uint32_t (*dev_busy_percent_get)(uint32_t, uint32_t *);
	uint32_t (*dev_memory_busy_percent_get)(uint32_t, uint32_t *);
	uint32_t (*dev_memory_usage_get)(uint32_t, uint32_t, uint64_t *);
	uint32_t (*dev_memory_total_get)(uint32_t, uint32_t, uint64_t *);
	uint32_t (*dev_pci_bandwidth_get)(uint32_t, fathom_rsmi_pcie_bandwidth *);
	uint32_t (*dev_pci_replay_counter_get)(uint32_t, uint64_t *);
	uint32_t (*dev_ecc_count_get)(uint32_t, uint64_t, fathom_rsmi_error_count *);
	uint32_t (*compute_process_info_get)(fathom_rsmi_process_info *, uint32_t *);
	uint32_t (*compute_process_gpus_get)(uint32_t, uint32_t *, uint32_t *);
} fathom_rsmi;

// fathom_rsmi_open loads the library and resolves every function; NULL with *err set
// (dlerror's text, copied) when the file cannot be loaded.
static fathom_rsmi *fathom_rsmi_open(const char *path, char *err, size_t errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		strncpy(err, e ? e : "dlopen failed", errlen - 1);
		err[errlen - 1] = 0;
		return NULL;
	}
	fathom_rsmi *l = calloc(1, sizeof *l);
	if (!l)
		return NULL;
#define SYM(field) *(void **)(&l->field) = dlsym(h, "rsmi_" #field)
	SYM(init); SYM(shut_down); SYM(status_string); SYM(num_monitor_devices); SYM(version_str_get);
	SYM(dev_name_get); SYM(dev_unique_id_get); SYM(dev_pci_id_get); SYM(dev_gpu_clk_freq_get);
	SYM(dev_power_ave_get); SYM(dev_power_cap_get); SYM(dev_temp_metric_get);
	SYM(dev_busy_percent_get); SYM(dev_memory_busy_percent_get);
	SYM(dev_memory_usage_get); SYM(dev_memory_total_get);
	SYM(dev_pci_bandwidth_get); SYM(dev_pci_replay_counter_get); SYM(dev_ecc_count_get);
	SYM(compute_process_info_get); SYM(compute_process_gpus_get);
#undef SYM
	return l;
}

#define CALL(l, fn, ...) ((l)->fn ? (l)->fn(__VA_ARGS__) : FATHOM_RSMI_MISSING)

static uint32_t fr_init(fathom_rsmi *l) { return CALL(l, init, 0); }
static uint32_t fr_shut_down(fathom_rsmi *l) { return CALL(l, shut_down); }
static uint32_t fr_status_string(fathom_rsmi *l, uint32_t s, const char **out) { return CALL(l, status_string, s, out); }
static uint32_t fr_num_monitor_devices(fathom_rsmi *l, uint32_t *n) { return CALL(l, num_monitor_devices, n); }
static uint32_t fr_version_str_get(fathom_rsmi *l, uint32_t c, char *s, uint32_t n) { return CALL(l, version_str_get, c, s, n); }
static uint32_t fr_dev_name_get(fathom_rsmi *l, uint32_t d, char *s, size_t n) { return CALL(l, dev_name_get, d, s, n); }
static uint32_t fr_dev_unique_id_get(fathom_rsmi *l, uint32_t d, uint64_t *v) { return CALL(l, dev_unique_id_get, d, v); }
static uint32_t fr_dev_pci_id_get(fathom_rsmi *l, uint32_t d, uint64_t *v) { return CALL(l, dev_pci_id_get, d, v); }
static uint32_t fr_dev_gpu_clk_freq_get(fathom_rsmi *l, uint32_t d, uint32_t t, fathom_rsmi_frequencies *f) { return CALL(l, dev_gpu_clk_freq_get, d, t, f); }
static uint32_t fr_dev_power_ave_get(fathom_rsmi *l, uint32_t d, uint64_t *v) { return CALL(l, dev_power_ave_get, d, 0, v); }
static uint32_t fr_dev_power_cap_get(fathom_rsmi *l, uint32_t d, uint64_t *v) { return CALL(l, dev_power_cap_get, d, 0, v); }
static uint32_t fr_dev_temp_metric_get(fathom_rsmi *l, uint32_t d, uint32_t sensor, int64_t *v) { return CALL(l, dev_temp_metric_get, d, sensor, 0, v); }
static uint32_t fr_dev_busy_percent_get(fathom_rsmi *l, uint32_t d, uint32_t *v) { return CALL(l, dev_busy_percent_get, d, v); }
static uint32_t fr_dev_memory_busy_percent_get(fathom_rsmi *l, uint32_t d, uint32_t *v) { return CALL(l, dev_memory_busy_percent_get, d, v); }
static uint32_t fr_dev_memory_usage_get(fathom_rsmi *l, uint32_t d, uint64_t *v) { return CALL(l, dev_memory_usage_get, d, 0, v); }
static uint32_t fr_dev_memory_total_get(fathom_rsmi *l, uint32_t d, uint64_t *v) { return CALL(l, dev_memory_total_get, d, 0, v); }
static uint32_t fr_dev_pci_bandwidth_get(fathom_rsmi *l, uint32_t d, fathom_rsmi_pcie_bandwidth *b) { return CALL(l, dev_pci_bandwidth_get, d, b); }
static uint32_t fr_dev_pci_replay_counter_get(fathom_rsmi *l, uint32_t d, uint64_t *v) { return CALL(l, dev_pci_replay_counter_get, d, v); }
static uint32_t fr_dev_ecc_count_get(fathom_rsmi *l, uint32_t d, fathom_rsmi_error_count *ec) { return CALL(l, dev_ecc_count_get, d, 1, ec); }
static uint32_t fr_compute_process_info_get(fathom_rsmi *l, fathom_rsmi_process_info *p, uint32_t *n) { return CALL(l, compute_process_info_get, p, n); }
static uint32_t fr_compute_process_gpus_get(fathom_rsmi *l, uint32_t pid, uint32_t *d, uint32_t *n) { return CALL(l, compute_process_gpus_get, pid, d, n); }
*/
import "C"

import "unsafe"

// The constants of rocm_smi.h (5.2) the calls above are given.
const (
	clockSystem = 0 // RSMI_CLK_TYPE_SYS: the shader (compute) clock, NVML's SM clock
	clockMemory = 4 // RSMI_CLK_TYPE_MEM
	tempEdge    = 0 // RSMI_TEMP_TYPE_EDGE
	tempJunct   = 1 // RSMI_TEMP_TYPE_JUNCTION: the die's hot spot
	swDriver    = 0 // RSMI_SW_COMP_DRIVER
)

// missingSymbol is what a call answers when this library does not export the function.
const missingSymbol = status(C.FATHOM_RSMI_MISSING)

// handle is a loaded library's resolved functions.
type handle = *C.fathom_rsmi

func load(path string) (handle, string) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var errbuf [512]C.char
	h := C.fathom_rsmi_open(cpath, &errbuf[0], C.size_t(len(errbuf)))
	if h == nil {
		return nil, C.GoString(&errbuf[0])
	}
	return h, ""
}

func cInit(h handle) status     { return status(C.fr_init(h)) }
func cShutDown(h handle) status { return status(C.fr_shut_down(h)) }

// cStatusString is ROCm SMI's own text for s ("" where it has none).
func cStatusString(h handle, s status) string {
	var text *C.char
	if status(C.fr_status_string(h, C.uint32_t(s), &text)) != statusSuccess || text == nil {
		return ""
	}
	return C.GoString(text)
}

func cNumDevices(h handle) (uint32, status) {
	var n C.uint32_t
	s := status(C.fr_num_monitor_devices(h, &n))
	return uint32(n), s
}

func cDriverVersion(h handle) (string, status) {
	var buf [256]C.char
	s := status(C.fr_version_str_get(h, swDriver, &buf[0], C.uint32_t(len(buf))))
	buf[len(buf)-1] = 0
	return C.GoString(&buf[0]), s
}

func cName(h handle, dev uint32) (string, status) {
	var buf [256]C.char
	s := status(C.fr_dev_name_get(h, C.uint32_t(dev), &buf[0], C.size_t(len(buf))))
	buf[len(buf)-1] = 0
	return C.GoString(&buf[0]), s
}

func cU64(h handle, dev uint32, get func(handle, C.uint32_t, *C.uint64_t) C.uint32_t) (uint64, status) {
	var v C.uint64_t
	s := status(get(h, C.uint32_t(dev), &v))
	return uint64(v), s
}

func cUniqueID(h handle, dev uint32) (uint64, status) {
	return cU64(h, dev, func(h handle, d C.uint32_t, v *C.uint64_t) C.uint32_t { return C.fr_dev_unique_id_get(h, d, v) })
}

func cPCIID(h handle, dev uint32) (uint64, status) {
	return cU64(h, dev, func(h handle, d C.uint32_t, v *C.uint64_t) C.uint32_t { return C.fr_dev_pci_id_get(h, d, v) })
}

func cPowerAverage(h handle, dev uint32) (uint64, status) {
	return cU64(h, dev, func(h handle, d C.uint32_t, v *C.uint64_t) C.uint32_t { return C.fr_dev_power_ave_get(h, d, v) })
}

func cPowerCap(h handle, dev uint32) (uint64, status) {
	return cU64(h, dev, func(h handle, d C.uint32_t, v *C.uint64_t) C.uint32_t { return C.fr_dev_power_cap_get(h, d, v) })
}

func cMemoryUsed(h handle, dev uint32) (uint64, status) {
	return cU64(h, dev, func(h handle, d C.uint32_t, v *C.uint64_t) C.uint32_t { return C.fr_dev_memory_usage_get(h, d, v) })
}

func cMemoryTotal(h handle, dev uint32) (uint64, status) {
	return cU64(h, dev, func(h handle, d C.uint32_t, v *C.uint64_t) C.uint32_t { return C.fr_dev_memory_total_get(h, d, v) })
}

func cReplays(h handle, dev uint32) (uint64, status) {
	return cU64(h, dev, func(h handle, d C.uint32_t, v *C.uint64_t) C.uint32_t {
		return C.fr_dev_pci_replay_counter_get(h, d, v)
	})
}

func cTemperature(h handle, dev, sensor uint32) (int64, status) {
	var v C.int64_t
	s := status(C.fr_dev_temp_metric_get(h, C.uint32_t(dev), C.uint32_t(sensor), &v))
	return int64(v), s
}

func cBusy(h handle, dev uint32) (uint32, status) {
	var v C.uint32_t
	s := status(C.fr_dev_busy_percent_get(h, C.uint32_t(dev), &v))
	return uint32(v), s
}

func cMemoryBusy(h handle, dev uint32) (uint32, status) {
	var v C.uint32_t
	s := status(C.fr_dev_memory_busy_percent_get(h, C.uint32_t(dev), &v))
	return uint32(v), s
}

// frequencies is rsmi_frequencies_t: the levels the clock may run at, in Hz, and the
// one it runs at now.
type frequencies struct {
	current uint32
	hz      []uint64
}

func fromC(f *C.fathom_rsmi_frequencies) frequencies {
	n := min(int(f.num_supported), C.FATHOM_RSMI_MAX_FREQUENCIES)
	out := frequencies{current: uint32(f.current)}
	for i := range n {
		out.hz = append(out.hz, uint64(f.frequency[i]))
	}
	return out
}

func cClock(h handle, dev, clock uint32) (frequencies, status) {
	var f C.fathom_rsmi_frequencies
	s := status(C.fr_dev_gpu_clk_freq_get(h, C.uint32_t(dev), C.uint32_t(clock), &f))
	return fromC(&f), s
}

// cPCIeBandwidth is the link's possible transfer rates (T/s) with their lane counts,
// and which it runs at now.
func cPCIeBandwidth(h handle, dev uint32) (frequencies, []uint32, status) {
	var b C.fathom_rsmi_pcie_bandwidth
	s := status(C.fr_dev_pci_bandwidth_get(h, C.uint32_t(dev), &b))
	rates := fromC(&b.transfer_rate)
	lanes := make([]uint32, len(rates.hz))
	for i := range lanes {
		lanes[i] = uint32(b.lanes[i])
	}
	return rates, lanes, s
}

func cECC(h handle, dev uint32) (corrected, uncorrected uint64, s status) {
	var ec C.fathom_rsmi_error_count
	s = status(C.fr_dev_ecc_count_get(h, C.uint32_t(dev), &ec))
	return uint64(ec.correctable_err), uint64(ec.uncorrectable_err), s
}

// process is rsmi_process_info_t's part Fathom keeps.
type process struct {
	pid        uint32
	vramBytes  uint64
	deviceList []uint32
}

// cProcesses lists the processes with a compute context on any GPU (ROCm SMI lists them
// node-wide, from the kernel's kfd), each with the GPUs it uses, at most limit of them.
func cProcesses(h handle, limit int) ([]process, int, status) {
	var n C.uint32_t
	if s := status(C.fr_compute_process_info_get(h, nil, &n)); s != statusSuccess {
		return nil, 0, s
	}
	if n == 0 {
		return nil, 0, statusSuccess
	}
	// Room for a few that start between the two calls; more is INSUFFICIENT_SIZE, and
	// what was written is still used.
	room := n + 16
	buf := make([]C.fathom_rsmi_process_info, room)
	got := room
	s := status(C.fr_compute_process_info_get(h, &buf[0], &got))
	if s != statusSuccess && s != statusInsufficientSize {
		return nil, 0, s
	}
	got = min(got, room)
	var out []process
	leftOut := 0
	for _, p := range buf[:got] {
		if len(out) == limit {
			leftOut++
			continue
		}
		proc := process{pid: uint32(p.process_id), vramBytes: uint64(p.vram_usage)}
		var devs [64]C.uint32_t
		nd := C.uint32_t(len(devs))
		if ds := status(C.fr_compute_process_gpus_get(h, p.process_id, &devs[0], &nd)); ds == statusSuccess || ds == statusInsufficientSize {
			for _, d := range devs[:min(int(nd), len(devs))] {
				proc.deviceList = append(proc.deviceList, uint32(d))
			}
		}
		out = append(out, proc)
	}
	return out, leftOut, statusSuccess
}
