// Package nodecheck answers "will Fathom work on this node, and if not, why?": kernel,
// BTF, privileges, tracefs, a real BPF load, and the GPU libraries processes have
// loaded. `fathom check` prints it for people and as JSON for scripts.
package nodecheck

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fathom-gpu/fathom/internal/discovery"
	"github.com/fathom-gpu/fathom/internal/gpustate"
	"github.com/fathom-gpu/fathom/internal/gpustate/rocmsmi"
	"github.com/fathom-gpu/fathom/internal/probes"
)

// Check is one line of the report.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	// Fix says what to do when the check fails.
	Fix string `json:"fix,omitempty"`
	// Impact says what will not work while the check fails.
	Impact string `json:"impact,omitempty"`
	// Advisory checks report what a node lacks without making it unready.
	Advisory bool `json:"advisory,omitempty"`
}

// Library is a probed library file and the processes that map it.
type Library struct {
	Path    string   `json:"path"`
	Library string   `json:"library"`
	PIDs    []uint32 `json:"pids"`
}

// Report is the whole answer.
type Report struct {
	Kernel    string    `json:"kernel"`
	Checks    []Check   `json:"checks"`
	Libraries []Library `json:"libraries"`
	// Ready is true when the gpuebpf receiver can run in ebpf mode.
	Ready bool `json:"ready"`
}

// BPFLoadCheck names the check that loads the programs.
const BPFLoadCheck = "bpf_load"

// Options changes how the costliest check is answered.
type Options struct {
	// BPFLoad, when set, answers the bpf_load check instead of loading and attaching
	// every program: a running gpuebpf receiver already knows whether its own load
	// worked, and a second load beside it would cost a verifier pass and a second set
	// of tracepoints each time it re-checks.
	BPFLoad func() Check
	// NVML, when set, answers the nvml check: a running receiver knows what its own
	// load of the library found.
	NVML func() Check
	// ROCmSMI, when set, answers the rocm_smi check, as NVML does the nvml one; found
	// says whether librocm_smi64.so.1 was there (loaded, whether ROCm SMI then started
	// or not).
	ROCmSMI func() (c Check, found bool)
}

// NVMLCheck names the check that loads NVML.
const NVMLCheck = "nvml"

// NVMLImpact is what a node without NVML loses.
const NVMLImpact = "no GPU state (clocks and throttle reasons, power, PCIe link, ECC and remapped rows, XIDs), so a rank slowed by its own GPU is not named with its cause; everything traced from the host still works"

// NVMLFix says how to give the collector NVML.
const NVMLFix = "on a GPU node, mount the NVIDIA driver's libnvidia-ml.so.1 into the collector (the NVIDIA container toolkit does) or set nvml.library_path; on a node without GPUs there is nothing to do"

// NVMLFailure is the nvml check's detail and fix for gpustate.Open's error: where the
// library loaded but NVML did not start, NVML's own answer (NVML_ERROR_DRIVER_NOT_LOADED
// ...) and the fix for it; else the error and NVMLFix.
func NVMLFailure(err error) (detail, fix string) {
	var initErr *gpustate.InitError
	if errors.As(err, &initErr) {
		return initErr.Summary(), initErr.Fix()
	}
	return err.Error(), NVMLFix
}

// ROCmSMICheck names the check that loads ROCm SMI, AMD's NVML. It is in the report
// only where it has something to say: where librocm_smi64.so.1 is installed (an AMD
// node, or one whose image carries ROCm), or where a process maps AMD's HIP runtime
// and the library is missing. A node with neither vendor's GPUs hears nothing of it.
const ROCmSMICheck = "rocm_smi"

// ROCmSMIImpact is what a node running AMD GPUs loses without ROCm SMI.
const ROCmSMIImpact = "no AMD GPU state (clocks, power, temperature, memory, PCIe link, ECC), so a rank slowed by its own GPU is not named with its cause; everything traced from the host still works"

// ROCmSMIFix says how to give the collector ROCm SMI.
const ROCmSMIFix = "on an AMD GPU node, mount ROCm's librocm_smi64.so.1 into the collector and put it on LD_LIBRARY_PATH, or set rocm_smi.library_path; on a node without AMD GPUs there is nothing to do"

// ROCmSMIFailure is the rocm_smi check's detail and fix for rocmsmi.Open's error: where
// the library loaded but ROCm SMI did not start, its own status (RSMI_STATUS_INIT_ERROR
// ...) with its text and the fix for it; else the error and ROCmSMIFix.
func ROCmSMIFailure(err error) (detail, fix string) {
	var initErr *rocmsmi.InitError
	if errors.As(err, &initErr) {
		return initErr.Summary(), initErr.Fix()
	}
	return err.Error(), ROCmSMIFix
}

