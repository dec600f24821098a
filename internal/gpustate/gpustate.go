// Package gpustate reads the state of the node's GPUs from NVML through NVIDIA's go-nvml
// binding: clocks against their maximum, why the clocks are held down, power, heat,
// memory, the PCIe link against what it could train to, memory errors and remapped rows,
// and the processes with a context on each GPU, which is what binds a GPU to a rank.
//
// go-nvml loads libnvidia-ml.so.1 at run time. A node without the library (no driver,
// or a collector image without it) gets ErrNoLibrary from Open and runs on without GPU
// state. NVML's own error strings are never asked for: with the library absent,
// nvml.ErrorString calls a symbol that is not there and ends the process. The same
// holds for any call the driver's library lacks (the clock event reasons arrived in
// driver 535), so Open looks up every symbol Read calls and Read skips the missing ones.
package gpustate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ErrNoLibrary is Open's error when libnvidia-ml.so.1 cannot be loaded.
var ErrNoLibrary = errors.New("libnvidia-ml.so.1 not found: no NVIDIA driver on this node, or the collector cannot see it (mount the driver's libraries and put them on LD_LIBRARY_PATH)")

// MaxProcessesPerGPU bounds the processes kept for one GPU in one reading; the rest are
// counted in GPU.ProcessesLeftOut.
const MaxProcessesPerGPU = 256

// GPU is one reading of one GPU.
type GPU struct {
	Index int
	UUID  string
	// BusID is the PCI address, domain:bus:device.function, as nvidia-smi prints it.
	BusID string
	Name  string
	// Vendor is the GPU's maker as hw.vendor says it: NVIDIA (read through NVML) or AMD
	// (through ROCm SMI, internal/gpustate/rocmsmi).
	Vendor string

	SMClockMHz, SMClockMaxMHz   uint32
	MemClockMHz, MemClockMaxMHz uint32
	// ClockEventReasons is NVML's bit mask of why the clocks are below their maximum
	// (nvmlClocksEventReason*, "throttle reasons" before driver 535); Reasons names it.
	ClockEventReasons uint64

	PowerWatts, PowerLimitWatts float64
	TemperatureC                uint32
	// UtilizationPercent and MemoryUtilizationPercent are NVML's share of the last
	// sample period with a kernel running, and with device memory being read or written.
	UtilizationPercent, MemoryUtilizationPercent uint32
	MemoryUsedBytes, MemoryTotalBytes            uint64

	PCIeGen, PCIeGenMax, PCIeWidth, PCIeWidthMax uint32
	// PCIeReplays counts PCIe packets the link had to resend since the driver loaded.
	PCIeReplays uint64

	// ECC errors since the driver loaded (volatile counts).
	ECCCorrected, ECCUncorrected uint64
	// Rows of device memory remapped to spares, by the kind of error that retired them;
	// a pending remap takes effect at the next GPU reset, and a failed one means the
	// GPU ran out of spare rows.
	RemappedCorrectable, RemappedUncorrectable uint32
	RemapPending, RemapFailed                  bool

	Processes        []Process
	ProcessesLeftOut int

	// Unsupported lists what NVML cannot read on this GPU (an older board, a driver
	// without the call); those fields are zero and are not reported.
	Unsupported []string
}

// Process is a process with a compute context on a GPU.
type Process struct {
	PID             uint32
	UsedMemoryBytes uint64
}

// Supports says whether a field (as named in Unsupported) was read.
func (g GPU) Supports(field string) bool {
	for _, f := range g.Unsupported {
		if f == field {
			return false
		}
	}
	return true
}

// ClockEventReason names one bit of NVML's clock event reason mask.
type ClockEventReason struct {
	Bit  uint64
	Name string
}

// ClockEventReasons are NVML's reasons, by the names Fathom reports (nvml.h numbers
// them; nvmlClocksEventReasonGpuIdle is 0x1 and so on).
var ClockEventReasons = []ClockEventReason{
	{0x1, "gpu_idle"},
	{0x2, "applications_clocks_setting"},
	{0x4, "sw_power_cap"},
	{0x8, "hw_slowdown"},
	{0x10, "sync_boost"},
	{0x20, "sw_thermal_slowdown"},
	{0x40, "hw_thermal_slowdown"},
	{0x80, "hw_power_brake_slowdown"},
	{0x100, "display_clock_setting"},
}

