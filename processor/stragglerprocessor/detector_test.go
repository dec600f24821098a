package stragglerprocessor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/pushback"
)

// cluster feeds a detector the device-wait signal of ranks, one point per rank per
// one-second interval, as the nodes' collectors send it.
type cluster struct {
	t          *testing.T
	det        *detector
	key        cohortKey
	start      time.Time
	interval   int
	cumulative bool
	totals     map[int64]float64
	pids       map[int64]int64
	// starts are the start times of ranks whose series began after start (a restart).
	starts map[int64]time.Time
	// seconds marks the points as time per second (unit "s"), as device wait is.
	seconds bool
	events  []event
	last    evaluation
	// every is the length of an interval (1 s unless a test sets it).
	every time.Duration
}

func newCluster(t *testing.T, cfg *Config, cumulative bool) *cluster {
	return &cluster{t: t, det: newDetector(cfg), key: cohortKey{cluster: "c1", cohort: "comm-1"},
		start: time.Unix(1_800_000_000, 0), cumulative: cumulative, totals: map[int64]float64{}, pids: map[int64]int64{}, starts: map[int64]time.Time{}}
}

// step reports one interval: rates[rank] seconds waited per second (a rank missing
// from rates sends nothing), then evaluates.
func (c *cluster) step(rates map[int64]float64) evaluation {
	end := c.report(rates)
	ev := c.det.evaluate(end)
	c.events = append(c.events, ev.events...)
	c.last = ev
	return ev
}

// quarterSecondCluster samples every 250 ms, as a node with rank_signals.interval:
// 250ms does, judged as the shipped configs judge it (5 of 6).
func quarterSecondCluster(t *testing.T) *cluster {
	cfg := createDefaultConfig()
	cfg.Persistence = PersistenceConfig{Beyond: 5, Of: 6}
	c := newCluster(t, cfg, true)
	c.every = 250 * time.Millisecond
	return c
}

// report sends one interval's points without evaluating, and returns its end.
func (c *cluster) report(rates map[int64]float64) time.Time {
	every := c.every
	if every == 0 {
		every = time.Second
	}
	c.interval++
	end := c.start.Add(time.Duration(c.interval) * every)
	for rank, rate := range rates {
		c.totals[rank] += rate * every.Seconds()
		p := point{cohort: c.key, node: fmt.Sprintf("node-%d", rank/2), rank: rank, pid: 1000 + rank + c.pids[rank], value: rate * every.Seconds(),
			start: end.Add(-every).UnixNano(), ts: end.UnixNano(), seconds: c.seconds}
		if c.cumulative {
			p.cumulative, p.value, p.start = true, c.totals[rank], c.start.UnixNano()
			if s, ok := c.starts[rank]; ok {
				p.start = s.UnixNano()
			}
		}
		c.det.observe(p, end)
	}
	return end
}

func (c *cluster) describeEvents() string {
	var b strings.Builder
	for _, e := range c.events {
		fmt.Fprintf(&b, "%s rank %d at interval %d (since interval %d); ", e.state, e.rank,
			int(e.at.Sub(c.start)/time.Second), int(e.since.Sub(c.start)/time.Second))
	}
	return b.String()
}

func jittered(rng *rand.Rand, ranks int, base, jitter float64) map[int64]float64 {
	rates := map[int64]float64{}
	for r := range ranks {
		rates[int64(r)] = base * (1 + jitter*(2*rng.Float64()-1))
	}
	return rates
}

// Rank 5 of 8 waits for the device far less than its peers from interval 20 (its host
// is slow, so its peers wait for it) and recovers at interval 40. With persistence 3 of
// 4 it is flagged at the third interval beyond the line, named alone, with the interval
// its slowness began; and resolved once no more than one of its last four is beyond and
// none of its windows' medians is past its resolve line (the 12 s window's, 6 s after).
func TestASlowRankIsFlaggedAloneThenResolved(t *testing.T) {
	for _, cumulative := range []bool{true, false} {
		t.Run(fmt.Sprintf("cumulative=%v", cumulative), func(t *testing.T) {
			c := newCluster(t, createDefaultConfig(), cumulative)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := 1; i <= 60; i++ {
				rates := jittered(rng, 8, 0.30, 0.03)
				if i >= 20 && i < 40 {
					rates[5] = 0.18
				}
				ev := c.step(rates)
				if i == 30 {
					var score float64
					var flagged bool
					for _, r := range ev.ranks {
						if r.rank == 5 {
							score, flagged = r.score, r.flagged
						}
					}
					// The ranks agree within 3%, so the 5% relative floor sets the
					// spread: 1.4826 x 0.05 x 0.30 = 0.022, and 0.12 below the median
					// is about 5.4 of it.
					if !flagged || score < 5 || score > 6 {
						t.Errorf("interval 30: rank 5 score %.2f flagged %v, want about 5.4 and flagged", score, flagged)
					}
				}
			}
			// A cumulative series gives its first sample at its second point.
			want := "straggler rank 5 at interval 22 (since interval 20); resolved rank 5 at interval 46 (since interval 20); "
			if got := c.describeEvents(); got != want {
				t.Errorf("events:\n got %s\nwant %s", got, want)
			}
			s := c.events[0]
			if s.node != "node-2" || math.Abs(s.value-0.18) > 1e-9 || s.cohort != c.key || s.median < 0.29 || s.median > 0.31 || s.threshold >= s.median || s.threshold <= s.value {
				t.Errorf("straggler event %+v: want node-2, value 0.18, median ~0.30, and the line between them", s)
			}
		})
	}
}

