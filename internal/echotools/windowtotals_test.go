package echotools

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/echoschema"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/series"
)

// t2 is the start of the cross-check window [t2, t2+10m), hours away from the other
// plantings.
var t2 = time.Date(2026, 3, 1, 6, 0, 0, 0, time.UTC)

// seriesPoint is one point of a planted series: when it was taken, its start time
// (noStart: the sender gave none), and its total (a sum's value; a histogram's
// positive bucket counts, at offset 0, whose sum is its count).
type seriesPoint struct {
	at, start time.Duration
	total     float64
	buckets   []uint64
}

const noStart = time.Duration(math.MinInt64)

type seriesCase struct {
	name  string
	hist  bool
	delta bool
	pts   []seriesPoint
}

// every returns points every 10 s from..to (inclusive of from, exclusive of to), all
// with the same start, whose total grows by step each time from first.
func every(from, to, start time.Duration, first, step float64) []seriesPoint {
	var out []seriesPoint
	for at, v := from, first; at < to; at, v = at+10*time.Second, v+step {
		out = append(out, seriesPoint{at: at, start: start, total: v})
	}
	return out
}

// histEvery is every for a histogram: the calls of each interval land in bucket
// (interval mod 3), so the buckets grow unevenly.
func histEvery(from, to, start time.Duration, first []uint64, step uint64) []seriesPoint {
	var out []seriesPoint
	b := slices.Clone(first)
	for at, i := from, 0; at < to; at, i = at+10*time.Second, i+1 {
		out = append(out, seriesPoint{at: at, start: start, buckets: slices.Clone(b)})
		b[i%len(b)] += step
	}
	return out
}

// windowSeriesCases are the sequences of TestWindowTotalsFollowTheSeriesRule, around
// the window [t2, t2+10m) (lookback from t2-5m).
func windowSeriesCases() []seriesCase {
	const m = time.Minute
	var cases []seriesCase
	add := func(name string, hist, delta bool, pts ...[]seriesPoint) {
		cases = append(cases, seriesCase{name: name, hist: hist, delta: delta, pts: slices.Concat(pts...)})
	}
	// Steady growth of a series begun long before the window, with points before it.
	add("steady", false, false, every(-4*m, 10*m, -2*time.Hour, 1e6, 7))
	// A point sent twice.
	steady := every(-1*m, 3*m, -2*time.Hour, 500, 5)
	add("duplicate", false, false, steady, steady[10:11], every(3*m, 10*m, -2*time.Hour, 620, 5))
	// The process reset its counter with a new start time, after its last point.
	add("reset", false, false, every(-2*m, 4*m, -time.Hour, 900, 3), every(4*m+5*time.Second, 10*m, 4*m+2*time.Second, 2, 3))
	// The collector restarted: its new series start after the last point it sent.
	add("restart_after", false, false, every(-3*m, 2*m, -time.Hour, 40, 11), every(2*m+30*time.Second, 10*m, 2*m+20*time.Second, 9, 11))
	// A restart whose start time overlaps time already counted (the new collector
	// adopted counts from before it): a baseline only.
	add("restart_overlap", false, false, every(-3*m, 5*m, -time.Hour, 40, 11), every(5*m+5*time.Second, 10*m, 4*m, 700, 11))
	// A series begun before the window whose first point is inside it.
	add("begun_before", false, false, every(2*m, 10*m, -10*m, 5000, 4))
	// A series begun inside the window: its first point counts whole.
	add("begun_inside", false, false, every(1*m+30*time.Second, 10*m, 1*m, 25, 4))
	// Delta points each add themselves; those before the window do not count.
	add("delta", false, true, every(-2*m, 10*m, noStart, 3, 1))
	// No start time: a fall is a reset from zero, counted whole.
	add("no_start", false, false, every(-1*m, 4*m, noStart, 80, 6), every(4*m, 10*m, noStart, 5, 6))
	// No start time and no point before the window: the first point is a baseline.
	add("no_start_first", false, false, every(30*time.Second, 10*m, noStart, 300, 2))

	// Histograms follow the same rule on their count.
	add("hist_steady", true, false, histEvery(-3*m, 10*m, -time.Hour, []uint64{100, 50, 10}, 4))
	add("hist_reset", true, false, histEvery(-2*m, 5*m, -time.Hour, []uint64{10, 10, 10}, 2), histEvery(5*m+5*time.Second, 10*m, 5*m, []uint64{1, 0, 0}, 3))
	add("hist_begun_inside", true, false, histEvery(3*m, 10*m, 2*m, []uint64{3, 0, 1}, 5))
	add("hist_no_start", true, false, histEvery(-1*m, 10*m, noStart, []uint64{7, 7, 7}, 1))
	// A reset the count hid: a bucket fell while the count grew. With no start time
	// it is counted whole; with the same start time it is a baseline.
	hidden := func(start time.Duration) []seriesPoint {
		return slices.Concat(histEvery(-1*m, 3*m, start, []uint64{5, 5, 5}, 2),
			histEvery(3*m, 10*m, start, []uint64{0, 0, 90}, 2))
	}
	add("hist_hidden_reset_no_start", true, false, hidden(noStart))
	add("hist_hidden_reset_same_start", true, false, hidden(-time.Hour))
	add("hist_delta", true, true, histEvery(-1*m, 10*m, noStart, []uint64{1, 2, 3}, 0))
	return cases
}

func (p seriesPoint) count() uint64 {
	var n uint64
	for _, c := range p.buckets {
		n += c
	}
	return n
}

