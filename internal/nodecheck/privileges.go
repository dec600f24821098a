package nodecheck

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Three things refuse a BPF load with the same EPERM, and each has its own fix: a
// seccomp filter (a container runtime's default profile refuses bpf() and
// perf_event_open() to a container without CAP_SYS_ADMIN, root or not), missing
// capabilities, and, on kernels before 5.11, RLIMIT_MEMLOCK. cilium/ebpf reads the
// first as the third: its memlock probe takes any EPERM from bpf() for an exhausted
// limit, so the loader's own message blames the limit. process tells them apart.

// Linux capability numbers (include/uapi/linux/capability.h).
const (
	capDACReadSearch = 2
	capKill          = 5
	capSysPtrace     = 19
	capSysAdmin      = 21
	capSysResource   = 24
	capPerfmon       = 38
	capBPF           = 39
)

// capNames names the capabilities the node collector is granted, and those that stand
// in for them.
var capNames = map[int]string{
	capDACReadSearch: "CAP_DAC_READ_SEARCH", capKill: "CAP_KILL", capSysPtrace: "CAP_SYS_PTRACE",
	capSysAdmin: "CAP_SYS_ADMIN", capSysResource: "CAP_SYS_RESOURCE", capPerfmon: "CAP_PERFMON", capBPF: "CAP_BPF",
}

// Seccomp modes as /proc/PID/status shows them (Documentation/filesystems/proc.rst).
const (
	seccompUnknown  = -1
	seccompDisabled = 0
	seccompStrict   = 1
	seccompFilter   = 2
)

// memcgAccountingKernel is the first kernel that charges BPF maps to the memory cgroup
// instead of RLIMIT_MEMLOCK (5.11).
var memcgAccountingKernel = [2]int{5, 11}

// process is what decides whether this process may load and attach BPF programs.
type process struct {
	UID    int
	CapEff uint64
	// Seccomp is /proc/self/status's Seccomp field: 0 none, 1 strict, 2 a filter.
	Seccomp int
	// Memlock is RLIMIT_MEMLOCK's soft limit in bytes (unix.RLIM_INFINITY: none).
	Memlock uint64
	// MemcgAccounting: the kernel charges BPF memory to the memory cgroup, and the
	// memlock limit does not bound it.
	MemcgAccounting bool
	// BPFAnswer is what bpf() with a command no kernel defines answers: EINVAL once
	// the call reaches the kernel's BPF code. A filter in front of it answers
	// otherwise (podman's and Docker's default profiles: EPERM).
	BPFAnswer unix.Errno
	// PerfAnswer is what perf_event_open() without attributes answers: EFAULT from
	// the kernel, which reads the attributes before it checks any right.
	PerfAnswer unix.Errno
}

func (p process) has(capability int) bool { return p.CapEff&(1<<capability) != 0 }

// canLoad: CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN, which implies both.
func (p process) canLoad() bool {
	return p.has(capSysAdmin) || (p.has(capBPF) && p.has(capPerfmon))
}

// inspectProcess reads this process's rights and asks the kernel the two questions.
func inspectProcess(kernel string) process {
	p := process{UID: os.Geteuid(), Seccomp: seccompUnknown, Memlock: unix.RLIM_INFINITY}
	if status, err := os.ReadFile("/proc/self/status"); err == nil {
		p.CapEff, p.Seccomp = parseStatus(string(status))
	}
	var limit unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &limit) == nil {
		p.Memlock = limit.Cur
	}
	major, minor := kernelVersion(kernel)
	p.MemcgAccounting = major > memcgAccountingKernel[0] || (major == memcgAccountingKernel[0] && minor >= memcgAccountingKernel[1])
	p.BPFAnswer, p.PerfAnswer = askSyscalls()
	return p
}

// parseStatus reads CapEff and Seccomp from /proc/PID/status.
func parseStatus(status string) (capEff uint64, seccomp int) {
	seccomp = seccompUnknown
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			capEff, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
		if v, ok := strings.CutPrefix(line, "Seccomp:"); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				seccomp = n
			}
		}
	}
	return capEff, seccomp
}

