// Package rocmsmi reads the state of the node's AMD GPUs from ROCm SMI
// (librocm_smi64.so.1) into the same gpustate.GPU readings NVML gives for NVIDIA's, so
// the receiver's GPU series and the binding of GPUs to ranks work unchanged on AMD
// nodes.
//
// The library is loaded at run time with dlopen: a collector built here runs on nodes
// without ROCm, and a missing library is ErrNoLibrary, not a failed start. Every
// function is looked up once and one this version lacks is listed as unsupported, never
// called. The layouts are rocm_smi.h's as of ROCm 5.2 (the rocm-5.2.3 tag of
// rocm_smi_lib; Debian 12's librocm-smi64-1 is 5.2.3), which later versions keep for
// these calls.
//
// What ROCm SMI has that NVML has too is read: the shader clock (NVML's SM clock) and
// memory clock against their highest level, power and its cap, temperature,
// utilization, memory, the PCIe link's rate and lanes against their highest, PCIe
// replays, the memory controller's ECC counts and the processes on each GPU. ROCm SMI
// 5.2 has no portable reasons for a lowered clock (its gpu_metrics throttle bits are
// firmware-specific) and no remapped rows, so those are listed as unsupported.
package rocmsmi

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/fathom-gpu/fathom/internal/gpustate"
)

// Soname is the library's name on the loader's search path.
const Soname = "librocm_smi64.so.1"

// ErrNoLibrary is Open's error when librocm_smi64.so.1 cannot be loaded.
var ErrNoLibrary = errors.New(Soname + " not found: ROCm SMI is not installed on this node, or the collector cannot see it (mount the host's ROCm libraries and put them on LD_LIBRARY_PATH, or set rocm_smi.library_path)")

// status is rsmi_status_t.
type status uint32

// rocm_smi.h's (5.2) return codes.
const (
	statusSuccess           status = 0
	statusInvalidArgs       status = 1
	statusNotSupported      status = 2
	statusFileError         status = 3
	statusPermission        status = 4
	statusOutOfResources    status = 5
	statusInternalException status = 6
	statusInputOutOfBounds  status = 7
	statusInitError         status = 8
	statusNotYetImplemented status = 9
	statusNotFound          status = 10
	statusInsufficientSize  status = 11
	statusInterrupt         status = 12
	statusUnexpectedSize    status = 13
	statusNoData            status = 14
	statusUnexpectedData    status = 15
	statusBusy              status = 16
	statusRefcountOverflow  status = 17
	statusUnknownError      status = 0xFFFFFFFF
)

var statusNames = map[status]string{
	statusSuccess:           "RSMI_STATUS_SUCCESS",
	statusInvalidArgs:       "RSMI_STATUS_INVALID_ARGS",
	statusNotSupported:      "RSMI_STATUS_NOT_SUPPORTED",
	statusFileError:         "RSMI_STATUS_FILE_ERROR",
	statusPermission:        "RSMI_STATUS_PERMISSION",
	statusOutOfResources:    "RSMI_STATUS_OUT_OF_RESOURCES",
	statusInternalException: "RSMI_STATUS_INTERNAL_EXCEPTION",
	statusInputOutOfBounds:  "RSMI_STATUS_INPUT_OUT_OF_BOUNDS",
	statusInitError:         "RSMI_STATUS_INIT_ERROR",
	statusNotYetImplemented: "RSMI_STATUS_NOT_YET_IMPLEMENTED",
	statusNotFound:          "RSMI_STATUS_NOT_FOUND",
	statusInsufficientSize:  "RSMI_STATUS_INSUFFICIENT_SIZE",
	statusInterrupt:         "RSMI_STATUS_INTERRUPT",
	statusUnexpectedSize:    "RSMI_STATUS_UNEXPECTED_SIZE",
	statusNoData:            "RSMI_STATUS_NO_DATA",
	statusUnexpectedData:    "RSMI_STATUS_UNEXPECTED_DATA",
	statusBusy:              "RSMI_STATUS_BUSY",
	statusRefcountOverflow:  "RSMI_STATUS_REFCOUNT_OVERFLOW",
	statusUnknownError:      "RSMI_STATUS_UNKNOWN_ERROR",
}