// rows turns a case into stored rows as the duckdb exporter writes the receiver's points.
func (c seriesCase) rows() []echoschema.Row {
	temporality := "cumulative"
	if c.delta {
		temporality = "delta"
	}
	var out []echoschema.Row
	for _, p := range c.pts {
		r := echoschema.NewRow()
		r.Time, r.Node, r.PID, r.Cluster = t2.Add(p.at), "gpu-9", 900, "c1"
		if p.start != noStart {
			r.Start = t2.Add(p.start)
		}
		r.Attributes = `{"` + semconv.MetricTemporality + `":"` + temporality + `","case":"` + c.name + `"}`
		if c.hist {
			r.Kind, r.Name, r.Unit, r.API = echoschema.KindExpHistogram, semconv.MetricCUDAAPIDuration, "s", "cudaMemcpy"
			r.Scale, r.BucketCounts, r.Count = 3, p.buckets, int64(p.count())
			r.Sum = float64(p.count()) / 100
		} else {
			r.Kind, r.Name, r.Unit, r.Value = echoschema.KindSum, semconv.MetricCUDAAPICalls, "{call}", p.total
		}
		out = append(out, r)
	}
	return out
}

// goTotals is what series.Cumulative (or CumulativeHistogram) says the points in
// [since, until) added, fed the points of [since-seriesLookback, until) in time order,
// horizon since.
func (c seriesCase) goTotals(since, until time.Time) (calls, sum float64) {
	pts := slices.Clone(c.pts)
	slices.SortStableFunc(pts, func(a, b seriesPoint) int { return int(a.at - b.at) })
	var cum series.Cumulative
	var hist series.CumulativeHistogram
	horizon := since.UnixNano()
	for _, p := range pts {
		ts := t2.Add(p.at)
		if ts.Before(since.Add(-seriesLookback)) || !ts.Before(until) {
			continue
		}
		var start int64
		if p.start != noStart {
			start = t2.Add(p.start).UnixNano()
		}
		b := series.Buckets{Counts: p.buckets, Sum: float64(p.count()) / 100}
		var inc series.Increase
		var gained series.Buckets
		var ok bool
		switch {
		case c.delta && c.hist:
			inc, gained, ok = series.Delta(start, ts.UnixNano(), float64(p.count())), b, true
		case c.delta:
			inc, ok = series.Delta(start, ts.UnixNano(), p.total), true
		case c.hist:
			gained, inc, ok = hist.Add(start, ts.UnixNano(), b, horizon)
		default:
			inc, ok = cum.Add(series.Mark{Start: start, Time: ts.UnixNano(), Total: p.total}, horizon)
		}
		if ok && !ts.Before(since) {
			calls += inc.Value
			sum += gained.Sum
		}
	}
	return calls, sum
}

// TestWindowTotalsFollowTheSeriesRule holds windowTotalsCTE to internal/series: the same
// points, through the real store (a DuckDB file, the Append path) and the CTE, and
// through series.Cumulative / CumulativeHistogram in Go, give the same totals per
// series. Each case is one way a series starts, continues or restarts.
func TestWindowTotalsFollowTheSeriesRule(t *testing.T) {
	env := plantedStore(t)
	cases := windowSeriesCases()
	var rows []echoschema.Row
	for _, c := range cases {
		rows = append(rows, c.rows()...)
	}
	if err := env.Store.Append(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	since, until := t2, t2.Add(10*time.Minute)
	var f filter
	f.add("node = ?", "gpu-9")
	cte, args := windowTotalsCTE(since, until, []string{semconv.MetricCUDAAPICalls, semconv.MetricCUDAAPIDuration}, f)
	q := fmt.Sprintf(`WITH %s SELECT json_extract_string(attributes, '$.case'), any_value(name),
		coalesce(sum(d_value), 0), coalesce(sum(d_count), 0), coalesce(sum(d_sum), 0) FROM w GROUP BY 1`, cte)
	res, err := env.Store.DB().QueryContext(context.Background(), q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	got := map[string][2]float64{}
	for res.Next() {
		var name, metric string
		var dValue, dCount, dSum float64
		if err := res.Scan(&name, &metric, &dValue, &dCount, &dSum); err != nil {
			t.Fatal(err)
		}
		if metric == semconv.MetricCUDAAPICalls {
			got[name] = [2]float64{dValue, 0}
		} else {
			got[name] = [2]float64{dCount, dSum}
		}
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		calls, sum := c.goTotals(since, until)
		g, ok := got[c.name]
		if !ok {
			t.Errorf("%s: no row in the window", c.name)
			continue
		}
		if g[0] != calls || math.Abs(g[1]-sum) > 1e-9 {
			t.Errorf("%s: SQL totals %v calls (sum %v), series says %v (sum %v)", c.name, g[0], g[1], calls, sum)
		}
	}
	// The cases are not all alike: the rule's branches each decide some total.
	want := map[string]float64{
		"steady":          60 * 7,
		"restart_overlap": 30*11 + (5*6-1)*11, // to 5m, then the overlapping restart is a baseline
		"begun_before":    47 * 4,
		"begun_inside":    25 + 50*4,
		"no_start_first":  56 * 2,
	}
	for name, w := range want {
		if calls, _ := cases[slices.IndexFunc(cases, func(c seriesCase) bool { return c.name == name })].goTotals(since, until); calls != w {
			t.Errorf("%s: series says %v calls, the generator made %v", name, calls, w)
		}
	}
}
