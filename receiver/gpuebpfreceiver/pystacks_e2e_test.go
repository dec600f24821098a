//go:build linux

package gpuebpfreceiver_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// stackWant is where the records of one marked line must come from: the thread, and
// how their Python frames begin.
type stackWant struct {
	tid   int64
	stack string
}

// stackTally is what a test's records say of its marked lines: how many records each
// line has, the stack ids each line's records carry, each stack's frames (they come
// whole on the first record of a stack, then once a minute; the others carry its id),
// and what did not fit.
type stackTally struct {
	counted    map[string]int
	idsOf      map[string]map[string]bool
	framesOf   map[string]string
	unexpected []string
}

// tallyStacks matches records with code.lineno against the marked lines of script in
// want; a record of a line in also is allowed and not counted, and a record without a
// line is unexpected once there are more than unstacked of them.
func tallyStacks(recs []pcommon.Map, script string, line map[string]int, want map[string]stackWant, also []string, unstacked int) stackTally {
	tl := stackTally{counted: map[string]int{}, idsOf: map[string]map[string]bool{}, framesOf: map[string]string{}}
	for _, rec := range recs {
		lineno, ok := rec.Get(semconv.CodeLineno)
		if !ok {
			if unstacked--; unstacked < 0 {
				tl.unexpected = append(tl.unexpected, "a record without code.lineno: "+fmt.Sprint(rec.AsRaw()))
			}
			continue
		}
		id, _ := rec.Get(semconv.StackID)
		if frames, ok := rec.Get(semconv.PythonStack); ok {
			tl.framesOf[id.Str()] = frames.Str()
		}
		tid, _ := rec.Get(semconv.ThreadID)
		file, _ := rec.Get(semconv.CodeFilepath)
		matched := false
		for name, w := range want {
			if lineno.Int() != int64(line[name]) {
				continue
			}
			matched = true
			if file.Str() != script || tid.Int() != w.tid || id.Str() == "" {
				tl.unexpected = append(tl.unexpected, fmt.Sprintf("%s on thread %d in %s, stack id %q", name, tid.Int(), file.Str(), id.Str()))
				continue
			}
			if tl.idsOf[name] == nil {
				tl.idsOf[name] = map[string]bool{}
			}
			tl.idsOf[name][id.Str()] = true
			tl.counted[name]++
		}
		for _, a := range also {
			matched = matched || lineno.Int() == int64(line[a])
		}
		if !matched {
			tl.unexpected = append(tl.unexpected, fmt.Sprintf("line %d: %v", lineno.Int(), rec.AsRaw()))
		}
	}
	return tl
}

// A real PyTorch training loop (Debian's CPython 3.11 and python3-torch) calls the CUDA
// runtime through ctypes inside its model's forward(), after each optimizer step, and
// from a second Python thread. Every one of those calls' records names the exact
// file, function and line, innermost first, on the thread that made it: for the call
// in forward(), the user's forward frame, then torch's Module._call_impl in
// torch/nn/modules/module.py that called it, then the loop's line, then the module.
func TestPythonStacksOfARealPyTorchLoop(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		t.Fatalf("Debian's python3-torch is needed (apt-get install python3-torch; make deps does): %v", err)
	}
	script, err := filepath.Abs("testdata/pystacks_train.py")
	if err != nil {
		t.Fatal(err)
	}
	line := fakegpu.MarkedLines(t, script)
	const steps = 40
	sink, col := startNodeCollector(t, nodeConfig("collection_interval: 300ms\nlogs:\n  policy: all\n  max_per_second: 100000", true))

	cmd := exec.Command("/usr/bin/python3", script, paths.Cudart, strconv.Itoa(steps))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var report struct {
		PID       int `json:"pid"`
		MainTID   int `json:"main_tid"`
		ThreadTID int `json:"thread_tid"`
	}
	reportLine, _ := bufio.NewReader(out).ReadBytes('\n')
	if err := json.Unmarshal(reportLine, &report); err != nil {
		t.Fatalf("the training loop's report %q: %v", reportLine, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}

	want := map[string]stackWant{
		"forward": {int64(report.MainTID), fmt.Sprintf("Net.forward (%[1]s:%[2]d) < Module._call_impl (%[3]s:", script, line["forward"], "/usr/lib/python3/dist-packages/torch/nn/modules/module.py")},
		"step":    {int64(report.MainTID), fmt.Sprintf("main (%[1]s:%[2]d) < <module> (%[1]s:%[3]d)", script, line["step"], line["entry"])},
		"thread":  {int64(report.ThreadTID), fmt.Sprintf("prefetch (%[1]s:%[2]d) < Thread.run (", script, line["thread"])},
	}
	// After the forward frame and torch's, the loop's line and the module's.
	forwardTail := fmt.Sprintf(") < main (%[1]s:%[2]d) < <module> (%[1]s:%[3]d)", script, line["loop"], line["entry"])
	var tl stackTally
	deadline := time.Now().Add(20 * time.Second)
	for done := false; ; {
		// The warm-up call may come before the collector has found the interpreter:
		// one record without a line, and no other.
		tl = tallyStacks(ncclRecords(sink, report.PID, semconv.EventCUDACall), script, line, want, []string{"warmup"}, 1)
		if done || len(tl.unexpected) > 0 || time.Now().After(deadline) {
			for _, u := range tl.unexpected {
				t.Errorf("unexpected record: %s", u)
			}
			break
		}
		done = tl.counted["forward"] == steps && tl.counted["step"] == steps && tl.counted["thread"] == steps
		if !done {
			time.Sleep(200 * time.Millisecond)
		}
	}
	counted, idsOf, framesOf := tl.counted, tl.idsOf, tl.framesOf
	for name, ids := range idsOf {
		w := want[name]
		if len(ids) != 1 {
			t.Errorf("%s: %d stacks, want the one: %v", name, len(ids), ids)
		}
		for id := range ids {
			frames, ok := framesOf[id]
			ok = ok && strings.HasPrefix(frames, w.stack) && (name != "forward" || strings.HasSuffix(frames, forwardTail))
			if !ok {
				t.Errorf("%s: stack %s has frames %q, want them to begin %q", name, id, frames, w.stack)
			}
			t.Logf("%s: stack %s: %s", name, id, frames)
		}
	}
	for _, name := range []string{"forward", "step", "thread"} {
		if counted[name] != steps {
			t.Errorf("%d records from the %s line (%d) with its stack, want %d", counted[name], name, line[name], steps)
		}
	}
	if t.Failed() {
		t.Logf("collector output:\n%s", col.Output())
	}
	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}

