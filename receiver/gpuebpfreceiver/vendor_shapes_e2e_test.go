//go:build linux

package gpuebpfreceiver_test

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// The shapes NVIDIA's libcudart comes in on users' machines, each tested on the real
// libcudart.so.11.8.89 (make vendor-libs) except the runtime linked into an executable,
// whose NVIDIA form (libcudart_static.a, in Debian's 774 MB nvidia-cuda-dev) is not
// fetched: that shape is tested on the fake runtime linked the same way.

// shapePlan is what each process makes through its libcudart: a training step's mix of
// launches, copies, syncs and allocations, a different count for each function, so that
// calls counted under another function's name cannot add up right.
var shapePlan = map[string]int64{
	"cudaLaunchKernel": 3000, "cudaMemcpy": 150, "cudaMemcpyAsync": 600,
	"cudaStreamSynchronize": 450, "cudaDeviceSynchronize": 120, "cudaMalloc": 250, "cudaFree": 260,
}

// vendorProcess is how a test starts fakegpu-vendor: under a launcher (which must exec
// it in the same process), with extra flags and environment.
type vendorProcess struct {
	launcher, args, env []string
}

// runVendorProcess starts fakegpu-vendor as p says with plan, waits until it sits at its
// gate with its libraries mapped, calls atGate with its pid, then lets it run and returns
// its report.
func runVendorProcess(t *testing.T, p vendorProcess, plan map[string]int64, atGate func(pid int)) vendorReport {
	t.Helper()
	bin := filepath.Join(fakegpu.Build(t).Out, "bin", "fakegpu-vendor")
	var items []string
	for api, n := range plan {
		items = append(items, api+"="+strconv.FormatInt(n, 10))
	}
	gate := t.TempDir()
	ready, goFile := filepath.Join(gate, "ready"), filepath.Join(gate, "go")
	argv := append(append(append([]string{}, p.launcher...), bin), p.args...)
	argv = append(argv, "--plan", strings.Join(items, ","), "--ready-file", ready, "--wait-file", goFile)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), p.env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("fakegpu-vendor exited before its gate: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("fakegpu-vendor never reached its gate\n%s", stderr.String())
		}
	}
	atGate(cmd.Process.Pid)
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err // for the cleanup
		if err != nil {
			t.Fatalf("fakegpu-vendor: %v\n%s", err, stderr.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("fakegpu-vendor still running after 2 minutes\n%s", stderr.String())
	}
	var r vendorReport
	if err := json.Unmarshal([]byte(stdout.String()), &r); err != nil {
		t.Fatalf("fakegpu-vendor's report %q: %v", stdout.String(), err)
	}
	if r.Pid != cmd.Process.Pid {
		t.Fatalf("the report is from pid %d, the process started is %d", r.Pid, cmd.Process.Pid)
	}
	return r
}

// copyFile copies src to dst (a new inode: no probe is on it), creating dst's directory.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// mapsOf returns pid's /proc/PID/maps.
func mapsOf(t *testing.T, pid int) string {
	t.Helper()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	return string(maps)
}

// requireMapsOnly fails unless pid maps want, and none of the other libcudart files.
func requireMapsOnly(t *testing.T, pid int, want string, others ...string) {
	t.Helper()
	maps := mapsOf(t, pid)
	if !strings.Contains(maps, " "+want+"\n") {
		t.Fatalf("pid %d does not map %s; its maps:\n%s", pid, want, maps)
	}
	for _, other := range others {
		if strings.Contains(maps, " "+other+"\n") {
			t.Fatalf("pid %d maps %s as well as %s: the test would not tell which was probed", pid, other, want)
		}
	}
}

