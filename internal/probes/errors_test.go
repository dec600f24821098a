//go:build linux

package probes_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// A process calls on with no device: every one of 20,000 cudaLaunchKernel and 20,000
// cudaMalloc calls into NVIDIA's libcudart fails, the two in turn. Each failure is
// counted in the kernel, but a failure becomes a record (with its stack walk) only when
// the API's return code on the thread changes or 100 ms after its last record: here a
// few per API in all, where each call used to be one. The two APIs failing in turn
// must not make each other's failures new.
func TestARepeatedFailureIsARecordTenTimesASecond(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	nvidia := filepath.Join(fakegpu.RepoRoot(), "build", "vendor", "nvidia", "lib")
	cudart, err := filepath.EvalSymlinks(filepath.Join(nvidia, "libcudart.so.11.0"))
	if err != nil {
		if os.Getenv(privtest.EnvRequire) == "1" {
			t.Fatalf("NVIDIA's libcudart is not in %s (make vendor-libs): %v", nvidia, err)
		}
		t.Skipf("NVIDIA's libcudart is not in %s (make vendor-libs): %v", nvidia, err)
	}
	p, err := probes.Load(probes.Options{TraceAllCUDA: traceNamed})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, _, err := p.AttachLibrary(cudart, probes.LibCUDART); err != nil {
		t.Fatal(err)
	}
	for _, a := range probes.APIs {
		if err := p.SetNotableThreshold(a.ID, probes.NeverNotable); err != nil {
			t.Fatal(err)
		}
	}
	const calls = 20000
	gate := t.TempDir()
	ready, goFile := filepath.Join(gate, "ready"), filepath.Join(gate, "go")
	cmd := exec.Command(filepath.Join(paths.Out, "bin", "fakegpu-vendor"), "--plan", "cudaLaunchKernel=20000,cudaMalloc=20000",
		"--ready-file", ready, "--wait-file", goFile)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+nvidia)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("fakegpu-vendor never reached its gate")
		}
	}
	rec := &recorder{pid: uint32(cmd.Process.Pid)}
	stop := runReader(t, p, rec)
	trace(t, p, cmd.Process.Pid)
	start := time.Now()
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	time.Sleep(200 * time.Millisecond) // the ring drained
	stop()

	stats := statsOf(t, p, uint32(cmd.Process.Pid))
	records := map[string]int{}
	rec.mu.Lock()
	for _, c := range rec.calls {
		if c.Ret == 0 {
			t.Errorf("%s returned 0 without a GPU", probes.APIName(c.Api))
		}
		records[probes.APIName(c.Api)]++
	}
	rec.mu.Unlock()
	// One record when the API first fails, one each time its return code changes (a
	// few times at most as the runtime's state settles), and one per 100 ms of calling.
	most := 3 + int(elapsed/(100*time.Millisecond))
	for _, api := range []string{"cudaLaunchKernel", "cudaMalloc"} {
		s := stats[api]
		if s.TotalCalls() != calls || s.Errors != calls {
			t.Errorf("%s: %d calls, %d errors counted; want %d of each", api, s.TotalCalls(), s.Errors, calls)
		}
		if records[api] < 1 || records[api] > most {
			t.Errorf("%s: %d failures became records in %v; want 1 to %d", api, records[api], elapsed.Round(time.Millisecond), most)
		}
	}
	t.Logf("%d failing calls of each API in %v: %d and %d records", calls, elapsed.Round(time.Millisecond), records["cudaLaunchKernel"], records["cudaMalloc"])
}
