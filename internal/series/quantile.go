package series

import "math"

// Bucket is one histogram bucket as a value range and how many values fell in it.
type Bucket struct {
	Lower, Upper float64
	Count        uint64
}

// Quantile estimates the q-quantile (0 < q <= 1) of values counted in buckets, given in
// ascending order, by one method for every histogram Fathom reads (exponential,
// explicit, the store's rollup): the value at rank q·total, interpolated linearly
// inside the bucket that holds it, with the bucket clamped to the recorded min and max
// where known (NaN when not). Linear interpolation inside a bucket assumes values
// spread evenly across it, the usual assumption (Prometheus' histogram_quantile makes
// it), and never reports a value outside the bucket the quantile is known to lie in.
// An empty histogram's quantile is NaN.
func Quantile(q float64, buckets []Bucket, minV, maxV float64) float64 {
	var total uint64
	for _, b := range buckets {
		total += b.Count
	}
	if total == 0 {
		return math.NaN()
	}
	rank := q * float64(total)
	i, before := 0, uint64(0)
	for ; i < len(buckets)-1; i++ {
		if float64(before+buckets[i].Count) >= rank && buckets[i].Count > 0 {
			break
		}
		before += buckets[i].Count
	}
	b := buckets[i]
	lo, hi := b.Lower, b.Upper
	if math.IsInf(lo, -1) || (!math.IsNaN(minV) && lo < minV) {
		lo = minV
	}
	if math.IsInf(hi, 1) || (!math.IsNaN(maxV) && hi > maxV) {
		hi = maxV
	}
	switch {
	case math.IsNaN(lo) || math.IsInf(lo, 0):
		return hi
	case math.IsNaN(hi) || math.IsInf(hi, 0):
		return lo
	case b.Count == 0 || hi < lo:
		return lo
	}
	return lo + (hi-lo)*(rank-float64(before))/float64(b.Count)
}

// ExponentialBuckets lays out an exponential histogram's zero bucket and positive
// buckets (bucket i is (base^i, base^(i+1)], base = 2^(2^-scale)) for Quantile.
func ExponentialBuckets(scale int32, zero uint64, offset int32, counts []uint64) []Bucket {
	base := math.Exp2(math.Exp2(-float64(scale)))
	out := make([]Bucket, 0, len(counts)+1)
	if zero > 0 {
		out = append(out, Bucket{0, 0, zero})
	}
	for i, n := range counts {
		idx := float64(offset + int32(i))
		out = append(out, Bucket{math.Pow(base, idx), math.Pow(base, idx+1), n})
	}
	return out
}
