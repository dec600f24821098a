//go:build linux

package gpuebpfreceiver_test

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// pidLogs returns every log record exported for process pid.
func pidLogs(sink *collectortest.Sink, pid int) []plog.LogRecord {
	var out []plog.LogRecord
	for _, ld := range sink.Logs() {
		for i := 0; i < ld.ResourceLogs().Len(); i++ {
			rl := ld.ResourceLogs().At(i)
			if p, ok := rl.Resource().Attributes().Get(semconv.ProcessPID); !ok || p.Int() != int64(pid) {
				continue
			}
			for j := 0; j < rl.ScopeLogs().Len(); j++ {
				lrs := rl.ScopeLogs().At(j).LogRecords()
				for k := 0; k < lrs.Len(); k++ {
					out = append(out, lrs.At(k))
				}
			}
		}
	}
	return out
}

// A training job that dies of CUDA out-of-memory: under the default notable policy the
// failed cudaMalloc is one ERROR record with reason oom, the size asked for and a body a
// person can read, and the process's exit is a lifecycle record with its exit code.
func TestOutOfMemoryAndTheExitThatFollowsAreLogged(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	const ask = 64 << 20
	// 32 MiB of fake device memory: the setup's buffers fit, the loop's 64 MiB does not,
	// and the workload exits 1 on the failed call, as a training script would.
	w := fakegpu.Start(t, paths, fakegpu.Options{
		Gate: true, Steps: 1, Launches: 10, Allocs: 1, AllocBytes: ask, Env: []string{"FAKEGPU_MEM_MB=32"},
	})
	sink, col := startCollector(t)
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	_, err := w.Wait(time.Minute)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(err.Error(), "cudaMalloc failed with error 2") {
		t.Fatalf("the workload should die of its failed cudaMalloc with exit code 1: %v", err)
	}

	var oom, exits []plog.LogRecord
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		oom, exits = oom[:0], exits[:0]
		for _, lr := range pidLogs(sink, w.Pid) {
			reason, _ := lr.Attributes().Get(semconv.NotableReason)
			switch {
			case reason.Str() == "oom":
				oom = append(oom, lr)
			case lr.EventName() == semconv.EventProcessExit:
				exits = append(exits, lr)
			}
		}
		if len(oom) > 0 && len(exits) > 0 {
			break
		}
	}
	if len(oom) != 1 {
		t.Fatalf("%d oom records for pid %d, want 1 (records: %d)", len(oom), w.Pid, len(pidLogs(sink, w.Pid)))
	}
	lr := oom[0]
	a := lr.Attributes()
	api, _ := a.Get(semconv.CUDAAPIName)
	result, _ := a.Get(semconv.CUDAResult)
	bytes, _ := a.Get(semconv.CUDABytes)
	if api.Str() != "cudaMalloc" || result.Int() != 2 || bytes.Int() != ask || lr.SeverityNumber() != plog.SeverityNumberError {
		t.Errorf("oom record: api %s result %d bytes %d severity %s", api.Str(), result.Int(), bytes.Int(), lr.SeverityText())
	}
	body := lr.Body().Str()
	for _, want := range []string{"cudaMalloc took ", "failed: out of device memory (error 2)", fmt.Sprintf("(%d bytes)", ask), fmt.Sprintf("fakegpu-workload[%d]", w.Pid)} {
		if !strings.Contains(body, want) {
			t.Errorf("oom body %q lacks %q", body, want)
		}
	}

	if len(exits) != 1 {
		t.Fatalf("%d exit records for pid %d, want 1", len(exits), w.Pid)
	}
	code, _ := exits[0].Attributes().Get(semconv.ExitCode)
	reason, _ := exits[0].Attributes().Get(semconv.NotableReason)
	if code.Int() != 1 || reason.Str() != "lifecycle" || !strings.HasPrefix(exits[0].Body().Str(), "exited with code 1 ") {
		t.Errorf("exit record: code %d reason %s body %q", code.Int(), reason.Str(), exits[0].Body().Str())
	}

	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}
