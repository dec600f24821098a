package gpuebpfreceiver

import (
	"testing"

	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// unnamedJob is a job whose communicators were made before the collector ran: each
// rank's calls carry its own comm pointer and no hash.
type unnamedJob struct {
	agg   *aggregator
	ranks int
	base  int64 // CLOCK_MONOTONIC ns of the first call
}

func newUnnamedJob(t *testing.T, ranks int) *unnamedJob {
	t.Helper()
	cfg := createDefaultConfig()
	cfg.Logs.NCCL.SampleEvery = 4
	j := &unnamedJob{agg: newTestAggregator(cfg, true), ranks: ranks, base: monotonicNow()}
	for r := range ranks {
		p := j.agg.process(uint32(syntheticPIDBase + r))
		p.info.WorldSize, p.info.Rendezvous = ranks, "10.0.0.1:29500"
	}
	return j
}

func (j *unnamedJob) call(rank int, comm uint64, api uint32, count uint64, at int64) {
	var ev probes.NCCLCall
	ev.Hdr.Pid = uint32(syntheticPIDBase + rank)
	ev.Hdr.Tid = ev.Hdr.Pid
	ev.Hdr.TsNs = uint64(j.base + at)
	ev.Api, ev.Comm, ev.Count = api, comm, count
	ev.Datatype, ev.Redop = 7, 0
	ev.Rank, ev.Nranks, ev.Peer = -1, -1, -1
	ev.DurationNs = 100_000
	j.agg.NCCLCall(&ev)
}

// steps makes every rank call step's all-reduce counts each step for steps steps of
// stepNS, rank r's collector beginning at call skip[r]; it returns each rank's calls.
func (j *unnamedJob) steps(comm func(rank int) uint64, step []uint64, stepNS int64, steps int, skip []int) []uint64 {
	calls := make([]uint64, j.ranks)
	for s := range steps {
		for k, count := range step {
			for r := range j.ranks {
				if s*len(step)+k < skip[r] {
					continue
				}
				j.call(r, comm(r), probes.NCCLAllReduce, count, int64(s)*stepNS+int64(k)*1e6+int64(r)*1e5)
				calls[r]++
			}
		}
	}
	return calls
}

// callsBy sums a process's all-reduce series by key.
func callsBy(p *processSeries) map[ncclKey]uint64 {
	out := map[ncclKey]uint64{}
	for k, s := range p.nccl {
		if s.calls > 0 {
			out[k] += s.calls
		}
	}
	return out
}

// Four ranks whose collectors began at different calls, mid-step: every call each
// made since is counted, all on one recovered communicator with the rank and size
// their launcher gave, which is the processes' cohort.
func TestCallsOnACommunicatorMadeBeforeTheCollectorCountOnOneName(t *testing.T) {
	j := newUnnamedJob(t, 4)
	calls := j.steps(func(r int) uint64 { return 0x7f0000 + uint64(r)<<12 }, []uint64{6553600, 6553600, 786432}, 50e6, 80, []int{0, 5, 7, 31})
	var comm uint64
	for r := range j.ranks {
		p := j.agg.processes[uint32(syntheticPIDBase+r)]
		j.agg.settleUnnamedComms(p, monotonicNow(), false)
		got := callsBy(p)
		if len(got) != 1 {
			t.Fatalf("rank %d: series %v, want one", r, got)
		}
		for k, n := range got {
			if r == 0 {
				comm = k.comm
			}
			want := ncclKey{comm: comm, rank: int32(r), nranks: 4, api: probes.NCCLAllReduce, recovered: true}
			if k != want || n != calls[r] || comm == 0 {
				t.Errorf("rank %d: %d calls on %+v, want %d on %+v", r, n, k, calls[r], want)
			}
		}
		if p.worldComm != comm || p.worldRanks != 4 {
			t.Errorf("rank %d: cohort communicator %016x of %d ranks, want %016x of 4", r, p.worldComm, p.worldRanks, comm)
		}
	}
	// Records after the name carry it and say it was recovered, with no sequence.
	ld, _ := j.agg.logs.take()
	named := 0
	for i := range ld.ResourceLogs().Len() {
		lrs := ld.ResourceLogs().At(i).ScopeLogs().At(0).LogRecords()
		for k := range lrs.Len() {
			a := lrs.At(k).Attributes()
			if _, ok := a.Get(semconv.NCCLSeq); ok {
				t.Fatalf("a record on a recovered communicator has a sequence: %v", a.AsRaw())
			}
			id, _ := a.Get(semconv.NCCLCommID)
			rec, _ := a.Get(semconv.NCCLCommRecovered)
			if id.Str() != commID(comm) || !rec.Bool() {
				t.Fatalf("record %v, want communicator %s, recovered", a.AsRaw(), commID(comm))
			}
			named++
		}
	}
	if named == 0 {
		t.Errorf("no record of the recovered communicator was kept")
	}
	// The cohort says it was recovered; a communicator of the job's size named by its
	// unique id (made after the collector began) takes its place.
	p := j.agg.processes[uint32(syntheticPIDBase)]
	if got := commCohort(p.worldComm, p.worldCommRecovered); got != "nccl-recovered:"+commID(comm) {
		t.Errorf("cohort %s, want nccl-recovered:%s", got, commID(comm))
	}
	var ev probes.NCCLCall
	ev.Hdr.Pid, ev.Api, ev.CommHash, ev.Comm, ev.Rank, ev.Nranks = uint32(syntheticPIDBase), probes.NCCLAllReduce, 0xfeed, 0x9000, 0, 4
	j.agg.NCCLCall(&ev)
	if got := commCohort(p.worldComm, p.worldCommRecovered); got != "nccl:000000000000feed" {
		t.Errorf("cohort %s after a call on a communicator named by its unique id, want nccl:000000000000feed", got)
	}
}

// A shape the named set did not hold (a long step's late bucket) renames the
// communicator: no call is lost or counted twice across the two names.
func TestALateShapeRenamesWithoutLosingACall(t *testing.T) {
	j := newUnnamedJob(t, 1)
	comm := func(int) uint64 { return 0xabc000 }
	calls := j.steps(comm, []uint64{1024}, 100e6, 30, []int{0})
	p := j.agg.processes[uint32(syntheticPIDBase)]
	first := callsBy(p)
	j.base += 3e9 // the steps after the first 3 s
	calls[0] += j.steps(comm, []uint64{1024, 77}, 100e6, 30, []int{0})[0]
	j.agg.settleUnnamedComms(p, monotonicNow(), true)
	got := callsBy(p)
	var sum uint64
	for _, n := range got {
		sum += n
	}
	if len(first) != 1 || len(got) != 2 || sum != calls[0] {
		t.Errorf("named first %v, then %v (%d calls), want one name, then two, %d calls", first, got, sum, calls[0])
	}
}

// No call waits past its process or forever: a short job's calls are named at its last
// export; calls of a communicator that only sends and receives, and of one whose set
// does not settle within the rule, are counted without a communicator.
func TestNoCallWaitsForANameForever(t *testing.T) {
	j := newUnnamedJob(t, 3)
	for i := range 30 {
		j.call(0, 0x1000, probes.NCCLAllReduce, 256, int64(i)*1e6) // a 30 ms job
		j.call(1, 0x2000, probes.NCCLSend, 256, int64(i)*1e6)
		j.call(2, 0x3000, probes.NCCLAllGather, uint64(i+1), int64(i)*1e6) // a new shape each call
	}
	for r, last := range []bool{true, true, false} {
		p := j.agg.processes[uint32(syntheticPIDBase+r)]
		now := monotonicNow()
		if !last {
			now = j.base + 61e9 // past the rule's 60 s
		}
		j.agg.settleUnnamedComms(p, now, last)
		got := callsBy(p)
		if len(got) != 1 {
			t.Fatalf("rank %d: series %v, want one", r, got)
		}
		for k, n := range got {
			if n != 30 || (r == 0) != k.recovered || (r != 0 && k.comm != 0) {
				t.Errorf("rank %d: %d calls on %+v, want 30, recovered %v", r, n, k, r == 0)
			}
		}
	}
}

// A recovered communicator's collectives are recorded in bursts with the process's own
// count: four ranks whose collectors began at different calls record, in each wall-clock
// second after the one they named it in, 16 consecutive collectives numbered by their
// own count (nccl.seq.local), the first entered after the boundary; the ranks' counts
// differ by the calls between their collectors' starts, and their bursts hold the same
// collectives of the job.
func TestARecoveredCommunicatorsRecordsAreBurstsOfItsOwnCount(t *testing.T) {
	j := newUnnamedJob(t, 4)
	skip := []int{0, 5, 7, 31}
	// 3 all-reduces 50 ms steps for 8 s: 60 a second.
	j.steps(func(r int) uint64 { return 0x7f0000 + uint64(r)<<12 }, []uint64{6553600, 6553600, 786432}, 50e6, 160, skip)
	ld, _ := j.agg.logs.take()
	// byPeriod[second][rank] is the job's call numbers the rank recorded in it.
	byPeriod := map[int64]map[int][]int64{}
	for i := range ld.ResourceLogs().Len() {
		rl := ld.ResourceLogs().At(i)
		pid, _ := rl.Resource().Attributes().Get(semconv.ProcessPID)
		r := int(pid.Int()) - syntheticPIDBase
		lrs := rl.ScopeLogs().At(0).LogRecords()
		for k := range lrs.Len() {
			a := lrs.At(k).Attributes()
			local, ok := a.Get(semconv.NCCLSeqLocal)
			if !ok {
				t.Fatalf("rank %d: a recovered communicator's record without %s: %v", r, semconv.NCCLSeqLocal, a.AsRaw())
			}
			entry, _ := a.Get(semconv.NCCLEntryTime)
			p := entry.Int() / 1e9
			if byPeriod[p] == nil {
				byPeriod[p] = map[int][]int64{}
			}
			// Its own count began at 1 on the call its collector first saw.
			byPeriod[p][r] = append(byPeriod[p][r], local.Int()-1+int64(skip[r]))
		}
	}
	last := int64(0)
	for p := range byPeriod {
		last = max(last, p)
	}
	full := 0
	for p, ranks := range byPeriod {
		for r, calls := range ranks {
			for k, c := range calls {
				if c != calls[0]+int64(k) {
					t.Fatalf("second %d, rank %d: calls %v, want consecutive", p, r, calls)
				}
			}
			if len(calls) != 16 && (p != last || len(calls) > 16) {
				// The job's last second may end a burst early.
				t.Errorf("second %d, rank %d: %d records, want 16", p, r, len(calls))
			}
		}
		if len(ranks) == j.ranks {
			full++
			for r := range j.ranks {
				if ranks[r][0] != ranks[0][0] {
					t.Errorf("second %d: rank %d's burst begins at call %d, rank 0's at %d", p, r, ranks[r][0], ranks[0][0])
				}
			}
		}
	}
	if full < 4 {
		t.Errorf("%d seconds with every rank's burst, want at least 4: %v", full, byPeriod)
	}
}