// Run inspects the node. procRoot is normally /proc.
func Run(procRoot string) Report { return RunWith(procRoot, Options{}) }

// RunWith inspects the node, with the bpf_load check answered as opts says.
func RunWith(procRoot string, opts Options) Report {
	var r Report
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		r.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	add := func(c Check) { r.Checks = append(r.Checks, c) }

	add(kernelCheck(r.Kernel))

	_, err := os.Stat("/sys/kernel/btf/vmlinux")
	add(Check{Name: "btf", OK: err == nil, Detail: "/sys/kernel/btf/vmlinux", Fix: "the kernel must be built with CONFIG_DEBUG_INFO_BTF=y",
		Impact: "no program loads: the probes are CO-RE and the host tracepoints are tp_btf; run the receiver with mode: synthetic"})

	self := inspectProcess(r.Kernel)
	add(privilegesCheck(self))
	add(syscallsCheck(self))

	// The uprobe PMU lets uprobes attach through perf_event_open; without it they go
	// through tracefs's uprobe_events, which then must be mounted.
	_, pmuErr := os.Stat("/sys/bus/event_source/devices/uprobe/type")
	_, tracefsErr := os.Stat("/sys/kernel/tracing/events")
	add(Check{Name: "tracefs", OK: tracefsErr == nil, Detail: "/sys/kernel/tracing",
		Fix:    "mount -t tracefs tracefs /sys/kernel/tracing",
		Impact: tracefsImpact(pmuErr == nil), Advisory: pmuErr == nil})
	_, debugfsErr := os.Stat("/sys/kernel/debug/tracing")
	add(Check{Name: "debugfs", OK: debugfsErr == nil, Detail: "/sys/kernel/debug",
		Fix:    "mount -t debugfs debugfs /sys/kernel/debug",
		Impact: "nothing Fathom needs; bpftool and older tools look for tracing here", Advisory: true})

	if opts.BPFLoad != nil {
		c := opts.BPFLoad()
		c.Name = BPFLoadCheck
		if !c.OK && !c.Advisory {
			c.Detail, c.Fix = explainLoadFailure(self, c.Detail)
		}
		add(c)
	} else {
		c := Check{Name: BPFLoadCheck, Impact: "the receiver cannot run in ebpf mode on this node"}
		c.OK, c.Detail = tryLoad()
		if !c.OK {
			c.Detail, c.Fix = explainLoadFailure(self, c.Detail)
		}
		add(c)
	}

	if opts.NVML != nil {
		c := opts.NVML()
		c.Name = NVMLCheck
		add(c)
	} else {
		add(nvmlCheck())
	}

	mappings, err := discovery.Scan(procRoot)
	hipPIDs := map[uint32]bool{}
	for _, m := range mappings {
		if m.Library == probes.LibHIP {
			hipPIDs[m.PID] = true
		}
	}
	var rocm Check
	var found bool
	if opts.ROCmSMI != nil {
		rocm, found = opts.ROCmSMI()
	} else {
		rocm, found = rocmSMICheck()
	}
	rocm.Name = ROCmSMICheck
	if found || len(hipPIDs) > 0 {
		if !found {
			rocm.Detail += fmt.Sprintf(" (%d processes here run AMD's HIP runtime)", len(hipPIDs))
		}
		add(rocm)
	}

	byPath := map[string]*Library{}
	for _, m := range mappings {
		l, ok := byPath[m.Path]
		if !ok {
			l = &Library{Path: m.Path, Library: string(m.Library)}
			byPath[m.Path] = l
		}
		l.PIDs = append(l.PIDs, m.PID)
	}
	for _, l := range byPath {
		r.Libraries = append(r.Libraries, *l)
	}
	sort.Slice(r.Libraries, func(i, j int) bool { return r.Libraries[i].Path < r.Libraries[j].Path })
	// Informational: no CUDA process right now is normal; the receiver attaches later.
	detail := fmt.Sprintf("%d probed library files mapped by running processes", len(r.Libraries))
	if err != nil {
		detail = err.Error()
	}
	add(Check{Name: "gpu_libraries", OK: err == nil, Detail: detail, Fix: "cannot read " + procRoot,
		Impact: "no CUDA or NCCL library is found, so no uprobe attaches (configure targets.libraries, or mount the host's /proc)"})

	r.Ready = ready(r.Checks)
	return r
}