// NCCL calls carry their stacks as CUDA calls do. A Python process in DDP's shape makes
// its communicator on the main thread, issues gradient all-reduces from a second thread
// (DDP's hooks run on the autograd engine's thread) and an all-reduce of its own after
// each step on the main thread: every NCCL record names the exact line, function and
// thread it came from, with its Python frames innermost first, and its native frames.
func TestNCCLRecordsNameThePythonLineThatIssuedThem(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	script, err := filepath.Abs("testdata/pystacks_nccl.py")
	if err != nil {
		t.Fatal(err)
	}
	line := fakegpu.MarkedLines(t, script)
	const steps = 30
	sink, col := startNodeCollector(t, nodeConfig("collection_interval: 300ms\nlogs:\n  policy: all\n  max_per_second: 100000", true))

	cmd := exec.Command("/usr/bin/python3", script, paths.Cudart, paths.NCCL, strconv.Itoa(steps))
	cmd.Env = append(os.Environ(), "FAKENCCL_MODE=blocking")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	var report struct {
		PID       int `json:"pid"`
		MainTID   int `json:"main_tid"`
		ThreadTID int `json:"thread_tid"`
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("the script's report %q: %v", out, err)
	}
	want := map[string]stackWant{
		"init": {int64(report.MainTID), fmt.Sprintf("main (%[1]s:%[2]d) < <module> (%[1]s:%[3]d)", script, line["init"], line["entry"])},
		"hook": {int64(report.ThreadTID), fmt.Sprintf("reduce_gradients (%[1]s:%[2]d) < autograd (%[1]s:", script, line["hook"])},
		"step": {int64(report.MainTID), fmt.Sprintf("main (%[1]s:%[2]d) < <module> (%[1]s:%[3]d)", script, line["step"], line["entry"])},
	}
	records := map[string]int{"init": 1, "hook": steps, "step": steps}
	var tl stackTally
	nativeSeen := false
	collectortest.WaitFor(t, "every NCCL record with its line", 20*time.Second, func() bool {
		recs := append(ncclRecords(sink, report.PID, semconv.EventNCCLCall), ncclRecords(sink, report.PID, semconv.EventNCCLCollective)...)
		for _, rec := range recs {
			if frames, ok := rec.Get(semconv.NativeStack); ok && frames.Str() != "" {
				nativeSeen = true
			}
		}
		tl = tallyStacks(recs, script, line, want, nil, 0)
		return len(tl.unexpected) > 0 || (tl.counted["init"] == 1 && tl.counted["hook"] == steps && tl.counted["step"] == steps)
	})
	counted, idsOf, framesOf, unexpected := tl.counted, tl.idsOf, tl.framesOf, tl.unexpected
	for _, u := range unexpected {
		t.Errorf("unexpected record: %s", u)
	}
	for name, w := range want {
		if counted[name] != records[name] {
			t.Errorf("%d records from the %s line (%d), want %d", counted[name], name, line[name], records[name])
		}
		if len(idsOf[name]) != 1 {
			t.Errorf("%s: %d stacks, want the one: %v", name, len(idsOf[name]), idsOf[name])
		}
		for id := range idsOf[name] {
			if frames := framesOf[id]; !strings.HasPrefix(frames, w.stack) {
				t.Errorf("%s: stack %s has frames %q, want them to begin %q", name, id, frames, w.stack)
			} else {
				t.Logf("%s: stack %s: %s", name, id, frames)
			}
		}
	}
	if !nativeSeen {
		t.Error("no NCCL record carried its native frames")
	}
	if t.Failed() {
		t.Logf("collector output:\n%s", col.Output())
	}
	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}
