//go:build linux

package gpuebpfreceiver_test

import (
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// With stacks.sample_every: 100, one call in 100 of a thread becomes a record with its
// stacks, notable or not: a workload of ordinary calls on one thread gets exactly its
// calls / 100 sampled records, each with a native stack's id, and its counts stay exact.
func TestOneCallInNIsRecordedWithItsStack(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	sink, col := startNodeCollector(t, nodeConfig("collection_interval: 300ms\nstacks:\n  sample_every: 100\nlogs:\n  policy: notable\n  max_per_second: 100000", true))
	w := fakegpu.Start(t, paths, fakegpu.Options{Steps: 10, Launches: 5000, Syncs: 10, Stall: 300 * time.Millisecond})
	res, err := w.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var calls int64
	for _, n := range res.Calls {
		calls += n
	}
	want := calls / 100
	var sampled, withStack int64
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		sampled, withStack = 0, 0
		for _, rec := range ncclRecords(sink, w.Pid, semconv.EventCUDACall) {
			if r, _ := rec.Get(semconv.NotableReason); r.Str() == "sample" {
				sampled++
				if id, ok := rec.Get(semconv.StackID); ok && id.Str() != "" {
					withStack++
				}
			}
		}
		if sampled >= want {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%d calls on one thread: %d sampled records, %d with a stack", calls, sampled, withStack)
	if sampled != want || withStack != want {
		t.Errorf("%d sampled records (%d with a stack), want %d: one in 100 of %d calls", sampled, withStack, want, calls)
	}
	v := waitFor(t, sink, w.Pid, "every launch", func(v processView) bool { return v.series[cudartLaunches].value == res.Calls["cudaLaunchKernel"] })
	if got := v.series[cudartLaunches].value; got != res.Calls["cudaLaunchKernel"] {
		t.Errorf("launches counted %d, made %d: a sampled call must be counted once", got, res.Calls["cudaLaunchKernel"])
	}
	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}
