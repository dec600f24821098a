package gpuebpfreceiver

import (
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

// feed sends 100 calls of 100 µs, then one of 50 ms (an outlier) and one that failed.
func feed(a *aggregator) {
	ev := probes.CUDACall{Api: apiID("cudaStreamSynchronize"), MemcpyKind: uint8(probes.MemcpyNone)}
	ev.Hdr.Pid, ev.Hdr.Tid = syntheticPIDBase, syntheticPIDBase
	for i := 0; i < 100; i++ {
		ev.DurationNs = 100_000
		a.CUDACall(&ev)
	}
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
