package series

// Mark is what the increase rule reads of a cumulative point: when its series began
// (OTLP's start time, 0 when the sender did not say), when it was taken, and its total
// (a sum's value, a histogram's count), all times in unix nanoseconds.
type Mark struct {
	Start, Time int64
	Total       float64
}

// Step is how a cumulative point relates to the series' point before it.
type Step int

const (
	// Stale: the point is no newer than the one before it (a duplicate, or a replay out
	// of order); it adds nothing and does not replace the previous point.
	Stale Step = iota
	// Continues: same start time and a total no lower: it adds its total minus the
	// previous one, over the time between the two points.
	Continues
	// Whole: the series began (or began again) after everything the observer has
	// counted of it, so its whole total is new: it adds its total, over the time since
	// its start.
	Whole
	// Baseline: the series began before what the observer has seen of it (a first
	// point of a long-running process, a restart whose start time overlaps counted
	// time); what it holds may already be counted or was never seen, so it only sets
	// the baseline for the next point.
	Baseline
)

// Next says what cur adds to a series whose previous point is prev (hasPrev false for
// the series' first point). horizon is the earliest time the observer could have seen
// points of any series (a streaming consumer's start; a window's start for a query).
//
// The rule, the same for sums, histograms, the stream consumers and the store's SQL:
//   - cur not newer than prev: Stale.
//   - same start time and a total no lower than prev's: Continues.
//   - otherwise the series began at cur.Start. It counts Whole when that start is known
//     and no earlier than the last time the observer accounted for (prev's time, or the
//     horizon for a first point): nothing counted in it can have been counted before.
//     A point with no start time whose total fell is a reset, counted Whole as well (a
//     counter only falls when it restarted from zero). Anything else is a Baseline.
func Next(prev Mark, hasPrev bool, cur Mark, horizon int64) Step {
	if hasPrev && cur.Time <= prev.Time {
		return Stale
	}
	if hasPrev && cur.Start == prev.Start && cur.Total >= prev.Total {
		return Continues
	}
	floor := horizon
	if hasPrev {
		floor = prev.Time
	}
	switch {
	case cur.Start > 0 && cur.Start >= floor:
		return Whole
	case cur.Start <= 0 && hasPrev && cur.Total < prev.Total:
		return Whole
	}
	return Baseline
}

// Increase is what one cumulative point added to its series, over [From, To].
type Increase struct {
	Value    float64
	From, To int64 // unix nanos; From is 0 when a reset with no start time says nothing of it
}

// Seconds is the increase's span in seconds, 0 when unknown.
func (i Increase) Seconds() float64 {
	if i.From <= 0 || i.To <= i.From {
		return 0
	}
	return float64(i.To-i.From) / 1e9
}

// Cumulative follows one cumulative sum and says what each point added.
type Cumulative struct {
	prev    Mark
	hasPrev bool
}

// Add takes the series' next point. ok is false when the point adds nothing countable
// (Stale or Baseline).
func (c *Cumulative) Add(cur Mark, horizon int64) (Increase, bool) {
	step := Next(c.prev, c.hasPrev, cur, horizon)
	if step == Stale {
		return Increase{}, false
	}
	prev := c.prev
	c.prev, c.hasPrev = cur, true
	switch step {
	case Continues:
		return Increase{Value: cur.Total - prev.Total, From: prev.Time, To: cur.Time}, true
	case Whole:
		return Increase{Value: cur.Total, From: cur.Start, To: cur.Time}, true
	}
	return Increase{}, false
}

// Delta is the increase a delta point stands for: its value, over [start, ts]. A delta
// point always counts whole; its start is the previous point's time.
func Delta(start, ts int64, value float64) Increase {
	return Increase{Value: value, From: start, To: ts}
}