// name is the status's name in rocm_smi.h, named here so that it reads the same
// whatever the library's own strings say (5.2's text for RSMI_STATUS_INIT_ERROR does
// not carry the name, its text for the others does).
func (s status) name() string {
	if s == missingSymbol {
		return "not exported by this library"
	}
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("ROCm SMI status %d", uint32(s))
}

// loaded holds the library's functions once found: dlopen of the same file gives the
// same handle, and ROCm SMI's state (rsmi_init's reference count) is the process's, so
// one lock orders every call into it.
var (
	loadMu sync.Mutex
	loaded = map[string]handle{}
)

// Library is ROCm SMI, loaded and initialised.
type Library struct {
	mu   sync.Mutex
	h    handle
	path string
}

var _ gpustate.Reader = (*Library)(nil)

// Open loads librocm_smi64.so.1 (from path when it is not empty, else from the loader's
// search path) and initialises ROCm SMI. The library is never unloaded: it is C++ with
// static state, and a process reads it for its whole life.
func Open(path string) (*Library, error) {
	file := path
	if file == "" {
		file = Soname
	}
	loadMu.Lock()
	defer loadMu.Unlock()
	h, ok := loaded[file]
	if !ok {
		var why string
		if h, why = load(file); h == nil {
			if path != "" {
				return nil, fmt.Errorf("%w (tried %s: %s)", ErrNoLibrary, path, why)
			}
			return nil, ErrNoLibrary
		}
		loaded[file] = h
	}
	// rsmi_init prints its own complaint to stderr when it fails (5.2: "Failed to open
	// drm root directory /sys/class/drm"); the error returned here is what says what to do.
	if s := cInit(h); s != statusSuccess {
		return nil, &InitError{Status: uint32(s), Text: cStatusString(h, s), Library: path, Missing: missingDevices()}
	}
	return &Library{h: h, path: path}, nil
}

// missingDevices names what the amdgpu driver gives a process that ROCm SMI and HIP
// need and this one cannot see.
func missingDevices() []string {
	var out []string
	for _, p := range []string{"/sys/class/drm", "/sys/class/kfd", "/dev/kfd", "/dev/dri"} {
		if _, err := os.Stat(p); err != nil {
			out = append(out, p)
		}
	}
	return out
}

// InitError is rsmi_init's failure once librocm_smi64.so.1 has loaded: what a node
// with ROCm's libraries but no amdgpu driver, or a collector that cannot see its
// devices, gets (RSMI_STATUS_INIT_ERROR in 5.2).
type InitError struct {
	// Status is rsmi_init's return, rsmi_status_t.
	Status uint32
	// Text is ROCm SMI's own text for it (rsmi_status_string).
	Text string
	// Library is the file as configured (rocm_smi.library_path); "" when the loader's
	// search path found librocm_smi64.so.1.
	Library string
	// Missing lists the driver's paths this process cannot see.
	Missing []string
}

// ErrInit matches (errors.Is) an InitError for RSMI_STATUS_INIT_ERROR.
var ErrInit = &InitError{Status: uint32(statusInitError)}

// Is makes errors.Is match InitErrors by their status, whatever their library.
func (e *InitError) Is(target error) bool {
	t, ok := target.(*InitError)
	return ok && t.Status == e.Status
}

// Code is the status's name in rocm_smi.h (RSMI_STATUS_INIT_ERROR).
func (e *InitError) Code() string { return status(e.Status).name() }