// Healthy ranks with realistic jitter (each interval +-10%, and now and then one rank
// stalled for a single interval, as a page fault or a preemption does) flag nobody over
// 500 intervals.
func TestHealthyJitterFlagsNobody(t *testing.T) {
	c := newCluster(t, createDefaultConfig(), true)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		rates := jittered(rng, 16, 0.30, 0.10)
		if rng.IntN(10) == 0 {
			rates[int64(rng.IntN(16))] = 0.02
		}
		c.step(rates)
	}
	// Two stalls running on one rank are one stall of two seconds: recorded as a
	// stall (stall.go), not a flag.
	if flags := flagsOnly(c.events); len(flags) != 0 {
		t.Errorf("a healthy cohort raised events: %s", c.describeEvents())
	}
}

// A node that samples its ranks every 250 ms (rank_signals.interval) sends four samples
// to each of the gateway's 1 s evaluations. Each counts towards persistence, in order:
// with 5 of 6, rank 5, slow from the sample ending at 10.25 s, is flagged at the first
// evaluation after its fifth sample beyond (11.25 s), at 12 s, since 10.25 s. Judging
// only the latest sample of each evaluation, it would take five evaluations.
func TestSamplesBetweenEvaluationsEachCount(t *testing.T) {
	c := quarterSecondCluster(t)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := 1; i <= 64; i++ { // 16 s
		rates := jittered(rng, 8, 0.30, 0.05)
		if i > 40 {
			rates[5] = 0.05
		}
		end := c.report(rates)
		if i%4 == 0 {
			c.events = append(c.events, c.det.evaluate(end).events...)
		}
	}
	if len(c.events) != 1 || c.events[0].rank != 5 || c.events[0].state != "straggler" {
		t.Fatalf("events: %s, want rank 5 flagged alone", c.describeEvents())
	}
	if at, since := c.events[0].at.Sub(c.start), c.events[0].since.Sub(c.start); at != 12*time.Second || since != 10250*time.Millisecond {
		t.Errorf("flagged at %v since %v, want at 12s since 10.25s", at, since)
	}
}

// Healthy ranks sampled every 250 ms, judged at every sample with persistence 5 of 6:
// 16 ranks at ±15% (a quarter second holds fewer steps than a second, so it is
// noisier than the ±10% of TestHealthyJitterFlagsNobody), and about 1 sample in 10 one
// rank stalls for 1 to 4 samples running (up to a whole second). Nobody is flagged in
// 500 s (nor with any of 100 seeds); a rank slowed for good is flagged at its fifth
// sample beyond the line. At ±20%, a healthy sample now and then falls beyond the line
// next to a whole-second stall, and 26 seeds in 100 flagged a rank.
func TestHealthyJitterAtQuarterSecondSamplesFlagsNobody(t *testing.T) {
	c := quarterSecondCluster(t)
	rng := rand.New(rand.NewPCG(9, 10))
	stalled, stallLeft, sinceStall := int64(-1), 0, 0
	for range 2000 {
		rates := jittered(rng, 16, 0.30, 0.15)
		// Stalls are apart by two samples at least: two stalls running on one rank
		// are one stall of more than a second, which a 2 s detection must flag.
		if stallLeft == 0 && sinceStall >= 2 && rng.IntN(10) == 0 {
			stalled, stallLeft = int64(rng.IntN(16)), 1+rng.IntN(4)
		}
		sinceStall++
		if stallLeft > 0 {
			rates[stalled] = 0.02
			stallLeft--
			sinceStall = 0
		}
		c.step(rates)
	}
	// Its stalls of three samples or more are recorded as stalls (stall.go), not
	// flags.
	if flags := flagsOnly(c.events); len(flags) != 0 {
		t.Fatalf("a healthy cohort raised events: %s", c.describeEvents())
	}
	first := c.interval
	for range 8 {
		rates := jittered(rng, 16, 0.30, 0.15)
		rates[3] = 0.05
		c.step(rates)
	}
	flags := flagsOnly(c.events)
	if len(flags) != 1 || flags[0].rank != 3 || c.interval-first < 5 {
		t.Fatalf("events: %s, want rank 3 flagged at its fifth sample", c.describeEvents())
	}
	if got := int(flags[0].at.Sub(c.start)/c.every) - first; got != 5 {
		t.Errorf("rank 3 flagged at its sample %d beyond, want 5", got)
	}
}

