package expohisto

import (
	"math"
	"slices"
	"sort"
	"testing"

	"go.opentelemetry.io/collector/pdata/pmetric"
)

// Bucket i must hold (base^i, base^(i+1)], the OTLP definition, including exactly at
// powers of two where floating-point log2 is easy to get wrong.
func TestBucketBoundsFollowOTLP(t *testing.T) {
	base := math.Exp2(1.0 / (1 << Scale))
	for _, v := range []float64{1, 2, 0.5, 1e-6, 3.7e-3, 42, 1024, 1.0000001} {
		i := bucketIndex(v)
		lower, upper := math.Pow(base, float64(i)), math.Pow(base, float64(i+1))
		if !(v > lower*(1-1e-12) && v <= upper*(1+1e-12)) {
			t.Errorf("v=%g in bucket %d = (%g, %g]", v, i, lower, upper)
		}
	}
	if got := bucketIndex(1); got != -1 {
		t.Errorf("1.0 is the upper bound of bucket -1, got %d", got)
	}
	if got := bucketIndex(2); got != (1<<Scale)-1 {
		t.Errorf("2.0 should be in bucket %d, got %d", (1<<Scale)-1, got)
	}
}

func TestRecordCountsSumsAndQuantiles(t *testing.T) {
	var h Histogram
	// 90 fast calls of 100 µs and 10 slow ones of 40 ms: p50 near 100 µs, p99 near 40 ms.
	for i := 0; i < 90; i++ {
		h.Record(100e-6)
	}
	for i := 0; i < 10; i++ {
		h.Record(40e-3)
	}
	if h.Count != 100 || math.Abs(h.Sum-(90*100e-6+10*40e-3)) > 1e-12 {
		t.Fatalf("count %d sum %g", h.Count, h.Sum)
	}
	if h.Min != 100e-6 || h.Max != 40e-3 {
		t.Fatalf("min %g max %g", h.Min, h.Max)
	}
	if p50 := h.Quantile(0.5); math.Abs(p50-100e-6)/100e-6 > 0.05 {
		t.Errorf("p50 %g, want 100µs within 5%%", p50)
	}
	if p99 := h.Quantile(0.99); math.Abs(p99-40e-3)/40e-3 > 0.05 {
		t.Errorf("p99 %g, want 40ms within 5%%", p99)
	}
	dp := pmetric.NewExponentialHistogramDataPoint()
	h.CopyTo(dp)
	var total uint64
	for _, c := range dp.Positive().BucketCounts().AsRaw() {
		total += c
	}
	if dp.Scale() != Scale || total != 100 || dp.Count() != 100 {
		t.Fatalf("data point scale %d buckets total %d count %d", dp.Scale(), total, dp.Count())
	}
}

// Whatever is recorded, memory stays bounded.
func TestBucketsAreBounded(t *testing.T) {
	var h Histogram
	for v := 1e-12; v < 1e12; v *= 1.01 {
		h.Record(v)
	}
	if len(h.counts) > maxBuckets {
		t.Fatalf("%d buckets, bound is %d", len(h.counts), maxBuckets)
	}
	if h.Count == 0 || h.ZeroCount != 0 {
		t.Fatalf("count %d zero %d", h.Count, h.ZeroCount)
	}
}

func BenchmarkRecord(b *testing.B) {
	var h Histogram
	for i := 0; i < b.N; i++ {
		h.Record(float64(i%5000+1) * 1e-6)
	}
}

// The kernel buckets integer nanoseconds by comparing them with UpperBoundsNS; that must
// put every value where Record puts the same duration in seconds.
func TestUpperBoundsNSAgreeWithRecord(t *testing.T) {
	const first, n = -208, 320
	bounds := UpperBoundsNS(first, n)
	bucketOf := func(ns uint64) int32 {
		i := sort.Search(len(bounds), func(i int) bool { return ns <= bounds[i] })
		return first + int32(i)
	}
	check := func(ns uint64) {
		want := bucketIndex(float64(ns) / 1e9)
		if want < first || want >= first+n {
			return // outside the table: the kernel clamps into its end buckets
		}
		if got := bucketOf(ns); got != want {
			t.Fatalf("%d ns: bounds put it in bucket %d, Record in %d", ns, got, want)
		}
	}
	for ns := uint64(15); ns < 2_000_000; ns++ {
		check(ns)
	}
	// Around every bound, where a rounding error would show.
	for _, b := range bounds {
		for d := uint64(0); d < 3 && b > d; d++ {
			check(b - d)
			check(b + d + 1)
		}
	}
	// Powers of two seconds times 1e9 are integers and the inclusive upper bound of
	// their bucket: 1 s ends bucket -1, 2 s ends bucket 7 (scale 3).
	if got := bucketOf(1_000_000_000); got != -1 {
		t.Errorf("1 s in bucket %d, want -1", got)
	}
	if got := bucketOf(2_000_000_000); got != 7 {
		t.Errorf("2 s in bucket %d, want 7", got)
	}
	if got := bucketOf(2_000_000_001); got != 8 {
		t.Errorf("2 s + 1 ns in bucket %d, want 8", got)
	}
}

func TestAddBucketsDropsExtremes(t *testing.T) {
	var h Histogram
	h.Record(0.1) // bucket -27
	h.AddBuckets(-80, []uint64{2, 0, 3}, 4e-3)
	if h.Count != 6 || h.HasMinMax {
		t.Fatalf("count %d hasMinMax %v, want 6 false", h.Count, h.HasMinMax)
	}
	if math.Abs(h.Sum-0.104) > 1e-12 {
		t.Errorf("sum %g, want 0.104", h.Sum)
	}
	dp := pmetric.NewExponentialHistogramDataPoint()
	h.CopyTo(dp)
	if dp.HasMin() || dp.HasMax() {
		t.Error("a histogram with kernel buckets must not claim a min or max")
	}
	if got := dp.Positive().BucketCounts().At(int(-80 - dp.Positive().Offset())); got != 2 {
		t.Errorf("bucket -80 holds %d, want 2", got)
	}
}

func TestMergeKeepsCountsAndExtremes(t *testing.T) {
	var a, b, both Histogram
	for _, v := range []float64{1e-6, 3e-6, 2e-3} {
		a.Record(v)
		both.Record(v)
	}
	for _, v := range []float64{5e-9, 0.7, 0} {
		b.Record(v)
		both.Record(v)
	}
	a.Merge(&b)
	if a.Count != both.Count || a.ZeroCount != both.ZeroCount || a.Min != both.Min || a.Max != both.Max || !a.HasMinMax {
		t.Fatalf("merged %+v, want %+v", a, both)
	}
	da, db := pmetric.NewExponentialHistogramDataPoint(), pmetric.NewExponentialHistogramDataPoint()
	a.CopyTo(da)
	both.CopyTo(db)
	if da.Positive().Offset() != db.Positive().Offset() || !slices.Equal(da.Positive().BucketCounts().AsRaw(), db.Positive().BucketCounts().AsRaw()) {
		t.Errorf("merged buckets %d %v, want %d %v", da.Positive().Offset(), da.Positive().BucketCounts().AsRaw(), db.Positive().Offset(), db.Positive().BucketCounts().AsRaw())
	}
}