// Reasons names the bits of ClockEventReasons that are set, in NVML's order.
func (g GPU) Reasons() []string {
	var out []string
	for _, r := range ClockEventReasons {
		if g.ClockEventReasons&r.Bit != 0 {
			out = append(out, r.Name)
		}
	}
	return out
}

// Throttled says whether a reason other than idling or a configured clock holds the SM
// clock down: power or thermal limits, or the hardware slowing itself.
func (g GPU) Throttled() bool {
	const slowing = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
	return g.ClockEventReasons&slowing != 0
}

// Reader is a vendor's library read for the node's GPUs: NVML (Library, here) or ROCm
// SMI (internal/gpustate/rocmsmi). Both fill the same GPU, so what is made of a reading
// (series, the binding to ranks, the straggler signals) is written once.
type Reader interface {
	// Read returns one reading of every GPU; the error names what could not be read,
	// and the GPUs returned are what could.
	Read() ([]GPU, error)
	// ReadClocks returns the SM clock of every GPU, and why it is down where the
	// library says: a few calls a GPU, light enough to take with each rank sample (a
	// quarter second) where Read, with its process list and error counters, comes once
	// a collection.
	ReadClocks() ([]Clock, error)
	Close() error
}

// Clock is one quick reading of a GPU's SM clock (Reader.ReadClocks): what slows a
// GPU's kernels first, power and heat, shows in it within a second, and the straggler
// loop compares it across a job's ranks at the pace of their other signals. A GPU is
// named by its Index and Vendor, as in the Read before it.
type Clock struct {
	Index      int
	Vendor     string
	SMClockMHz uint32
	// ClockEventReasons is NVML's mask, as in GPU; HasReasons is false where the
	// library does not say (ROCm SMI, a driver without the call).
	ClockEventReasons uint64
	HasReasons        bool
}

// Refresh takes c's reading into g, the GPU it names.
func (c Clock) Refresh(g *GPU) {
	g.SMClockMHz = c.SMClockMHz
	if c.HasReasons {
		g.ClockEventReasons = c.ClockEventReasons
	}
}

var _ Reader = (*Library)(nil)

// Library is NVML, loaded and initialised.
type Library struct {
	mu  sync.Mutex
	lib nvml.Interface
	// has says which of the calls Read makes this driver's library exports.
	has map[string]bool
}

// calls are the NVML symbols Read may call, besides those go-nvml resolves itself by
// version (count, handle by index, PCI info, running processes).
var calls = []string{
	"nvmlDeviceGetUUID", "nvmlDeviceGetName",
	"nvmlDeviceGetClockInfo", "nvmlDeviceGetMaxClockInfo",
	"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
	"nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetTemperature",
	"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo",
	"nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkGeneration",
	"nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetPcieReplayCounter",
	"nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRemappedRows",
	"nvmlSystemGetDriverVersion",
	"nvmlEventSetCreate", "nvmlEventSetFree", "nvmlDeviceRegisterEvents", "nvmlDeviceGetSupportedEventTypes",
}

// Open loads libnvidia-ml.so.1 (from path when it is not empty, else from the loader's
// search path) and initialises NVML.
func Open(path string) (*Library, error) {
	var lib nvml.Interface
	if path != "" {
		lib = nvml.New(nvml.WithLibraryPath(path))
	} else {
		lib = nvml.New()
	}
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
		l := &Library{lib: lib, has: map[string]bool{}}
		for _, name := range calls {
			l.has[name] = lib.Extensions().LookupSymbol(name) == nil
		}
		return l, nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		if path != "" {
			return nil, fmt.Errorf("%w (tried %s)", ErrNoLibrary, path)
		}
		return nil, ErrNoLibrary
	default:
		return nil, &InitError{Return: ret, Library: path}
	}
}

