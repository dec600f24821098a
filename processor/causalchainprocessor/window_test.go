package causalchainprocessor

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// A series that began before the processor was watching (a process already running
// when the chains' collector started) counts from its second point: its first total
// holds the calls of hours the window never covered. One that began after counts from
// its start, as a new process's first export does.
func TestAFirstPointCountsWholeOnlyWhenItsSeriesBeganAfterTheHorizon(t *testing.T) {
	horizon := time.Unix(1_800_000_000, 0)
	ts := func(d time.Duration) pcommon.Timestamp { return pcommon.NewTimestampFromTime(horizon.Add(d)) }

	var old windowSeries
	if d, ok := old.addSum(1e6, ts(-time.Hour), ts(time.Second), true, horizon.UnixNano()); ok {
		t.Fatalf("a series begun an hour before the horizon counted %v at its first point", d)
	}
	if d, ok := old.addSum(1e6+40, ts(-time.Hour), ts(2*time.Second), true, horizon.UnixNano()); !ok || d != 40 {
		t.Fatalf("its second point added %v %v, want 40", d, ok)
	}

	var fresh windowSeries
	if d, ok := fresh.addSum(25, ts(500*time.Millisecond), ts(time.Second), true, horizon.UnixNano()); !ok || d != 25 {
		t.Fatalf("a series begun after the horizon added %v %v at its first point, want 25", d, ok)
	}

	var hist windowSeries
	dp := pmetric.NewExponentialHistogramDataPoint()
	dp.SetScale(3)
	dp.SetStartTimestamp(ts(-time.Hour))
	dp.SetTimestamp(ts(time.Second))
	dp.Positive().SetOffset(-80)
	dp.Positive().BucketCounts().FromRaw([]uint64{10, 5})
	dp.SetCount(15)
	if _, ok := hist.addHistogram(dp, true, horizon.UnixNano()); ok {
		t.Fatal("a histogram begun before the horizon counted its history")
	}
	dp.SetTimestamp(ts(2 * time.Second))
	dp.Positive().BucketCounts().FromRaw([]uint64{11, 7})
	dp.SetCount(18)
	if h, ok := hist.addHistogram(dp, true, horizon.UnixNano()); !ok || h.Count != 3 {
		t.Fatalf("its second point added %+v %v, want 3 calls", h, ok)
	}
}