// askSyscalls makes two calls that do nothing and fail in the kernel with a known
// answer, so that any other answer came from whatever stands in front of the kernel.
func askSyscalls() (bpfAnswer, perfAnswer unix.Errno) {
	// The union bpf_attr's first 64 bytes, zero, and a command past every defined one:
	// the kernel copies the attributes, asks the LSMs, and answers EINVAL.
	var attr [64]byte
	const unknownCommand = 1 << 20
	_, _, bpfAnswer = unix.Syscall(unix.SYS_BPF, unknownCommand, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	// No attributes: the kernel's first read of them faults (EFAULT).
	pid := -1
	_, _, perfAnswer = unix.Syscall6(unix.SYS_PERF_EVENT_OPEN, 0, 0, uintptr(pid), ^uintptr(0), 0, 0)
	return bpfAnswer, perfAnswer
}

// SeccompFix says how to let the node collector's system calls through.
const SeccompFix = "the container's seccomp profile refuses them: use the chart's fathom-node profile " +
	"(node.seccompProfile, type Localhost, fathom-node.json installed in each node's kubelet seccomp directory, " +
	"e.g. /var/lib/kubelet/seccomp/fathom-node.json) or type Unconfined; " +
	"with podman or docker, --security-opt seccomp=fathom-node.json (or seccomp=unconfined)"

// syscallsCheck says whether bpf() and perf_event_open() reach the kernel.
func syscallsCheck(p process) Check {
	c := Check{Name: "syscalls", Impact: "no program loads (bpf) and no uprobe attaches through the uprobe PMU (perf_event_open), whatever the capabilities"}
	var refused []string
	if p.BPFAnswer != unix.EINVAL {
		// A kernel before 6.5 with unprivileged BPF disabled (the distributions'
		// default) answers EPERM itself to a process without CAP_BPF: that one is the
		// privileges check's to report.
		if !(p.BPFAnswer == unix.EPERM && !p.canLoad() && p.Seccomp != seccompFilter) {
			refused = append(refused, fmt.Sprintf("bpf() (%s)", errnoName(p.BPFAnswer)))
		}
	}
	if p.PerfAnswer != unix.EFAULT {
		refused = append(refused, fmt.Sprintf("perf_event_open() (%s)", errnoName(p.PerfAnswer)))
	}
	mode := seccompName(p.Seccomp)
	if len(refused) == 0 {
		c.OK = true
		c.Detail = "bpf() and perf_event_open() reach the kernel (seccomp: " + mode + ")"
		return c
	}
	what := strings.Join(refused, " and ")
	switch p.Seccomp {
	case seccompFilter, seccompStrict:
		c.Detail = fmt.Sprintf("the seccomp filter on this process (Seccomp: %d in /proc/self/status) refuses %s", p.Seccomp, what)
		c.Fix = SeccompFix
		if !p.canLoad() && p.BPFAnswer == unix.EPERM {
			c.Detail += "; without CAP_BPF a kernel before 6.5 refuses bpf() too (see privileges)"
		}
	case seccompDisabled:
		if p.BPFAnswer == unix.ENOSYS || p.PerfAnswer == unix.ENOSYS {
			c.Detail = what + ": this kernel lacks the system call"
			c.Fix = "a kernel built with CONFIG_BPF_SYSCALL and CONFIG_PERF_EVENTS (every major distribution's is)"
			return c
		}
		c.Detail = fmt.Sprintf("%s refused before the kernel's own checks, with no seccomp filter on this process: a security module (SELinux, AppArmor, lockdown) refuses them", what)
		c.Fix = "allow bpf and perf_event in the security module's policy for the collector (SELinux: the bpf and perf_event classes; AppArmor: capability bpf, perfmon)"
	default:
		c.Detail = fmt.Sprintf("%s refused before the kernel's own checks (seccomp mode %s)", what, mode)
		c.Fix = SeccompFix
	}
	return c
}

// privilegesCheck says whether the effective capabilities allow loading BPF. Root in
// a container holds only what the runtime grants, so the uid alone decides nothing.
func privilegesCheck(p process) Check {
	c := Check{Name: "privileges", OK: p.canLoad(),
		Fix: "grant CAP_BPF and CAP_PERFMON (the chart grants them; or run as root on the host); " +
			"CAP_SYS_PTRACE reads other users' /proc/PID/environ, CAP_DAC_READ_SEARCH finds a gone process's cgroup by id, " +
			"CAP_KILL continues a process held at its first load of a library",
		Impact: "no program loads, so nothing is traced; the receiver refuses to start in ebpf mode (mode: synthetic needs no privileges)"}
	var missing []string
	if !p.has(capSysAdmin) {
		for _, cp := range []int{capBPF, capPerfmon} {
			if !p.has(cp) {
				missing = append(missing, capNames[cp])
			}
		}
	}
	c.Detail = fmt.Sprintf("uid %d, effective capabilities %#x", p.UID, p.CapEff)
	if len(missing) > 0 {
		c.Detail += ": no " + strings.Join(missing, ", ")
	}
	if !p.MemcgAccounting && !p.has(capSysResource) && p.Memlock != unix.RLIM_INFINITY {
		c.Fix += "; on this kernel (before 5.11) BPF maps count against RLIMIT_MEMLOCK: grant CAP_SYS_RESOURCE or raise the limit"
	}
	return c
}

// explainLoadFailure names the cause of a failed BPF load, detail being the loader's
// error, and the fix for that cause.
func explainLoadFailure(p process, detail string) (string, string) {
	syscalls := syscallsCheck(p)
	switch {
	case !syscalls.OK:
		return "not the kernel's refusal: " + syscalls.Detail + " (the loader said: " + detail + ")", syscalls.Fix
	case !p.canLoad():
		return detail, "grant CAP_BPF and CAP_PERFMON (see privileges)"
	case !p.MemcgAccounting && !p.has(capSysResource) && p.Memlock != unix.RLIM_INFINITY:
		return fmt.Sprintf("%s (RLIMIT_MEMLOCK is %s, and this kernel counts BPF maps against it)", detail, memlockName(p.Memlock)),
			"raise the locked-memory limit (LimitMEMLOCK=infinity in a unit, --ulimit memlock=-1:-1 with podman or docker) or grant CAP_SYS_RESOURCE"
	case strings.Contains(detail, "RLIMIT_MEMLOCK"):
		// The loader blames the limit for an EPERM it could not place; this kernel
		// charges BPF memory to the memory cgroup, so the limit is not why.
		return detail + " (not the limit: this kernel charges BPF memory to the memory cgroup)",
			"the kernel refused bpf() with every capability present and no seccomp filter in the way: look for a security module (SELinux, AppArmor, lockdown) or the memory cgroup's limit"
	}
	return detail, "see the privileges and btf checks; the detail is the kernel's answer"
}

func seccompName(mode int) string {
	switch mode {
	case seccompDisabled:
		return "none"
	case seccompStrict:
		return "strict"
	case seccompFilter:
		return "filter"
	}
	return "unknown"
}

func errnoName(e unix.Errno) string {
	if name := unix.ErrnoName(e); name != "" {
		return name
	}
	if e == 0 {
		return "no error"
	}
	return e.Error()
}

func memlockName(limit uint64) string {
	if limit == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return fmt.Sprintf("%d KiB", limit/1024)
}
