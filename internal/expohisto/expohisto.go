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
	"math/big"

	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/series"
)

// Scale is the OTLP scale of every histogram: base = 2^(2^-Scale).
const Scale = 3

// maxBuckets bounds memory per histogram: 1e-9..1e4 s is about 43 powers of two.
const maxBuckets = 44 << Scale

// Histogram accumulates positive values (zero and negatives go to the zero bucket).
type Histogram struct {
	Count     uint64
	Sum       float64
	Min, Max  float64 // meaningful only while HasMinMax
	HasMinMax bool    // false once buckets counted elsewhere were added (AddBuckets)
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
	if h.Count == 0 {
		h.Min, h.Max, h.HasMinMax = v, v, true
	} else if h.HasMinMax {
		h.Min, h.Max = math.Min(h.Min, v), math.Max(h.Max, v)
	}
	h.Count++
	h.Sum += v
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		h.ZeroCount++
		return
	}
	h.add(bucketIndex(v), 1)
}

// AddBuckets adds counts[i] values to bucket firstIndex+i, and sum to the sum: buckets
// counted elsewhere on the same scale (the kernel's, see UpperBoundsNS). Their extremes
// are unknown, so the histogram reports no min and max from then on.
func (h *Histogram) AddBuckets(firstIndex int32, counts []uint64, sum float64) {
	added := uint64(0)
	for i, n := range counts {
		if n != 0 {
			h.add(firstIndex+int32(i), n)
			added += n
		}
	}
	if added == 0 {
		return
	}
	h.Count += added
	h.Sum += sum
	h.HasMinMax = false
}

// Merge adds o's values to h (both on the fixed scale).
func (h *Histogram) Merge(o *Histogram) {
	if o.Count == 0 {
		return
	}
	switch {
	case h.Count == 0:
		h.Min, h.Max, h.HasMinMax = o.Min, o.Max, o.HasMinMax
	case h.HasMinMax && o.HasMinMax:
		h.Min, h.Max = math.Min(h.Min, o.Min), math.Max(h.Max, o.Max)
	default:
		h.HasMinMax = false
	}
	h.Count += o.Count
	h.Sum += o.Sum
	h.ZeroCount += o.ZeroCount
	for i, n := range o.counts {
		if n != 0 {
			h.add(o.offset+int32(i), n)
		}
	}
}

// add puts n values in bucket idx.
func (h *Histogram) add(idx int32, n uint64) {
	if len(h.counts) == 0 {
		h.offset = idx
		h.counts = append(h.counts, 0)
	}
	switch {
	case idx < h.offset:
		grow := int(h.offset - idx)
		if len(h.counts)+grow > maxBuckets {
			h.counts[0] += n // clamp into the lowest bucket rather than grow without bound
			return
		}
		h.counts = append(make([]uint64, grow, grow+len(h.counts)), h.counts...)
		h.offset = idx
	case int(idx-h.offset) >= len(h.counts):
		need := int(idx-h.offset) + 1
		if need > maxBuckets {
			h.counts[len(h.counts)-1] += n
			return
		}
		h.counts = append(h.counts, make([]uint64, need-len(h.counts))...)
	}
	h.counts[idx-h.offset] += n
}

// Quantile estimates the q-quantile (0 < q <= 1) by series.Quantile, Fathom's one
// method (linear inside the bucket that holds it, clamped to the min and max when
// known); 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) float64 {
	if h.Count == 0 {
		return 0
	}
	minV, maxV := math.NaN(), math.NaN()
	if h.HasMinMax {
		minV, maxV = h.Min, h.Max
	}
	return series.Quantile(q, series.ExponentialBuckets(Scale, h.ZeroCount, h.offset, h.counts), minV, maxV)
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
	if h.Count > 0 && h.HasMinMax {
		dp.SetMin(h.Min)
		dp.SetMax(h.Max)
	}
	dp.SetZeroCount(h.ZeroCount)
	dp.Positive().SetOffset(h.offset)
	dp.Positive().BucketCounts().FromRaw(h.counts)
}

// UpperBoundsNS returns the inclusive upper bounds, in whole nanoseconds, of n buckets
// of durations in seconds starting at bucket index firstIndex: bound i is the largest
// integer number of nanoseconds in bucket firstIndex+i, floor(1e9 * base^(firstIndex+i+1)).
// A count of integer nanoseconds v belongs to bucket i exactly when
// bound[i-1] < v <= bound[i], which lets the kernel bucket durations with integer
// comparisons alone. The bounds are computed at 256-bit precision: float64 could round
// the floor the wrong way where a bound falls just above an integer.
func UpperBoundsNS(firstIndex int32, n int) []uint64 {
	const prec = 256
	bounds := make([]uint64, n)
	billion := new(big.Float).SetPrec(prec).SetInt64(1_000_000_000)
	for i := range bounds {
		exp := int64(firstIndex) + int64(i) + 1 // base^exp = 2^(exp / 2^Scale)
		whole, frac := exp>>Scale, exp&(1<<Scale-1)
		// 2^(frac/2^Scale) by repeated square roots of 2^frac.
		root := new(big.Float).SetPrec(prec).SetMantExp(big.NewFloat(1).SetPrec(prec), int(frac))
		for s := 0; s < Scale; s++ {
			root.Sqrt(root)
		}
		v := new(big.Float).SetPrec(prec).Mul(billion, root)
		v.SetMantExp(v, int(whole))
		floor, _ := v.Int(nil) // truncates toward zero: the floor of a positive number
		if !floor.IsUint64() {
			bounds[i] = math.MaxUint64
			continue
		}
		bounds[i] = floor.Uint64()
	}
	return bounds
}