// A rank that stops reporting while its cohort keeps a quorum is reported silent once,
// with the end of its last interval, and resolved when it reports again.
func TestASilentRankIsReportedAndResolved(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.SilentAfter = 5 * time.Second
	c := newCluster(t, cfg, true)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 1; i <= 40; i++ {
		rates := jittered(rng, 6, 0.30, 0.03)
		if i > 10 && i <= 25 {
			delete(rates, 3)
		}
		c.step(rates)
	}
	// Last report at interval 10; silent once more than 5 s passed (interval 16).
	// Back at 26: its first point after the gap has no baseline-free sample... a
	// cumulative series needs no new baseline (same process and start), so it counts.
	want := "silent rank 3 at interval 16 (since interval 10); resolved rank 3 at interval 26 (since interval 10); "
	if got := c.describeEvents(); got != want {
		t.Errorf("events:\n got %s\nwant %s", got, want)
	}
}

// A cohort its ranks all leave within a second or two (a job's cohort, once its nodes saw
// the communicator: CI's healthy jobs left theirs so, the per-collection signals a
// second after the others) has no silent rank: none stopped while the others kept
// reporting. Six ranks report once or twice, a node a second after the next, then
// nothing more.
func TestACohortItsRanksLeaveHasNoSilentRank(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.SilentAfter, cfg.Warmup = 5*time.Second, 0
	c := newCluster(t, cfg, false)
	for i := 1; i <= 20; i++ {
		rates := map[int64]float64{}
		for rank := range int64(6) {
			// Node n (ranks 2n, 2n+1) reports in intervals n+1 and n+2 only.
			if n := int(rank / 2); i == n+1 || i == n+2 {
				rates[rank] = 0.3
			}
		}
		c.step(rates)
	}
	if len(c.events) != 0 {
		t.Errorf("events: %s, want none", c.describeEvents())
	}
}

// Below the quorum nothing is judged; a cohort that is slow from its first interval is
// judged only after the warm-up (3 evaluations with a quorum), then flagged after
// persistence.
func TestQuorumAndWarmup(t *testing.T) {
	c := newCluster(t, createDefaultConfig(), false)
	for range 10 {
		if ev := c.step(map[int64]float64{0: 0.3, 1: 0.1}); len(ev.groups) != 0 || len(ev.events) != 0 {
			t.Fatalf("two ranks were judged: %+v", ev)
		}
	}
	c = newCluster(t, createDefaultConfig(), false)
	for range 10 {
		c.step(map[int64]float64{0: 0.3, 1: 0.31, 2: 0.29, 3: 0.30, 4: 0.05})
	}
	// Evaluations 1-3 are warm-up; their verdicts still fill the window, so the first
	// warm evaluation (4) already sees 4 of 4 beyond.
	if want := "straggler rank 4 at interval 4 (since interval 1); "; c.describeEvents() != want {
		t.Errorf("events: %s, want %s", c.describeEvents(), want)
	}
}

// A restarted rank (a new process, its counter from zero) starts a new baseline
// instead of a negative or huge sample.
func TestARestartedRankStartsANewBaseline(t *testing.T) {
	for _, newStart := range []bool{false, true} {
		c := newCluster(t, createDefaultConfig(), true)
		for i := 1; i <= 30; i++ {
			rates := map[int64]float64{0: 0.3, 1: 0.3, 2: 0.3, 3: 0.3}
			if i == 15 {
				c.pids[2] = 7 // rank 2 restarted: new pid, total from zero
				c.totals[2] = 0
				if newStart {
					// As the receiver reports it: the new process's series start when
					// it was first seen, so its first point is counted from there.
					c.starts[2] = c.start.Add(14 * time.Second)
				}
			}
			c.step(rates)
			for _, r := range c.last.ranks {
				if r.score > 0.001 || r.score < -0.001 {
					t.Fatalf("new start %v, interval %d: rank %d scored %.3f across a restart", newStart, i, r.rank, r.score)
				}
			}
		}
		if len(c.events) != 0 {
			t.Errorf("new start %v: events: %s", newStart, c.describeEvents())
		}
	}
}

