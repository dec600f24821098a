package nodecheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The node collector's capabilities as the chart grants them: BPF, PERFMON,
// SYS_PTRACE, DAC_READ_SEARCH, KILL (CapEff 0xc000080024 in the podman run).
const chartCaps = 1<<capBPF | 1<<capPerfmon | 1<<capSysPtrace | 1<<capDACReadSearch | 1<<capKill

// The loader's message when cilium/ebpf's memlock probe meets an EPERM from bpf().
const memlockMessage = "raise RLIMIT_MEMLOCK: loading BPF programs needs root, or CAP_BPF + CAP_PERFMON (and, before Linux 5.11, CAP_SYS_RESOURCE or a memlock limit that fits the maps); under a container runtime a seccomp profile that allows bpf(): `fathom check` tells which"

func TestParseStatusReadsCapabilitiesAndSeccomp(t *testing.T) {
	status := "Name:\tfathom\nUid:\t0\t0\t0\t0\nCapInh:\t0000000000000000\nCapPrm:\t000000c000080024\n" +
		"CapEff:\t000000c000080024\nCapBnd:\t000000c000080024\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n"
	caps, mode := parseStatus(status)
	if caps != chartCaps || mode != seccompFilter {
		t.Errorf("CapEff %#x Seccomp %d, want %#x and 2", caps, mode, uint64(chartCaps))
	}
	if _, mode := parseStatus("CapEff:\t0\n"); mode != seccompUnknown {
		t.Errorf("a status without Seccomp reads as mode %d", mode)
	}
}

// Each cause of a refused load is named with its own fix: a seccomp filter, missing
// capabilities, a security module, the memlock limit where the kernel counts BPF
// memory against it; and the loader's blame of the memlock limit is corrected where
// it does not.
func TestALoadRefusalNamesItsCause(t *testing.T) {
	host := process{UID: 0, CapEff: 0x1ffffffffff, Seccomp: seccompDisabled, Memlock: 8 << 20, MemcgAccounting: true,
		BPFAnswer: unix.EINVAL, PerfAnswer: unix.EFAULT}
	with := func(change func(*process)) process { p := host; change(&p); return p }
	for _, tc := range []struct {
		name string
		p    process
		// what each check says: ok, and words its detail and fix must hold
		privilegesOK, syscallsOK bool
		privileges, syscalls     []string
		load                     []string // the bpf_load detail and fix after a memlock-blaming failure
	}{{
		name: "root on the host", p: host, privilegesOK: true, syscallsOK: true,
		syscalls: []string{"reach the kernel (seccomp: none)"},
		load:     []string{"not the limit: this kernel charges BPF memory to the memory cgroup", "security module"},
	}, {
		name: "the chart's capabilities under podman's default profile",
		p: with(func(p *process) {
			p.CapEff, p.Seccomp, p.BPFAnswer, p.PerfAnswer = chartCaps, seccompFilter, unix.EPERM, unix.EPERM
		}),
		privilegesOK: true,
		syscalls:     []string{"Seccomp: 2", "refuses bpf() (EPERM) and perf_event_open() (EPERM)", "fathom-node", "Unconfined", "/var/lib/kubelet/seccomp/fathom-node.json"},
		load:         []string{"not the kernel's refusal: the seccomp filter", "the loader said: raise RLIMIT_MEMLOCK", "the chart's fathom-node profile"},
	}, {
		name: "a profile that lets bpf() through but not perf_event_open()",
		p: with(func(p *process) {
			p.CapEff, p.Seccomp, p.PerfAnswer = chartCaps, seccompFilter, unix.ENOSYS
		}),
		privilegesOK: true,
		syscalls:     []string{"refuses perf_event_open() (ENOSYS)", "fathom-node"},
	}, {
		name: "the chart's profile", p: with(func(p *process) { p.CapEff, p.Seccomp = chartCaps, seccompFilter }),
		privilegesOK: true, syscallsOK: true, syscalls: []string{"reach the kernel (seccomp: filter)"},
	}, {
		name: "root with every capability dropped",
		p: with(func(p *process) {
			p.CapEff, p.Seccomp, p.BPFAnswer = 0, seccompDisabled, unix.EPERM // a kernel before 6.5 refuses itself
		}),
		syscallsOK: true,
		privileges: []string{"no CAP_BPF, CAP_PERFMON", "grant CAP_BPF and CAP_PERFMON"},
		load:       []string{memlockMessage, "grant CAP_BPF and CAP_PERFMON (see privileges)"},
	}, {
		name: "CAP_BPF without CAP_PERFMON", p: with(func(p *process) { p.CapEff = 1 << capBPF }),
		syscallsOK: true, privileges: []string{": no CAP_PERFMON"},
	}, {
		name: "CAP_SYS_ADMIN alone", p: with(func(p *process) { p.CapEff = 1 << capSysAdmin }),
		privilegesOK: true, syscallsOK: true,
	}, {
		name: "no capabilities and a filter: both are named",
		p: with(func(p *process) {
			p.CapEff, p.Seccomp, p.BPFAnswer, p.PerfAnswer = 0, seccompFilter, unix.EPERM, unix.EPERM
		}),
		privileges: []string{"no CAP_BPF"},
		syscalls:   []string{"the seccomp filter", "without CAP_BPF a kernel before 6.5 refuses bpf() too"},
	}, {
		name: "a security module, no filter", p: with(func(p *process) { p.BPFAnswer = unix.EPERM }),
		privilegesOK: true, syscalls: []string{"no seccomp filter on this process", "security module"},
		load: []string{"not the kernel's refusal", "SELinux"},
	}, {
		name: "a kernel that counts BPF memory against RLIMIT_MEMLOCK",
		p: with(func(p *process) {
			p.CapEff, p.MemcgAccounting, p.Memlock = chartCaps, false, 64<<10
		}),
		privilegesOK: true, syscallsOK: true,
		privileges: []string{"before 5.11", "CAP_SYS_RESOURCE"},
		load:       []string{"RLIMIT_MEMLOCK is 64 KiB, and this kernel counts BPF maps against it", "--ulimit memlock=-1:-1"},
	}, {
		name: "the same kernel with CAP_SYS_RESOURCE",
		p: with(func(p *process) {
			p.CapEff, p.MemcgAccounting, p.Memlock = chartCaps|1<<capSysResource, false, 64<<10
		}),
		privilegesOK: true, syscallsOK: true,
		load: []string{"security module"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			priv, sys := privilegesCheck(tc.p), syscallsCheck(tc.p)
			if priv.OK != tc.privilegesOK || sys.OK != tc.syscallsOK {
				t.Errorf("privileges ok %v (%s), syscalls ok %v (%s); want %v and %v", priv.OK, priv.Detail, sys.OK, sys.Detail, tc.privilegesOK, tc.syscallsOK)
			}
			for check, words := range map[*Check][]string{&priv: tc.privileges, &sys: tc.syscalls} {
				for _, w := range words {
					if !strings.Contains(check.Detail+" | "+check.Fix, w) {
						t.Errorf("%s lacks %q: %s | %s", check.Name, w, check.Detail, check.Fix)
					}
				}
			}
			if strings.Contains(priv.Fix, "CAP_SYS_RESOURCE") != (!tc.p.MemcgAccounting && tc.p.CapEff&(1<<capSysResource) == 0) {
				t.Errorf("privileges asks for CAP_SYS_RESOURCE only where the kernel counts BPF memory by rlimit: %s", priv.Fix)
			}
			detail, fix := explainLoadFailure(tc.p, memlockMessage)
			for _, w := range tc.load {
				if !strings.Contains(detail+" | "+fix, w) {
					t.Errorf("bpf_load lacks %q: %s | %s", w, detail, fix)
				}
			}
		})
	}
}

