package stragglerprocessor

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/processor/stragglerprocessor/internal/metadata"
)

const recoveredCommID = "00000000000000bb"

// recoveredJob is a job whose communicator was made before its nodes' collectors ran:
// each rank's records of its collectives carry its own count (nccl.seq.local), begun at
// the call its collector first saw, kept as the gpuebpf receiver keeps them (16
// consecutive collectives from the first entered after each wall-clock second, none in
// the second its collector began).
type recoveredJob struct {
	ranks int
	step  time.Duration
	// counts are the counts of one step's all-reduces, at their entries within it.
	counts []int64
	at     []time.Duration
	// from is the call each rank's collector began at.
	from []int
	// lag is how late rank enters call i; jitter adds up to ± that much more.
	lag    func(rank, call int) time.Duration
	jitter time.Duration
	// delay is how late each rank's records reach the gateway (its node's export).
	delay []time.Duration
	// restart, when set, is the call from which a rank is a new process (pid + 1000),
	// its count begun anew.
	restart map[int]int
	// lost, when set, is the call whose event a rank's node lost: its own count is one
	// short from the next on.
	lost    map[int]int
	seconds int
	seed    uint64
	grace   time.Duration
}

type recoveredRecord struct {
	rank      int
	pid, seq  int64
	count     int64
	entry     time.Time
	deliverAt time.Time
}

// records makes every rank's records.
func (j *recoveredJob) records(start time.Time) []recoveredRecord {
	rng := rand.New(rand.NewPCG(j.seed, 7))
	var out []recoveredRecord
	calls := int(time.Duration(j.seconds)*time.Second/j.step) * len(j.counts)
	for r := range j.ranks {
		began, boundary, left := false, int64(0), 0
		from, pid := j.from[r], int64(4000+r)
		for i := from; i < calls; i++ {
			if at, ok := j.restart[r]; ok && i == at {
				from, pid, began, left = at, pid+1000, false, 0
			}
			if at, ok := j.lost[r]; ok && i == at {
				from++ // counted by nobody
				continue
			}
			k := i % len(j.counts)
			entry := start.Add(time.Duration(i/len(j.counts))*j.step + j.at[k] + j.lag(r, i))
			if j.jitter > 0 {
				entry = entry.Add(time.Duration(rng.Int64N(int64(2*j.jitter))) - j.jitter)
			}
			period := entry.UnixNano() / 1e9
			switch {
			case !began:
				began, boundary = true, period
			case period > boundary:
				boundary, left = period, 16
			}
			if left == 0 {
				continue
			}
			left--
			out = append(out, recoveredRecord{rank: r, pid: pid, seq: int64(i - from + 1), count: j.counts[k], entry: entry,
				deliverAt: entry.Add(j.delay[r])})
		}
	}
	return out
}

// recoveredRun is what the gateway made of a recovered job.
type recoveredRun struct {
	s *straggler
	// keptAt is when each rank's offset was first kept, keptOffset which.
	keptAt     map[int]time.Time
	keptOffset map[int]int64
	// wrong lists every moment a kept offset was not the rank's (after the grace a
	// lost call's rank is given).
	wrong []string
	// lags sums each rank's drained lag after a second after, n counts them.
	lags map[int]float64
	n    map[int]int
}

