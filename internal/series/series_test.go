package series

import (
	"math"
	"testing"

	"go.opentelemetry.io/collector/pdata/pmetric"
)

func TestValueReadsIntsAndDoubles(t *testing.T) {
	dp := pmetric.NewNumberDataPoint()
	dp.SetIntValue(7)
	if got := Value(dp); got != 7 {
		t.Fatalf("int point: %v", got)
	}
	dp.SetDoubleValue(2.5)
	if got := Value(dp); got != 2.5 {
		t.Fatalf("double point: %v", got)
	}
}

const s = int64(1e9)

// TestCumulativeCountsEveryCallOnce follows a counter through its first point, steady
// increases, a duplicate, a reset with a new start time, a restart whose start time
// overlaps what was counted, and a reset with no start time: the increases sum to the
// calls made after the horizon, each counted once.
func TestCumulativeCountsEveryCallOnce(t *testing.T) {
	horizon := 100 * s
	type step struct {
		m     Mark
		value float64
		ok    bool
		from  int64
	}
	steps := []step{
		{Mark{Start: 101 * s, Time: 110 * s, Total: 50}, 50, true, 101 * s}, // began after the horizon: whole
		{Mark{Start: 101 * s, Time: 120 * s, Total: 80}, 30, true, 110 * s},
		{Mark{Start: 101 * s, Time: 120 * s, Total: 80}, 0, false, 0},      // duplicate: stale
		{Mark{Start: 101 * s, Time: 115 * s, Total: 70}, 0, false, 0},      // replayed out of order
		{Mark{Start: 125 * s, Time: 130 * s, Total: 5}, 5, true, 125 * s},  // collector restarted: counts start at 125 s
		{Mark{Start: 128 * s, Time: 140 * s, Total: 9}, 0, false, 0},       // new start before the last point: may overlap
		{Mark{Start: 128 * s, Time: 150 * s, Total: 12}, 3, true, 140 * s}, // continues the new baseline
		{Mark{Start: 128 * s, Time: 160 * s, Total: 4}, 0, false, 0},       // fell with an old start: baseline
	}
	var c Cumulative
	for i, st := range steps {
		inc, ok := c.Add(st.m, horizon)
		if ok != st.ok || inc.Value != st.value || (ok && inc.From != st.from) || (ok && inc.To != st.m.Time) {
			t.Fatalf("step %d: got %+v ok=%v, want value %v from %d ok=%v", i, inc, ok, st.value, st.from, st.ok)
		}
	}
	var u Cumulative // no start times: a fall is a reset, counted whole
	for i, st := range []step{
		{Mark{Time: 10 * s, Total: 100}, 0, false, 0},
		{Mark{Time: 20 * s, Total: 150}, 50, true, 10 * s},
		{Mark{Time: 30 * s, Total: 20}, 20, true, 0},
	} {
		inc, ok := u.Add(st.m, horizon)
		if ok != st.ok || inc.Value != st.value || (ok && inc.From != st.from) {
			t.Fatalf("no-start step %d: got %+v ok=%v", i, inc, ok)
		}
	}
}

func TestAFirstPointOfASeriesOlderThanTheHorizonIsABaseline(t *testing.T) {
	var c Cumulative
	if _, ok := c.Add(Mark{Start: 5 * s, Time: 200 * s, Total: 1e6}, 100*s); ok {
		t.Fatal("a series begun before the horizon counted its whole history")
	}
	if inc, ok := c.Add(Mark{Start: 5 * s, Time: 210 * s, Total: 1e6 + 10}, 100*s); !ok || inc.Value != 10 || inc.Seconds() != 10 {
		t.Fatalf("next point: %+v %v", inc, ok)
	}
}

func TestHistogramIncreasesFollowTheSameRule(t *testing.T) {
	var h CumulativeHistogram
	b1 := Buckets{Offset: 10, Counts: []uint64{1, 2, 3}, Zero: 1, Sum: 6}
	d, inc, ok := h.Add(101*s, 110*s, b1, 100*s)
	if !ok || d.Count() != 7 || inc.Value != 7 || d.Sum != 6 {
		t.Fatalf("first point: %+v %+v %v", d, inc, ok)
	}
	// The layout grew on both sides.
	b2 := Buckets{Offset: 9, Counts: []uint64{4, 1, 2, 5, 1}, Zero: 1, Sum: 20}
	d, inc, ok = h.Add(101*s, 120*s, b2, 100*s)
	want := []uint64{4, 0, 0, 2, 1}
	if !ok || d.Offset != 9 || inc.Value != 7 || d.Sum != 14 || d.Zero != 0 {
		t.Fatalf("second point: %+v %+v %v", d, inc, ok)
	}
	for i := range want {
		if d.Counts[i] != want[i] {
			t.Fatalf("second point's buckets %v, want %v", d.Counts, want)
		}
	}
	// Same start and a higher count, but a bucket fell: a reset the count hid. Its start
	// is before the last point, so it is a baseline.
	b3 := Buckets{Offset: 9, Counts: []uint64{0, 0, 0, 20, 0}, Sum: 30}
	if _, _, ok := h.Add(101*s, 130*s, b3, 100*s); ok {
		t.Fatal("a histogram whose buckets fell was differenced")
	}
	b4 := Buckets{Offset: 9, Counts: []uint64{0, 0, 0, 21, 0}, Sum: 31}
	if d, _, ok := h.Add(101*s, 140*s, b4, 100*s); !ok || d.Count() != 1 {
		t.Fatalf("after the reset: %+v %v", d, ok)
	}
}

func TestQuantileInterpolatesInsideItsBucket(t *testing.T) {
	b := []Bucket{{0, 0, 2}, {1, 2, 4}, {2, 4, 4}}
	cases := []struct{ q, want float64 }{
		{0.1, 0},     // rank 1 of 10: the zero bucket
		{0.4, 1.5},   // rank 4: two into the 4 of (1, 2]
		{0.6, 2},     // rank 6: the top of (1, 2]
		{0.8, 3},     // rank 8: two into (2, 4]
		{0.99, 3.95}, // rank 9.9: 3.9 of 4 into (2, 4]
		{1, 4},       // the top
	}
	for _, c := range cases {
		if got := Quantile(c.q, b, math.NaN(), math.NaN()); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("q%v = %v, want %v", c.q, got, c.want)
		}
	}
	if got := Quantile(0.99, b, 0, 3.5); math.Abs(got-(2+1.5*3.9/4)) > 1e-12 {
		t.Errorf("clamped to max 3.5: %v", got)
	}
	if !math.IsNaN(Quantile(0.5, nil, 0, 1)) {
		t.Error("an empty histogram has no quantile")
	}
	// Explicit buckets open at both ends take the recorded extremes.
	open := []Bucket{{math.Inf(-1), 1, 1}, {1, math.Inf(1), 1}}
	if got := Quantile(1, open, 0.5, 9); got != 9 {
		t.Errorf("open top bucket: %v", got)
	}
	eb := ExponentialBuckets(0, 1, 1, []uint64{2})
	if len(eb) != 2 || eb[1].Lower != 2 || eb[1].Upper != 4 {
		t.Errorf("exponential layout: %+v", eb)
	}
}

func TestMedianAndMAD(t *testing.T) {
	v := []float64{5, 1, 3, 100}
	m := Median(v)
	if m != 4 {
		t.Fatalf("median %v", m)
	}
	if mad := MAD(v, m); mad != 2 { // deviations 1 3 1 96
		t.Fatalf("MAD %v", mad)
	}
	if !math.IsNaN(Median(nil)) {
		t.Fatal("median of nothing")
	}
}
