package gpuebpfreceiver

import (
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/receiver/gpuebpfreceiver/internal/commrecovery"
)

// maxUnnamedCommsPerProcess bounds the communicators of a process followed while they
// wait for a name; past it, calls on a further one are counted without a communicator.
const maxUnnamedCommsPerProcess = 16

// unnamedComm is a communicator of a process whose setup the collector did not see (the
// job made it before the collector ran): the kernel sends its calls with the comm
// pointer and no hash. Its calls wait, counted apart, until commrecovery names it; then
// they join its named series, so the calls made since the collector began are all
// counted on the one communicator every rank names alike.
type unnamedComm struct {
	seen commrecovery.Communicator
	// waitingSince is when its calls began to wait (CLOCK_MONOTONIC ns; also after a
	// reopening), waiting the calls since, by API.
	waitingSince int64
	waiting      map[uint32]*ncclSeries
	named        bool
	gaveUp       bool // counted without a communicator from now on
	name         ncclKey
	// collectives is the process's own count of its collectives on it since the
	// collector first saw it (nccl.seq.local of the latest): no rank's count agrees with
	// another's, but each differs from the others' by a constant, which the gateway
	// learns from the records' bursts.
	collectives uint64
	bursts      commrecovery.BurstState
}

// unnamedCommCall takes a call on a communicator whose setup was not seen. It returns
// the series the call goes to (nil: the caller's, under the key returned) and, when the
// key names a recovered communicator, that communicator.
func (a *aggregator) unnamedCommCall(p *processSeries, ev *probes.NCCLCall) (*ncclSeries, ncclKey, *unnamedComm) {
	unnamed := ncclKey{rank: -1, nranks: -1, api: ev.Api}
	c := p.unnamedComms[ev.Comm]
	if c == nil {
		if len(p.unnamedComms) >= maxUnnamedCommsPerProcess {
			a.drops.add("cardinality", 1)
			return nil, unnamed, nil
		}
		if p.unnamedComms == nil {
			p.unnamedComms = map[uint64]*unnamedComm{}
		}
		c = &unnamedComm{waitingSince: int64(ev.Hdr.TsNs), waiting: map[uint32]*ncclSeries{}}
		p.unnamedComms[ev.Comm] = c
	}
	if ev.Api == probes.NCCLCommDestroy || ev.Api == probes.NCCLCommAbort {
		// Its last call: the pointer may be reused by a communicator made later,
		// whose setup is seen.
		delete(p.unnamedComms, ev.Comm)
		if !c.named && !c.gaveUp {
			a.giveUpName(p, c)
		}
	}
	if c.gaveUp {
		return nil, unnamed, nil
	}
	ts := int64(ev.Hdr.TsNs)
	if isCollective[ev.Api] {
		c.collectives++
		shape := commrecovery.Shape{API: ev.Api, DataType: ev.Datatype, RedOp: ev.Redop, Count: ev.Count}
		if c.seen.Observe(shape, ts, commrecovery.DefaultRule) && c.named {
			// A shape the set did not hold: its name was drawn too early. Calls wait
			// again, and the set settles anew.
			c.seen.Reopen(ts)
			c.named, c.waitingSince = false, ts
		}
		if !c.named && c.seen.Settled(commrecovery.DefaultRule) {
			a.nameComm(p, c)
		}
	}
	if c.named {
		k := c.name
		k.api = ev.Api
		return nil, k, c
	}
	s := c.waiting[ev.Api]
	if s == nil {
		s = &ncclSeries{}
		c.waiting[ev.Api] = s
	}
	return s, unnamed, nil
}

// nameComm names c and moves its waiting calls to their named series. The rank and size
// come from the process's launcher (fathom.rank, fathom.world_size) when c is the only
// communicator it uses, none named by its unique id: the job's world. Otherwise they
// are unknown (-1).
func (a *aggregator) nameComm(p *processSeries, c *unnamedComm) {
	rank, nranks := int32(-1), int32(-1)
	followed := 0
	for _, o := range p.unnamedComms {
		if !o.gaveUp {
			followed++
		}
	}
	if (p.worldComm == 0 || p.worldCommRecovered) && followed == 1 && p.info.WorldSize > 0 && p.info.Rank >= 0 {
		rank, nranks = int32(p.info.Rank), int32(p.info.WorldSize)
	}
	job := p.info.Job + "@" + p.info.Rendezvous
	c.name = ncclKey{comm: c.seen.ID(job), rank: rank, nranks: nranks, recovered: true}
	c.named = true
	if nranks > 0 && (p.worldComm == 0 || p.worldCommRecovered) {
		p.worldComm, p.worldRanks, p.worldCommRecovered = c.name.comm, nranks, true
	}
	a.moveWaiting(p, c, c.name)
}

// giveUpName counts c's calls without a communicator from now on, and moves those
// waiting there.
func (a *aggregator) giveUpName(p *processSeries, c *unnamedComm) {
	c.gaveUp = true
	a.moveWaiting(p, c, ncclKey{rank: -1, nranks: -1})
}

func (a *aggregator) moveWaiting(p *processSeries, c *unnamedComm, to ncclKey) {
	for api, w := range c.waiting {
		k := to
		k.api = api
		if s := a.ncclSeriesOf(p, k); s != nil {
			s.duration.Merge(&w.duration)
			s.calls += w.calls
			s.bytes += w.bytes
			s.errors += w.errors
		}
	}
	clear(c.waiting)
}

// settleUnnamedComms runs before each export of p: a communicator whose set will not
// settle gives up its wait, and at the process's last export one whose calls held still
// is named (a short job's), the others give up, so no call waits past the process.
func (a *aggregator) settleUnnamedComms(p *processSeries, now int64, last bool) {
	for _, c := range p.unnamedComms {
		if c.named || c.gaveUp {
			continue
		}
		switch {
		case last && c.seen.SettledAtEnd(commrecovery.DefaultRule):
			a.nameComm(p, c)
		case last || c.seen.Hopeless(commrecovery.DefaultRule, c.waitingSince, now):
			a.giveUpName(p, c)
		}
	}
}