// run feeds a gateway straggler processor the job's records as its nodes would export
// them, every 250 ms, and drains the arrival lags each second.
func (j *recoveredJob) run(t *testing.T, after time.Duration) *recoveredRun {
	t.Helper()
	s, err := newStraggler(createDefaultConfig(), processortest.NewNopSettings(metadata.Type))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1_800_000_000, 300e6)
	var clock time.Time
	s.now = func() time.Time { return clock }
	recs := j.records(start)
	out := &recoveredRun{s: s, keptAt: map[int]time.Time{}, keptOffset: map[int]int64{}, lags: map[int]float64{}, n: map[int]int{}}
	ctx := context.Background()
	for tick := 1; tick <= 4*(j.seconds+3); tick++ {
		clock = start.Add(time.Duration(tick) * 250 * time.Millisecond)
		ld := plog.NewLogs()
		res := map[int64]plog.LogRecordSlice{}
		left := recs[:0]
		for _, rec := range recs {
			if rec.deliverAt.After(clock) {
				left = append(left, rec)
				continue
			}
			lrs, ok := res[rec.pid]
			if !ok {
				rl := ld.ResourceLogs().AppendEmpty()
				putRankResource(rl.Resource().Attributes(), fmt.Sprintf("node-%d", rec.rank/2), "nccl-recovered:"+recoveredCommID, "llama", int64(rec.rank))
				rl.Resource().Attributes().PutInt(semconv.ProcessPID, rec.pid)
				lrs = rl.ScopeLogs().AppendEmpty().LogRecords()
				res[rec.pid] = lrs
			}
			lr := lrs.AppendEmpty()
			lr.SetEventName(semconv.EventNCCLCollective)
			lr.SetTimestamp(pcommon.NewTimestampFromTime(rec.entry))
			a := lr.Attributes()
			a.PutStr(semconv.NCCLCommID, recoveredCommID)
			a.PutBool(semconv.NCCLCommRecovered, true)
			a.PutStr(semconv.NCCLOp, "all_reduce")
			a.PutInt(semconv.NCCLSeqLocal, rec.seq)
			a.PutInt(semconv.NCCLRank, int64(rec.rank))
			a.PutInt(semconv.NCCLNRanks, int64(j.ranks))
			a.PutInt(semconv.NCCLCount, rec.count)
			a.PutStr(semconv.NCCLDataType, "float32")
			a.PutStr(semconv.NCCLReduceOp, "sum")
			a.PutInt(semconv.NCCLEntryTime, rec.entry.UnixNano())
		}
		recs = left
		if _, err := s.processLogs(ctx, ld); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		if c := s.arr.recovered[recoveredKey{"c1", recoveredCommID}]; c != nil {
			for commRank, ar := range c.ranks {
				r := int(commRank)
				if !ar.kept {
					continue
				}
				want := j.offset(r, ar.last.pid)
				if at, ok := j.lost[r]; ok && ar.last.pid == int64(4000+r) {
					lostAt := start.Add(time.Duration(at/len(j.counts)) * j.step)
					if clock.After(lostAt) {
						want++
					}
					if clock.After(lostAt) && clock.Before(lostAt.Add(j.grace)) {
						want = ar.offset // either, while its new offset is learned
					}
				}
				if ar.offset != want {
					out.wrong = append(out.wrong, fmt.Sprintf("%v: rank %d kept offset %d, want %d", clock.Sub(start), r, ar.offset, want))
				}
				if _, ok := out.keptAt[r]; !ok {
					out.keptAt[r], out.keptOffset[r] = clock, ar.offset
				}
			}
		}
		if tick%4 == 0 {
			for _, l := range s.arr.drain(clock) {
				if clock.Sub(start) > after {
					out.lags[int(l.rank)] += l.sum / float64(l.n)
					out.n[int(l.rank)]++
				}
			}
		}
		s.mu.Unlock()
	}
	return out
}

// offset is what maps rank r's count (as process pid) onto rank 0's: the calls its
// collector began after rank 0's (a restarted process's count began at its restart).
func (j *recoveredJob) offset(r int, pid int64) int64 {
	from := func(r int, pid int64) int {
		if pid != int64(4000+r) {
			return j.restart[r]
		}
		return j.from[r]
	}
	return int64(from(r, pid) - from(0, int64(4000)))
}

// A rank's node loses one collective's event (its ring was full): its own count is one
// short from then on, its kept offset one off. Three bursts in a row against it move it
// to the new one within 4 s, counted as offset_disagree, and its lags go on, near 0.
func TestARankWhoseCountSlipsLearnsItsNewOffset(t *testing.T) {
	j := ddpJob(4)
	j.seconds, j.grace = 24, 4*time.Second
	j.lost = map[int]int{6: 10 * 50 * 4} // second 10
	run := j.run(t, 15*time.Second)
	if len(run.wrong) > 0 {
		t.Fatalf("wrong offsets kept: %v", run.wrong)
	}
	if n := run.s.det.drops["offset_disagree"]; n < 3 {
		t.Errorf("offset_disagree drops %d, want at least 3", n)
	}
	if run.n[6] < 5 || math.Abs(run.meanLag(6)) > 0.0006 {
		t.Errorf("rank 6 after its lost call: arrival lag %.6f s in %d evaluations, want within 0.6 ms of 0 in at least 5", run.meanLag(6), run.n[6])
	}
}

func (run *recoveredRun) meanLag(r int) float64 { return run.lags[r] / float64(run.n[r]) }

