package echotools

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/echoschema"
	"github.com/fathom-gpu/fathom/internal/expohisto"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/series"
)

// t3 is the start of the trace-stats window [t3, t3+5m): 30 exports, one every 10 s.
var t3 = time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)

// fakeRank is a process making CUDA calls and the receiver exporting them as
// cuda.api.duration, an exponential histogram of the receiver's own kind
// (internal/expohisto), every 10 s from 20 minutes before the window.
type fakeRank struct {
	node  string
	delta bool
	// resetAt: the process's counters restart (a new start time) after this export.
	resetAt int
	// restartAt: the collector is down for the two exports after this one; the next
	// one adopts what the kernel counted and keeps the series' start time.
	restartAt int

	rows []echoschema.Row
	// inWindow holds every call made inside the window: what get_trace_stats must
	// answer.
	inWindow  expohisto.Histogram
	snapshots int64 // the counts of the points in the window, summed (what the old code answered)
}

const exportsBefore = 120 // 20 minutes of exports before the window

// run makes the calls and the exports: export i is at t3 + (i-exportsBefore)*10s and
// holds the calls of the 10 s before it. The store knows a call when the export that
// carries it arrives, so the window's calls are those of the exports inside it.
func (f *fakeRank) run() {
	var hist expohisto.Histogram
	start := t3.Add(-(exportsBefore + 1) * 10 * time.Second)
	// The collector is down (no export) for the two intervals after restartAt.
	for i := range exportsBefore + 30 {
		at := t3.Add(time.Duration(i-exportsBefore) * 10 * time.Second)
		inside := !at.Before(t3) && at.Before(t3.Add(5*time.Minute))
		// Slow calls before the window, fast and spread inside it.
		calls := 40 + (i*7+len(f.node))%13
		for j := range calls {
			v := 0.5
			if inside {
				v = 1e-3 * (1 + float64((i+j)%20)/4)
			}
			hist.Record(v)
			if inside {
				f.inWindow.Record(v)
			}
		}
		down := f.restartAt > 0 && i > f.restartAt && i <= f.restartAt+2
		if !down {
			f.export(&hist, start, at)
		}
		if f.delta {
			hist.Reset()
			start = at
		}
		if f.resetAt > 0 && i == f.resetAt {
			hist.Reset()
			start = at.Add(time.Second)
		}
	}
}

// export stores the point as the duckdb exporter does.
func (f *fakeRank) export(h *expohisto.Histogram, start, at time.Time) {
	dp := pmetric.NewExponentialHistogramDataPoint()
	h.CopyTo(dp)
	r := echoschema.NewRow()
	r.Time, r.Start, r.Kind, r.Name, r.Unit = at, start, echoschema.KindExpHistogram, semconv.MetricCUDAAPIDuration, "s"
	r.Cluster, r.Node, r.PID, r.API = "c3", f.node, 4000, "cudaStreamSynchronize"
	temporality := "cumulative"
	if f.delta {
		temporality = "delta"
	}
	r.Attributes = `{"` + semconv.MetricTemporality + `":"` + temporality + `"}`
	r.Count, r.Sum = int64(dp.Count()), dp.Sum()
	r.Scale, r.BucketOffset, r.BucketCounts, r.ZeroCount = dp.Scale(), dp.Positive().Offset(), dp.Positive().BucketCounts().AsRaw(), dp.ZeroCount()
	buckets := series.ExponentialBuckets(dp.Scale(), dp.ZeroCount(), dp.Positive().Offset(), r.BucketCounts)
	r.P50, r.P95, r.P99 = series.Quantile(0.5, buckets, math.NaN(), math.NaN()), series.Quantile(0.95, buckets, math.NaN(), math.NaN()), series.Quantile(0.99, buckets, math.NaN(), math.NaN())
	if !at.Before(t3) && at.Before(t3.Add(5*time.Minute)) {
		f.snapshots += r.Count
	}
	f.rows = append(f.rows, r)
}

// want is what the workload made in the window: its calls and their percentiles, from
// its own record of them.
func (f *fakeRank) want() TraceStat {
	dp := pmetric.NewExponentialHistogramDataPoint()
	f.inWindow.CopyTo(dp)
	b := series.ExponentialBuckets(dp.Scale(), dp.ZeroCount(), dp.Positive().Offset(), dp.Positive().BucketCounts().AsRaw())
	q := func(p float64) float64 { return series.Quantile(p, b, math.NaN(), math.NaN()) }
	return TraceStat{API: "cudaStreamSynchronize", Node: f.node, Calls: int64(f.inWindow.Count), P50: q(0.5), P95: q(0.95), P99: q(0.99), Unit: "s"}
}

