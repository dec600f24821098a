package stragglerprocessor

import (
	"slices"
	"time"

	"github.com/fathom-gpu/fathom/internal/series"
)

// A recovered communicator (nccl.comm.recovered: its setup happened before its nodes'
// collectors ran) has no sequence number its ranks agree on. Each rank's records carry
// the process's own count of its collectives on it (nccl.seq.local), which began at
// whatever call its collector first saw; a rank's count differs from another's by a
// constant. The nodes keep those records in bursts of consecutive collectives from the
// first entered after each wall-clock second, so every rank's burst holds nearly the
// same collectives. Here each rank's offset from the communicator's rank 0 is learned
// from them: a burst is aligned with rank 0's records by its collectives' shapes (which
// every rank passes alike) and entry times (which lie within the ranks' lags of each
// other), and once alignCandidates bursts in a row agree on one offset, the rank's
// records are matched by own count plus offset in the instance table, as those of a
// communicator with nccl.seq are.

const (
	// alignRecordsPerRank records of each rank are kept to align with: 4 bursts of 16,
	// the last four seconds.
	alignRecordsPerRank = 64
	// alignBurstLen is the nodes' burst length (commrecovery.DefaultBursts): a longer
	// run of consecutive records (logs.policy all keeps every one) is aligned in
	// blocks of this many.
	alignBurstLen = 16
	// alignMinOverlap collectives at least in common with rank 0's records, for an
	// offset to be weighed.
	alignMinOverlap = 4
	// alignAgree bursts in a row must vote for one offset before it is kept.
	alignAgree = 3
	// alignMaxLag is the most a burst's median distance from rank 0's may be: beyond
	// it the two are not the same collectives (rank 0's burst of that second has not
	// arrived yet, or a rank is so late nothing here can tell).
	alignMaxLag = 250 * time.Millisecond
	// alignMargin: the best offset's median distance must be under half the next
	// best's less this, so jitter alone never decides between two offsets.
	alignMargin = 100 * time.Microsecond
)

// recoveredKey names a recovered communicator.
type recoveredKey struct{ cluster, comm string }

// localRecord is one rank's record of a collective on a recovered communicator.
type localRecord struct {
	seq   int64  // nccl.seq.local
	shape uint64 // FNV-1a of op, count, data type and reduction
	entry int64  // unix nanos on the node's clock
}

// alignRank is what is known of one rank of a recovered communicator.
type alignRank struct {
	last arrivalRank   // its latest record's process, node and cohort (entry unused)
	recs []localRecord // ascending seq, at most alignRecordsPerRank
	// votedThrough is the last seq of the latest block that voted, or was found
	// ambiguous: each block is weighed once.
	votedThrough int64
	candidate    int64
	agree        int
	// offset maps its count to rank 0's once kept (rank 0's is 0, kept from its
	// first record); added is the last seq put into the instance table.
	offset int64
	kept   bool
	added  int64
}

type recoveredComm struct {
	nranks  int
	ranks   map[int64]*alignRank // by rank in the communicator
	heard   time.Time
	touched bool // records came since the last alignment
}

// addLocal takes one rank's record of a collective on a recovered communicator, with
// its own count seq and its shape. Bounded: at most a.maxInstances ranks are followed
// over all recovered communicators (past it a new rank's records are dropped, counted
// offset_rank_cap), each with its last alignRecordsPerRank records; a communicator not
// heard from for the match window is forgotten.
func (a *arrivals) addLocal(k recoveredKey, seq int64, shape uint64, nranks int, r arrivalRank, now time.Time) {
	if nranks < 2 || nranks > a.maxRanks || r.commRank < 0 || r.commRank >= int64(nranks) {
		a.drops["arrival_nranks"]++
		return
	}
	c := a.recovered[k]
	if c == nil {
		c = &recoveredComm{nranks: nranks, ranks: map[int64]*alignRank{}}
		a.recovered[k] = c
	}
	if c.nranks != nranks {
		a.drops["arrival_nranks"]++
		return
	}
	c.heard, c.touched = now, true
	ar := c.ranks[r.commRank]
	if ar == nil {
		if a.recoveredRanks >= a.maxInstances {
			a.drops["offset_rank_cap"]++
			return
		}
		ar = &alignRank{votedThrough: -1, added: -1}
		c.ranks[r.commRank] = ar
		a.recoveredRanks++
	}
	if len(ar.recs) > 0 && (ar.last.pid != r.pid || seq < ar.recs[0].seq) {
		// A new process in its place, or a count begun anew (its collector
		// restarted): what was learned of its count no longer holds, and if it is
		// rank 0, nobody's offset does.
		a.drops["offset_reset"]++
		if r.commRank == 0 {
			for _, o := range c.ranks {
				o.forget()
			}
		} else {
			ar.forget()
		}
		ar.recs, ar.added = ar.recs[:0], -1
	}
	ar.last = r
	i, found := slices.BinarySearchFunc(ar.recs, seq, func(l localRecord, s int64) int { return int(l.seq - s) })
	if found {
		a.drops["arrival_duplicate"]++
		return
	}
	ar.recs = slices.Insert(ar.recs, i, localRecord{seq: seq, shape: shape, entry: r.entry})
	if n := len(ar.recs) - alignRecordsPerRank; n > 0 {
		ar.recs = slices.Delete(ar.recs, 0, n)
	}
	if r.commRank == 0 && !ar.kept {
		ar.kept, ar.offset = true, 0
	}
	if ar.kept {
		a.addKept(k, c, ar, now)
	}
}

// forget drops what was learned of a rank's count. Its records already matched stay
// out of the instance table when it is learned anew (added).
func (ar *alignRank) forget() {
	ar.kept, ar.agree, ar.votedThrough = false, 0, -1
}