// The two questions asked of the real kernel: here, with no filter, both reach it;
// in a child whose seccomp filter answers EPERM to bpf() and perf_event_open() (as
// podman's default profile does), the syscalls check names the filter.
func TestTheSyscallQuestionsTellAFilterFromTheKernel(t *testing.T) {
	if os.Getenv("FATHOM_SECCOMP_CHILD") == "1" {
		seccompChild()
		return
	}
	if _, mode := parseStatus(readStatus(t)); mode != seccompDisabled {
		t.Skipf("this test process already runs under seccomp mode %d", mode)
	}
	bpfAnswer, perfAnswer := askSyscalls()
	if bpfAnswer != unix.EINVAL && !(bpfAnswer == unix.EPERM && !inspectProcess("").canLoad()) {
		t.Errorf("bpf() with an unknown command answered %v, want EINVAL", bpfAnswer)
	}
	if perfAnswer != unix.EFAULT {
		t.Errorf("perf_event_open() without attributes answered %v, want EFAULT", perfAnswer)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestTheSyscallQuestionsTellAFilterFromTheKernel$")
	cmd.Env = append(os.Environ(), "FATHOM_SECCOMP_CHILD=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var c Check
	line, _, _ := strings.Cut(string(out), "\n")
	if err := json.Unmarshal([]byte(line), &c); err != nil {
		t.Fatalf("child said %q: %v", out, err)
	}
	if c.OK || !strings.Contains(c.Detail, "the seccomp filter on this process (Seccomp: 2") ||
		!strings.Contains(c.Detail, "perf_event_open() (EPERM)") || c.Fix != SeccompFix {
		t.Errorf("under a filter refusing bpf and perf_event_open: %+v", c)
	}
}

func readStatus(t *testing.T) string {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// seccompChild installs a filter on every thread that answers EPERM to bpf() and
// perf_event_open() and lets everything else through, then prints the syscalls check.
func seccompChild() {
	runtime.LockOSThread()
	const (
		ldAbsW  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeqK    = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		retK    = unix.BPF_RET | unix.BPF_K
		nrField = 0 // struct seccomp_data: nr first
	)
	filter := []unix.SockFilter{
		{Code: ldAbsW, K: nrField},
		{Code: jeqK, Jt: 2, Jf: 0, K: unix.SYS_BPF},
		{Code: jeqK, Jt: 1, Jf: 0, K: unix.SYS_PERF_EVENT_OPEN},
		{Code: retK, K: unix.SECCOMP_RET_ALLOW},
		{Code: retK, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		panic(err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		panic(errno)
	}
	out, _ := json.Marshal(syscallsCheck(inspectProcess("")))
	os.Stdout.Write(append(out, '\n'))
	os.Exit(0)
}