// requireProbedFor waits until the collector probes path, first for pid, with every
// libcudart function found.
func requireProbedFor(t *testing.T, col *collectortest.Process, path string, pid int) {
	t.Helper()
	line := waitProbing(t, col, path)
	t.Logf("probing library %s", line[strings.Index(line, `"path"`):])
	var attached struct {
		FirstPID  int      `json:"first_pid"`
		Functions int      `json:"functions"`
		Missing   []string `json:"missing"`
	}
	if i := strings.Index(line, "{"); i < 0 || json.Unmarshal([]byte(line[i:]), &attached) != nil {
		t.Fatalf("cannot read the probing line %q", line)
	}
	want := 0
	for _, api := range probes.APIs {
		if api.Library == probes.LibCUDART {
			want++
		}
	}
	if attached.FirstPID != pid {
		t.Errorf("%s was first probed for pid %d, not the process under test (%d)", path, attached.FirstPID, pid)
	}
	if attached.Functions != want || len(attached.Missing) != 0 {
		t.Errorf("%s: %d functions probed, missing %v; want all %d", path, attached.Functions, attached.Missing, want)
	}
	for _, l := range strings.Split(col.Output(), "\n") {
		if strings.Contains(l, "cannot probe library") && strings.Contains(l, path) {
			t.Errorf("the collector warned about %s: %s", path, l)
		}
	}
}

// runtimeCalls sums cuda.api.calls of one runtime function over its series (the copies
// carry a direction).
func runtimeCalls(v processView, api string) int64 {
	var n int64
	for key, p := range v.series {
		if strings.HasPrefix(key, semconv.MetricCUDAAPICalls+"{") && strings.Contains(key, semconv.CUDAAPIName+"="+api+",") &&
			strings.Contains(key, semconv.CUDALibrary+"="+string(probes.LibCUDART)) {
			n += p.value
		}
	}
	return n
}

// requireCountedExactly waits for pid's exports to reach want (calls per runtime
// function), then checks each function's calls, errors (errs; nil for none) and
// duration count.
func requireCountedExactly(t *testing.T, sink *collectortest.Sink, pid int, want, errs map[string]int64) {
	t.Helper()
	v := waitFor(t, sink, pid, "every call", func(v processView) bool {
		for api, n := range want {
			if runtimeCalls(v, api) != n {
				return false
			}
		}
		return true
	})
	var total int64
	for api, n := range want {
		total += n
		if got := runtimeCalls(v, api); got != n {
			t.Errorf("%s: %d calls exported, the process made %d", api, got, n)
		}
		if got := v.series[seriesKey(semconv.MetricCUDAAPIErrors, attrs(semconv.CUDAAPIName, api))].value; got != errs[api] {
			t.Errorf("%s: %d errors exported, the process had %d", api, got, errs[api])
		}
		hist := v.series[seriesKey(semconv.MetricCUDAAPIDuration, attrs(semconv.CUDAAPIName, api, semconv.CUDALibrary, string(probes.LibCUDART)))]
		if hist.count != uint64(n) {
			t.Errorf("%s: duration histogram counts %d calls, want %d", api, hist.count, n)
		}
	}
	t.Logf("%d runtime calls in %d functions, each counted exactly", total, len(want))
}

// requirePlanMade checks the vendor process made every planned call, and returns the
// calls and errors it reports.
func requirePlanMade(t *testing.T, report vendorReport, plan map[string]int64) (calls, errs map[string]int64) {
	t.Helper()
	calls, errs = map[string]int64{}, map[string]int64{}
	for api, n := range plan {
		made := report.APIs[api]
		if made.Calls != n {
			t.Errorf("%s: the process made %d calls, planned %d", api, made.Calls, n)
		}
		calls[api], errs[api] = made.Calls, made.Errors
	}
	return calls, errs
}

