package gpuebpfreceiver

import "time"

// Bounds on the stacks a process's records carry. A stack's frames are a few hundred
// bytes to a few KB: they go on one record of each stackInterval for each stack of a
// process, and its other records carry the stack's id and innermost frame only (the
// store's get_stacks takes the frames from any record of the id in its window). A
// process has at most maxStacksPerInterval distinct stacks per interval; the records of
// further stacks carry none, counted as stack_cap.
const (
	stackInterval        = time.Minute
	maxStacksPerInterval = 256
)

type stackVerdict int

const (
	stackRefused stackVerdict = iota // no stack on the record: the process's cap is reached
	stackWhole                       // the frames whole, with the id
	stackByID                        // the id and innermost frame only
)

// stackTally decides, per process, which records carry their stacks whole. Called with
// the aggregator's lock held.
type stackTally struct {
	drops *counterSet
}

// processStacks are the stacks of a process that went out whole in this interval.
type processStacks struct {
	since uint64 // CLOCK_MONOTONIC ns the interval began
	whole map[string]bool
}

// admit says what a record of process p made at monoNS carries of stack id.
func (t *stackTally) admit(p *processSeries, id string, monoNS uint64) stackVerdict {
	ps := p.stacks
	if ps == nil || monoNS-ps.since >= uint64(stackInterval) {
		if ps == nil {
			ps = &processStacks{whole: map[string]bool{}}
			p.stacks = ps
		}
		ps.since = monoNS
		clear(ps.whole)
	}
	if ps.whole[id] {
		return stackByID
	}
	if len(ps.whole) >= maxStacksPerInterval {
		t.drops.add("stack_cap", 1)
		return stackRefused
	}
	ps.whole[id] = true
	return stackWhole
}
