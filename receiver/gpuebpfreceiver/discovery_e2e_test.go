//go:build linux

package gpuebpfreceiver_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// startCollectorWith runs a metrics-only node collector whose receiver also has
// receiverYAML (unindented lines under gpuebpf).
func startCollectorWith(t *testing.T, receiverYAML string) (*collectortest.Sink, *collectortest.Process) {
	return startNodeCollector(t, nodeConfig("collection_interval: 300ms\nlogs:\n  policy: none\n"+receiverYAML, false))
}

var cudartLaunches = seriesKey(semconv.MetricCUDAAPICalls, attrs("cuda.api.name", "cudaLaunchKernel", "cuda.library", "libcudart"))

// probingLine returns the collector's "probing library" log line for path, or "".
func probingLine(col *collectortest.Process, path string) string {
	quoted, _ := json.Marshal(path)
	for _, line := range strings.Split(col.Output(), "\n") {
		if strings.Contains(line, "probing library") && strings.Contains(line, `"path": `+string(quoted)) {
			return line
		}
	}
	return ""
}

// waitProbing waits (bounded) until the collector logs that it probes path.
func waitProbing(t *testing.T, col *collectortest.Process, path string) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if line := probingLine(col, path); line != "" {
			return line
		}
	}
	t.Fatalf("the collector never logged probing %s; its output:\n%s", path, col.Output())
	return ""
}

// privateCUDA copies the fake libcudart and libcuda (what fakegpu-workload needs) to a
// directory of the test's own: files no other process on the host maps, whatever other
// tests run meanwhile.
func privateCUDA(t *testing.T, paths fakegpu.Paths) string {
	t.Helper()
	return privateLibs(t, paths.Cudart, paths.Cuda)
}

// privateLibs copies library files into a directory of their own: new inodes, which no
// process has mapped and no probe is on.
func privateLibs(t *testing.T, files ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "lib")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, src := range files {
		in, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.OpenFile(filepath.Join(dir, filepath.Base(src)), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(out, in)
		in.Close()
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A process that starts after the collector, mapping a libcudart no process had mapped
// at the collector's start, is found through the exec that started it (the periodic
// rescan is an hour away), and every launch it makes once released is counted.
func TestDiscoveryFindsAProcessThatStartsLater(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	lib := privateCUDA(t, paths)
	cudart := filepath.Join(lib, filepath.Base(paths.Cudart))

	sink, col := startCollectorWith(t, "discovery:\n  rescan_interval: 1h")
	if line := probingLine(col, cudart); line != "" {
		t.Fatalf("the collector probed %s before any process mapped it: %s", cudart, line)
	}

	w := fakegpu.Start(t, paths, fakegpu.Options{
		Gate: true, Steps: 5, Launches: 1500,
		Env: []string{"LD_LIBRARY_PATH=" + lib},
	})
	line := waitProbing(t, col, cudart)
	t.Logf("found after its exec: %s", line)
	if !strings.Contains(line, fmt.Sprintf(`"first_pid": %d`, w.Pid)) {
		t.Errorf("%s was first probed for another process than the workload (pid %d): %s", cudart, w.Pid, line)
	}
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	report, err := w.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	v := waitFor(t, sink, w.Pid, "every launch", func(v processView) bool {
		return v.series[cudartLaunches].value == report.Calls["cudaLaunchKernel"]
	})
	if got := v.value(t, cudartLaunches); got != report.Calls["cudaLaunchKernel"] || got != 1500 {
		t.Errorf("launches %d, workload made %d, want 1500", got, report.Calls["cudaLaunchKernel"])
	}

	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}

// containerLauncher runs fakegpu-workload in a mount namespace of its own, where its
// CUDA libraries sit on a tmpfs the host cannot see: as in a container, the library's
// path in /proc/PID/maps opens only through /proc/PID/root. unshare, sh and the
// workload are one process, exec after exec. It returns the launcher and libcudart's
// path inside the namespace.
func containerLauncher(t *testing.T, paths fakegpu.Paths) (launcher []string, libPath string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "ctr-root") // empty on the host; a tmpfs in the namespace
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	libDir := filepath.Join(root, "usr", "lib", "fathom-ctr")
	script := `set -e
root=$1 lib=$2 cudart=$3 cuda=$4
shift 4
mount -t tmpfs fathom-ctr "$root"
mkdir -p "$lib"
cp "$cudart" "$cuda" "$lib/"
export LD_LIBRARY_PATH="$lib"
exec "$@"`
	launcher = []string{"unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", root, libDir, paths.Cudart, paths.Cuda}
	return launcher, filepath.Join(libDir, filepath.Base(paths.Cudart))
}

// A library that exists only in a process's own mount namespace (a container image's
// libcudart) is probed through /proc/PID/root, and the process's launches are counted.
func TestDiscoveryReadsContainerLibrariesThroughProcRoot(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	launcher, libPath := containerLauncher(t, paths)
	w := fakegpu.Start(t, paths, fakegpu.Options{Gate: true, Steps: 5, Launches: 1200, Launcher: launcher})
	// The workload maps the namespace's copy, a path that does not open on the host.
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", w.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(maps), libPath) {
		t.Fatalf("pid %d does not map %s; its maps:\n%s", w.Pid, libPath, maps)
	}
	if _, err := os.Stat(libPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s is visible from the host (stat: %v): the test would not exercise /proc/PID/root", libPath, err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/root%s", w.Pid, libPath)); err != nil {
		t.Fatalf("not reachable through /proc/PID/root either: %v", err)
	}

	// Held at its gate, the workload is found by the collector's first scan.
	sink, col := startCollectorWith(t, "")
	line := waitProbing(t, col, libPath)
	t.Logf("found in its mount namespace: %s", line)
	if !strings.Contains(line, fmt.Sprintf(`"first_pid": %d`, w.Pid)) {
		t.Errorf("%s probed for another process than pid %d: %s", libPath, w.Pid, line)
	}
	// (Other tests' processes may vanish mid-scan; only this library's warnings count.)
	for _, l := range strings.Split(col.Output(), "\n") {
		if strings.Contains(l, "cannot probe library") && strings.Contains(l, libPath) {
			t.Errorf("the collector warned about the namespaced library: %s", l)
		}
	}
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	report, err := w.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if report.Pid != w.Pid {
		t.Fatalf("the report is from pid %d, the namespaced workload is %d", report.Pid, w.Pid)
	}
	v := waitFor(t, sink, w.Pid, "every launch", func(v processView) bool {
		return v.series[cudartLaunches].value == report.Calls["cudaLaunchKernel"]
	})
	if got := v.value(t, cudartLaunches); got != report.Calls["cudaLaunchKernel"] || got != 1200 {
		t.Errorf("launches %d, workload made %d, want 1200", got, report.Calls["cudaLaunchKernel"])
	}

	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}