// countVendorShape runs fakegpu-vendor as p says under a collector started while it
// waits at its gate, checks that it maps inside (the libcudart of the shape, as the
// process names it) and that the collector probes that file, for it, then that every
// planned call is counted exactly.
func countVendorShape(t *testing.T, libs vendorLibs, p vendorProcess, inside string, atGate func(pid int)) {
	t.Helper()
	sink, col := startCollectorWith(t, "")
	report := runVendorProcess(t, p, shapePlan, func(pid int) {
		if atGate != nil {
			atGate(pid)
		}
		requireMapsOnly(t, pid, inside, libs.cudart)
		requireProbedFor(t, col, inside, pid)
	})
	calls, errs := requirePlanMade(t, report, shapePlan)
	requireCountedExactly(t, sink, report.Pid, calls, errs)
	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}

// sitePackages is a Python environment's site-packages directory under a test's own
// temporary directory.
func sitePackages(t *testing.T) string {
	return filepath.Join(t.TempDir(), "venv", "lib", "python3.11", "site-packages")
}

// pip's nvidia-cuda-runtime-cu11 wheel installs NVIDIA's runtime as a plain file
// named by its soname, site-packages/nvidia/cuda_runtime/lib/libcudart.so.11.0, and
// PyTorch loads it by that full path. A process that does the same with NVIDIA's
// libcudart.so.11.8.89, copied there, is probed in that file and counted exactly.
func TestVendorShapeNVIDIAWheelUnderSitePackages(t *testing.T) {
	privtest.Require(t)
	libs := requireVendorLibs(t)
	wheel := filepath.Join(sitePackages(t), "nvidia", "cuda_runtime", "lib", "libcudart.so.11.0")
	copyFile(t, libs.cudart, wheel)
	countVendorShape(t, libs, vendorProcess{
		args: []string{"--cudart", wheel},
		env:  []string{"LD_LIBRARY_PATH=" + libs.dir}, // libcuda.so.1
	}, wheel, nil)
}

// torchSoname sets the copy's SONAME to its file name, as auditwheel does for the
// libraries it grafts into a wheel, with patchelf when this machine has it. It returns
// the SONAME the copy ends up with.
func torchSoname(t *testing.T, path string) string {
	t.Helper()
	if patchelf, err := exec.LookPath("patchelf"); err == nil {
		if out, err := exec.Command(patchelf, "--set-soname", filepath.Base(path), path).CombinedOutput(); err != nil {
			t.Fatalf("patchelf --set-soname: %v\n%s", err, out)
		}
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names, err := f.DynString(elf.DT_SONAME)
	if err != nil || len(names) != 1 {
		t.Fatalf("%s: SONAME %v: %v", path, names, err)
	}
	return names[0]
}

// PyTorch wheels that bundle the runtime ship it in torch/lib under a hashed name,
// libcudart-<first 8 hex digits of its sha256>.so.11.0, its SONAME set to that name
// (auditwheel's repair). NVIDIA's libcudart.so.11.8.89 copied there under that name is
// probed in that file and counted exactly. The SONAME is patched when patchelf is on
// PATH; otherwise the copy keeps NVIDIA's (libcudart.so.11.0): discovery goes by the
// file name a process maps, never the SONAME.
func TestVendorShapeTorchLibHashedCopy(t *testing.T) {
	privtest.Require(t)
	libs := requireVendorLibs(t)
	data, err := os.ReadFile(libs.cudart)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	hashed := filepath.Join(sitePackages(t), "torch", "lib", "libcudart-"+hex.EncodeToString(sum[:4])+".so.11.0")
	copyFile(t, libs.cudart, hashed)
	soname := torchSoname(t, hashed)
	t.Logf("%s, SONAME %s", filepath.Base(hashed), soname)
	countVendorShape(t, libs, vendorProcess{
		args: []string{"--cudart", hashed},
		env:  []string{"LD_LIBRARY_PATH=" + libs.dir},
	}, hashed, nil)
}

// A container's libcudart: NVIDIA's libcudart.so.11.8.89 and libcuda, copied to a tmpfs
// mounted in the process's own mount namespace (unshare --mount), loaded by soname
// through LD_LIBRARY_PATH as in an image. The path the process maps does not exist on
// the host; the collector reaches the file through /proc/PID/root, probes it and
// counts every call exactly.
func TestVendorShapeContainerLibraryThroughProcRoot(t *testing.T) {
	privtest.Require(t)
	libs := requireVendorLibs(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("needs unshare (util-linux) to give the process a mount namespace: %v", err)
	}
	root := filepath.Join(t.TempDir(), "ctr-root") // empty on the host; a tmpfs in the namespace
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	libDir := filepath.Join(root, "usr", "local", "cuda", "lib64")
	script := `set -e
root=$1 lib=$2 cudart=$3 cuda=$4
shift 4
mount -t tmpfs fathom-ctr "$root"
mkdir -p "$lib"
cp "$cudart" "$cuda" "$lib/"
ln -s "$(basename "$cudart")" "$lib/libcudart.so.11.0"
ln -s "$(basename "$cuda")" "$lib/libcuda.so.1"
export LD_LIBRARY_PATH="$lib"
exec "$@"`
	inside := filepath.Join(libDir, filepath.Base(libs.cudart))
	countVendorShape(t, libs, vendorProcess{
		launcher: []string{"unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", root, libDir, libs.cudart, libs.cuda},
	}, inside, func(pid int) {
		if _, err := os.Stat(inside); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s is visible from the host (stat: %v): the test would not exercise /proc/PID/root", inside, err)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/root%s", pid, inside)); err != nil {
			t.Fatalf("%s is not reachable through /proc/%d/root either: %v", inside, pid, err)
		}
	})
}