// TestTraceStatsCountTheCallsMadeInTheWindow: a rank's histogram exported every 10 s,
// cumulative from long before the window, across a counter reset, across a collector
// restart, and as delta points: get_trace_stats answers exactly the calls made in the
// window and the percentiles of those calls, not the sum of the snapshots' counts and
// the quantiles of their quantiles.
func TestTraceStatsCountTheCallsMadeInTheWindow(t *testing.T) {
	env := plantedStore(t)
	ranks := []*fakeRank{
		{node: "steady"},
		{node: "reset", resetAt: exportsBefore + 12},
		{node: "restart", restartAt: exportsBefore + 17},
		{node: "delta", delta: true},
	}
	var rows []echoschema.Row
	for _, f := range ranks {
		f.run()
		rows = append(rows, f.rows...)
	}
	if err := env.Store.Append(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	r, _ := NewRegistry(env)
	window := fmt.Sprintf(`"since":%q,"until":%q`, t3.Format(time.RFC3339), t3.Add(5*time.Minute).Format(time.RFC3339))
	for _, f := range ranks {
		out := call[TraceStatsOutput](t, r, "get_trace_stats", `{"node":"`+f.node+`",`+window+`}`)
		want := f.want()
		if len(out.Stats) != 1 || out.Stats[0] != want {
			t.Errorf("%s: got %+v, want %+v (the snapshots' counts sum to %d)", f.node, out.Stats, want, f.snapshots)
			continue
		}
		t.Logf("%s: %d calls, p50 %.6f p99 %.6f; the snapshots' counts sum to %d", f.node, want.Calls, want.P50, want.P99, f.snapshots)
	}
	// All four nodes' one API: the window's calls, never the snapshots'.
	all := call[TraceStatsOutput](t, r, "get_trace_stats", `{"api":"cudaStreamSynchronize",`+window+`}`)
	var calls, made int64
	for _, s := range all.Stats {
		calls += s.Calls
	}
	for _, f := range ranks {
		made += int64(f.inWindow.Count)
	}
	if len(all.Stats) != 4 || calls != made {
		t.Errorf("all nodes: %d stats, %d calls, want 4 and %d", len(all.Stats), calls, made)
	}
	// The SQL the other tools total with agrees, node by node.
	var f filter
	f.add("cluster = ?", "c3")
	cte, args := windowTotalsCTE(t3, t3.Add(5*time.Minute), []string{semconv.MetricCUDAAPIDuration}, f)
	res, err := env.Store.DB().QueryContext(context.Background(), `WITH `+cte+` SELECT node, sum(d_count)::BIGINT FROM w GROUP BY node`, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	sqlCalls := map[string]int64{}
	for res.Next() {
		var node string
		var n int64
		if err := res.Scan(&node, &n); err != nil {
			t.Fatal(err)
		}
		sqlCalls[node] = n
	}
	for _, f := range ranks {
		if sqlCalls[f.node] != int64(f.inWindow.Count) {
			t.Errorf("%s: windowTotalsCTE counts %d calls, the generator made %d", f.node, sqlCalls[f.node], f.inWindow.Count)
		}
	}
}

// A series whose exponential scale coarsened is compared at its coarsest scale, and
// explicit-bucket points gain bucket by bucket like exponential ones.
func TestWindowHistogramAcrossScalesAndExplicitBuckets(t *testing.T) {
	since := t3.UnixNano()
	until := t3.Add(time.Minute).UnixNano()
	h := newWindowHistogram()
	h.addSeries([]histogramPoint{
		{ts: t3.Add(-10 * time.Second), start: t3.Add(-time.Hour), kind: echoschema.KindExpHistogram, buckets: true, scale: 4, offset: 0, counts: []uint64{2, 2, 1}, zero: 1},
		{ts: t3.Add(10 * time.Second), start: t3.Add(-time.Hour), kind: echoschema.KindExpHistogram, buckets: true, scale: 3, offset: 0, counts: []uint64{5, 3}, zero: 1},
	}, since, until)
	// At scale 3 the first point is [4, 1]: the second gained 1 in bucket 0, 2 in bucket 1.
	if h.calls != 3 || h.exp[3][0] != 1 || h.exp[3][1] != 2 || h.zero != 0 {
		t.Fatalf("across scales: calls %v, buckets %v, zero %d", h.calls, h.exp, h.zero)
	}
	e := newWindowHistogram()
	e.addSeries([]histogramPoint{
		{ts: t3.Add(10 * time.Second), start: t3.Add(5 * time.Second), kind: echoschema.KindHistogram, buckets: true, bounds: []float64{1, 2}, counts: []uint64{1, 0, 0}},
		{ts: t3.Add(20 * time.Second), start: t3.Add(5 * time.Second), kind: echoschema.KindHistogram, buckets: true, bounds: []float64{1, 2}, counts: []uint64{1, 4, 1}},
	}, since, until)
	s := e.stat()
	// 6 calls: 1 below 1, 4 in (1, 2], 1 above 2; the median is rank 3 of 6, half way
	// through (1, 2].
	if s.Calls != 6 || e.explicit[[2]float64{1, 2}] != 4 || s.P50 != 1.5 || s.P99 != 2 {
		t.Fatalf("explicit buckets: %+v %v", s, e.explicit)
	}
}