// With targets.all false and one pid named, only that process is traced: another
// process calling the same probed library, even first, never shows up.
func TestTargetsTraceOnlyTheNamedPID(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	named := fakegpu.Start(t, paths, fakegpu.Options{Gate: true, Steps: 4, Launches: 800})
	other := fakegpu.Start(t, paths, fakegpu.Options{Gate: true, Steps: 4, Launches: 500})

	sink, col := startCollectorWith(t, fmt.Sprintf("targets:\n  all: false\n  pids: [%d]", named.Pid))

	// The other process runs to the end first: had it been traced, its calls would be in
	// the exports that carry the named process's.
	if err := other.Release(); err != nil {
		t.Fatal(err)
	}
	otherReport, err := other.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := named.Release(); err != nil {
		t.Fatal(err)
	}
	report, err := named.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	v := waitFor(t, sink, named.Pid, "every launch", func(v processView) bool {
		return v.series[cudartLaunches].value == report.Calls["cudaLaunchKernel"]
	})
	if got := v.value(t, cudartLaunches); got != report.Calls["cudaLaunchKernel"] || got != 800 {
		t.Errorf("launches %d, workload made %d, want 800", got, report.Calls["cudaLaunchKernel"])
	}
	if otherReport.Calls["cudaLaunchKernel"] != 500 {
		t.Errorf("the other workload made %d launches, want 500", otherReport.Calls["cudaLaunchKernel"])
	}
	// Two more exports after the one that completed the named process's count.
	batches := len(sink.Metrics())
	for deadline := time.Now().Add(20 * time.Second); len(sink.Metrics()) < batches+2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no further exports after %d batches", batches)
		}
	}
	pids := exportedPIDs(sink)
	if slices.Contains(pids, int64(other.Pid)) {
		t.Errorf("pid %d is not a target but was exported (exported: %v); its series:\n%s", other.Pid, pids, view(sink, other.Pid).keys())
	}
	if !slices.Equal(pids, []int64{int64(named.Pid)}) {
		t.Errorf("exported processes %v, want only the target %d (other: %d)", pids, named.Pid, other.Pid)
	}
	if !strings.Contains(col.Output(), "probing library") {
		t.Errorf("the collector probed no library; output:\n%s", col.Output())
	}

	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}

