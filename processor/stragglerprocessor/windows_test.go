package stragglerprocessor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/pushback"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// busyHost is the detector's model of a busy host's rank samples every 250 ms: each
// rank's device wait is 0.30 s/s ± 15% (a quarter second holds few steps), and about
// one sample in ten starts a stall of one rank for 1 to 4 samples (up to a second: a
// preemption, a page-fault storm), during which it waits almost nothing. Stalls are two
// samples apart at least: two in a row on one rank would be one stall of more than a
// second, which is a straggler.
type busyHost struct {
	rng                   *rand.Rand
	ranks                 int
	stalled               int64
	stallLeft, sinceStall int
}

func newBusyHost(seed uint64, ranks int) *busyHost {
	return &busyHost{rng: rand.New(rand.NewPCG(seed, 99)), ranks: ranks, stalled: -1}
}

func (b *busyHost) next() map[int64]float64 {
	rates := jittered(b.rng, b.ranks, 0.30, 0.15)
	if b.stallLeft == 0 && b.sinceStall >= 2 && b.rng.IntN(10) == 0 {
		b.stalled, b.stallLeft = int64(b.rng.IntN(b.ranks)), 1+b.rng.IntN(4)
	}
	b.sinceStall++
	if b.stallLeft > 0 {
		rates[b.stalled] = 0.02
		b.stallLeft--
		b.sinceStall = 0
	}
	return rates
}

// On the busy host, a rank 20% or 10% slower for good scores under the line in most
// samples (a sample's spread is about 9% of the median, the line 3 spreads from it), so
// judged by samples alone it is found in 4 trials of 20 at most. Over windows it is
// found in every trial at 20% (p50 10 s in 6 ranks, 5.75 s in 16), and at 10% in 8 of
// 20 (6 ranks) and 17 of 20 (16) within 40 s. Each trial runs the model healthy for
// 20 s, then slows rank 3 for up to 40 s; nobody else is flagged in any.
func TestASmallSteadySlowdownIsFoundOverItsWindows(t *testing.T) {
	for _, ranks := range []int{6, 16} {
		for _, pct := range []float64{20, 10} {
			for _, minDuration := range []time.Duration{1500 * time.Millisecond, 0} {
				var found []time.Duration
				falseFlags := 0
				for seed := range uint64(20) {
					c := quarterSecondCluster(t)
					c.det.cfg.MinDuration = minDuration
					c.det = newDetector(c.det.cfg)
					b := newBusyHost(seed, ranks)
					for range 80 {
						c.step(b.next())
					}
					healthy := len(c.events)
					for i := 1; i <= 160; i++ {
						rates := b.next()
						rates[3] *= 1 - pct/100
						c.step(rates)
						if slices.ContainsFunc(c.events[healthy:], func(e event) bool { return e.state == "straggler" && e.rank == 3 }) {
							found = append(found, time.Duration(i)*250*time.Millisecond)
							break
						}
					}
					for _, e := range c.events {
						if e.state == "straggler" && e.rank != 3 {
							falseFlags++
						}
					}
				}
				slices.Sort(found)
				row := fmt.Sprintf("%d ranks, %v%% slower, min_duration %v: found %d of 20", ranks, pct, minDuration, len(found))
				if len(found) > 0 {
					row += fmt.Sprintf(", p50 %v, p95 %v", found[len(found)/2], found[len(found)*95/100])
				}
				t.Logf("%s; other ranks flagged %d times", row, falseFlags)
				switch {
				case falseFlags > 0:
					t.Errorf("%s: other ranks flagged %d times", row, falseFlags)
				case minDuration == 0 && len(found) > 5:
					t.Errorf("%s: judged by samples alone, the slowdown was expected to stay hidden in the noise", row)
				case minDuration > 0 && pct == 20 && len(found) < 20:
					t.Errorf("%s, want 20 of 20", row)
				case minDuration > 0 && pct == 10 && len(found) < 6:
					t.Errorf("%s, want at least 6 of 20", row)
				}
			}
		}
	}
}

// The busy host flags nobody over its windows: 20 runs of 500 s each, 6 and 16 ranks,
// with a stall of up to a second on some rank about every 3 s.
func TestABusyHostFlagsNobodyOverItsWindows(t *testing.T) {
	for _, ranks := range []int{6, 16} {
		flags := 0
		for seed := range uint64(20) {
			c := quarterSecondCluster(t)
			b := newBusyHost(seed+100, ranks)
			for range 2000 {
				c.step(b.next())
			}
			for _, e := range c.events {
				if e.state == "straggler" {
					flags++
					t.Logf("seed %d: %s", seed, c.describeEvents())
					break
				}
			}
		}
		if flags > 0 {
			t.Errorf("%d ranks: %d runs of 20 flagged a healthy rank", ranks, flags)
		}
	}
}

