// Package nodecheck answers "will Fathom work on this node, and if not, why?": kernel,
// BTF, privileges, tracefs, a real BPF load, and the GPU libraries processes have
// loaded. `fathom check` prints it for people and as JSON for scripts.
package nodecheck

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fathom-gpu/fathom/internal/discovery"
	"github.com/fathom-gpu/fathom/internal/probes"
)

// Check is one line of the report.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	// Fix says what to do when the check fails.
	Fix string `json:"fix,omitempty"`
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

// Linux capability numbers (include/uapi/linux/capability.h).
const (
	capSysAdmin    = 21
	capSysResource = 24
	capPerfmon     = 38
	capBPF         = 39
)

// Run inspects the node. procRoot is normally /proc.
func Run(procRoot string) Report {
	var r Report
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		r.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	add := func(c Check) { r.Checks = append(r.Checks, c) }

	major, minor := kernelVersion(r.Kernel)
	add(Check{Name: "kernel", OK: major > 5 || (major == 5 && minor >= 8),
		Detail: "Linux " + r.Kernel, Fix: "Fathom needs Linux 5.8 or newer (ring buffer, CAP_BPF, tp_btf, attach cookies need 5.15)"})

	_, err := os.Stat("/sys/kernel/btf/vmlinux")
	add(Check{Name: "btf", OK: err == nil, Detail: "/sys/kernel/btf/vmlinux", Fix: "the kernel must be built with CONFIG_DEBUG_INFO_BTF=y"})

	caps := effectiveCaps(procRoot)
	privileged := os.Geteuid() == 0 || (caps&(1<<capBPF) != 0 && caps&(1<<capPerfmon) != 0)
	add(Check{Name: "privileges", OK: privileged, Detail: fmt.Sprintf("uid %d, effective capabilities %#x", os.Geteuid(), caps),
		Fix: "run as root, or grant CAP_BPF, CAP_PERFMON, CAP_SYS_RESOURCE (and CAP_SYS_PTRACE to read other users' /proc/PID/environ)"})

	_, tracefsErr := os.Stat("/sys/kernel/tracing/events")
	add(Check{Name: "tracefs", OK: tracefsErr == nil, Detail: "/sys/kernel/tracing",
		Fix: "mount -t tracefs tracefs /sys/kernel/tracing (some kernels need it for uprobe attachment)"})

	loadOK, loadDetail := tryLoad()
	add(Check{Name: "bpf_load", OK: loadOK, Detail: loadDetail, Fix: "see the privileges and btf checks; the detail is the kernel's answer"})

	mappings, err := discovery.Scan(procRoot)
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
	add(Check{Name: "gpu_libraries", OK: err == nil, Detail: detail, Fix: "cannot read " + procRoot})

	r.Ready = true
	for _, c := range r.Checks {
		if !c.OK && c.Name != "tracefs" {
			r.Ready = false
		}
	}
	return r
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

func effectiveCaps(procRoot string) uint64 {
	status, err := os.ReadFile(procRoot + "/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return caps
		}
	}
	return 0
}

// Text renders the report for people.
func (r Report) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Fathom node check (Linux %s)\n\n", r.Kernel)
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "  [%s] %-14s %s\n", mark, c.Name, c.Detail)
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
