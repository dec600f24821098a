package expohisto

import (
	"math"
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