// The caps hold: a third cohort over max_cohorts 2 evicts the one heard from least
// recently; a fifth rank over max_ranks_per_cohort 4 is not tracked; a cohort heard
// nothing from for forget_after is dropped. Each is counted.
func TestStateIsBounded(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Limits = LimitsConfig{MaxCohorts: 2, MaxRanksPerCohort: 4}
	d := newDetector(cfg)
	t0 := time.Unix(1_800_000_000, 0)
	obs := func(cohort string, rank int64, at time.Time) {
		d.observe(point{cohort: cohortKey{cohort: cohort}, rank: rank, value: 1, start: at.Add(-time.Second).UnixNano(), ts: at.UnixNano()}, at)
	}
	obs("a", 0, t0)
	obs("b", 0, t0.Add(time.Second))
	obs("c", 0, t0.Add(2*time.Second))
	for r := range int64(5) {
		obs("c", r, t0.Add(3*time.Second))
	}
	cohorts, ranks := d.counts()
	var names []string
	for k := range d.cohorts {
		names = append(names, k.cohort)
	}
	slices.Sort(names)
	if cohorts != 2 || ranks != 5 || !slices.Equal(names, []string{"b", "c"}) {
		t.Errorf("held %d cohorts %v, %d ranks; want b and c, 1+4 ranks", cohorts, names, ranks)
	}
	if d.drops["cohort_cap"] != 1 || d.drops["rank_cap"] != 1 {
		t.Errorf("drops %v, want one cohort_cap and one rank_cap", d.drops)
	}
	d.evaluate(t0.Add(2*time.Second + cfg.ForgetAfter + time.Second))
	if cohorts, _ := d.counts(); cohorts != 1 || d.drops["forgotten"] != 1 {
		t.Errorf("after forget_after: %d cohorts, drops %v; want b forgotten (1 rank)", cohorts, d.drops)
	}
}

// line returns a cohort's last line for a signal (gateway), for the tests that look at
// it; what is pushed back is detector.pushed.
func (d *detector) line(key cohortKey, sig int) (line, bool) {
	c := d.cohorts[key]
	if c == nil || !c.lines[sig].ok {
		return line{}, false
	}
	return c.lines[sig], true
}

// heldLines is what a node's thresholds extension holds, for the node-mode tests.
type heldLines map[pushback.Key]pushback.Threshold

func (h heldLines) Threshold(k pushback.Key, _ time.Time) (pushback.Threshold, bool) {
	t, ok := h[k]
	return t, ok
}

// On a node, its own ranks are judged against the gateway's line with the same
// persistence; losing the line is said once for the cohort (naming the node), and
// judging resumes when a line is back.
func TestANodeJudgesItsRanksAgainstThePushedBackLine(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Mode = ModeNode
	c := newCluster(t, cfg, true)
	key := pushback.Key{Cluster: "c1", Cohort: "comm-1", Signal: cfg.Signals[0].Metric}
	lines := heldLines{key: {Cluster: "c1", Cohort: "comm-1", Signal: key.Signal, Median: 0.30, Line: 0.23, Worse: "lower"}}
	step := func(rates map[int64]float64) {
		c.interval++
		end := c.start.Add(time.Duration(c.interval) * time.Second)
		for rank, rate := range rates {
			c.totals[rank] += rate
			c.det.observe(point{cohort: c.key, node: "node-2", rank: rank, pid: 1, cumulative: true, value: c.totals[rank],
				start: c.start.UnixNano(), ts: end.UnixNano()}, end)
		}
		// The answer to the export that carried them: a line drawn just now.
		if l, ok := lines[key]; ok {
			l.At = end.UnixMilli()
			lines[key] = l
		}
		c.events = append(c.events, c.det.evaluateAgainst(lines, end).events...)
	}
	for i := 1; i <= 12; i++ {
		rate5 := 0.30
		if i >= 4 {
			rate5 = 0.10
		}
		step(map[int64]float64{4: 0.29, 5: rate5})
	}
	// Rank 5's samples from interval 4 are beyond; the third one (6) flags it.
	want := "straggler rank 5 at interval 6 (since interval 4); "
	if got := c.describeEvents(); got != want {
		t.Fatalf("events: %s, want %s", got, want)
	}
	if e := c.events[0]; e.node != "node-2" || e.threshold != 0.23 || e.median != 0.30 {
		t.Errorf("event %+v: want node-2 against the pushed line 0.23 (median 0.30)", e)
	}
	delete(lines, key) // past the TTL
	step(map[int64]float64{4: 0.29, 5: 0.30})
	step(map[int64]float64{4: 0.29, 5: 0.30})
	if n := len(c.events); n != 2 || c.events[1].state != "no_thresholds" || c.events[1].node != "node-2" || c.events[1].rank != -1 {
		t.Fatalf("after the line expired: %s", c.describeEvents())
	}
	lines[key] = pushback.Threshold{Cluster: "c1", Cohort: "comm-1", Signal: key.Signal, Median: 0.30, Line: 0.23, Worse: "lower"}
	for range 4 {
		step(map[int64]float64{4: 0.29, 5: 0.30})
	}
	if last := c.events[len(c.events)-1]; last.state != "resolved" || last.rank != 5 {
		t.Errorf("rank 5 back within the line was not resolved: %s", c.describeEvents())
	}
}