// InitError is nvmlInit's failure once libnvidia-ml.so.1 has loaded: NVML's own return
// code, by the name nvml.h gives it, what it means and what to do. It is what NVIDIA's
// library answers on a node with the user-space driver but no kernel module
// (NVML_ERROR_DRIVER_NOT_LOADED: a container image that carries the library, a host
// whose module failed to build), with the wrong module (NVML_ERROR_LIB_RM_VERSION_MISMATCH)
// or without access to /dev/nvidia* (NVML_ERROR_NO_PERMISSION).
type InitError struct {
	Return nvml.Return
	// Library is the file as configured (nvml.library_path); "" when the loader's
	// search path found libnvidia-ml.so.1.
	Library string
}

// ErrDriverNotLoaded matches (errors.Is) an InitError for NVML_ERROR_DRIVER_NOT_LOADED.
var ErrDriverNotLoaded = &InitError{Return: nvml.ERROR_DRIVER_NOT_LOADED}

// Is makes errors.Is match InitErrors by their return code, whatever their library.
func (e *InitError) Is(target error) bool {
	t, ok := target.(*InitError)
	return ok && t.Return == e.Return
}

// Code is the return code's name in nvml.h (NVML_ERROR_DRIVER_NOT_LOADED), named here
// rather than asked of the library (see the package comment).
func (e *InitError) Code() string {
	if name, ok := initReturnNames[e.Return]; ok {
		return name
	}
	return fmt.Sprintf("NVML error %d", int32(e.Return))
}

var initReturnNames = map[nvml.Return]string{
	nvml.ERROR_UNINITIALIZED:           "NVML_ERROR_UNINITIALIZED",
	nvml.ERROR_NO_PERMISSION:           "NVML_ERROR_NO_PERMISSION",
	nvml.ERROR_DRIVER_NOT_LOADED:       "NVML_ERROR_DRIVER_NOT_LOADED",
	nvml.ERROR_LIB_RM_VERSION_MISMATCH: "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
	nvml.ERROR_IRQ_ISSUE:               "NVML_ERROR_IRQ_ISSUE",
	nvml.ERROR_GPU_IS_LOST:             "NVML_ERROR_GPU_IS_LOST",
	nvml.ERROR_FUNCTION_NOT_FOUND:      "NVML_ERROR_FUNCTION_NOT_FOUND",
	nvml.ERROR_INSUFFICIENT_RESOURCES:  "NVML_ERROR_INSUFFICIENT_RESOURCES",
	nvml.ERROR_UNKNOWN:                 "NVML_ERROR_UNKNOWN",
}

// Summary says what NVML answered and from which library, without the fix.
func (e *InitError) Summary() string {
	from := "libnvidia-ml.so.1 from the loader's search path"
	if e.Library != "" {
		from = e.Library
	}
	var what string
	switch e.Return {
	case nvml.ERROR_DRIVER_NOT_LOADED:
		what = "the NVIDIA kernel driver is not loaded"
	case nvml.ERROR_NO_PERMISSION:
		what = "no permission to open the GPU devices (/dev/nvidia*)"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		what = "the library's version differs from the loaded kernel driver's"
	default:
		what = describe(e.Return)
	}
	return fmt.Sprintf("nvml: %s from nvmlInit (%s): %s", e.Code(), from, what)
}

// Fix says what to do about it.
func (e *InitError) Fix() string {
	switch e.Return {
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "load the NVIDIA kernel driver on the host (modprobe nvidia; nvidia-smi then lists the GPUs), and run the collector with the host's /dev/nvidia* and driver libraries (the NVIDIA container toolkit mounts both); on a node without GPUs, set nvml.enabled: false"
	case nvml.ERROR_NO_PERMISSION:
		return "run the collector as root, or give it read-write access to /dev/nvidiactl and /dev/nvidia* (in Kubernetes, the NVIDIA device plugin's devices or a privileged pod)"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "use the host's own libnvidia-ml.so.1 (the version /proc/driver/nvidia/version names), not one baked into the collector's image, or reboot after a driver upgrade"
	default:
		return "see NVIDIA's nvml.h for " + e.Code() + "; nvidia-smi on the host shows the same failure"
	}
}

func (e *InitError) Error() string { return e.Summary() + "; fix: " + e.Fix() }

// Close shuts NVML down.
func (l *Library) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lib == nil {
		return nil
	}
	ret := l.lib.Shutdown()
	l.lib = nil
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvml: shutdown: %s", describe(ret))
	}
	return nil
}