// A rank flagged over a window says so: its record's value, median and line are the
// window's, its score is against that line, and since is when its samples began to lie
// past it. One flagged by its evidence (evidence.go) says that. Its node, judging its
// own ranks by the lines pushed back, flags it by the same rule within a sample, and
// both resolve it once it is back. (This 20% slowdown is found by its evidence, 11 s
// after its onset, before its windows would find it.)
func TestAWindowFlagIsNamedAndTheNodeJudgesItsWindowsAlike(t *testing.T) {
	gw := quarterSecondCluster(t)
	ncfg := createDefaultConfig()
	ncfg.Mode, ncfg.Persistence = ModeNode, PersistenceConfig{Beyond: 5, Of: 6}
	node := newDetector(ncfg)
	b := newBusyHost(7, 8)
	lines := heldLines{}
	var nodeEvents []event
	onset := 0
	for i := 1; i <= 400; i++ {
		rates := b.next()
		if i > 120 && i <= 280 {
			if onset == 0 {
				onset = i
			}
			rates[3] *= 0.8
		}
		end := gw.report(rates)
		gw.events = append(gw.events, gw.det.evaluate(end).events...)
		// The node holds rank 3 alone and judges it by the line and the noise the
		// gateway drew at this evaluation, as an answer to its export carries.
		l, ok := gw.det.line(gw.key, 0)
		if !ok {
			continue
		}
		key := pushback.Key{Cluster: "c1", Cohort: "comm-1", Signal: ncfg.Signals[0].Metric}
		lines[key] = pushback.Threshold{Cluster: "c1", Cohort: "comm-1", Signal: key.Signal, Median: l.median, Line: l.threshold,
			Worse: WorseLower, At: l.at.UnixMilli(), Windows: toPushback(l.windows), Noise: l.noise}
		node.observe(point{cohort: gw.key, node: "node-1", rank: 3, pid: 1003, cumulative: true, value: gw.totals[3],
			start: gw.start.UnixNano(), ts: end.UnixNano()}, end)
		nodeEvents = append(nodeEvents, node.evaluateAgainst(lines, end).events...)
	}
	var gwEvents []event
	for _, e := range gw.events {
		if e.signal == 0 {
			gwEvents = append(gwEvents, e)
		}
	}
	// The busy host's stalls are recorded as stalls (stall.go); only flags count here.
	gwEvents, nodeEvents = flagsOnly(gwEvents), flagsOnly(nodeEvents)
	for name, evs := range map[string][]event{"gateway": gwEvents, "node": nodeEvents} {
		if len(evs) != 2 || evs[0].state != "straggler" || evs[0].rank != 3 || evs[1].state != "resolved" {
			t.Fatalf("%s: %v, want rank 3 flagged and resolved", name, evs)
		}
		f := evs[0]
		at, since := f.at.Sub(gw.start), f.since.Sub(gw.start)
		t.Logf("%s: flagged at %v over %v (value %.4f, median %.4f, line %.4f, score %.2f), since %v; resolved at %v",
			name, at, f.window, f.value, f.median, f.threshold, f.score, since, evs[1].at.Sub(gw.start))
		slowFrom := time.Duration(onset-1) * 250 * time.Millisecond
		switch f.rule {
		case ruleWindow:
			if f.window == 0 || f.value >= f.threshold || f.threshold >= f.median || f.score <= 3 {
				t.Errorf("%s: %+v, want a window, its median past its line and a score past 3", name, f)
			}
		case ruleEvidence:
			if f.window != 0 || f.value >= f.median {
				t.Errorf("%s: %+v, want no window and a value on the worse side of the median", name, f)
			}
		default:
			t.Errorf("%s: flagged by %q, want a window or evidence", name, f.rule)
		}
		if since < slowFrom-time.Second || since > at || at > slowFrom+20*time.Second {
			t.Errorf("%s: flagged at %v since %v; slow from %v", name, at, since, slowFrom)
		}
		if back := evs[1].at.Sub(gw.start); back < 70*time.Second {
			t.Errorf("%s: resolved at %v while still slow (until 70s)", name, back)
		}
	}
	if nodeEvents[0].window != gwEvents[0].window || nodeEvents[0].rule != gwEvents[0].rule || nodeEvents[0].at.Sub(gwEvents[0].at).Abs() > time.Second {
		t.Errorf("node flagged at %v over %v by %s, gateway at %v over %v by %s", nodeEvents[0].at, nodeEvents[0].window, nodeEvents[0].rule,
			gwEvents[0].at, gwEvents[0].window, gwEvents[0].rule)
	}
}

