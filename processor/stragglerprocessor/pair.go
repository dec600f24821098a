package stragglerprocessor

import (
	"math"
	"slices"
	"time"

	"github.com/fathom-gpu/fathom/internal/pushback"
	"github.com/fathom-gpu/fathom/internal/series"
)

// Judging a cohort of two ranks.
//
// The cohort rule draws its line from the median of the ranks, and the median of two
// ranks lies half way between them: either could be the slow one. A pair can still be
// judged, over time rather than across ranks. Per signal, d = x_a − x_b at each aligned
// sample sits at a level of its own in a healthy pair (ranks differ by structure: rank 0
// logs, one node is busier), with a noise of its own. A slowdown of one rank moves d
// away from that level, and the signal's direction says which rank moved: on a signal
// where higher is worse the rank whose value rose against the other's, on device wait
// (lower is worse) the rank that waits less, since it holds the other.
//
// So each rank's sample is scored against its partner's value over the same interval
// plus the level learned between them, in spreads of d's own noise (measured from
// consecutive differences, as scoreNoise does for the cohort's scores), and that score
// goes through the same rules as a cohort's: samples (k, persistence), evidence (the
// CUSUM with its drift, height and min_duration cap), hysteresis and stall records. The
// two ranks' scores mirror each other, so at most one of them builds evidence.
//
// The level is the median of d over the last pairHorizon of samples taken while the
// pair looked healthy: neither rank flagged or building evidence on the signal, and the
// sample within the line. A slowdown is not learned away while it is being found, and a
// stall never enters. A pair is judged only once it has pairLearn of such samples and
// its noise is measured: a pair slow from its start has that slowness as its level and
// is never found, and a slowdown too small to build evidence (about the evidence's
// drift) is learned into the level within about half the horizon.
//
// A pair is judged at the gateway only: a node holds only its own ranks and judges
// them against the lines the gateway pushes back, and a pair has no line a node could
// judge by without its partner's samples. So the gateway pushes back its verdict
// instead (pushback.Threshold.Pair: which of the two it holds flagged, since when, and
// what its record said), and the node says the same of its ranks an answer later
// (adoptPairVerdict).
const (
	// pairHorizon is how far back the level is learned; pairLearn how much healthy
	// time a pair needs before it can flag anyone.
	pairHorizon = 30 * time.Second
	pairLearn   = 20 * time.Second
	// pairRing bounds the samples of d the level is learned from: the horizon at 60 ms
	// samples; older ones are dropped (counted as pair_cap).
	pairRing = 512
	// pairWait is how long a rank's sample waits for its partner's samples to cover
	// half of its interval (a node exports its samples in batches, out of phase with
	// the other); past it, the sample is dropped unaligned.
	pairWait = time.Second
	// pairDrift is the least drift of a pair's evidence, in spreads of its difference.
	// A pair's difference wanders where a cohort's median does not: two ranks of a
	// busy host have swings of their own that no third rank averages out, and the
	// level, a median over the horizon, follows them only slowly. Replayed on the
	// committed recordings (pair_replay_test.go), the cohort's drift (the noise, at
	// least 0.25) flagged healthy pairs 20 times in 1.5 hours of pair-time; 1.1 flags
	// none and still finds every 20% slowdown (10% no longer: docs/straggler.md).
	pairDrift = 1.1
)

// rulePair names a straggler its pair's rule flagged (semconv.StragglerRule).
const rulePair = "pair"

// pairState is what a cohort of two ranks has learned about the difference between them
// on one signal.
type pairState struct {
	a, b       int64 // the ranks, a < b
	pidA, pidB int64
	// clean are the differences x_a − x_b of the latest healthy samples, as many as
	// cover pairHorizon, oldest first; level is their median, and learned says they
	// cover pairLearn and the noise is measured.
	clean   []windowSample
	level   float64
	learned bool
	// wander is the spread of the clean differences around their level (1.4826 ×
	// MAD): how far a healthy pair's difference strays over the horizon, which the
	// noise of consecutive samples misses when it drifts slowly.
	wander float64
	// noise holds the differences between consecutive d of rank a's samples; lastD is
	// the latest d.
	noise scoreNoise
	lastD float64
	haveD bool
	// scores takes the pair's score differences that accumulate records for a cohort's
	// noise: a pair's noise is d's, in its own units, and must not mix with a cohort's.
	scores  scoreNoise
	scratch []float64
	// judgedAt is the evaluation that last judged the pair, and flags what each rank
	// flagged on the signal said when it was (pushed back to the nodes with the
	// verdict).
	judgedAt time.Time
	flags    []pushback.Flag
}