// nodeJudgingEachSample is a node's detector that flags on one sample past the line,
// the key of its first signal's line for comm-1, and a function that gives it rank 5's
// cumulative total (on node-2, counted from t0) at a time.
func nodeJudgingEachSample(t0 time.Time) (*detector, pushback.Key, func(at time.Time, total float64)) {
	cfg := createDefaultConfig()
	cfg.Mode = ModeNode
	cfg.Persistence = PersistenceConfig{Beyond: 1, Of: 1}
	d := newDetector(cfg)
	key := cohortKey{cluster: "c1", cohort: "comm-1"}
	observe := func(at time.Time, total float64) {
		d.observe(point{cohort: key, node: "node-2", rank: 5, pid: 1, cumulative: true, value: total,
			start: t0.UnixNano(), ts: at.UnixNano()}, at)
	}
	return d, pushback.Key{Cluster: "c1", Cohort: "comm-1", Signal: cfg.Signals[0].Metric}, observe
}

// A node's rank gauges score each rank against the gateway's line, as the gateway
// scores it; a rank none of whose samples has been judged has no score point, not a
// zero (every node wrote 0 for every rank, which halved the score a backend averaged
// over the cohort's points).
func TestANodeScoresItsRanksAgainstThePushedBackLine(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	d, lineKey, observe := nodeJudgingEachSample(t0)
	lines := heldLines{lineKey: {Cluster: "c1", Cohort: "comm-1", Signal: lineKey.Signal, Median: 0.30, Line: 0.24, Worse: "lower", At: t0.UnixMilli()}}
	observe(t0, 0)
	observe(t0.Add(time.Second), 0.18) // 0.18/s: 0.12 under the median, whose spread is 0.02
	// The held line is older than the sample, which waits for the next.
	ev := d.evaluateAgainst(lines, t0.Add(time.Second+250*time.Millisecond))
	if len(ev.ranks) != 1 || !ev.ranks[0].unscored {
		t.Fatalf("before a sample was judged: %+v, want rank 5 unscored", ev.ranks)
	}
	lines[lineKey] = pushback.Threshold{Cluster: "c1", Cohort: "comm-1", Signal: lineKey.Signal, Median: 0.30, Line: 0.24, Worse: "lower",
		At: t0.Add(time.Second + 100*time.Millisecond).UnixMilli()}
	ev = d.evaluateAgainst(lines, t0.Add(time.Second+500*time.Millisecond))
	if len(ev.ranks) != 1 || ev.ranks[0].unscored || math.Abs(ev.ranks[0].score-6) > 1e-9 {
		t.Fatalf("judged: %+v, want rank 5 scored 6 spreads worse than the median", ev.ranks)
	}
}

// A node's fresh sample waits for the line of the answer to its own export (drawn after
// the peers' samples of the same interval), unless none comes within lineWait: judged
// against the interval-old line, a rank that just slowed down is not beyond it yet.
func TestANodeJudgesAFreshSampleAgainstTheNextLine(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	d, lineKey, observe := nodeJudgingEachSample(t0)
	old := pushback.Threshold{Cluster: "c1", Cohort: "comm-1", Signal: lineKey.Signal, Median: 0.10, Line: 0.05, Worse: "lower", At: t0.UnixMilli()}
	lines := heldLines{lineKey: old}
	observe(t0, 0)
	observe(t0.Add(time.Second), 0.08) // 0.08/s: within the old line (0.05), beyond the new one
	if ev := d.evaluateAgainst(lines, t0.Add(time.Second+250*time.Millisecond)); len(ev.events) != 0 {
		t.Fatalf("judged against the interval-old line: %+v", ev.events)
	}
	lines[lineKey] = pushback.Threshold{Cluster: "c1", Cohort: "comm-1", Signal: lineKey.Signal, Median: 0.30, Line: 0.23, Worse: "lower",
		At: t0.Add(time.Second + 100*time.Millisecond).UnixMilli()}
	ev := d.evaluateAgainst(lines, t0.Add(time.Second+500*time.Millisecond))
	if len(ev.events) != 1 || ev.events[0].state != "straggler" || ev.events[0].threshold != 0.23 {
		t.Fatalf("against the answer's line: %+v, want one straggler event on line 0.23", ev.events)
	}
	// No newer line within lineWait: judged against what is held.
	observe(t0.Add(2*time.Second), 0.38)
	lines[lineKey] = old
	if ev := d.evaluateAgainst(lines, t0.Add(2*time.Second+time.Second)); len(ev.events) != 0 {
		t.Fatalf("judged before lineWait: %+v", ev.events)
	}
	if ev := d.evaluateAgainst(lines, t0.Add(2*time.Second+lineWait)); len(ev.events) != 1 || ev.events[0].state != "resolved" {
		t.Fatalf("after lineWait: %+v, want rank 5 resolved against the held line", ev.events)
	}
}

