//go:build linux

package gpuebpfreceiver_test

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// PyTorch DDP issues its all-reduces from the autograd engine's device thread, which
// never waits for the device itself; the main thread does, at loss.item(). A rank's
// host lead into a collective is measured from the last device wait of any of its
// threads: measured per thread, as it once was, the autograd thread had none and these
// ranks reported no host lead at all. Each step's first all-reduce comes at least the
// step's host work after the previous step's sync, so the sum over a rank's collectives
// is at least that; and no lead is longer than the rank's whole run.
func TestHostLeadHoldsWhenAnotherThreadMakesTheCollectives(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	const ranks, steps, buckets = 2, 100, 2
	host := 3 * time.Millisecond
	run := fakegpu.StartDDP(t, paths, fakegpu.DDPOptions{
		Ranks: ranks, Steps: steps, Buckets: buckets, BucketBytes: 16 << 10, KernelTime: 10 * time.Microsecond,
		HostCompute: host, HostComputeSleeps: true, Threads: fakegpu.ThreadsPyTorch, Gate: true,
	})
	sink, _ := startNodeCollector(t, ncclE2EConfig, "SYSFS="+t.TempDir())
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	reports, err := run.Wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reports {
		if r.AutogradTid == 0 || r.AutogradTid == r.Tid {
			t.Fatalf("rank %d made its collectives on its main thread %d (autograd %d)", r.Rank, r.Tid, r.AutogradTid)
		}
		floor := (steps - 1) * buckets * host.Seconds()
		ceiling := buckets * float64(r.EndNS-r.StartNS) / 1e9
		var lead float64
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if lead = hostLeadOf(sink, r.Pid); lead >= floor {
				break
			}
		}
		if lead < floor || lead > ceiling {
			t.Errorf("rank %d (pid %d): host lead %.3fs over %d all-reduces, want between %.3fs and %.3fs", r.Rank, r.Pid, lead, steps*buckets, floor, ceiling)
		}
	}
}

// hostLeadOf is the last host lead total the sink got for process pid.
func hostLeadOf(sink *collectortest.Sink, pid int) float64 {
	var lead float64
	eachMetric(sink, func(p int64, _ pcommon.Map, m pmetric.Metric) {
		if p == int64(pid) && m.Name() == semconv.MetricRankHostLead && m.Type() == pmetric.MetricTypeSum {
			for k := 0; k < m.Sum().DataPoints().Len(); k++ {
				lead = m.Sum().DataPoints().At(k).DoubleValue()
			}
		}
	})
	return lead
}