// The CUDA runtime linked into the executable as nvcc links libcudart_static.a by
// default, its functions in the executable's .symtab only (not exported): no libcudart
// file is mapped, and discovery finds the runtime in the process's executable itself. The
// fake runtime stands in for NVIDIA's static one, which Debian ships only in the 774 MB
// nvidia-cuda-dev. The process starts after the collector, so the exec's scans find
// it; every runtime call it makes is counted exactly.
func TestVendorShapeRuntimeLinkedIntoTheExecutable(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	// A copy of the program: an executable no probe is on, whatever ran before.
	exe := filepath.Join(t.TempDir(), "bin", "train")
	copyFile(t, paths.WorkloadStatic, exe)
	static := paths
	static.Workload = exe

	sink, col := startCollectorWith(t, "")
	w := fakegpu.Start(t, static, fakegpu.Options{
		Gate: true, Steps: 10, Launches: 3000, H2D: 150, H2DAsync: 600, Syncs: 450, Allocs: 250,
		Env: []string{"LD_LIBRARY_PATH=" + paths.LibDir}, // libcuda.so.1
	})
	maps := mapsOf(t, w.Pid)
	if strings.Contains(maps, "libcudart") {
		t.Fatalf("pid %d maps a libcudart file: the runtime is not only in its executable\n%s", w.Pid, maps)
	}
	requireProbedFor(t, col, exe, w.Pid)
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	report, err := w.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for _, api := range probes.APIs {
		if api.Library == probes.LibCUDART && report.Calls[api.Symbol] > 0 {
			want[api.Symbol] = report.Calls[api.Symbol]
		}
	}
	// (Its setup allocates its buffers besides the 250 allocations asked for.)
	for api, n := range map[string]int64{"cudaLaunchKernel": 3000, "cudaMemcpy": 150, "cudaMemcpyAsync": 600} {
		if want[api] != n {
			t.Errorf("%s: the workload made %d calls, want %d", api, want[api], n)
		}
	}
	if want["cudaMalloc"] < 250 || want["cudaFree"] < 250 {
		t.Errorf("the workload made %d cudaMalloc and %d cudaFree calls, want at least 250 each", want["cudaMalloc"], want["cudaFree"])
	}
	// The fake runtime fails no call.
	requireCountedExactly(t, sink, w.Pid, want, nil)
	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}