// verdict is what the gateway pushes back for the pair at its last evaluation: the
// ranks it holds flagged.
func (p *pairState) verdict(c *cohort, sig int) []pushback.Flag {
	var out []pushback.Flag
	for _, f := range p.flags {
		if r := c.ranks[f.Rank]; r != nil && r.series[sig].flagged {
			out = append(out, f)
		}
	}
	return out
}

// noteFlag keeps what rank's flag said (state "straggler"), or forgets it.
func (p *pairState) noteFlag(ev event, state string) {
	p.flags = slices.DeleteFunc(p.flags, func(f pushback.Flag) bool { return f.Rank == ev.rank })
	if state == "straggler" {
		p.flags = append(p.flags, pushback.Flag{Rank: ev.rank, Since: ev.since.UnixMilli(), Value: ev.value, Expected: ev.median, Line: ev.threshold, Score: ev.score})
	}
}

// pairsJudge says whether signal sig of a cohort with two fresh ranks is judged as a
// pair: pairs on, the signal one with evidence, and its samples kept (for windows, over
// the longest) for aligning the two ranks. The signals judged by their floors alone
// (GPU, fabric) say how large a difference matters, not how it changed, and the
// gateway's own signals (arrival lag) are measured against the median of the ranks.
func (d *detector) pairsJudge(sig int) bool {
	return d.cfg.Pairs && d.cfg.evidenced(sig) && d.longest > 0 && !gatewayOnly[d.cfg.Signals[sig].Metric]
}

// pair returns the cohort's pair state for sig, started anew when the pair is two other
// ranks or either is another process (a restarted rank learns its level anew).
func (c *cohort) pair(sig int, a, b int64) *pairState {
	if c.pairs == nil {
		c.pairs = make([]*pairState, len(c.lines))
	}
	p := c.pairs[sig]
	pidA, pidB := c.ranks[a].series[sig].historyPID, c.ranks[b].series[sig].historyPID
	if p == nil || p.a != a || p.b != b || p.pidA != pidA || p.pidB != pidB {
		p = &pairState{a: a, b: b, pidA: pidA, pidB: pidB}
		c.pairs[sig] = p
	}
	return p
}

// learn lets go of the clean samples beyond the latest pairHorizon of them (by the time
// they cover, not the clock: while the pair is flagged or building evidence nothing is
// learned, and the level it had stays, however long that lasts) and recomputes the
// level from the rest.
func (p *pairState) learn() {
	var covered float64
	cut := len(p.clean)
	for cut > 0 && covered < pairHorizon.Seconds() {
		cut--
		covered += p.clean[cut].span
	}
	if cut > 0 {
		p.clean = append(p.clean[:0], p.clean[cut:]...)
	}
	p.learned = false
	if len(p.clean) == 0 {
		return
	}
	p.scratch = p.scratch[:0]
	for _, c := range p.clean {
		p.scratch = append(p.scratch, c.value)
	}
	p.level = series.Median(p.scratch)
	p.wander = series.MADScale * series.MAD(p.scratch, p.level)
	p.learned = covered >= pairLearn.Seconds() && p.noise.measured() > 0
}

// remember keeps one difference of a healthy sample for the level.
func (p *pairState) remember(d float64, sm sample, drops map[string]int64) {
	if len(p.clean) == pairRing {
		p.clean = p.clean[1:]
		drops["pair_cap"]++
	}
	p.clean = append(p.clean, windowSample{at: sm.at.UnixNano(), value: d, span: sm.span})
}

// alignedValue is the partner's value over sm's interval: its samples (history)
// weighted by how much of the interval each covers. complete says the partner's samples
// reach sm's end (none of the interval is still to come); ok that they cover at least
// half of it.
func alignedValue(history []windowSample, sm sample) (value float64, ok, complete bool) {
	end := sm.at.UnixNano()
	start := end - int64(sm.span*float64(time.Second))
	if len(history) == 0 || !(end > start) {
		return 0, false, false
	}
	complete = history[len(history)-1].at >= end
	var sum, covered float64
	for i := len(history) - 1; i >= 0; i-- {
		h := history[i]
		if h.at <= start {
			break
		}
		hStart := h.at - int64(h.span*float64(time.Second))
		if overlap := float64(min(h.at, end) - max(hStart, start)); overlap > 0 {
			sum += h.value * overlap
			covered += overlap
		}
	}
	if covered < 0.5*float64(end-start) {
		return 0, false, complete
	}
	return sum / covered, true, complete
}

