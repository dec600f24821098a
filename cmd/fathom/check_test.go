//go:build linux

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/collectorconfig"
	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/nodecheck"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

func TestCheckReportsAReadyNodeAndItsGPULibraries(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	w := fakegpu.Start(t, paths, fakegpu.Options{Gate: true, Launches: 1})
	out, err := exec.Command(collectortest.Binary(t), "check", "--json").Output()
	if err != nil {
		t.Fatalf("fathom check: %v\n%s", err, out)
	}
	var r nodecheck.Report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !r.Ready {
		t.Fatalf("node not ready: %+v", r.Checks)
	}
	for _, c := range r.Checks {
		if !c.OK && !c.Advisory {
			t.Errorf("check %s failed: %s", c.Name, c.Detail)
		}
	}
	want := filepath.Join(paths.LibDir, "libcudart.so.12")
	found := false
	for _, l := range r.Libraries {
		for _, pid := range l.PIDs {
			found = found || (l.Path == want && int(pid) == w.Pid && l.Library == "libcudart")
		}
	}
	if !found {
		t.Fatalf("%s mapped by pid %d not reported: %+v", want, w.Pid, r.Libraries)
	}
}

// Without privileges the check says what is missing and how to grant it, and the
// receiver refuses to start with one line that says the same, not a stack trace.
func TestWithoutPrivilegesTheAnswerIsOneClearLine(t *testing.T) {
	privtest.Require(t) // needs root to drop to nobody
	bin := unprivilegedCopy(t)
	nobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}

	check := exec.Command(bin, "check")
	check.SysProcAttr = nobody
	out, err := check.CombinedOutput()
	if err == nil {
		t.Fatalf("check passed as nobody:\n%s", out)
	}
	for _, want := range []string{"[FAIL] privileges", "fix: grant CAP_BPF and CAP_PERFMON (the chart grants them; or run as root on the host)", "won't work: no program loads, so nothing is traced", "not ready"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}

	// Readable by nobody, who runs it.
	cfg := writeReceiverAlone(t, filepath.Join(filepath.Dir(bin), "node.yaml"), 0o644)
	run := exec.Command(bin, "--config", cfg)
	run.SysProcAttr = nobody
	done := make(chan struct{})
	var runOut []byte
	go func() { runOut, err = run.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = run.Process.Kill()
		t.Fatal("collector kept running without privileges")
	}
	if err == nil {
		t.Fatalf("collector started without privileges:\n%s", runOut)
	}
	if !strings.Contains(string(runOut), "gpuebpf: cannot load BPF programs without privileges: run the collector as root, or grant it with `setcap cap_bpf,cap_perfmon") {
		t.Fatalf("no clear privileges line:\n%s", runOut)
	}
	if strings.Contains(string(runOut), "goroutine ") {
		t.Fatalf("a stack trace instead of one line:\n%s", runOut)
	}
}

// receiverAlone is the gpuebpf receiver alone, into the debug exporter: what these
// tests hold to one clear line is the receiver's refusal to start, which a node role
// would put behind its exporter's TLS files and its other components.
const receiverAlone = `
receivers:
  gpuebpf:
exporters:
  debug:
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [gpuebpf]
      exporters: [debug]
`

// writeReceiverAlone writes receiverAlone to path with mode perm.
func writeReceiverAlone(t *testing.T, path string, perm os.FileMode) string {
	t.Helper()
	c, err := collectorconfig.Parse(receiverAlone)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
	return path
}

// unprivilegedCopy puts the binary where nobody can execute it.
func unprivilegedCopy(t *testing.T) string {
	dir, err := os.MkdirTemp("", "fathom-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(collectortest.Binary(t))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "fathom")
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// On a kernel without BTF, `fathom check` says so and what it stops, and the receiver
// refuses to start with one line. The test hides /sys/kernel/btf under a tmpfs in a
// mount namespace of its own, which is what such a kernel looks like from userspace.
func TestWithoutBTFTheAnswerIsOneClearLine(t *testing.T) {
	privtest.Require(t)
	bin := collectortest.Binary(t)
	withoutBTF := func(ctx context.Context, args ...string) *exec.Cmd {
		script := `mount -t tmpfs none /sys/kernel/btf && exec "$0" "$@"`
		return exec.CommandContext(ctx, "unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, bin}, args...)...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	out, err := withoutBTF(ctx, "check").CombinedOutput()
	if err == nil {
		t.Fatalf("check passed without BTF:\n%s", out)
	}
	for _, want := range []string{"[FAIL] btf", "won't work: no program loads: the probes are CO-RE", "fix: the kernel must be built with CONFIG_DEBUG_INFO_BTF=y", "not ready"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}

	cfg := writeReceiverAlone(t, filepath.Join(t.TempDir(), "node.yaml"), 0o600)
	out, err = withoutBTF(ctx, "--config", cfg).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the collector kept running without BTF:\n%s", out)
	}
	if err == nil {
		t.Fatalf("the collector started without BTF:\n%s", out)
	}
	if !strings.Contains(string(out), "gpuebpf: this kernel exposes no BTF (/sys/kernel/btf/vmlinux is missing); it needs CONFIG_DEBUG_INFO_BTF=y, or use mode: synthetic") {
		t.Fatalf("no clear BTF line:\n%s", out)
	}
	if strings.Contains(string(out), "goroutine ") {
		t.Fatalf("a stack trace instead of one line:\n%s", out)
	}
}

// On this machine, with AMD's librocm_smi64.so.1 installed (Debian's librocm-smi64-1,
// ROCm 5.2) and no AMD GPU, `fathom check` shows ROCm SMI's own answer,
// RSMI_STATUS_INIT_ERROR with its text, as an advisory warning with the fix for a
// missing amdgpu driver, and the node stays ready.
func TestCheckNamesROCmSMIsOwnErrorWithoutAnAMDGPU(t *testing.T) {
	privtest.Require(t)
	if _, err := os.Stat("/usr/lib/librocm_smi64.so.1"); err != nil {
		why := "AMD's librocm_smi64.so.1 is not installed (Debian's librocm-smi64-1; `make vendor-libs` installs it)"
		if os.Getenv(privtest.EnvRequire) == "1" {
			t.Fatalf("%s, and %s=1 makes that a failure", why, privtest.EnvRequire)
		}
		t.Skip(why)
	}
	out, err := exec.Command(collectortest.Binary(t), "check", "--json").Output()
	if err != nil {
		t.Fatalf("fathom check: %v\n%s", err, out)
	}
	var r nodecheck.Report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var rocm *nodecheck.Check
	for i := range r.Checks {
		if r.Checks[i].Name == nodecheck.ROCmSMICheck {
			rocm = &r.Checks[i]
		}
	}
	if rocm == nil || rocm.OK || !rocm.Advisory || !strings.Contains(rocm.Detail, "RSMI_STATUS_INIT_ERROR") ||
		!strings.Contains(rocm.Detail, "An error occurred during initialization") || !strings.Contains(rocm.Fix, "modprobe amdgpu") {
		t.Fatalf("rocm_smi check %+v, want a failed advisory check with ROCm SMI's status and the driver's fix", rocm)
	}
	if !r.Ready {
		t.Errorf("an advisory rocm_smi check made the node unready: %+v", r.Checks)
	}
	text, _ := exec.Command(collectortest.Binary(t), "check").CombinedOutput()
	if !strings.Contains(string(text), "[warn] rocm_smi") || !strings.Contains(string(text), "fix: load the amdgpu kernel driver") {
		t.Errorf("fathom check's text lacks the rocm_smi warning:\n%s", text)
	}
	t.Logf("%s", text)
}
