package stragglerprocessor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/pushback"
)

// pairRun feeds a two-rank job's device wait, sampled every 250 ms, to the gateway's
// detector at the shipped settings: rank 0 computes 70% of its step and waits 0.30
// s/s, rank 1 (which logs, say) 65% and waits 0.35 (a structural offset), each ±jitter
// uniformly. slow(i) is how much longer the slow rank's compute is at sample i (0:
// healthy) and stall(i) whether it is stalled: in a synchronous pair the slow rank's
// extra compute is time its partner waits, so its wait falls by that much and its
// partner's rises by it. It returns the events by sample.
func pairRun(seed uint64, samples int, jitter float64, slowRank int64, slow func(i int) float64, stall func(i int) bool) (*cluster, []int) {
	c := quarterSecondCluster(nil)
	rng := rand.New(rand.NewPCG(seed, 23))
	base := map[int64]float64{0: 0.30, 1: 0.35}
	compute := map[int64]float64{0: 0.70, 1: 0.65}
	var at []int
	for i := range samples {
		rates := map[int64]float64{}
		for r, b := range base {
			rates[r] = b * (1 + jitter*(2*rng.Float64()-1))
		}
		if p := slow(i); p > 0 {
			extra := compute[slowRank] * p
			rates[slowRank] -= extra
			rates[1-slowRank] += extra
		}
		if stall(i) {
			rates[slowRank], rates[1-slowRank] = 0.01, 0.95
		}
		n := len(c.events)
		c.step(rates)
		for range len(c.events) - n {
			at = append(at, i)
		}
	}
	return c, at
}

func never(int) bool { return false }

// A pair in which one rank's compute becomes 20% or 10% longer after 40 s of healthy
// time is flagged on that rank, never the other, within 4 s by the pair rule (its
// device wait falls against its partner's past the level learned between them); it
// stays flagged, without a resolution, for as long as it is slow (30 s), and is
// resolved within 5 s of its recovery, with nothing more in the 30 s after.
func TestAPairFindsItsSlowRankAndResolvesIt(t *testing.T) {
	const onset, end = 160, 280 // samples: 40 s healthy, 30 s slow
	for _, pct := range []float64{20, 10} {
		for _, slowRank := range []int64{0, 1} {
			for seed := range uint64(5) {
				name := fmt.Sprintf("%v%%, rank %d slow, seed %d", pct, slowRank, seed)
				c, at := pairRun(seed, end+120, 0.10, slowRank, func(i int) float64 {
					if i >= onset && i < end {
						return pct / 100
					}
					return 0
				}, never)
				evs := flagsOnly(c.events)
				var states []string
				for _, e := range evs {
					states = append(states, fmt.Sprintf("%s rank %d", e.state, e.rank))
				}
				flags := flagsOnly(c.events)
				if len(flags) != 2 || flags[0].state != "straggler" || flags[0].rank != slowRank || flags[0].rule != rulePair || flags[1].state != "resolved" || flags[1].rank != slowRank {
					t.Errorf("%s: events %v, want the slow rank flagged by the pair rule, then resolved", name, states)
					continue
				}
				var flagAt, resolvedAt int
				for i, e := range c.events {
					switch e.state {
					case "straggler":
						flagAt = at[i]
					case "resolved":
						resolvedAt = at[i]
					}
				}
				if d := time.Duration(flagAt-onset) * 250 * time.Millisecond; flagAt < onset || d > 4*time.Second {
					t.Errorf("%s: flagged %v after the onset, want within 4s", name, d)
				}
				if d := time.Duration(resolvedAt-end) * 250 * time.Millisecond; resolvedAt < end || d > 5*time.Second {
					t.Errorf("%s: resolved %v after the recovery, want within 5s of it", name, d)
				}
			}
		}
	}
}

// A healthy pair with a structural offset (0.30 against 0.35 s/s of device wait) and
// ±10% jitter a sample flags nobody: 30 seeds of 500 s each (4.2 pair-hours).
func TestAHealthyFlagsNobody(t *testing.T) {
	flagged := 0
	for seed := range uint64(30) {
		c, _ := pairRun(seed+1000, 2000, 0.10, 0, func(int) float64 { return 0 }, never)
		for _, e := range c.events {
			if e.state == "straggler" {
				flagged++
				t.Logf("seed %d: %s", seed, c.describeEvents())
				break
			}
		}
	}
	t.Logf("%d of 30 healthy pair runs of 500 s flagged a rank", flagged)
	if flagged != 0 {
		t.Errorf("%d of 30 healthy pair runs flagged a rank, want none", flagged)
	}
}

// A one-second stall of one rank of a pair (four quarter-second samples in which it
// waits for nothing and its partner waits for it) flags nobody, and is recorded as one
// stall of the stalled rank: its device wait fell against its partner's.
func TestAOneSecondStallInAFlagsNobody(t *testing.T) {
	for seed := range uint64(10) {
		c, _ := pairRun(seed, 300, 0.05, 1, func(int) float64 { return 0 }, func(i int) bool { return i >= 200 && i < 204 })
		if flags := flagsOnly(c.events); len(flags) != 0 {
			t.Errorf("seed %d: %s, want no flag", seed, c.describeEvents())
		}
		stalls := stallsOnly(c.events)
		if len(stalls) != 1 || stalls[0].rank != 1 || stalls[0].at.Sub(stalls[0].since) != time.Second {
			t.Errorf("seed %d: stall records %+v, want one of rank 1 lasting 1s", seed, stalls)
		}
	}
}

