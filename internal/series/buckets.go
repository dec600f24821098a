package series

// Buckets are a cumulative histogram's counts: Counts[i] values fell in bucket
// Offset+i (OTLP's exponential histogram layout, one side), Zero in the zero bucket.
type Buckets struct {
	Offset int32
	Counts []uint64
	Zero   uint64
	Sum    float64
}

// Count is every value the buckets hold.
func (b Buckets) Count() uint64 {
	n := b.Zero
	for _, c := range b.Counts {
		n += c
	}
	return n
}

// Minus returns the counts b gained since before, bucket by bucket (b's layout), and
// false when a bucket fell: then b is not a continuation of before (a reset the count
// alone did not show) and the caller treats the point as its series' first.
func (b Buckets) Minus(before Buckets) (Buckets, bool) {
	out := Buckets{Offset: b.Offset, Counts: make([]uint64, len(b.Counts)), Sum: b.Sum - before.Sum}
	if b.Zero < before.Zero {
		return Buckets{}, false
	}
	out.Zero = b.Zero - before.Zero
	seen := uint64(0)
	for i, n := range b.Counts {
		var was uint64
		if j := b.Offset + int32(i) - before.Offset; j >= 0 && int(j) < len(before.Counts) {
			was = before.Counts[j]
			seen += was
		}
		if n < was {
			return Buckets{}, false
		}
		out.Counts[i] = n - was
	}
	// A bucket before had that b no longer covers fell to zero.
	if seen+before.Zero != before.Count() {
		return Buckets{}, false
	}
	return out, true
}

// CumulativeHistogram follows one cumulative exponential histogram and says what each
// point added, by the same rule as Cumulative (the total is the count).
type CumulativeHistogram struct {
	prev    Mark
	prevB   Buckets
	hasPrev bool
}

// Add takes the series' next point (its start time, time and buckets). ok is false
// when the point adds nothing countable.
func (c *CumulativeHistogram) Add(start, ts int64, b Buckets, horizon int64) (Buckets, Increase, bool) {
	cur := Mark{Start: start, Time: ts, Total: float64(b.Count())}
	step := Next(c.prev, c.hasPrev, cur, horizon)
	if step == Stale {
		return Buckets{}, Increase{}, false
	}
	var out Buckets
	var inc Increase
	if step == Continues {
		if d, ok := b.Minus(c.prevB); ok {
			out, inc = d, Increase{Value: cur.Total - c.prev.Total, From: c.prev.Time, To: ts}
		} else {
			// A bucket fell though the count did not: a reset; judged as a point that
			// does not continue its series.
			step = Next(c.prev, true, Mark{Start: start, Time: ts, Total: -1}, horizon)
		}
	}
	if step == Whole {
		out = Buckets{Offset: b.Offset, Counts: append([]uint64(nil), b.Counts...), Zero: b.Zero, Sum: b.Sum}
		inc = Increase{Value: cur.Total, From: start, To: ts}
	}
	c.prev, c.hasPrev = cur, true
	c.prevB = Buckets{Offset: b.Offset, Counts: append(c.prevB.Counts[:0], b.Counts...), Zero: b.Zero, Sum: b.Sum}
	return out, inc, step == Continues || step == Whole
}