// ddpJob is eight ranks of DDP over a recovered communicator: 20 ms steps, three full
// buckets and a smaller last one all-reduced 2 ms apart in backward, every rank's
// collector begun at its own call, each rank up to 0.4 ms late and ±0.2 ms of jitter.
func ddpJob(seed uint64) *recoveredJob {
	rng := rand.New(rand.NewPCG(seed, 1))
	j := &recoveredJob{ranks: 8, step: 20 * time.Millisecond, counts: []int64{6553600, 6553600, 6553600, 786432},
		at:     []time.Duration{8 * time.Millisecond, 10 * time.Millisecond, 12 * time.Millisecond, 14 * time.Millisecond},
		jitter: 200 * time.Microsecond, seconds: 20, seed: seed, delay: make([]time.Duration, 8)}
	lags := make([]time.Duration, j.ranks)
	for r := range j.ranks {
		j.from = append(j.from, rng.IntN(400))
		lags[r] = time.Duration(rng.Int64N(400e3))
		j.delay[r] = time.Duration(rng.Int64N(300e6))
	}
	j.lag = func(r, _ int) time.Duration { return lags[r] }
	return j
}

// Eight ranks whose collectors began at different calls, each rank's records reaching
// the gateway up to 300 ms after it entered: every rank's offset is learned, the right
// one, within 4 s of its and rank 0's collectors' start (the next second's burst, and
// two more that agree) plus its node's delay, and every rank gets an arrival lag, within
// 0.6 ms of 0 for a healthy rank. Rank 5, 3 ms late into every all-reduce from the
// start (a step's three full buckets repeat a shape 2 ms apart, under its lag: the
// last bucket's shape and the step's 20 ms decide), is learned as well and lies 2.4 to
// 3.2 ms behind the median; rank 3's node sends its records 2 s late, and is learned
// when they come.
func TestARecoveredCommunicatorsRanksLearnTheirOffsets(t *testing.T) {
	j := ddpJob(1)
	base := j.lag
	j.lag = func(r, i int) time.Duration {
		if r == 5 {
			return 3 * time.Millisecond
		}
		return base(r, i)
	}
	j.delay[3] = 2 * time.Second
	run := j.run(t, 8*time.Second)
	if len(run.wrong) > 0 {
		t.Fatalf("wrong offsets kept: %v", run.wrong)
	}
	start := time.Unix(1_800_000_000, 300e6)
	for r := range j.ranks {
		at, ok := run.keptAt[r]
		if !ok {
			t.Errorf("rank %d: no offset kept", r)
			continue
		}
		// Its collector and rank 0's have both begun; the next second's burst is the
		// first, the third agrees, and reaches the gateway after the later node's delay.
		began := start.Add(time.Duration(max(j.from[r], j.from[0])/len(j.counts)) * j.step)
		if d, limit := at.Sub(began), 4*time.Second+max(j.delay[r], j.delay[0]); d > limit {
			t.Errorf("rank %d: offset kept %v after its and rank 0's collectors began, want within %v", r, d, limit)
		}
		lag := run.meanLag(r)
		t.Logf("rank %d: offset %d kept %v after its and rank 0's collectors began, mean arrival lag %.6f s over %d evaluations", r, run.keptOffset[r], at.Sub(began), lag, run.n[r])
		if run.n[r] < 10 {
			t.Errorf("rank %d: arrival lag in %d evaluations, want at least 10", r, run.n[r])
		}
		if r == 5 {
			if lag < 0.0024 || lag > 0.0032 {
				t.Errorf("rank 5: mean arrival lag %.6f s, want 2.4 to 3.2 ms", lag)
			}
		} else if math.Abs(lag) > 0.0006 {
			t.Errorf("rank %d: mean arrival lag %.6f s, want within 0.6 ms of 0", r, lag)
		}
	}
}

// One all-reduce of one shape a 6 ms step (the fake DDP job's): shapes say nothing, the
// entry times alone decide, and do, for healthy ranks a few hundred microseconds apart.
func TestIdenticalShapesAreAlignedByTimeAlone(t *testing.T) {
	j := ddpJob(2)
	j.step, j.counts, j.at = 6*time.Millisecond, []int64{4096}, []time.Duration{time.Millisecond}
	run := j.run(t, 8*time.Second)
	if len(run.wrong) > 0 {
		t.Fatalf("wrong offsets kept: %v", run.wrong)
	}
	for r := range j.ranks {
		if _, ok := run.keptAt[r]; !ok || run.n[r] < 10 || math.Abs(run.meanLag(r)) > 0.0006 {
			t.Errorf("rank %d: kept %v, arrival lag %.6f s in %d evaluations: want kept, within 0.6 ms of 0, at least 10", r, ok, run.meanLag(r), run.n[r])
		}
	}
}