// DriverVersion is the NVIDIA driver's version string.
func (l *Library) DriverVersion() (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lib == nil {
		return "", errClosed
	}
	if !l.has["nvmlSystemGetDriverVersion"] {
		return "", errors.New("nvml: this library has no nvmlSystemGetDriverVersion")
	}
	v, ret := l.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("nvml: driver version: %s", describe(ret))
	}
	return v, nil
}

var errClosed = errors.New("nvml: library closed")

// Read returns one reading of every GPU. A GPU that cannot be opened (lost, or removed
// since the count) is an error that names it; the others are still read.
func (l *Library) Read() ([]GPU, error) {
	var gpus []GPU
	err := l.eachDevice(func(i int, d nvml.Device) error {
		g, err := read(i, d, l.has)
		if err == nil {
			gpus = append(gpus, g)
		}
		return err
	})
	return gpus, err
}

// ReadClocks returns the SM clock and its event reasons of every GPU NVML counts. A GPU
// whose clock cannot be read is an error that names it; the others are still read.
func (l *Library) ReadClocks() ([]Clock, error) {
	var clocks []Clock
	err := l.eachDevice(func(i int, d nvml.Device) error {
		if !l.has["nvmlDeviceGetClockInfo"] {
			return nil
		}
		c := Clock{Index: i, Vendor: "NVIDIA"}
		var ret nvml.Return
		if c.SMClockMHz, ret = d.GetClockInfo(nvml.CLOCK_SM); ret != nvml.SUCCESS {
			if ret == nvml.ERROR_NOT_SUPPORTED {
				return nil
			}
			return fmt.Errorf("nvml: GPU %d: sm_clock: %s", i, describe(ret))
		}
		switch {
		case l.has["nvmlDeviceGetCurrentClocksEventReasons"]:
			c.ClockEventReasons, ret = d.GetCurrentClocksEventReasons()
			c.HasReasons = ret == nvml.SUCCESS
		case l.has["nvmlDeviceGetCurrentClocksThrottleReasons"]:
			c.ClockEventReasons, ret = d.GetCurrentClocksThrottleReasons()
			c.HasReasons = ret == nvml.SUCCESS
		}
		clocks = append(clocks, c)
		return nil
	})
	return clocks, err
}