// Summary says what ROCm SMI answered, from which library, and which of the driver's
// paths are missing, without the fix.
func (e *InitError) Summary() string {
	from := Soname + " from the loader's search path"
	if e.Library != "" {
		from = e.Library
	}
	s := fmt.Sprintf("rocm_smi: %s from rsmi_init (%s)", e.Code(), from)
	if e.Text != "" {
		s += ": " + strings.TrimSpace(strings.TrimPrefix(e.Text, e.Code()+":"))
	}
	if len(e.Missing) > 0 {
		s += "; not visible to the collector: " + strings.Join(e.Missing, ", ")
	}
	return s
}

// Fix says what to do about it.
func (e *InitError) Fix() string {
	switch status(e.Status) {
	case statusInitError, statusFileError:
		return "load the amdgpu kernel driver on the host (modprobe amdgpu; rocm-smi then lists the GPUs), and run the collector with the host's /dev/kfd, /dev/dri and /sys/class/drm (in Kubernetes, AMD's device plugin's devices or a privileged pod; /sys mounted read-only from the host); on a node without AMD GPUs, set rocm_smi.enabled: false"
	case statusPermission:
		return "run the collector as root, or give it read-write access to /dev/kfd and /dev/dri/renderD* (the render and video groups, or a privileged pod)"
	default:
		return "see ROCm's rocm_smi.h for " + e.Code() + "; rocm-smi on the host shows the same failure"
	}
}

func (e *InitError) Error() string { return e.Summary() + "; fix: " + e.Fix() }

// Close shuts ROCm SMI down (rsmi_init is reference-counted; the library stays loaded).
func (l *Library) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h == nil {
		return nil
	}
	loadMu.Lock()
	s := cShutDown(l.h)
	loadMu.Unlock()
	l.h = nil
	if s != statusSuccess {
		return fmt.Errorf("rocm_smi: shut down: %s", s.name())
	}
	return nil
}

var errClosed = errors.New("rocm_smi: library closed")

// DriverVersion is the amdgpu driver's version as ROCm SMI reports it.
func (l *Library) DriverVersion() (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h == nil {
		return "", errClosed
	}
	loadMu.Lock()
	defer loadMu.Unlock()
	v, s := cDriverVersion(l.h)
	if s != statusSuccess {
		return "", fmt.Errorf("rocm_smi: driver version: %s", s.name())
	}
	return v, nil
}

// Read returns one reading of every GPU ROCm SMI monitors. A GPU whose identity cannot
// be read is an error that names it; the others are still read.
func (l *Library) Read() ([]gpustate.GPU, error) {
	var gpus []gpustate.GPU
	var errs []error
	if err := l.withDevices(func(n uint32) { gpus, errs = l.readAll(n) }); err != nil {
		return nil, err
	}
	return gpus, errors.Join(errs...)
}

// withDevices calls fn with the number of GPUs ROCm SMI monitors, under the library's
// locks.
func (l *Library) withDevices(fn func(n uint32)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h == nil {
		return errClosed
	}
	loadMu.Lock()
	defer loadMu.Unlock()
	n, s := cNumDevices(l.h)
	if s != statusSuccess {
		return fmt.Errorf("rocm_smi: device count: %s", s.name())
	}
	fn(n)
	return nil
}

// readAll reads the n GPUs and the node's process list; called under withDevices.
func (l *Library) readAll(n uint32) ([]gpustate.GPU, []error) {
	var errs []error
	// ROCm SMI lists processes for the whole node, each with the GPUs it uses.
	procs, procsLeftOut, ps := cProcesses(l.h, maxProcessesPerNode)
	gpus := make([]gpustate.GPU, 0, n)
	for dev := range n {
		g, err := read(l.h, dev)
		if err != nil {
			errs = append(errs, err)
			if g.UUID == "" {
				continue
			}
		}
		switch {
		case ps == statusSuccess:
			for _, p := range procs {
				for _, d := range p.deviceList {
					if d != dev {
						continue
					}
					if len(g.Processes) == gpustate.MaxProcessesPerGPU {
						g.ProcessesLeftOut++
						continue
					}
					g.Processes = append(g.Processes, gpustate.Process{PID: p.pid, UsedMemoryBytes: p.vramBytes})
				}
			}
			g.ProcessesLeftOut += procsLeftOut
		case unsupported(ps):
			g.Unsupported = append(g.Unsupported, "processes")
		default:
			errs = append(errs, fmt.Errorf("rocm_smi: GPU %d (%s): processes: %s", dev, g.UUID, ps.name()))
		}
		gpus = append(gpus, g)
	}
	return gpus, errs
}