// A line says when the newest sample it was drawn from ended (Drawn): a node's sample
// waits for a line drawn from samples as new as itself, even one the gateway computed
// after the sample came, since the gateway may not have had the sample then; judged
// against that earlier line, which the old rule (computed at most lineSkew before the
// sample came) accepted, the rank that just slowed down was not beyond it.
func TestANodeWaitsForALineDrawnFromSamplesAsNewAsItsOwn(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	end := t0.Add(time.Second)
	d, lineKey, observe := nodeJudgingEachSample(t0)
	// Computed 200 ms after the sample ended, from samples that ended 250 ms before it.
	before := pushback.Threshold{Cluster: "c1", Cohort: "comm-1", Signal: lineKey.Signal, Median: 0.10, Line: 0.05, Worse: "lower",
		At: end.Add(200 * time.Millisecond).UnixMilli(), Drawn: end.Add(-250 * time.Millisecond).UnixMilli()}
	lines := heldLines{lineKey: before}
	observe(t0, 0)
	observe(end, 0.08) // 0.08/s: within the earlier line (0.05), beyond the one drawn with it
	if ev := d.evaluateAgainst(lines, end.Add(250*time.Millisecond)); len(ev.events) != 0 {
		t.Fatalf("judged against a line drawn before the gateway had the sample: %+v", ev.events)
	}
	drawn := pushback.Threshold{Cluster: "c1", Cohort: "comm-1", Signal: lineKey.Signal, Median: 0.30, Line: 0.23, Worse: "lower",
		At: end.Add(450 * time.Millisecond).UnixMilli(), Drawn: end.UnixMilli()}
	lines[lineKey] = drawn
	ev := d.evaluateAgainst(lines, end.Add(500*time.Millisecond))
	if len(ev.events) != 1 || ev.events[0].state != "straggler" || ev.events[0].threshold != 0.23 {
		t.Fatalf("against the line drawn with it: %+v, want one straggler event on line 0.23", ev.events)
	}
}

// The gateway evaluates just before each of the node's exports arrives, so every line
// a node holds was drawn more than lineSkew before its latest sample, and each second a
// new sample comes. Each sample is judged against the first line drawn after it came,
// which comes with the next second's answer, and the rank is flagged with the usual
// persistence, one second late.
func TestANodeWhoseLinesAreAlwaysOldStillJudges(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Mode = ModeNode
	d := newDetector(cfg)
	key := cohortKey{cluster: "c1", cohort: "comm-1"}
	t0 := time.Unix(1_800_000_000, 0)
	lineKey := pushback.Key{Cluster: "c1", Cohort: "comm-1", Signal: cfg.Signals[0].Metric}
	lines := heldLines{}
	var flaggedAt time.Duration
	for i := 0; i <= 20 && flaggedAt == 0; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		d.observe(point{cohort: key, node: "node-2", rank: 5, pid: 1, cumulative: true, value: 0.05 * float64(i),
			start: t0.UnixNano(), ts: at.UnixNano()}, at)
		// Drawn 700 ms before this sample came, as every line will be.
		lines[lineKey] = pushback.Threshold{Cluster: "c1", Cohort: "comm-1", Signal: lineKey.Signal, Median: 0.30, Line: 0.23,
			Worse: "lower", At: at.Add(-700 * time.Millisecond).UnixMilli()}
		for step := time.Duration(0); step < time.Second && flaggedAt == 0; step += 250 * time.Millisecond {
			for _, e := range d.evaluateAgainst(lines, at.Add(step)).events {
				if e.state == "straggler" && e.rank == 5 {
					flaggedAt = time.Duration(i)*time.Second + step
				}
			}
		}
	}
	// The first rate comes at 1 s and is judged at 2 s (against the line drawn at
	// 1.3 s), the next at 3 s, the third at 4 s: its verdict beyond flags the rank.
	// When a node held only its latest sample, each was replaced before a line new
	// enough for it came, and only lineWait made the node judge at all (at 9 s).
	if flaggedAt != 4*time.Second {
		t.Fatalf("flagged at %v after the first point, want 4s (never: 0s)", flaggedAt)
	}
}