// A short job that starts after the collector, on a libcudart no process had mapped,
// and is done long before the first post-exec scan (200 ms): its libraries are attached
// as the loader maps them, before its first call, and every launch is counted. Without
// attach on first use the same job's start is lost.
func TestAttachOnFirstUseSeesAShortJobWhole(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	// The hold stands for the time between loading the libraries and the first call
	// (PyTorch spends seconds importing); it is well under the 200 ms scan.
	job := fakegpu.Options{Steps: 5, Launches: 1500, Hold: 30 * time.Millisecond}

	for _, onMap := range []bool{true, false} {
		t.Run(fmt.Sprintf("attach_on_map=%v", onMap), func(t *testing.T) {
			lib := privateCUDA(t, paths)
			cudart := filepath.Join(lib, filepath.Base(paths.Cudart))
			sink, col := startCollectorWith(t, fmt.Sprintf("discovery:\n  rescan_interval: 1h\n  attach_on_map: %v", onMap))
			o := job
			o.Env = []string{"LD_LIBRARY_PATH=" + lib}
			w := fakegpu.Start(t, paths, o)
			report, err := w.Wait(time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if report.Calls["cudaLaunchKernel"] != 1500 {
				t.Fatalf("the workload made %d launches, want 1500", report.Calls["cudaLaunchKernel"])
			}
			if !onMap {
				// Found by the scan 200 ms after its exec, or not at all: the job
				// was over, or mostly over, by then.
				time.Sleep(time.Second)
				if got := view(sink, w.Pid).series[cudartLaunches].value; got >= 1500 {
					t.Errorf("without attach on first use %d launches were counted: the test does not exercise the gap", got)
				}
				col.Terminate(t, 30*time.Second)
				return
			}
			line := waitProbing(t, col, cudart)
			if !strings.Contains(line, fmt.Sprintf(`"first_pid": %d`, w.Pid)) {
				t.Errorf("%s was first probed for another process than the workload (pid %d): %s", cudart, w.Pid, line)
			}
			for _, l := range strings.Split(col.Output(), "\n") {
				if strings.Contains(l, "attached on first use") && strings.Contains(l, fmt.Sprintf(`"pid": %d`, w.Pid)) {
					t.Logf("gap: %s", l)
				}
			}
			v := waitFor(t, sink, w.Pid, "every launch", func(v processView) bool {
				return v.series[cudartLaunches].value == 1500
			})
			if got := v.value(t, cudartLaunches); got != 1500 {
				t.Errorf("launches %d, want all 1500", got)
			}
			if code := col.Terminate(t, 30*time.Second); code != 0 {
				t.Fatalf("collector exit code %d", code)
			}
		})
	}
}

// A library replaced while probed, as a package manager does it (a new file renamed
// over the old): the running process keeps the old file and its probes; the next
// process maps the new file, a new inode, which is attached on first use. Both
// processes' launches are counted exactly, and nothing failed to attach.
func TestALibraryReplacedWhileProbedIsProbedAgain(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	lib := privateCUDA(t, paths)
	cudart := filepath.Join(lib, filepath.Base(paths.Cudart))
	sink, col := startNodeCollector(t, nodeConfig("collection_interval: 300ms\nlogs:\n  policy: none\ndiscovery:\n  rescan_interval: 1h", false))

	env := []string{"LD_LIBRARY_PATH=" + lib}
	old := fakegpu.Start(t, paths, fakegpu.Options{Gate: true, Steps: 2, Launches: 400, Hold: 30 * time.Millisecond, Env: env})
	waitProbing(t, col, cudart)

	data, err := os.ReadFile(paths.Cudart)
	if err != nil {
		t.Fatal(err)
	}
	next := cudart + ".new"
	if err := os.WriteFile(next, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, cudart); err != nil {
		t.Fatal(err)
	}
	replaced := fakegpu.Start(t, paths, fakegpu.Options{Steps: 2, Launches: 700, Hold: 30 * time.Millisecond, Env: env})
	if err := old.Release(); err != nil {
		t.Fatal(err)
	}
	for w, want := range map[*fakegpu.Workload]int64{old: 400, replaced: 700} {
		if _, err := w.Wait(time.Minute); err != nil {
			t.Fatal(err)
		}
		v := waitFor(t, sink, w.Pid, "every launch", func(v processView) bool { return v.series[cudartLaunches].value == want })
		if got := v.value(t, cudartLaunches); got != want {
			t.Errorf("pid %d: %d launches, want %d", w.Pid, got, want)
		}
	}
	var probing []string
	for _, line := range strings.Split(col.Output(), "\n") {
		if strings.Contains(line, "probing library") && strings.Contains(line, `"path": "`+cudart) {
			probing = append(probing, line)
		}
		if strings.Contains(line, "cannot probe library") {
			t.Errorf("an attach failed: %s", line)
		}
	}
	if len(probing) != 2 || !strings.Contains(probing[1], fmt.Sprintf(`"first_pid": %d`, replaced.Pid)) {
		t.Errorf("want the old and the new file probed, the new one for pid %d; probed:\n%s", replaced.Pid, strings.Join(probing, "\n"))
	}
	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}
