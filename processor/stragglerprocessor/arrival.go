package stragglerprocessor

import (
	"slices"
	"time"

	"github.com/fathom-gpu/fathom/internal/series"
)

// Arrival lag is the one signal the gateway makes itself: per sampled collective
// instance (communicator, sequence), how long after the instance's median rank each
// rank entered it. Every rank's node samples the same sequences (nccl.seq modulo
// sample_every), so an instance arrives whole from every node; a recovered
// communicator's records carry each rank's own count instead, and its ranks' offsets
// are learned first (arrivalalign.go). Entry times are on each
// node's own clock; each is taken back by the offset its node measured against the
// gateway's clock (the clock exchange of the thresholds extension), so a node whose
// clock is off does not make its ranks late.

// instanceKey names one collective instance.
type instanceKey struct {
	cluster, comm string
	seq           int64
}

// arrivalRank is one rank's entry into an instance.
type arrivalRank struct {
	commRank  int64 // rank in the communicator (0 to nranks-1), to tell duplicates
	rank, pid int64 // the process's own rank and pid (its resource)
	cohort    cohortKey
	job, node string
	entry     int64 // unix nanos on the node's clock
}

type instance struct {
	nranks   int
	ranks    []arrivalRank
	seen     []bool // by rank in the communicator
	received time.Time
}

// lagSum accumulates one rank's lags over the instances matched since the last
// evaluation.
type lagSum struct {
	cohort    cohortKey
	job, node string
	rank, pid int64
	sum       float64 // seconds
	n         int
}

// clockKey names a node's clock: host names are unique within a cluster.
type clockKey struct{ cluster, node string }

// nodeClock is a node's clock minus the gateway's, as the node last said, and when.
type nodeClock struct {
	offset time.Duration
	at     time.Time
}

// arrivals matches instances and keeps each node's clock offset. Bounded: at most
// maxInstances pending (the oldest is dropped and counted), an instance waits at most
// window for its ranks (then it is dropped as incomplete, counted: a rank missing from
// one instance, as when a node's record budget dropped it, says nothing about lateness),
// and at most maxInstances node clocks are kept.
type arrivals struct {
	window       time.Duration
	maxInstances int
	maxRanks     int

	pending map[instanceKey]*instance
	order   []instanceKey // arrival order, for expiry and eviction
	lags    map[cohortKey]map[int64]*lagSum
	clocks  map[clockKey]nodeClock
	drops   map[string]int64
	// recovered learns the offsets of recovered communicators' ranks (arrivalalign.go);
	// recoveredRanks counts the ranks it follows, at most maxInstances.
	recovered      map[recoveredKey]*recoveredComm
	recoveredRanks int
}

func newArrivals(window time.Duration, maxInstances, maxRanks int, drops map[string]int64) *arrivals {
	return &arrivals{window: window, maxInstances: maxInstances, maxRanks: maxRanks, pending: map[instanceKey]*instance{},
		lags: map[cohortKey]map[int64]*lagSum{}, clocks: map[clockKey]nodeClock{}, drops: drops, recovered: map[recoveredKey]*recoveredComm{}}
}

// clockOffset records what a node said of its clock.
func (a *arrivals) clockOffset(k clockKey, c nodeClock) {
	if _, ok := a.clocks[k]; !ok && len(a.clocks) >= a.maxInstances {
		a.drops["clock_cap"]++
		return
	}
	a.clocks[k] = c
}

// add takes one rank's entry into an instance of nranks ranks, and matches the
// instance once every rank has entered it.
func (a *arrivals) add(k instanceKey, nranks int, r arrivalRank, now time.Time) {
	if nranks < 2 || nranks > a.maxRanks || r.commRank < 0 || r.commRank >= int64(nranks) {
		a.drops["arrival_nranks"]++
		return
	}
	in := a.pending[k]
	if in == nil {
		a.expire(now)
		if len(a.pending) >= a.maxInstances {
			a.dropOldest("instance_cap")
		}
		in = &instance{nranks: nranks, seen: make([]bool, nranks), received: now}
		a.pending[k] = in
		a.order = append(a.order, k)
		if len(a.order) > 2*a.maxInstances {
			// Matched instances leave their keys in order until they reach its
			// front; keep it bounded by what is still pending.
			a.order = slices.DeleteFunc(a.order, func(k instanceKey) bool { _, ok := a.pending[k]; return !ok })
		}
	}
	if r.commRank >= int64(in.nranks) || in.seen[r.commRank] {
		// A second record of the same rank, or a rank past the size this instance's
		// first record gave.
		a.drops["arrival_duplicate"]++
		return
	}
	in.seen[r.commRank] = true
	in.ranks = append(in.ranks, r)
	if len(in.ranks) == in.nranks {
		a.match(in)
		delete(a.pending, k) // its place in order is skipped when reached
	}
}

// match puts each rank's lag behind the instance's median entry, clocks corrected,
// into its sum.
func (a *arrivals) match(in *instance) {
	// Relative to the first rank's entry: unix nanoseconds are past float64's 53 bits.
	base := in.ranks[0].entry
	entries := make([]float64, len(in.ranks))
	for i, r := range in.ranks {
		entries[i] = float64(r.entry - base - int64(a.clocks[clockKey{r.cohort.cluster, r.node}].offset))
	}
	corrected := append([]float64(nil), entries...)
	median := series.Median(corrected)
	for i, r := range in.ranks {
		byRank := a.lags[r.cohort]
		if byRank == nil {
			byRank = map[int64]*lagSum{}
			a.lags[r.cohort] = byRank
		}
		s := byRank[r.rank]
		if s == nil {
			s = &lagSum{cohort: r.cohort, rank: r.rank}
			byRank[r.rank] = s
		}
		s.job, s.node, s.pid = r.job, r.node, r.pid
		s.sum += (entries[i] - median) / 1e9
		s.n++
	}
}

// expire drops the instances that waited longer than the window.
func (a *arrivals) expire(now time.Time) {
	for len(a.order) > 0 {
		k := a.order[0]
		in, ok := a.pending[k]
		if ok && now.Sub(in.received) <= a.window {
			return
		}
		a.order = a.order[1:]
		if ok {
			delete(a.pending, k)
			a.drops["instance_incomplete"]++
		}
	}
}

func (a *arrivals) dropOldest(reason string) {
	for len(a.order) > 0 {
		k := a.order[0]
		a.order = a.order[1:]
		if _, ok := a.pending[k]; ok {
			delete(a.pending, k)
			a.drops[reason]++
			return
		}
	}
}

// drain returns each rank's mean lag since the last call, and starts new sums.
func (a *arrivals) drain(now time.Time) []lagSum {
	a.expire(now)
	a.expireRecovered(now)
	var out []lagSum
	for _, byRank := range a.lags {
		for _, s := range byRank {
			out = append(out, *s)
		}
	}
	clear(a.lags)
	return out
}