// addKept puts a rank's records not yet there into the instance table, under its own
// count plus its offset.
func (a *arrivals) addKept(k recoveredKey, c *recoveredComm, ar *alignRank, now time.Time) {
	for _, l := range ar.recs {
		if l.seq <= ar.added {
			continue
		}
		r := ar.last
		r.entry = l.entry
		a.add(instanceKey{cluster: k.cluster, comm: k.comm, seq: l.seq + ar.offset}, c.nranks, r, now)
		ar.added = l.seq
	}
}

// align weighs the new bursts of every recovered communicator that had records since
// the last call, and keeps the offsets they agree on.
func (a *arrivals) align(now time.Time) {
	for k, c := range a.recovered {
		if !c.touched {
			continue
		}
		c.touched = false
		ref := c.ranks[0]
		if ref == nil || len(ref.recs) == 0 {
			continue
		}
		for commRank, ar := range c.ranks {
			if commRank == 0 {
				continue
			}
			for _, block := range ar.blocks(now, a.window) {
				end := block[len(block)-1].entry
				if ref.recs[len(ref.recs)-1].entry < end && now.Sub(time.Unix(0, end)) < a.window {
					// Rank 0 has not sent its records of this block's moment yet;
					// past the window, it is weighed with what there is.
					break
				}
				ar.votedThrough = block[len(block)-1].seq
				d, ok := a.offsetOf(block, ar.last, ref)
				if !ok {
					a.drops["offset_ambiguous"]++
					continue
				}
				if ar.kept && d == ar.offset {
					ar.agree = 0
					continue
				}
				if ar.kept {
					// A confident burst against a kept offset: the rank's count
					// moved (its node lost a call's event, so its own count is one
					// short from then on), or a lag past what this can tell. It
					// takes alignAgree bursts in a row to move the offset, as it
					// took to learn it.
					a.drops["offset_disagree"]++
				}
				if ar.agree > 0 && d == ar.candidate {
					ar.agree++
				} else {
					ar.candidate, ar.agree = d, 1
				}
				if ar.agree >= alignAgree {
					ar.kept, ar.offset, ar.agree = true, d, 0
					a.addKept(k, c, ar, now)
				}
			}
		}
	}
}

// blocks returns ar's records after votedThrough that are ready to weigh, in runs of
// consecutive counts (a burst), each cut into blocks of alignBurstLen: a block is ready
// once it is full or a later record shows its run has ended.
func (ar *alignRank) blocks(now time.Time, window time.Duration) [][]localRecord {
	var out [][]localRecord
	start := -1
	for i, l := range ar.recs {
		if l.seq <= ar.votedThrough {
			continue
		}
		if start < 0 {
			start = i
			continue
		}
		if l.seq != ar.recs[i-1].seq+1 || i-start == alignBurstLen {
			out = append(out, ar.recs[start:i])
			start = i
		}
	}
	if start >= 0 {
		last := ar.recs[start:]
		// The newest run may still be arriving; a block of it waits until full, or
		// until its moment is older than the match window (a burst cut short).
		if len(last) == alignBurstLen || now.Sub(time.Unix(0, last[len(last)-1].entry)) > window {
			out = append(out, last)
		}
	}
	return out
}

// offsetOf finds the offset d that maps the block's counts onto rank 0's: rank 0 holds
// the same shapes at every count + d the two share (at least alignMinOverlap), and of
// all such d, the one whose entries lie nearest rank 0's (the median distance, clocks
// corrected) wins, if clearly: under alignMaxLag, and under half the next best's less
// alignMargin. A step's shapes repeat, so several d match the shapes; entry times tell
// them apart as long as the ranks' lags are well under half the time between two
// collectives of one shape sequence (a step, or one collective where all are alike).
func (a *arrivals) offsetOf(block []localRecord, who arrivalRank, ref *alignRank) (int64, bool) {
	refAt := func(seq int64) (localRecord, bool) {
		i, ok := slices.BinarySearchFunc(ref.recs, seq, func(l localRecord, s int64) int { return int(l.seq - s) })
		if !ok {
			return localRecord{}, false
		}
		return ref.recs[i], true
	}
	ownClock := int64(a.clocks[clockKey{who.cohort.cluster, who.node}].offset)
	refClock := int64(a.clocks[clockKey{ref.last.cohort.cluster, ref.last.node}].offset)
	best, second := time.Duration(-1), time.Duration(-1)
	var bestD int64
	tried := map[int64]bool{}
	dist := make([]float64, 0, len(block))
	for _, l := range block {
		for _, rl := range ref.recs {
			d := rl.seq - l.seq
			if rl.shape != l.shape || tried[d] {
				continue
			}
			tried[d] = true
			dist = dist[:0]
			matches := true
			for _, m := range block {
				o, ok := refAt(m.seq + d)
				if !ok {
					continue
				}
				if o.shape != m.shape {
					matches = false
					break
				}
				gap := float64((m.entry - ownClock) - (o.entry - refClock))
				dist = append(dist, max(gap, -gap))
			}
			if !matches || len(dist) < alignMinOverlap {
				continue
			}
			cost := time.Duration(series.Median(dist))
			switch {
			case best < 0 || cost < best:
				second, best, bestD = best, cost, d
			case second < 0 || cost < second:
				second = cost
			}
		}
	}
	if best < 0 || best > alignMaxLag || (second >= 0 && 2*best > second-alignMargin) {
		return 0, false
	}
	return bestD, true
}

// expireRecovered forgets the recovered communicators not heard from for the window.
func (a *arrivals) expireRecovered(now time.Time) {
	for k, c := range a.recovered {
		if now.Sub(c.heard) > a.window {
			a.recoveredRanks -= len(c.ranks)
			delete(a.recovered, k)
		}
	}
}
