//go:build linux

package gpuebpfreceiver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// More traced processes at once than the kernel has call-statistics slots (64): the
// calls of the 16 without a slot go out as records, counted as call_stats_full, and
// are counted in userspace, so all 80 processes' launches are exact. Once they exit
// their slots come back: 20 more processes arriving later all get slots (no new
// call_stats_full) and are counted exactly too.
func TestMoreProcessesThanKernelSlotsAreAllCounted(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	const first, later, launches = 80, 20, 100
	sink, col := startNodeCollector(t, nodeConfig("collection_interval: 300ms\nlogs:\n  policy: none", false))
	slotsFull := seriesKey(semconv.MetricReceiverDrops, attrs(semconv.ReceiverDropCause, "call_stats_full"))

	var perProcess int64 // probed calls each workload makes
	run := func(n int) {
		t.Helper()
		var ws []*fakegpu.Workload
		for i := 0; i < n; i++ {
			ws = append(ws, fakegpu.Start(t, paths, fakegpu.Options{Gate: true, Steps: 1, Launches: launches}))
		}
		for _, w := range ws {
			if err := w.Release(); err != nil {
				t.Fatal(err)
			}
		}
		for _, w := range ws {
			r, err := w.Wait(time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if r.Calls["cudaLaunchKernel"] != launches {
				t.Fatalf("pid %d made %d launches", w.Pid, r.Calls["cudaLaunchKernel"])
			}
		}
		short := func() []int {
			var pids []int
			for _, w := range ws {
				if view(sink, w.Pid).series[cudartLaunches].value != launches {
					pids = append(pids, w.Pid)
				}
			}
			return pids
		}
		for deadline := time.Now().Add(time.Minute); len(short()) > 0 && time.Now().Before(deadline); {
			time.Sleep(300 * time.Millisecond)
		}
		for _, pid := range short() {
			t.Errorf("pid %d: %d launches counted, want %d", pid, view(sink, pid).series[cudartLaunches].value, launches)
		}
		// Every process makes the same calls; the first one's total says how many.
		if perProcess == 0 {
			for key, p := range view(sink, ws[0].Pid).series {
				if strings.HasPrefix(key, semconv.MetricCUDAAPICalls+"{") {
					perProcess += p.value
				}
			}
		}
	}
	run(first)
	// Every call of a process without a slot is one record, counted as a drop of the
	// kernel statistics, not of the call.
	v := waitForHost(t, sink, "the calls without a slot", func(v processView) bool {
		return v.series[slotsFull].value == (first-64)*perProcess
	})
	full := v.series[slotsFull].value
	// A slot comes back at the first reading of the statistics after its process
	// exited; readings are a second apart.
	time.Sleep(5 * time.Second)
	run(later)
	// A last export after the later processes' counts.
	time.Sleep(time.Second)
	if got := hostView(sink).series[slotsFull].value; got != full {
		t.Errorf("call_stats_full went from %d to %d: the later processes found no free slot, the first ones' were not given back", full, got)
	}
	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}
