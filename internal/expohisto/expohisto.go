// Package expohisto is a fixed-scale base-2 exponential histogram that maps directly
// onto OTLP's ExponentialHistogram data point.
//
// The scale is fixed rather than adaptive: durations of interest span nanoseconds to
// minutes, so at scale 3 (8 buckets per power of two, about 9% wide, ±4.4% error) the
// whole range fits in a few hundred buckets, and two histograms of the same scale can
// be merged or compared bucket by bucket (ranks against each other at the gateway).
package expohisto

import (
	"math"

	"go.opentelemetry.io/collector/pdata/pmetric"
)

// Scale is the OTLP scale of every histogram: base = 2^(2^-Scale).
const Scale = 3

// maxBuckets bounds memory per histogram: 1e-9..1e4 s is about 43 powers of two.
const maxBuckets = 44 << Scale

// Histogram accumulates positive values (zero and negatives go to the zero bucket).
type Histogram struct {
	Count     uint64
	Sum       float64
	Min, Max  float64
	ZeroCount uint64
	offset    int32    // bucket index of counts[0]
	counts    []uint64 // dense, grows both ways up to maxBuckets
}

// bucketIndex returns the index i with base^i < v <= base^(i+1).
func bucketIndex(v float64) int32 {
	frac, exp := math.Frexp(v) // v = frac * 2^exp, frac in [0.5, 1)
	if frac == 0.5 {
		// Exact power of two 2^(exp-1) is the upper bound of the bucket below.
		return int32((exp-1)<<Scale) - 1
	}
	return int32(math.Ceil(math.Log2(v)*(1<<Scale))) - 1
}

// Record adds one value.
func (h *Histogram) Record(v float64) {
	if h.Count == 0 || v < h.Min {
		h.Min = v
	}
	if h.Count == 0 || v > h.Max {
		h.Max = v
	}
	h.Count++
	h.Sum += v
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		h.ZeroCount++
		return
	}
	idx := bucketIndex(v)
	if len(h.counts) == 0 {
		h.offset = idx
		h.counts = append(h.counts, 0)
	}
	switch {
	case idx < h.offset:
		grow := int(h.offset - idx)
		if len(h.counts)+grow > maxBuckets {
			h.counts[0]++ // clamp into the lowest bucket rather than grow without bound
			return
		}
		h.counts = append(make([]uint64, grow, grow+len(h.counts)), h.counts...)
		h.offset = idx
	case int(idx-h.offset) >= len(h.counts):
		need := int(idx-h.offset) + 1
		if need > maxBuckets {
			h.counts[len(h.counts)-1]++
			return
		}
		h.counts = append(h.counts, make([]uint64, need-len(h.counts))...)
	}
	h.counts[idx-h.offset]++
}

// Quantile estimates the q-quantile (0 < q < 1) as the midpoint of the bucket that
// holds it; 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) float64 {
	if h.Count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.Count)))
	if rank <= h.ZeroCount {
		return 0
	}
	seen := h.ZeroCount
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lower := math.Exp2(float64(h.offset+int32(i)) / (1 << Scale))
			upper := math.Exp2(float64(h.offset+int32(i)+1) / (1 << Scale))
			return math.Min(math.Max((lower+upper)/2, h.Min), h.Max)
		}
	}
	return h.Max
}

// Reset empties the histogram, keeping its memory.
func (h *Histogram) Reset() {
	*h = Histogram{counts: h.counts[:0]}
}

// CopyTo fills an OTLP data point (counts, sum, min, max, buckets).
func (h *Histogram) CopyTo(dp pmetric.ExponentialHistogramDataPoint) {
	dp.SetScale(Scale)
	dp.SetCount(h.Count)
	dp.SetSum(h.Sum)
	if h.Count > 0 {
		dp.SetMin(h.Min)
		dp.SetMax(h.Max)
	}
	dp.SetZeroCount(h.ZeroCount)
	dp.Positive().SetOffset(h.offset)
	dp.Positive().BucketCounts().FromRaw(h.counts)
}
