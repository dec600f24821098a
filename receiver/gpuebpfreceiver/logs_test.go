package gpuebpfreceiver

import (
	"math"
	"testing"

	"github.com/fathom-gpu/fathom/internal/probes"
)

// sinkFor builds an aggregator whose log sink follows policy with a cap per second.
func sinkFor(policy string, perSecond int) *aggregator {
	cfg := createDefaultConfig()
	cfg.Logs.Policy = policy
	cfg.Logs.MaxPerSecond = perSecond
	clock := &wallClock{}
	clock.refresh()
	a := newAggregator(cfg, clock, nil, true)
	a.logs = newLogSink(cfg, clock, &a.drops, hostIdentity("", true))
	return a
}

// feed sends 100 calls of 100 µs, lets the running median refresh (as it does every
// second), then sends one of 50 ms (an outlier) and one that failed.
func feed(a *aggregator) {
	ev := probes.CUDACall{Api: apiID("cudaStreamSynchronize"), MemcpyKind: uint8(probes.MemcpyNone)}
	ev.Hdr.Pid, ev.Hdr.Tid = syntheticPIDBase, syntheticPIDBase
	for i := 0; i < 100; i++ {
		ev.DurationNs = 100_000
		a.CUDACall(&ev)
	}
	a.refreshMedians()
	ev.DurationNs = 50_000_000
	a.CUDACall(&ev)
	ev.DurationNs, ev.Ret = 100_000, 700 // cudaErrorIllegalAddress
	a.CUDACall(&ev)
}

func TestLogPolicies(t *testing.T) {
	cases := []struct {
		policy            string
		perSecond         int
		wantLogs, wantCap uint64
		reasons           []string
	}{
		{LogsNone, 1000, 0, 0, nil},
		{LogsNotable, 1000, 2, 0, []string{"outlier", "error"}},
		{LogsAll, 1000, 102, 0, nil},
		{LogsAll, 10, 10, 92, nil}, // the cap admits a burst of one second's worth
	}
	for _, c := range cases {
		a := sinkFor(c.policy, c.perSecond)
		feed(a)
		ld, n := a.logs.take()
		if uint64(n) != c.wantLogs || uint64(ld.LogRecordCount()) != c.wantLogs {
			t.Errorf("%s/%d: %d records (%d in the batch), want %d", c.policy, c.perSecond, n, ld.LogRecordCount(), c.wantLogs)
		}
		if got := a.drops.snapshot()["log_rate"]; got != c.wantCap {
			t.Errorf("%s/%d: %d log_rate drops, want %d", c.policy, c.perSecond, got, c.wantCap)
		}
		if c.reasons != nil {
			records := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords()
			for i, want := range c.reasons {
				got, _ := records.At(i).Attributes().Get("fathom.notable.reason")
				if got.Str() != want {
					t.Errorf("notable record %d: reason %q, want %q (body %q)", i, got.Str(), want, records.At(i).Body().Str())
				}
			}
		}
	}
}

// The thresholds written into the kernel follow the policy and the running median:
// factor x median, never under the minimum outlier duration; graph capture always.
func TestNotableThresholdsFollowPolicyAndMedian(t *testing.T) {
	sync := apiID("cudaStreamSynchronize")
	launch := apiID("cudaLaunchKernel")
	capture := apiID("cudaStreamBeginCapture")
	for _, c := range []struct {
		policy                string
		sync, launch, capture uint64
	}{
		{LogsNotable, 4 * 2_000_000, probes.NeverNotable, 0},
		{LogsAll, 0, 0, 0},
		{LogsNone, probes.NeverNotable, probes.NeverNotable, probes.NeverNotable},
	} {
		a := sinkFor(c.policy, 1000)
		ev := probes.CUDACall{MemcpyKind: uint8(probes.MemcpyNone)}
		ev.Hdr.Pid = syntheticPIDBase
		for i := 0; i < 100; i++ {
			ev.Api, ev.DurationNs = sync, 2_000_000 // 2 ms: 4x is over the 1 ms minimum
			a.CUDACall(&ev)
		}
		for i := 0; i < 10; i++ { // too few for a median
			ev.Api, ev.DurationNs = launch, 5_000
			a.CUDACall(&ev)
		}
		a.refreshMedians()
		got, changed := a.notableThresholds()
		if !changed {
			t.Errorf("%s: thresholds never written, yet reported unchanged", c.policy)
		}
		// Bucket midpoints make the median approximate: within the bucket's ±4.4%.
		if d := math.Abs(float64(got[sync]) - float64(c.sync)); d > 0.05*float64(c.sync) {
			t.Errorf("%s: cudaStreamSynchronize threshold %d ns, want about %d", c.policy, got[sync], c.sync)
		}
		if got[launch] != c.launch || got[capture] != c.capture {
			t.Errorf("%s: launch %d capture %d, want %d %d", c.policy, got[launch], got[capture], c.launch, c.capture)
		}
	}
}
