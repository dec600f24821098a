// Package commrecovery names an NCCL communicator whose setup the collector did not
// see: a job that made it before its node's collector ran (a DaemonSet rollout, a first
// install on a busy cluster, a collector that was down).
//
// A communicator is normally named by the hash of the ncclUniqueId its ranks passed to
// ncclCommInitRank, which every rank sees. Once that call is past, nothing NCCL's API
// returns names the communicator the same on every rank: the comm pointer is the
// process's own. What every rank of one communicator does share is its collectives: an
// all-reduce needs the same count, type and operation on every rank, so a training
// step's buckets give all of them the same set of call shapes. Each rank's collector
// waits until that set has stopped growing, then names the communicator by its job and
// the set, with no private NCCL layout read.
//
// Why a set and not the sequence: the collectors of a job start at different moments,
// so each rank sees the sequence from a different call; the set of shapes of whole
// steps is the same wherever the observation began.
package commrecovery

import (
	"cmp"
	"encoding/binary"
	"hash/fnv"
	"slices"
)

// Shape is what every rank of a communicator passes alike to one collective.
type Shape struct {
	API      uint32 // enum nccl_api
	DataType uint8
	RedOp    uint8
	Count    uint64
}

// Rule says when the shapes seen are the whole set.
type Rule struct {
	// MinCalls collectives at least: a step's buckets, more than once.
	MinCalls int
	// MinSpanNS of observation at least, and the set unchanged over the later half of
	// it: a step whose last bucket differs (DDP's smaller last bucket) shows that
	// shape within one step time, and a set that grew in the later half has not
	// shown every step's shapes yet.
	MinSpanNS int64
	// MaxShapes distinct shapes at most: a communicator whose shapes vary without end
	// (variable-length all-gathers) has no set to name it by.
	MaxShapes int
	// GiveUpNS after the first call with no settled set: its calls are counted without
	// a communicator from then on.
	GiveUpNS int64
}

// DefaultRule is what the receiver uses: 16 collectives over 2 s, 256 shapes, 60 s.
var DefaultRule = Rule{MinCalls: 16, MinSpanNS: 2e9, MaxShapes: 256, GiveUpNS: 60e9}

// Communicator is what one rank's collector saw of an unnamed communicator.
type Communicator struct {
	first, last, grew int64 // CLOCK_MONOTONIC ns: first call, last call, last new shape
	calls             int
	shapes            map[Shape]struct{}
	overflow          bool
}

// Observe adds one collective, and says whether its shape is new to the set.
func (c *Communicator) Observe(s Shape, ts int64, r Rule) (grew bool) {
	if c.shapes == nil {
		c.shapes = map[Shape]struct{}{}
		c.first = ts
	}
	c.calls++
	c.last = max(c.last, ts)
	if _, ok := c.shapes[s]; ok || c.overflow {
		return false
	}
	if len(c.shapes) >= r.MaxShapes {
		c.overflow = true
		return false
	}
	c.shapes[s] = struct{}{}
	c.grew = ts
	return true
}

// Reopen starts a new observation of a communicator already named, whose set just
// grew (a step longer than the rule's span showed a shape late, or the job began a
// phase of new shapes): the set is kept, and it settles again once it has held still
// for MinSpanNS and MinCalls.
func (c *Communicator) Reopen(ts int64) {
	c.first, c.grew, c.last, c.calls = ts, ts, ts, 0
}

// Settled says whether the set seen is the communicator's whole set: enough calls over
// enough time, and no new shape in the later half of it.
func (c *Communicator) Settled(r Rule) bool {
	return c.last-c.first >= r.MinSpanNS && c.stable(r)
}

// SettledAtEnd is Settled for a process that has exited: no more calls will come, so a
// short job's set stands once it held still over the later half of the calls seen.
func (c *Communicator) SettledAtEnd(r Rule) bool { return c.stable(r) }

func (c *Communicator) stable(r Rule) bool {
	return !c.overflow && c.calls >= r.MinCalls && 2*(c.grew-c.first) <= c.last-c.first
}

// Hopeless says whether the communicator will not be named: its shapes overflowed, or
// no set settled within GiveUpNS of since (when its calls began to wait for a name;
// CLOCK_MONOTONIC ns, as now). A communicator that only sends and receives is never
// observed, and gives up too.
func (c *Communicator) Hopeless(r Rule, since, now int64) bool {
	return c.overflow || now-since >= r.GiveUpNS
}

// ID names the communicator: FNV-1a 64 over the job and the sorted shapes. Every rank
// computes the same one from what it saw alone. job is what tells the job's runs apart
// (its name and rendezvous address). The communicator's size is not in it: a rank knows
// it only from its launcher, and only while the communicator is its process's one, which
// depends on when each rank's collector began.
func (c *Communicator) ID(job string) uint64 {
	shapes := make([]Shape, 0, len(c.shapes))
	for s := range c.shapes {
		shapes = append(shapes, s)
	}
	slices.SortFunc(shapes, func(a, b Shape) int {
		return cmp.Or(cmp.Compare(a.API, b.API), cmp.Compare(a.DataType, b.DataType), cmp.Compare(a.RedOp, b.RedOp), cmp.Compare(a.Count, b.Count))
	})
	h := fnv.New64a()
	h.Write([]byte("nccl-recovered\x00"))
	h.Write([]byte(job))
	h.Write([]byte{0})
	var b [16]byte
	for _, s := range shapes {
		binary.LittleEndian.PutUint32(b[0:4], s.API)
		b[4], b[5], b[6], b[7] = s.DataType, s.RedOp, 0, 0
		binary.LittleEndian.PutUint64(b[8:16], s.Count)
		h.Write(b[:])
	}
	return h.Sum64()
}

// Bursts picks which collectives of a recovered communicator a rank records, so that
// every rank's records overlap although their own counts began at different calls: a
// burst of Len consecutive collectives from the first one entered after each boundary
// of PeriodNS on the wall clock. The ranks of a communicator enter one collective
// within its lag of each other, so their bursts begin on the same collective, or on
// neighbours when a boundary falls between their entries, and share at least Len-1
// collectives, as long as the nodes' clocks agree within the burst's span. The gateway
// aligns the bursts by their shapes and entry times to learn the offset between the
// ranks' counts (docs/straggler.md, Arrival lag).
type Bursts struct {
	PeriodNS int64
	Len      int
}

// DefaultBursts is what the receiver uses: 16 collectives each wall-clock second.
var DefaultBursts = Bursts{PeriodNS: 1e9, Len: 16}

// BurstState is one communicator's place in its bursts.
type BurstState struct {
	started  bool
	boundary int64 // the period the last burst began in
	left     int   // collectives still to record in it
}

// Keep says whether the collective entered at wallNS (unix ns) is recorded. The first
// collective seen waits for the next boundary: a burst begun mid-period, when the
// communicator was named, would hold collectives the other ranks do not record.
func (s *BurstState) Keep(b Bursts, wallNS int64) bool {
	period := wallNS / b.PeriodNS
	switch {
	case !s.started:
		s.started, s.boundary = true, period
	case period > s.boundary:
		s.boundary, s.left = period, b.Len
	}
	if s.left > 0 {
		s.left--
		return true
	}
	return false
}