// A wrong offset is never kept: with one shape a 6 ms step, rank 5 (or rank 0, the
// reference) enters 1.5 to 3.8 ms late, a quarter to 0.63 of the step: the next
// collective nears, and past half the step is nearer than, its own. Over 20 runs a
// rank's offset is either the right one or none. (Without the rule that the best
// offset's distance be under half the next best's, the last four runs keep offsets
// one collective off.)
func TestAWrongOffsetIsNeverKept(t *testing.T) {
	kept, none := 0, 0
	for seed := range uint64(20) {
		j := ddpJob(100 + seed)
		j.step, j.counts, j.at = 6*time.Millisecond, []int64{4096}, []time.Duration{time.Millisecond}
		j.seconds = 12
		late := []int{5, 0}[seed%2]
		by := 1500*time.Microsecond + time.Duration(seed)*120*time.Microsecond
		base := j.lag
		j.lag = func(r, i int) time.Duration {
			if r == late {
				return by
			}
			return base(r, i)
		}
		run := j.run(t, time.Hour)
		if len(run.wrong) > 0 {
			t.Errorf("seed %d, rank %d %v late: wrong offsets kept: %v", seed, late, by, run.wrong)
		}
		for r := range j.ranks {
			if _, ok := run.keptAt[r]; ok {
				kept++
			} else {
				none++
			}
		}
	}
	t.Logf("%d offsets kept (all right), %d never kept", kept, none)
}

// A rank whose process restarts (a new pid, its count begun anew) has its offset
// forgotten, counted, and learned anew, the right one for its new count, and its
// arrival lags go on.
func TestARestartedRankLearnsItsNewOffset(t *testing.T) {
	j := ddpJob(3)
	j.seconds = 24
	j.restart = map[int]int{2: 10 * 50 * 4} // call 2000: second 10 of 20 ms steps of 4
	run := j.run(t, 16*time.Second)
	if len(run.wrong) > 0 {
		t.Fatalf("wrong offsets kept: %v", run.wrong)
	}
	if n := run.s.det.drops["offset_reset"]; n != 1 {
		t.Errorf("offset_reset drops %d, want 1", n)
	}
	c := run.s.arr.recovered[recoveredKey{"c1", recoveredCommID}]
	if ar := c.ranks[2]; !ar.kept || ar.offset != j.offset(2, 5002) {
		t.Errorf("rank 2 after its restart: kept %v offset %d, want %d", ar.kept, ar.offset, j.offset(2, 5002))
	}
	if run.n[2] < 5 || math.Abs(run.meanLag(2)) > 0.0006 {
		t.Errorf("rank 2 after its restart: arrival lag %.6f s in %d evaluations, want within 0.6 ms of 0 in at least 5", run.meanLag(2), run.n[2])
	}
}

// Bounds: past max_instances ranks followed over all recovered communicators, a new
// rank's records are dropped, counted; a communicator not heard from for the match
// window is forgotten, and its ranks no longer count against the bound.
func TestRecoveredOffsetsAreBounded(t *testing.T) {
	drops := map[string]int64{}
	a := newArrivals(time.Second, 3, 16, drops)
	now := time.Unix(1_800_000_000, 0)
	r := func(commRank int64) arrivalRank {
		return arrivalRank{commRank: commRank, rank: commRank, pid: 100 + commRank, cohort: cohortKey{"c1", "nccl-recovered:1"}, node: "n", entry: now.UnixNano()}
	}
	for commRank := range int64(4) {
		a.addLocal(recoveredKey{"c1", "1"}, 1, 7, 4, r(commRank), now)
	}
	a.addLocal(recoveredKey{"c1", "1"}, 1, 7, 40, r(0), now) // more ranks than a cohort holds
	want := map[string]int64{"offset_rank_cap": 1, "arrival_nranks": 1}
	if fmt.Sprint(drops) != fmt.Sprint(want) {
		t.Errorf("drops %v, want %v", drops, want)
	}
	a.drain(now.Add(2 * time.Second))
	if len(a.recovered) != 0 || a.recoveredRanks != 0 {
		t.Errorf("after the window: %d communicators, %d ranks followed, want none", len(a.recovered), a.recoveredRanks)
	}
	a.addLocal(recoveredKey{"c1", "2"}, 1, 7, 4, r(3), now.Add(2*time.Second))
	if a.recoveredRanks != 1 || drops["offset_rank_cap"] != 1 {
		t.Errorf("a new communicator's rank: %d followed, %d dropped, want 1 followed", a.recoveredRanks, drops["offset_rank_cap"])
	}
}