// evaluatePair judges the two fresh ranks a < b of cohort c on signal sig, each sample
// of each rank against its partner's over the same interval; newest is the cohort's
// newest sample's end, as for a cohort.
func (d *detector) evaluatePair(c *cohort, sig int, a, b int64, newest, now time.Time, out *evaluation) {
	cfg := d.cfg
	signal := cfg.Signals[sig]
	p := c.pair(sig, a, b)
	p.learn()
	p.judgedAt = now
	worse := 1.0
	if signal.Worse == WorseLower {
		worse = -1
	}
	ra, rb := c.ranks[a], c.ranks[b]
	sa, sb := &ra.series[sig], &rb.series[sig]
	// The spread of d: its own noise, at least what the signal's floor gives two
	// ranks' difference (√2 of one rank's), so that a pair whose ranks agree closely is
	// not judged on differences below the signal's resolution. Not the relative floor:
	// a cohort's stands for how much its ranks differ by structure, which a median
	// cannot learn and a pair's level does. With it, a quiet pair (two ranks, one a
	// core) had its CPU time a collective 15% apart, thirty times the pair's noise,
	// scored 1.4 spreads, and its evidence hardly rose above the drift (20% found in
	// 2.7 s, 1.96 s without it: the recorded pair, testdata/recordings/pair); the
	// busy recordings' pairs found 20% in 2.1 s where they took 2.8, 10% in 10 of 17
	// where in none, with no false flag in quiet time either way (pair_replay_test.go).
	noise := max(p.noise.measured(), p.wander)
	spread := max(noise, math.Sqrt2*series.MADScale*signal.MADFloor)
	var rule evidenceRule
	if spread > 0 {
		// The whole min_duration, not the persistence's share of it as for a
		// cohort: a pair's difference strays more. At the share the recorded pairs
		// had 2 false flags in 1.5 h of quiet time (none at the whole), and twice
		// the flags while a third rank of the recorded job was slow (2026-11-28).
		rule = d.evidenceRuleOver(sig, noise/spread, cfg.MinDuration).floored(spread, math.Sqrt2*signal.MADFloor)
		rule.drift = max(rule.drift, pairDrift)
	}
	warm := p.learned && spread > 0

	for _, rank := range []int64{a, b} {
		r, s, partner, level := ra, sa, sb, p.level
		if rank == b {
			r, s, partner, level = rb, sb, sa, -p.level
		}
		judged := 0
		for _, sm := range s.unjudged {
			if sm.behind(newest) {
				judged++
				d.drops["stale"]++
				continue
			}
			// Judged once the partner's samples cover half of it: their mean over that
			// half stands for the partner's rate, as steady as a healthy rank's from
			// one sample to the next. Waiting for the rest (the partner's next sample,
			// up to a sample interval on nodes out of phase) held each flag back as
			// long; judged at half, the recorded pairs found 10% in 3.0 s at the
			// median, not 3.2, with half the flags of the slow rank's partner
			// (pair_replay_test.go, docs/straggler.md).
			other, ok, complete := alignedValue(partner.history, sm)
			if !ok && !complete && now.Sub(sm.received) < pairWait {
				break
			}
			judged++
			if !ok {
				d.drops["pair_unaligned"]++
				continue
			}
			diff := sm.value - other
			if rank == a {
				if p.haveD {
					p.noise.add(diff - p.lastD)
				}
				p.lastD, p.haveD = diff, true
			}
			if !(spread > 0) {
				if rank == a {
					p.remember(diff, sm, d.drops)
				}
				continue
			}
			expected := other + level
			threshold := expected + worse*cfg.K*spread
			score := worse * (diff - level) / spread
			// Whether the pair looked healthy before this sample: decided on its own
			// score, a sample that starts a rank's evidence (past the drift) would
			// never be learned, and the level would lean away from that rank. Those
			// samples are a tail of a healthy pair's difference; without them its
			// level sank, rank a's scores rose by a third of a spread, and the healthy
			// pair model (TestAHealthyFlagsNobody) flagged rank a in 5 of 30 runs once
			// the relative floor no longer widened its spread.
			healthyBefore := !sa.flagged && !sb.flagged && sa.evidence == 0 && sb.evidence == 0
			// No evidence until the level is learned: scored against a level not yet
			// known, a pair's structural difference would pile up as evidence.
			var evid evidenceVerdict
			if warm {
				evid = s.accumulate(score, sm.span, sm.at, rule, &p.scores)
			}
			ev := event{cohort: c.key, job: r.job, node: r.node, rank: rank, signal: sig, value: sm.value,
				median: expected, threshold: threshold, score: score, at: now, gauge: sm.gauge, detail: sm.detail}
			if state := s.judge(sm, score > cfg.K, score > cfg.K*cfg.ResolveWithin, windowVerdict{}, evid, warm, cfg.persistence(sig), cfg.persistenceCovers(sig)); state != "" {
				if state == "straggler" {
					s.rule = rulePair
				}
				ev.state, ev.since, ev.rule = state, s.since, s.rule
				out.events = append(out.events, ev)
				p.noteFlag(ev, state)
			}
			if ep, ended := s.followStall(sm, score > cfg.K, worse*(sm.value-expected), sm.seconds && worse > 0, expected, threshold, score, warm, d.stallLeast()); ended {
				d.recordStall(r, ep, ev, out)
			}
			if lag := worse * (diff - level); s.flagged && sm.seconds && lag > 0 && sm.span > 0 {
				span := time.Duration(sm.span * 1e9)
				out.lost = append(out.lost, timeLost{cohort: c.key, job: r.job, node: r.node, rank: rank, signal: sig,
					gpuSeconds: lag * sm.span, peers: 1, start: sm.at.Add(-span), end: sm.at})
			}
			// Learned from rank a's samples (rank b's are the same differences seen
			// from the other side) while the pair looks healthy; until it is learned,
			// from every sample (the median keeps a stall out of it).
			if rank == a && (!warm || healthyBefore && math.Abs(score) <= cfg.K) {
				p.remember(diff, sm, d.drops)
			}
		}
		s.unjudged = slices.Delete(s.unjudged, 0, judged)
		if s.latest.received.IsZero() || now.Sub(s.latest.received) > cfg.SilentAfter {
			continue
		}
		var score float64
		if spread > 0 {
			score = worse * (s.latest.value - expectedNow(partner, level)) / spread
		}
		out.ranks = append(out.ranks, rankGauge{cohort: c.key, job: r.job, node: r.node, rank: rank, signal: sig, score: score, flagged: s.flagged})
	}
}