// linesFrom is a source that also says when the gateway last answered.
type linesFrom struct {
	heldLines
	last time.Time
}

func (l *linesFrom) LastAnswer() time.Time { return l.last }

// While the gateway is away (no answer for lineWait), a node judges nothing against the
// line it held from before: rank 5's samples, far under that line, wait, the latest
// only. Once the gateway answers again with a line new enough, they are judged, and
// the rank is flagged at its third sample past it (3 of 4): the one kept from while the
// gateway was away (8 s), then 9 s and 10 s. Judged by the old line, it was flagged at
// 4 s, while the gateway was away.
func TestANodeJudgesNothingByAnOldLineWhileTheGatewayIsAway(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Mode = ModeNode
	d := newDetector(cfg)
	key := cohortKey{cluster: "c1", cohort: "comm-1"}
	t0 := time.Unix(1_800_000_000, 0)
	lineKey := pushback.Key{Cluster: "c1", Cohort: "comm-1", Signal: cfg.Signals[0].Metric}
	src := &linesFrom{heldLines: heldLines{lineKey: {Cluster: "c1", Cohort: "comm-1", Signal: lineKey.Signal, Median: 0.30, Line: 0.23,
		Worse: "lower", At: t0.UnixMilli()}}, last: t0}
	var events []event
	for i := 1; i <= 12; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		d.observe(point{cohort: key, node: "node-2", rank: 5, pid: 1, cumulative: true, value: 0.05 * float64(i),
			start: t0.UnixNano(), ts: at.UnixNano()}, at)
		if i >= 9 {
			// Back: it answers each export, with a line drawn as the sample came.
			src.last = at
			src.heldLines[lineKey] = pushback.Threshold{Cluster: "c1", Cohort: "comm-1", Signal: lineKey.Signal, Median: 0.30, Line: 0.23,
				Worse: "lower", At: at.UnixMilli()}
		}
		for step := time.Duration(0); step < time.Second; step += 250 * time.Millisecond {
			events = append(events, d.evaluateAgainst(src, at.Add(step)).events...)
		}
		if s := &d.cohorts[key].ranks[5].series[0]; i < 9 && len(s.unjudged) > 1 {
			t.Errorf("at %ds %d samples wait while the gateway is away, want the latest only", i, len(s.unjudged))
		}
	}
	if len(events) != 1 || events[0].state != "straggler" || events[0].at.Sub(t0) != 10*time.Second {
		var got []string
		for _, e := range events {
			got = append(got, fmt.Sprintf("%s at %v", e.state, e.at.Sub(t0)))
		}
		t.Errorf("events %v, want the rank flagged at 10s, once the gateway is back", got)
	}
}

// A rank known by its job until its node saw its communicator moves to the
// communicator's cohort. When the job's line then runs out on the node, no sample of
// the job's cohort is left to judge, and the node says nothing of it (no
// no_thresholds), while the communicator's line judges the ranks. CI's healthy job once
// wrote three such records at start-up.
func TestARankThatMovesToItsCommunicatorLosesNoLine(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Mode = ModeNode
	d := newDetector(cfg)
	t0 := time.Unix(1_800_000_000, 0)
	byJob, byComm := cohortKey{cluster: "c1", cohort: "job:train"}, cohortKey{cluster: "c1", cohort: "comm-1"}
	observe := func(key cohortKey, i int) {
		at := t0.Add(time.Duration(i) * time.Second)
		for rank := range int64(2) {
			d.observe(point{cohort: key, node: "node-0", rank: rank, pid: 100 + rank, cumulative: true, value: 0.3 * float64(i),
				start: t0.UnixNano(), ts: at.UnixNano()}, at)
		}
	}
	line := func(key cohortKey, at time.Time) pushback.Threshold {
		return pushback.Threshold{Cluster: "c1", Cohort: key.cohort, Signal: cfg.Signals[0].Metric, Median: 0.3, Line: 0.1,
			Worse: "lower", At: at.UnixMilli()}
	}
	lines := heldLines{}
	for i := 0; i <= 3; i++ {
		observe(byJob, i)
		at := t0.Add(time.Duration(i) * time.Second)
		lines[pushback.Key{Cluster: "c1", Cohort: byJob.cohort, Signal: cfg.Signals[0].Metric}] = line(byJob, at)
		d.evaluateAgainst(lines, at.Add(200*time.Millisecond))
	}
	for i := 4; i <= 12; i++ {
		observe(byComm, i)
		at := t0.Add(time.Duration(i) * time.Second)
		if i == 8 { // the job's line runs out
			delete(lines, pushback.Key{Cluster: "c1", Cohort: byJob.cohort, Signal: cfg.Signals[0].Metric})
		}
		lines[pushback.Key{Cluster: "c1", Cohort: byComm.cohort, Signal: cfg.Signals[0].Metric}] = line(byComm, at)
		if ev := d.evaluateAgainst(lines, at.Add(200*time.Millisecond)); len(ev.events) != 0 {
			t.Fatalf("second %d: events %+v, want none", i, ev.events)
		}
	}
	if len(d.cohorts[byComm].ranks) != 2 {
		t.Errorf("comm-1 holds %d ranks, want 2", len(d.cohorts[byComm].ranks))
	}
}