// A window's median needs three quarters of the window covered: a rank that just began,
// or came back from a gap, is not judged over it yet. A restarted rank (another
// process) starts its windows anew, and the history holds the longest window.
func TestWindowsCoverTheirLengthAndStartAnewWithTheProcess(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var s signalSeries
	var scratch []float64
	drops := map[string]int64{}
	add := func(pid int64, i int, v float64) {
		s.remember(sample{value: v, at: t0.Add(time.Duration(i) * 250 * time.Millisecond), span: 0.25}, pid, 12*time.Second, drops)
	}
	for i := 1; i <= 8; i++ {
		add(1, i, 0.3)
	}
	if _, ok := windowMedian(s.history, 3*time.Second, &scratch); ok {
		t.Error("2 s of samples made a 3 s window")
	}
	add(1, 9, 0.3)
	if m, ok := windowMedian(s.history, 3*time.Second, &scratch); !ok || m != 0.3 {
		t.Errorf("2.25 s of samples: median %v, %v; want 0.3 over three quarters of 3 s", m, ok)
	}
	add(2, 10, 0.1)
	if len(s.history) != 1 || s.history[0].value != 0.1 {
		t.Errorf("after a restart the history holds %d samples, want the new process's one", len(s.history))
	}
	for i := 11; i <= 4000; i++ {
		add(2, i, 0.1)
	}
	if len(s.history) != 48 || drops["window_cap"] != 0 {
		t.Errorf("history of %d samples (%d dropped), want the 12 s of the longest window", len(s.history), drops["window_cap"])
	}
}

// The window lines' k is k up to windowKRanks ranks, then grows so that one of n
// healthy ranks crosses by chance as often as one of windowKRanks does at k.
func TestWindowLinesMoveOutInLargeCohorts(t *testing.T) {
	tail := func(z float64) float64 { return 0.5 * math.Erfc(z/math.Sqrt2) }
	for _, c := range []struct {
		n    int
		want float64
	}{{3, 3}, {8, 3}, {16, 3.205}, {64, 3.585}, {16384, 4.837}} {
		got := windowK(3, c.n)
		if math.Abs(got-c.want) > 0.001 {
			t.Errorf("windowK(3, %d) = %.4f, want %.3f", c.n, got, c.want)
		}
		if c.n > windowKRanks {
			if family, ref := float64(c.n)*tail(got), windowKRanks*tail(3); math.Abs(family-ref) > 1e-9 {
				t.Errorf("%d ranks: chance that one crosses %.6f, want %.6f", c.n, family, ref)
			}
		}
	}
}

// lateRanks is arrival lag as a job of 640 ms steps on a busy host gives it: every rank
// matched once a second, at the same evaluation, each lag spread by the scheduler
// (Laplace, 20 ms; measured on the matrix's 200 ms step row: per-rank MADs of 10 to
// 42 ms), one rank late by late from the onset on.
func lateRanks(rng *rand.Rand, ranks int, slow int64, late float64) map[int64]float64 {
	out := map[int64]float64{}
	for r := range int64(ranks) {
		u := rng.Float64() - 0.5
		out[r] = -0.020 * math.Copysign(math.Log(1-2*math.Abs(u)), u)
		if r == slow {
			out[r] += late
		}
	}
	return out
}

// A rank late by 2.5 times the samples' spread, on a signal matched once a second
// (arrival lag on a job of long steps), is found over its windows: in every one of 20
// trials within 30 s (p50 9 s), nobody else flagged, nobody in 20 healthy minutes. The
// lines are drawn from the samples' spread over each window; drawn from one
// evaluation's (six heavy-tailed samples), they moved up to twenty times over between
// evaluations, and each line above the rank's window median reset its crossing: found
// in 19 of 20 (p50 16 s), and a healthy rank flagged once.
func TestARankLateIntoSparseCollectivesIsFoundOverItsWindows(t *testing.T) {
	const ranks, slow = 6, int64(3)
	var found []time.Duration
	falseFlags, missed := 0, 0
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		cfg := shippedConfig()
		d := newDetector(cfg)
		sig := slices.IndexFunc(cfg.Signals, func(s SignalConfig) bool { return s.Metric == semconv.MetricRankArrivalLag })
		start := time.Unix(1_800_000_000, 0)
		onset := start.Add(60 * time.Second)
		var flagged time.Duration = -1
		for at := start; at.Before(onset.Add(30 * time.Second)); at = at.Add(cfg.EvaluationInterval) {
			if at.Sub(start)%time.Second == 0 {
				late := 0.0
				if !at.Before(onset) {
					late = 0.050
				}
				for r, v := range lateRanks(rng, ranks, slow, late) {
					d.observe(point{cohort: cohortKey{cluster: "c", cohort: "job"}, node: fmt.Sprint("node-", r/2), rank: r, pid: 100 + r,
						signal: sig, gauge: true, value: v, ts: at.UnixNano()}, at)
				}
			}
			for _, ev := range d.evaluate(at).events {
				if ev.state != "straggler" {
					continue
				}
				if ev.rank != slow || at.Before(onset) {
					falseFlags++
					t.Logf("seed %d: false flag of rank %d at %v (%s)", seed, ev.rank, at.Sub(start), ev.rule)
				} else if flagged < 0 {
					flagged = at.Sub(onset)
				}
			}
		}
		if flagged < 0 {
			missed++
		} else {
			found = append(found, flagged)
		}
	}
	slices.Sort(found)
	t.Logf("found in %d of 20 (onset to flag %v); %d false flags in 20 healthy minutes", len(found), found, falseFlags)
	if missed > 0 || falseFlags > 0 {
		t.Errorf("found in %d of 20, %d false flags: want 20 of 20 and none", len(found), falseFlags)
	}
}