// expectedNow is a rank's expected value from its partner's latest and the level.
func expectedNow(partner *signalSeries, level float64) float64 {
	return partner.latest.value + level
}

// evaluateFreshPair finds the two fresh ranks of c on sig (fresh as evaluateSignal
// takes them) and judges them as a pair; the others' samples wait as below a quorum.
func (d *detector) evaluateFreshPair(c *cohort, sig int, newest, now time.Time, out *evaluation) {
	var ranks []int64
	for _, rank := range c.rankOrder() {
		s := &c.ranks[rank].series[sig]
		if !s.latest.received.IsZero() && now.Sub(s.latest.received) <= d.cfg.SilentAfter && !s.latest.behind(newest) {
			ranks = append(ranks, rank)
		} else {
			s.keepLatestUnjudged()
		}
	}
	d.evaluatePair(c, sig, ranks[0], ranks[1], newest, now, out)
}

// adoptPairVerdict is a node's judgement of its ranks in a cohort of two on signal sig:
// its gateway's verdict t, pushed back (adoptVerdict).
func (d *detector) adoptPairVerdict(c *cohort, sig int, t pushback.Threshold, now time.Time, out *evaluation) {
	for _, rank := range c.rankOrder() {
		r := c.ranks[rank]
		s := &r.series[sig]
		if s.latest.received.IsZero() || now.Sub(s.latest.received) > d.cfg.SilentAfter {
			continue
		}
		// Nothing here judges samples: the latest waits, as with no line, for a
		// cohort that has a line again.
		s.keepLatestUnjudged()
		d.adoptVerdict(c, rank, sig, t, now, out)
		out.ranks = append(out.ranks, rankGauge{cohort: c.key, job: r.job, node: r.node, rank: rank, signal: sig, flagged: s.flagged, unscored: true})
	}
}

// adoptedFlag is what a node kept of a pair verdict it adopted, for the record that
// resolves it.
type adoptedFlag struct {
	rank         int64
	signal       int
	median, line float64
}
