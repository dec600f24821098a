//go:build linux

package gpuebpfreceiver_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// Every CUDA call record of a C program built with frame pointers carries its native
// stack, named by the program's own symbols down to main and into libc; the same
// program stripped of its symbols, run first, gets the same frames named by file and
// offset, never a crash or a made-up name.
func TestNativeStacksNameTheCallersOfAProgram(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	stripped := filepath.Join(t.TempDir(), "fakegpu-workload-stripped")
	// Without its build id too: a file with the same build id and symbols (the
	// unstripped program, run by any other test on the host) would name it.
	if out, err := exec.Command("strip", "--strip-all", "--remove-section=.note.gnu.build-id", "-o", stripped, paths.Workload).CombinedOutput(); err != nil {
		t.Fatalf("strip: %v\n%s", err, out)
	}
	sink, col := startNodeCollector(t, nodeConfig("collection_interval: 300ms\nlogs:\n  policy: all\n  max_per_second: 100000", true))
	for _, bin := range []string{stripped, paths.Workload} {
		p := paths
		p.Workload = bin
		// The stall keeps the process alive after its launches: the collector reads a
		// record up to a poll (10 ms) after it was made, and names its frames from the
		// process's /proc/PID/maps (docs/stacks.md says what happens past its exit).
		w := fakegpu.Start(t, p, fakegpu.Options{Steps: 5, Launches: 50, Hold: 300 * time.Millisecond, Stall: 300 * time.Millisecond,
			Env: []string{"LD_LIBRARY_PATH=" + paths.LibDir}})
		if _, err := w.Wait(time.Minute); err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(bin)
		// Each record carries its stack's id; the frames come whole on the first
		// record of each stack.
		var ids []string
		framesOf := map[string]string{}
		deadline := time.Now().Add(20 * time.Second)
		for len(ids) < 51 && time.Now().Before(deadline) {
			ids = ids[:0]
			for _, rec := range ncclRecords(sink, w.Pid, semconv.EventCUDACall) {
				if api, _ := rec.Get(semconv.CUDAAPIName); api.Str() == "cudaLaunchKernel" {
					id, _ := rec.Get(semconv.StackID)
					ids = append(ids, id.Str())
					if native, ok := rec.Get(semconv.NativeStack); ok {
						framesOf[id.Str()] = native.Str()
					}
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		// 50 in the steps, and the one the stall waits for.
		if len(ids) != 51 {
			t.Fatalf("%s: %d launch records, want 51", name, len(ids))
		}
		var stacks []string
		for _, id := range ids {
			frames, ok := framesOf[id]
			if id == "" || !ok {
				t.Fatalf("%s: a launch record's stack %q came with no frames on any record", name, id)
			}
			stacks = append(stacks, frames)
		}
		t.Logf("%s: %s", name, stacks[0])
		for _, s := range stacks {
			frames := strings.Split(s, " < ")
			if len(frames) < 3 || !strings.Contains(frames[0], name) {
				t.Errorf("%s: stack %q does not begin in the program", name, s)
				break
			}
			libc := firstFrameIn(frames, "libc.so.6")
			if libc < 1 {
				t.Errorf("%s: stack %q does not reach libc (the program's frames chain through frame pointers to main)", name, s)
				break
			}
			for _, f := range frames[:libc] {
				symbol := !strings.HasPrefix(f, name+"+0x")
				if bin == stripped && symbol {
					t.Errorf("stripped: frame %q of %q has a name; the binary has no symbols", f, s)
				}
				if bin == paths.Workload && !symbol {
					t.Errorf("frame %q of %q has no symbol", f, s)
				}
			}
			if bin == paths.Workload && !strings.HasPrefix(frames[libc-1], "main+0x") {
				t.Errorf("%q: the last frame in the program is not main", s)
			}
		}
	}
	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
	_ = os.Remove(stripped)
}

// firstFrameIn is the index of the first frame in file, -1 if none.
func firstFrameIn(frames []string, file string) int {
	for i, f := range frames {
		if strings.Contains(f, "("+file+")") || strings.HasPrefix(f, file+"+") {
			return i
		}
	}
	return -1
}