// A node's queue replayed after the gateway was away brings seconds of samples at once.
// The gateway judges none of them against the line it draws now (they are counted as
// stale), and leaves them out of the line: eight low samples of rank 5, three seconds
// old, flag nobody, where judged they would have.
func TestReplayedSamplesAreNotJudgedAgainstTodaysLine(t *testing.T) {
	c := quarterSecondCluster(t)
	rng := rand.New(rand.NewPCG(11, 12))
	for range 40 {
		c.step(jittered(rng, 8, 0.30, 0.05))
	}
	// Rank 5's next 8 samples (2 s) come in one burst 3 s after the last of them ended;
	// the others' come on time.
	var held []point
	for range 8 {
		rates := jittered(rng, 8, 0.30, 0.05)
		c.totals[5] += 0.05 * c.every.Seconds()
		end := c.start.Add(time.Duration(c.interval+1) * c.every)
		held = append(held, point{cohort: c.key, node: "node-2", rank: 5, pid: 1005, cumulative: true, value: c.totals[5],
			start: c.start.UnixNano(), ts: end.UnixNano()})
		delete(rates, 5)
		c.step(rates)
	}
	for range 12 { // 3 s more of the others
		rates := jittered(rng, 8, 0.30, 0.05)
		delete(rates, 5)
		c.step(rates)
	}
	// The others' samples of this interval come, then rank 5's burst, then the gateway evaluates.
	rates := jittered(rng, 8, 0.30, 0.05)
	delete(rates, 5)
	late := c.report(rates)
	for _, p := range held {
		c.det.observe(p, late)
	}
	if ev := c.det.evaluate(late); len(ev.events) != 0 || len(c.events) != 0 {
		t.Fatalf("events %+v %s, want none", ev.events, c.describeEvents())
	}
	if c.det.drops["stale"] != 8 {
		t.Errorf("%d samples counted stale, want 8", c.det.drops["stale"])
	}
}

// Samples that waited are judged against the line of their own interval. Six healthy
// ranks sampled every 250 ms; now and then an evaluation comes only after five
// intervals (the gateway's evaluations held, or its nodes' exports), and over those the
// whole job moved: all six ranks waited 0.04 to 0.1 s/s less in the four older than in
// the last (or more). Against the line drawn from the latest samples only, every rank's
// older samples lay a shift away from it and their evidence rose together; a rank
// whose next sample was high too was flagged, never slow: 10 flags in these 384 pauses
// before (2026-11-28), none since.
func TestWaitedSamplesAreJudgedAgainstTheirOwnInterval(t *testing.T) {
	flags := 0
	for seed := range uint64(4) {
		c := quarterSecondCluster(t)
		c.seconds = true
		rng := rand.New(rand.NewPCG(28, seed))
		level := func(l float64) map[int64]float64 {
			rates := map[int64]float64{}
			for rank := range int64(6) {
				rates[rank] = l + 0.01*rng.NormFloat64()
			}
			return rates
		}
		for range 40 {
			c.step(level(0.5))
		}
		for pause := range 96 {
			shift := []float64{0.04, 0.06, 0.08, 0.1}[pause%4]
			before, after := 0.5-shift/2, 0.5+shift/2
			if pause/4%2 == 1 {
				before, after = after, before
			}
			for range 4 {
				c.report(level(before))
			}
			c.step(level(after))
			for range 12 {
				c.step(level(after))
			}
		}
		for _, e := range c.events {
			if e.state == "straggler" {
				flags++
				t.Errorf("seed %d: rank %d flagged at %v (rule %s, score %.2f), all six healthy", seed, e.rank, e.at, e.rule, e.score)
			}
		}
	}
	t.Logf("%d flags in 384 pauses", flags)
}