// ReadClocks returns the current system (SM) clock of every GPU ROCm SMI monitors; it
// has no reasons for a clock being down. A GPU whose clock cannot be read is an error
// that names it; the others are still read.
func (l *Library) ReadClocks() ([]gpustate.Clock, error) {
	var clocks []gpustate.Clock
	var errs []error
	err := l.withDevices(func(n uint32) {
		for dev := range n {
			f, s := cClock(l.h, dev, clockSystem)
			if s == statusSuccess && (len(f.hz) == 0 || int(f.current) >= len(f.hz)) {
				s = statusUnexpectedData
			}
			switch {
			case s == statusSuccess:
				clocks = append(clocks, gpustate.Clock{Index: int(dev), Vendor: "AMD", SMClockMHz: uint32(f.hz[f.current] / 1_000_000)})
			case unsupported(s):
			default:
				errs = append(errs, fmt.Errorf("rocm_smi: GPU %d: sm_clock: %s", dev, s.name()))
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return clocks, errors.Join(errs...)
}

// maxProcessesPerNode bounds one reading's process list (ROCm SMI gives it for the
// node, not per GPU).
const maxProcessesPerNode = 4096

// unsupported says whether a call's answer means ROCm SMI has no such reading here.
func unsupported(s status) bool {
	return s == statusNotSupported || s == statusNotYetImplemented || s == missingSymbol
}

// read fills one GPU, as gpustate's NVML reader does: identity must be readable; any
// field ROCm SMI does not support on this GPU is listed in Unsupported, and any other
// failure is an error (the fields read are kept).
func read(h handle, dev uint32) (gpustate.GPU, error) {
	g := gpustate.GPU{Index: int(dev), Vendor: "AMD"}
	var errs []error
	field := func(name string, s status) {
		switch {
		case s == statusSuccess:
		case unsupported(s):
			g.Unsupported = append(g.Unsupported, name)
		default:
			errs = append(errs, fmt.Errorf("%s: %s", name, s.name()))
		}
	}
	bdf, ps := cPCIID(h, dev)
	if ps == statusSuccess {
		g.BusID = busID(bdf)
	}
	field("pci", ps)
	// hw.id: the GPU's unique id, as ROCR_VISIBLE_DEVICES names a GPU ("GPU-" and 16
	// hex digits); a GPU without one (older boards) by its PCI address.
	switch id, s := cUniqueID(h, dev); {
	case s == statusSuccess && id != 0:
		g.UUID = fmt.Sprintf("GPU-%016x", id)
	case g.BusID != "":
		g.UUID = "PCI-" + g.BusID
	default:
		return g, fmt.Errorf("rocm_smi: GPU %d: neither a unique id (%s) nor a PCI address (%s)", dev, s.name(), ps.name())
	}
	name, s := cName(h, dev)
	g.Name = name
	field("name", s)

	clock := func(domain uint32, now, most *uint32, nowField, maxField string) {
		f, s := cClock(h, dev, domain)
		if s == statusSuccess && (len(f.hz) == 0 || int(f.current) >= len(f.hz)) {
			s = statusUnexpectedData
		}
		if s == statusSuccess {
			*now = uint32(f.hz[f.current] / 1_000_000)
			*most = uint32(maxOf(f.hz) / 1_000_000)
		}
		field(nowField, s)
		field(maxField, s)
	}
	clock(clockSystem, &g.SMClockMHz, &g.SMClockMaxMHz, "sm_clock", "sm_clock_max")
	clock(clockMemory, &g.MemClockMHz, &g.MemClockMaxMHz, "mem_clock", "mem_clock_max")
	g.Unsupported = append(g.Unsupported, "clock_event_reasons")

	uw, s := cPowerAverage(h, dev)
	g.PowerWatts = float64(uw) / 1e6
	field("power", s)
	uw, s = cPowerCap(h, dev)
	g.PowerLimitWatts = float64(uw) / 1e6
	field("power_limit", s)
	// The junction (hot spot) sensor is the die's; boards without it have the edge one.
	milli, s := cTemperature(h, dev, tempJunct)
	if unsupported(s) {
		milli, s = cTemperature(h, dev, tempEdge)
	}
	g.TemperatureC = uint32(max(milli, 0) / 1000)
	field("temperature", s)
	g.UtilizationPercent, s = cBusy(h, dev)
	field("utilization", s)
	if s == statusSuccess {
		// Memory activity rides with utilization, as NVML gives both in one call.
		if busy, ms := cMemoryBusy(h, dev); ms == statusSuccess {
			g.MemoryUtilizationPercent = busy
		}
	}
	used, us := cMemoryUsed(h, dev)
	total, ts := cMemoryTotal(h, dev)
	if us == statusSuccess {
		us = ts
	}
	g.MemoryUsedBytes, g.MemoryTotalBytes = used, total
	field("memory", us)

	rates, lanes, s := cPCIeBandwidth(h, dev)
	if s == statusSuccess && (len(rates.hz) == 0 || int(rates.current) >= len(rates.hz)) {
		s = statusUnexpectedData
	}
	if s == statusSuccess {
		g.PCIeGen, g.PCIeGenMax = pcieGeneration(rates.hz[rates.current]), pcieGeneration(maxOf(rates.hz))
		g.PCIeWidth = lanes[rates.current]
		for _, n := range lanes {
			g.PCIeWidthMax = max(g.PCIeWidthMax, n)
		}
	}
	for _, f := range []string{"pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max"} {
		field(f, s)
	}
	g.PCIeReplays, s = cReplays(h, dev)
	field("pcie_replays", s)
	// The memory controller's (UMC) counts: the device memory's ECC errors.
	corrected, uncorrected, s := cECC(h, dev)
	g.ECCCorrected, g.ECCUncorrected = corrected, uncorrected
	field("ecc_corrected", s)
	field("ecc_uncorrected", s)
	g.Unsupported = append(g.Unsupported, "remapped_rows")

	if len(errs) > 0 {
		return g, fmt.Errorf("rocm_smi: GPU %d (%s): %w", dev, g.UUID, errors.Join(errs...))
	}
	return g, nil
}

func maxOf(v []uint64) uint64 {
	var m uint64
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// busID writes rsmi_dev_pci_id_get's BDFID (domain in bits 63-32, bus 15-8, device
// 7-3, function 2-0) as sysfs names the device (0000:c1:00.0).
func busID(bdf uint64) string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", bdf>>32, (bdf>>8)&0xff, (bdf>>3)&0x1f, bdf&0x7)
}

// pcieGeneration is the PCIe generation whose per-lane rate a transfer rate (in
// transfers a second, as ROCm SMI gives them) is: 2.5 GT/s is Gen 1, 5 Gen 2, 8 Gen 3,
// then doubling. 0 for a rate below Gen 1's.
func pcieGeneration(rate uint64) uint32 {
	gt := float64(rate) / 1e9
	switch {
	case gt >= 63:
		return 6
	case gt >= 31:
		return 5
	case gt >= 15:
		return 4
	case gt >= 7.9:
		return 3
	case gt >= 4.9:
		return 2
	case gt >= 2.4:
		return 1
	}
	return 0
}