// A node holds one rank of a two-rank job and has no line to judge it by: it says what
// its gateway's pushed-back verdict says, an answer later. Its rank is flagged with the
// gateway's since, sample, expected value and line, held while the verdict holds it,
// and resolved (with the expected value and line it was flagged against) once the
// verdict no longer does; the partner's flag, on another node, is not this node's.
func TestANodeSaysItsGatewaysVerdictOnAPair(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Mode = ModeNode
	c := newCluster(t, cfg, true)
	sig := cfg.Signals[0]
	key := pushback.Key{Cluster: "c1", Cohort: "comm-1", Signal: sig.Metric}
	lines := heldLines{}
	verdict := func(flagged ...pushback.Flag) {
		lines[key] = pushback.Threshold{Cluster: "c1", Cohort: "comm-1", Signal: sig.Metric, Worse: sig.Worse, Pair: true, Flagged: flagged}
	}
	step := func() {
		c.interval++
		end := c.start.Add(time.Duration(c.interval) * time.Second)
		c.totals[1] += 0.2
		c.det.observe(point{cohort: c.key, node: "node-1", rank: 1, pid: 1, cumulative: true, value: c.totals[1],
			start: c.start.UnixNano(), ts: end.UnixNano()}, end)
		c.events = append(c.events, c.det.evaluateAgainst(lines, end).events...)
	}
	verdict()
	step()
	step()
	since := c.start.Add(1500 * time.Millisecond)
	flag := pushback.Flag{Rank: 1, Since: since.UnixMilli(), Value: 0.21, Expected: 0.3, Line: 0.26, Score: -4.5}
	verdict(pushback.Flag{Rank: 0, Since: since.UnixMilli(), Value: 0.1, Expected: 0.3, Line: 0.26, Score: -9})
	step()
	if len(c.events) != 0 {
		t.Fatalf("the partner's flag was said here: %s", c.describeEvents())
	}
	verdict(flag)
	for range 3 {
		step()
	}
	if len(c.events) != 1 {
		t.Fatalf("events %s, want one flag held", c.describeEvents())
	}
	if e := c.events[0]; e.state != "straggler" || e.rank != 1 || e.rule != rulePair || !e.since.Equal(since) ||
		e.value != 0.21 || e.median != 0.3 || e.threshold != 0.26 || e.score != -4.5 || e.node != "node-1" {
		t.Errorf("flag %+v, want rank 1 on node-1 by the pair rule since %v with the gateway's sample 0.21, expected 0.3, line 0.26, score -4.5", e, since)
	}
	verdict()
	step()
	step()
	if len(c.events) != 2 {
		t.Fatalf("events %s, want the flag resolved once", c.describeEvents())
	}
	if e := c.events[1]; e.state != "resolved" || e.rank != 1 || e.median != 0.3 || e.threshold != 0.26 || math.Abs(e.value-0.2) > 1e-9 {
		t.Errorf("resolution %+v, want rank 1 at its sample 0.2 against the expected 0.3 it was flagged by", e)
	}
}

// A pair's sample is judged at the first evaluation after its partner's samples cover
// half of its interval or more, not only once they reach its end: two nodes sample out
// of phase, and waiting for the partner's next sample held each flag back by up to a
// sample interval. Rank 1's samples end 100 ms before rank 0's (its latest covers 60%
// of rank 0's newest sample): rank 0's sample is judged at once; 150 ms before (40%), it
// waits for rank 1's next sample.
func TestAPairSampleIsJudgedOnceItsPartnerCoversHalfOfIt(t *testing.T) {
	for _, tc := range []struct {
		lag    time.Duration
		judged bool
	}{{100 * time.Millisecond, true}, {150 * time.Millisecond, false}} {
		c := quarterSecondCluster(t)
		rng := rand.New(rand.NewPCG(1, 2))
		for range 120 { // 30 s in phase, ±10%: the pair's level and noise are learned
			c.step(map[int64]float64{0: 0.30 * (0.9 + 0.2*rng.Float64()), 1: 0.35 * (0.9 + 0.2*rng.Float64())})
		}
		if p := c.det.cohorts[c.key].pairs[0]; p == nil || !p.learned {
			t.Fatalf("lag %v: the pair's level was not learned in 30 s", tc.lag)
		}
		end := c.start.Add(time.Duration(c.interval) * c.every)
		next := end.Add(c.every)
		observe := func(rank int64, ts time.Time, rate float64) {
			c.totals[rank] += rate * ts.Sub(end).Seconds()
			c.det.observe(point{cohort: c.key, node: fmt.Sprintf("node-%d", rank/2), rank: rank, pid: 1000 + rank + c.pids[rank], cumulative: true,
				value: c.totals[rank], start: c.start.UnixNano(), ts: ts.UnixNano()}, next)
		}
		observe(1, next.Add(-tc.lag), 0.35)
		observe(0, next, 0.30)
		c.det.evaluate(next)
		if s := &c.det.cohorts[c.key].ranks[0].series[0]; (len(s.unjudged) == 0) != tc.judged {
			t.Errorf("partner's samples end %v before rank 0's: %d of rank 0's samples wait, want judged %v", tc.lag, len(s.unjudged), tc.judged)
		}
	}
}
