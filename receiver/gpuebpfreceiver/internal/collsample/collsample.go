// Package collsample picks which collectives of a named communicator a rank records,
// so that every rank records the same ones and a communicator that makes few
// collectives still has enough of them recorded to be judged.
//
// The gateway matches a collective's records across the communicator's ranks by its
// sequence number (nccl.seq, the same on every rank), so each rank must pick by the
// sequence alone: one in Every. A fixed one in 16 suits a job of 2 ms steps (hundreds
// of collectives a second, tens recorded), but a job of 640 ms steps with one gradient
// bucket makes 1.5 collectives a second, and one in 16 recorded one every ten seconds:
// arrival lag, the signal that shows a rank entering each step's all-reduce late, was
// all but absent (docs/straggler.md, Long steps).
//
// So each rank picks its Every from its communicator's rate: a power-of-two fraction of
// the most it may be (halvings of Most), the largest that still records PerSecond
// collectives a second. Every rank of a communicator makes the same collectives at the
// same rate, and measures it over the same windows of the wall clock, so the ranks pick
// the same Every. Where two ranks differ (one rank's collector started later, or a rate
// on the edge between two), the smaller Every divides the larger: the collectives the
// larger keeps are kept by both and match whole, and only the rest arrive from some
// ranks alone (the gateway counts them as unmatched). To keep that rare, Every moves up
// (fewer kept) only once the rate is four times what the current one needs.
package collsample

// WindowNS is how long the rate is measured over: windows of the wall clock, the same
// on every node whose clock is within a collective's lag of the others'.
const WindowNS = 2e9

// Rule is what every rank of a node uses: the most Every may be (logs.nccl.sample_every)
// and the collectives a second to keep at least, while the communicator makes that many
// (logs.nccl.min_per_second; 0 keeps one in Most always).
type Rule struct {
	Most      uint64
	PerSecond float64
}

// State is one communicator's choice on one rank.
type State struct {
	// measured: a whole window has been counted. The window the first collective
	// came in is only part counted, and a rate from it would be too low.
	measured bool
	every    uint64 // 0 before the first collective
	window   int64  // the wall-clock window the current count began in
	seqAt    uint64 // the sequence number of the first collective in it
}

// Keep says whether the collective with sequence number seq, entered at wallNS (unix
// ns), is recorded, and moves the choice at each new window.
func (s *State) Keep(r Rule, seq uint64, wallNS int64) bool {
	most := max(r.Most, 1)
	window := wallNS / WindowNS
	switch {
	case s.every == 0:
		// A rank starts at the most, which divides by every other choice: what it
		// keeps until its first window ends matches whatever the other ranks chose.
		s.every, s.window, s.seqAt = most, window, seq
	case window > s.window && seq >= s.seqAt:
		if s.measured {
			rate := float64(seq-s.seqAt) / (float64(window-s.window) * WindowNS / 1e9)
			s.every = next(most, s.every, rate, r.PerSecond)
		}
		s.measured, s.window, s.seqAt = true, window, seq
	case window < s.window || seq < s.seqAt:
		// The clock stepped back or the count restarted: measure anew.
		s.measured, s.window, s.seqAt = false, window, seq
	}
	return seq%s.every == 0
}

// Every is the current choice (Most before the first collective).
func (s *State) Every(r Rule) uint64 {
	if s.every == 0 {
		return max(r.Most, 1)
	}
	return s.every
}

// next is the Every to use after a window in which the communicator made rate
// collectives a second: halved while fewer than perSecond would be kept, doubled
// (within most, by halvings of it) while four times perSecond would still be.
func next(most, every uint64, rate, perSecond float64) uint64 {
	if perSecond <= 0 {
		return most
	}
	for every > 1 && every%2 == 0 && rate/float64(every) < perSecond {
		every /= 2
	}
	for every < most && most%(every*2) == 0 && rate/float64(every) >= 4*perSecond {
		every *= 2
	}
	return every
}