// eachDevice calls visit with each GPU NVML counts, under the library's lock. A GPU
// that cannot be opened (lost, or removed since the count), or whose visit fails, is an
// error that names it; the others are still visited.
func (l *Library) eachDevice(visit func(index int, d nvml.Device) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lib == nil {
		return errClosed
	}
	n, ret := l.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvml: device count: %s", describe(ret))
	}
	var errs []error
	for i := range n {
		d, ret := l.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("nvml: GPU %d: %s", i, describe(ret)))
			continue
		}
		if err := visit(i, d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// read fills one GPU. Identity must be readable; any other field NVML does not support
// on this GPU, or that this driver's library lacks, is listed in Unsupported, and any
// other failure is an error.
func read(index int, d nvml.Device, has map[string]bool) (GPU, error) {
	g := GPU{Index: index, Vendor: "NVIDIA"}
	var errs []error
	// field calls get when the library exports symbol and records what it returned:
	// nothing on success, the field's name in Unsupported where NVML has no such
	// reading, an error otherwise.
	field := func(name, symbol string, get func() nvml.Return) {
		if symbol != "" && !has[symbol] {
			g.Unsupported = append(g.Unsupported, name)
			return
		}
		switch ret := get(); ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
			g.Unsupported = append(g.Unsupported, name)
		default:
			errs = append(errs, fmt.Errorf("%s: %s", name, describe(ret)))
		}
	}
	if !has["nvmlDeviceGetUUID"] {
		return g, fmt.Errorf("nvml: GPU %d: this library has no nvmlDeviceGetUUID", index)
	}
	var ret nvml.Return
	if g.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return g, fmt.Errorf("nvml: GPU %d: uuid: %s", index, describe(ret))
	}
	field("pci", "", func() (r nvml.Return) {
		var pci nvml.PciInfo
		pci, r = d.GetPciInfo()
		g.BusID = busID(pci)
		return r
	})
	field("name", "nvmlDeviceGetName", func() (r nvml.Return) { g.Name, r = d.GetName(); return })

	field("sm_clock", "nvmlDeviceGetClockInfo", func() (r nvml.Return) { g.SMClockMHz, r = d.GetClockInfo(nvml.CLOCK_SM); return })
	field("sm_clock_max", "nvmlDeviceGetMaxClockInfo", func() (r nvml.Return) { g.SMClockMaxMHz, r = d.GetMaxClockInfo(nvml.CLOCK_SM); return })
	field("mem_clock", "nvmlDeviceGetClockInfo", func() (r nvml.Return) { g.MemClockMHz, r = d.GetClockInfo(nvml.CLOCK_MEM); return })
	field("mem_clock_max", "nvmlDeviceGetMaxClockInfo", func() (r nvml.Return) { g.MemClockMaxMHz, r = d.GetMaxClockInfo(nvml.CLOCK_MEM); return })
	if has["nvmlDeviceGetCurrentClocksEventReasons"] {
		field("clock_event_reasons", "", func() (r nvml.Return) { g.ClockEventReasons, r = d.GetCurrentClocksEventReasons(); return })
	} else { // drivers before 535 name it after throttling
		field("clock_event_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", func() (r nvml.Return) {
			g.ClockEventReasons, r = d.GetCurrentClocksThrottleReasons()
			return
		})
	}

	field("power", "nvmlDeviceGetPowerUsage", func() nvml.Return {
		mw, r := d.GetPowerUsage()
		g.PowerWatts = float64(mw) / 1000
		return r
	})
	field("power_limit", "nvmlDeviceGetEnforcedPowerLimit", func() nvml.Return {
		mw, r := d.GetEnforcedPowerLimit()
		g.PowerLimitWatts = float64(mw) / 1000
		return r
	})
	field("temperature", "nvmlDeviceGetTemperature", func() (r nvml.Return) { g.TemperatureC, r = d.GetTemperature(nvml.TEMPERATURE_GPU); return })
	field("utilization", "nvmlDeviceGetUtilizationRates", func() nvml.Return {
		u, r := d.GetUtilizationRates()
		g.UtilizationPercent, g.MemoryUtilizationPercent = u.Gpu, u.Memory
		return r
	})
	field("memory", "nvmlDeviceGetMemoryInfo", func() nvml.Return {
		m, r := d.GetMemoryInfo()
		g.MemoryUsedBytes, g.MemoryTotalBytes = m.Used, m.Total
		return r
	})

	link := func(name, symbol string, get func() (int, nvml.Return), into *uint32) {
		field(name, symbol, func() nvml.Return {
			v, r := get()
			*into = uint32(max(v, 0))
			return r
		})
	}
	link("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration", d.GetCurrPcieLinkGeneration, &g.PCIeGen)
	link("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", d.GetMaxPcieLinkGeneration, &g.PCIeGenMax)
	link("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", d.GetCurrPcieLinkWidth, &g.PCIeWidth)
	link("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth", d.GetMaxPcieLinkWidth, &g.PCIeWidthMax)
	field("pcie_replays", "nvmlDeviceGetPcieReplayCounter", func() nvml.Return {
		v, r := d.GetPcieReplayCounter()
		g.PCIeReplays = uint64(max(v, 0))
		return r
	})

	field("ecc_corrected", "nvmlDeviceGetTotalEccErrors", func() (r nvml.Return) {
		g.ECCCorrected, r = d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC)
		return
	})
	field("ecc_uncorrected", "nvmlDeviceGetTotalEccErrors", func() (r nvml.Return) {
		g.ECCUncorrected, r = d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
		return
	})
	field("remapped_rows", "nvmlDeviceGetRemappedRows", func() nvml.Return {
		corr, unc, pending, failed, r := d.GetRemappedRows()
		g.RemappedCorrectable, g.RemappedUncorrectable = uint32(max(corr, 0)), uint32(max(unc, 0))
		g.RemapPending, g.RemapFailed = pending, failed
		return r
	})

	field("processes", "", func() nvml.Return {
		procs, r := d.GetComputeRunningProcesses()
		for _, p := range procs {
			if len(g.Processes) == MaxProcessesPerGPU {
				g.ProcessesLeftOut++
				continue
			}
			g.Processes = append(g.Processes, Process{PID: p.Pid, UsedMemoryBytes: p.UsedGpuMemory})
		}
		return r
	})
	if len(errs) > 0 {
		return g, fmt.Errorf("nvml: GPU %d (%s): %w", index, g.UUID, errors.Join(errs...))
	}
	return g, nil
}