// nvmlCheck loads NVML from the loader's search path and counts the GPUs.
func nvmlCheck() Check {
	c := Check{Name: NVMLCheck, Advisory: true, Impact: NVMLImpact, Fix: NVMLFix}
	lib, err := gpustate.Open("")
	if err != nil {
		c.Detail, c.Fix = NVMLFailure(err)
		return c
	}
	defer lib.Close()
	version, _ := lib.DriverVersion()
	gpus, err := lib.Read()
	c.OK = err == nil
	c.Detail = fmt.Sprintf("driver %s, %d GPUs", version, len(gpus))
	if err != nil {
		c.Detail += ": " + err.Error()
	}
	return c
}

// rocmSMICheck loads ROCm SMI from the loader's search path and counts the GPUs; found
// is false where the library is not installed.
func rocmSMICheck() (Check, bool) {
	c := Check{Name: ROCmSMICheck, Advisory: true, Impact: ROCmSMIImpact, Fix: ROCmSMIFix}
	lib, err := rocmsmi.Open("")
	if err != nil {
		c.Detail, c.Fix = ROCmSMIFailure(err)
		return c, !errors.Is(err, rocmsmi.ErrNoLibrary)
	}
	defer lib.Close()
	version, _ := lib.DriverVersion()
	gpus, err := lib.Read()
	c.OK = err == nil
	c.Detail = fmt.Sprintf("amdgpu driver %s, %d GPUs", version, len(gpus))
	if err != nil {
		c.Detail += ": " + err.Error()
	}
	return c, true
}

// ready is true when every check that matters passed.
func ready(checks []Check) bool {
	for _, c := range checks {
		if !c.OK && !c.Advisory {
			return false
		}
	}
	return true
}

// minKernel is the oldest kernel whose BPF features the probes use: tp_btf
// sched_switch's prev_state argument (5.18), BPF attach cookies (5.15), task storage
// from tracing programs (5.11), the BPF ring buffer (5.8).
var minKernel = [2]int{5, 18}

func kernelCheck(release string) Check {
	major, minor := kernelVersion(release)
	return Check{Name: "kernel", OK: major > minKernel[0] || (major == minKernel[0] && minor >= minKernel[1]),
		Detail: "Linux " + release,
		Fix:    fmt.Sprintf("Fathom needs Linux %d.%d or newer: sched_switch's prev_state (5.18), attach cookies (5.15), task storage (5.11), the ring buffer (5.8)", minKernel[0], minKernel[1]),
		Impact: "the programs do not load on this kernel; run the receiver with mode: synthetic"}
}

func tracefsImpact(uprobePMU bool) string {
	if uprobePMU {
		return "libraries are attached at the scans only, up to 200 ms after a process maps them, not on first use: the mmap tracepoints are found through tracefs (uprobes still attach through the uprobe PMU)"
	}
	return "uprobes cannot attach: this kernel has no uprobe PMU and creates them through tracefs, so no CUDA or NCCL call is seen"
}

func tryLoad() (bool, string) {
	p, err := probes.Load(probes.Options{TraceAllCUDA: true})
	if err != nil {
		return false, err.Error()
	}
	defer p.Close()
	if err := p.AttachHost(); err != nil {
		return false, "programs load, but tracepoints do not attach: " + err.Error()
	}
	return true, fmt.Sprintf("CUDA and host programs loaded, %d tracepoints attached", p.ProbeCount())
}

func kernelVersion(release string) (major, minor int) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) >= 2 {
		major, _ = strconv.Atoi(parts[0])
		minor, _ = strconv.Atoi(strings.TrimLeftFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	}
	return major, minor
}

// Text renders the report for people.
func (r Report) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Fathom node check (Linux %s)\n\n", r.Kernel)
	for _, c := range r.Checks {
		mark := "ok  "
		switch {
		case !c.OK && c.Advisory:
			mark = "warn"
		case !c.OK:
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "  [%s] %-14s %s\n", mark, c.Name, c.Detail)
		if !c.OK && c.Impact != "" {
			fmt.Fprintf(&b, "         %-14s won't work: %s\n", "", c.Impact)
		}
		if !c.OK && c.Fix != "" {
			fmt.Fprintf(&b, "         %-14s fix: %s\n", "", c.Fix)
		}
	}
	if len(r.Libraries) > 0 {
		b.WriteString("\nGPU libraries in use:\n")
		for _, l := range r.Libraries {
			fmt.Fprintf(&b, "  %-9s %s (pids %v)\n", l.Library, l.Path, l.PIDs)
		}
	}
	if r.Ready {
		b.WriteString("\nready: the gpuebpf receiver can run in ebpf mode here\n")
	} else {
		b.WriteString("\nnot ready: fix the failed checks above, or run the receiver with mode: synthetic\n")
	}
	return b.String()
}