// busID reads the PCI address NVML writes as a C string.
func busID(p nvml.PciInfo) string {
	var b strings.Builder
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

// describe names a return code without asking the library (see the package comment).
func describe(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_UNINITIALIZED:
		return "NVML not initialised"
	case nvml.ERROR_INVALID_ARGUMENT:
		return "invalid argument"
	case nvml.ERROR_NOT_SUPPORTED:
		return "not supported on this GPU"
	case nvml.ERROR_NO_PERMISSION:
		return "no permission"
	case nvml.ERROR_NOT_FOUND:
		return "not found"
	case nvml.ERROR_INSUFFICIENT_SIZE:
		return "buffer too small"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "driver not loaded"
	case nvml.ERROR_TIMEOUT:
		return "timeout"
	case nvml.ERROR_IRQ_ISSUE:
		return "interrupt problem"
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "library not found"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return "function not in this driver's library"
	case nvml.ERROR_GPU_IS_LOST:
		return "GPU is lost (fell off the bus or stopped answering)"
	case nvml.ERROR_RESET_REQUIRED:
		return "GPU needs a reset"
	default:
		return fmt.Sprintf("NVML error %d", int32(ret))
	}
}

// XID is a critical error the driver reported for a GPU: an Xid in the kernel log, as
// NVIDIA's XID catalogue numbers them (79: fallen off the bus, 48: double-bit ECC, ...).
type XID struct {
	GPU  int
	UUID string
	Code uint64
}

// xidEvent is nvmlEventTypeXidCriticalError.
const xidEvent = 0x8

// WatchXIDs registers every GPU that supports it for XID events and calls report with
// each, as the driver delivers them, until ctx ends (which is not an error). Once the
// GPUs are registered, ready (when not nil) is sent how many there are and closed.
// Close the Library only after WatchXIDs has returned.
func (l *Library) WatchXIDs(ctx context.Context, ready chan<- int, report func(XID)) error {
	for _, name := range []string{"nvmlEventSetCreate", "nvmlEventSetFree", "nvmlDeviceRegisterEvents", "nvmlDeviceGetSupportedEventTypes"} {
		if !l.has[name] {
			return fmt.Errorf("nvml: this library has no %s: no XID events", name)
		}
	}
	l.mu.Lock()
	if l.lib == nil {
		l.mu.Unlock()
		return errClosed
	}
	set, ret := l.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		l.mu.Unlock()
		return fmt.Errorf("nvml: event set: %s", describe(ret))
	}
	defer set.Free()
	type watched struct {
		index int
		uuid  string
	}
	gpus := map[nvml.Device]watched{}
	n, ret := l.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		l.mu.Unlock()
		return fmt.Errorf("nvml: device count: %s", describe(ret))
	}
	for i := range n {
		d, ret := l.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		if types, ret := d.GetSupportedEventTypes(); ret != nvml.SUCCESS || types&xidEvent == 0 {
			continue
		}
		uuid, _ := d.GetUUID()
		if d.RegisterEvents(xidEvent, set) == nvml.SUCCESS {
			gpus[d] = watched{i, uuid}
		}
	}
	l.mu.Unlock()
	if ready != nil {
		ready <- len(gpus)
		close(ready)
	}
	if len(gpus) == 0 {
		<-ctx.Done()
		return nil
	}
	for ctx.Err() == nil {
		// NVML's wait blocks in the driver; a short timeout bounds how long ctx's end
		// waits for it.
		e, ret := set.Wait(200)
		switch ret {
		case nvml.SUCCESS:
			if e.EventType&xidEvent == 0 {
				continue
			}
			w, ok := gpus[e.Device]
			if !ok {
				w = watched{index: -1}
			}
			report(XID{GPU: w.index, UUID: w.uuid, Code: e.EventData})
		case nvml.ERROR_TIMEOUT:
		default:
			return fmt.Errorf("nvml: waiting for events: %s", describe(ret))
		}
	}
	return nil
}
