package stragglerprocessor

import (
	"math"
	"time"

	"github.com/fathom-gpu/fathom/internal/pushback"
	"github.com/fathom-gpu/fathom/internal/series"
)

// Accumulating evidence: a small, steady lead found as surely as a large one.
//
// A rank 5% slower than its cohort on a busy host scores a fraction of the line a
// sample (0.7 spreads of its cohort on CPU time, where the line is at 3), and its
// windows' medians cross their lines only after tens of seconds. Yet every sample says
// the same thing. So each rank also keeps a one-sided CUSUM of its scores: each sample
// adds its score less a drift, the total never falls below zero, and the rank is flagged
// when the total reaches a height. A healthy rank's scores average zero and the drift
// drains whatever its noise adds; a slow rank's exceed the drift and pile up, the faster
// the slower it is.
//
// Two choices make it hold on jobs it was not tuned for:
//   - Drift and height scale with the scores' own noise, which differs by signal and
//     host: CPU time's scores varied by 0.23 spreads a sample on the busy-host recording
//     (its cohort's spread is floored at 5% of the median), device wait's by 0.84. The
//     noise is read from the differences between a rank's consecutive scores, pooled
//     over the cohort's ranks: a rank that steps to slower adds one large difference,
//     not a shifted level, so the slow rank does not widen its own line. Until 64
//     differences are in, the noise is taken as one spread. The gateway pushes its
//     noise back with each line, and a node uses it: a node's own ranks share its
//     sampling's jitter, which on the busy-host recording was 0.15 to 0.66 spreads a
//     sample by node against 0.29 over the cohort, and the slow rank's node asked for
//     twice the evidence (10% found in 6.2 s instead of 2.7 s).
//     The evidence sums scores, and where they wander (a rank's stay high for a
//     second or two) a sum varies more than consecutive differences say: then the
//     noise is read from the means of blocks of scores instead (scoreNoise.measured).
//   - No sample adds more than the height times its span over the persistence's share
//     of min_duration (5 of 6 of 1.5 s: 1.25 s), so the total reaches the height only
//     after that much excess: the same time the samples rule asks of a rank past the
//     line (5 of its last 6 samples), so that neither rule is the slower for a
//     slowdown of every size. No sample adds more than half the height either: two
//     samples at least, however long each. A stall shorter than that, however deep,
//     flags nobody by evidence. A pair's evidence takes the whole min_duration
//     (pair.go).
//   - A sample past the sample line (k) adds nothing but the first of a run of them:
//     the rest are a stall, or a slowdown the samples rule (p.Beyond of p.Of past the
//     line) finds by itself. Stalls of a second on one rank half a second apart are
//     healthy in the detector's busy-host model; counted, they added up past the
//     height in 11 of its 20 runs of 500 s.
//     And the total flags a rank only while the persistence's share of its latest
//     samples (5 of 6 in the shipped configs) are past the drift.
//
// A flagged rank's evidence holds it while the total stays above half the height (the
// total is capped at the height, so a rank that recovers is resolved after a second or
// two), and while it is flagged its samples are held against the drift times
// resolve_within (the line's hysteresis, 0.5 in the shipped configs): a rank that stays
// slow does not flap however close to its cohort it is. A rank whose mean excess sits
// just above the drift, found at last, otherwise drains below half the height within
// seconds and is found again: a busy pair's 10% slowdown flagged, resolved and flagged
// again 8.5 s later (pytorch ranks 3,4 of the pair replays).
// Measured on recorded jobs (replay_test.go, docs/straggler.md).
const (
	evidenceDriftFloor  = 0.25 // spreads
	evidenceDriftNoise  = 1.0  // × the scores' noise
	evidenceHeightFloor = 3.0  // spreads
	evidenceHeightNoise = 6.0  // × the scores' noise
	noiseWarmup         = 64   // differences before the noise is measured
	blockWarmup         = 64   // blocks' differences before the noise is measured
	noiseRing           = 512  // differences kept per cohort and signal
)

// scoreNoise keeps the latest differences between consecutive scores of the ranks of a
// cohort, for one signal, and between the means of blocks of them (signalSeries.block).
type scoreNoise struct {
	diffs  differences
	blocks differences
	// blocked: the scores come in blocks (signalSeries.block), and the noise waits
	// for blockWarmup of theirs too.
	blocked bool
}

// differences is a ring of the latest noiseRing differences.
type differences struct {
	values  []float64
	next    int
	scratch []float64
}

func (n *differences) add(d float64) {
	if math.IsNaN(d) || math.IsInf(d, 0) {
		return
	}
	if len(n.values) < noiseRing {
		n.values = append(n.values, d)
		return
	}
	n.values[n.next] = d
	n.next = (n.next + 1) % noiseRing
}

// spread is 1.4826 × the MAD of the differences, once warmup of them are in; 0
// before.
func (n *differences) spread(warmup int) float64 {
	if len(n.values) < warmup {
		return 0
	}
	n.scratch = append(n.scratch[:0], n.values...)
	return series.MADScale * series.MAD(n.scratch, series.Median(n.scratch))
}

func (n *scoreNoise) add(d float64) { n.diffs.add(d) }

// measured is the spread of one score, from its differences (a difference of two
// independent scores has √2 of it), once noiseWarmup of them are in; 0 before (nothing
// to push back to the nodes) where no blocks come. Where the scores wander (one rank's
// stay high for a second, as its host's do), the mean of a block of them varies more
// than independent scores' would, and the evidence sums them: then the blocks'
// differences (signalSeries.block) say more, and the larger of the two is the noise.
// Independent scores read alike both ways, within the estimates' own error: the
// larger of two such estimates reads a little more than either, which cost one trial
// of the busy-host model's 20% slowdown 10.5 s where it took 4.75 (its median is
// 2.75 s either way). Taking the blocks only where they read 1.3 times the
// differences kept that trial, and kept a synthetic 8-rank cohort's false flag whose
// blocks read 1.08 times (docs/straggler.md). It sorts the rings: taken once an
// evaluation.
func (n *scoreNoise) measured() float64 {
	diffs := n.diffs.spread(noiseWarmup) / math.Sqrt2
	if n.blocked && len(n.blocks.values) < blockWarmup {
		// Until the blocks are in, at least one spread: the differences alone, in
		// sooner, read a three-rank cohort's device wait at 0.70 while a healthy
		// rank's scores stayed 1.5 to 3 up for 1.5 s, and it was flagged; the blocks,
		// a second later, read 1.17.
		return max(1, diffs)
	}
	return max(diffs, n.blocks.spread(blockWarmup))
}

// counted is what of a score the evidence can take, for the blocks' noise: within the
// sample line either side, and nothing of a run past it but its first sample (inRun:
// the score continues one). A stall of a second is a run past the line; counted whole,
// the busy-host model's stalls (healthy) read as wander, and its 20% slowdown took p50
// 5 s to be found, not 2.75.
func (r evidenceRule) counted(score float64, inRun bool) float64 {
	if r.line <= 0 {
		return score
	}
	if inRun {
		return 0
	}
	return max(-r.line, min(score, r.line))
}

// maxBlock is the most scores a block holds (twice evidenceRule.least: at 250 ms
// samples and 1.25 s, ten).
const maxBlock = 16

// block notes a series' new score in its recent ones and, once it has three blocks of
// them, the difference between the mean of the latest block and of the one two blocks
// before, a block being twice least's worth of samples of span (one sample at least,
// maxBlock at most; blocks of least's worth read less, and flagged 3 of 5 three-rank
// wandering cohorts at ρ = 0.7 where these flagged 1). Scaled by √(n/2), it has the
// spread of one score where the scores are independent, and more where they wander.
// Not the block just before:
// where scores wander, two adjacent blocks' means move together (correlated 0.18 for
// ten samples at a lag-one correlation of 0.7, against 0.005 two blocks apart), and
// their difference under-reads the sum's noise.
func (s *signalSeries) block(score, span, least float64, noise *scoreNoise) {
	if len(s.recent) == 3*maxBlock {
		copy(s.recent, s.recent[1:])
		s.recent = s.recent[:3*maxBlock-1]
	}
	s.recent = append(s.recent, float32(score))
	noise.blocked = true
	n := 1
	if span > 0 && least > 0 {
		n = min(maxBlock, max(1, int(math.Round(2*least/span))))
	}
	if len(s.recent) < 3*n {
		return
	}
	last := s.recent[len(s.recent)-n:]
	before := s.recent[len(s.recent)-3*n : len(s.recent)-2*n]
	noise.blocks.add((mean(last) - mean(before)) * math.Sqrt(float64(n)/2))
}

func mean(v []float32) float64 {
	sum := 0.0
	for _, x := range v {
		sum += float64(x)
	}
	return sum / float64(len(v))
}

// evidenceRule is the CUSUM's parameters for one cohort and signal at one evaluation.
type evidenceRule struct {
	drift, height float64
	// line is the sample line's score (k): a sample past it adds nothing, but for
	// the first of a run past it.
	line float64
	// perSecond bounds what a second of samples adds: the height over the time of
	// excess it stands for (evidenceRule).
	perSecond float64
	// holdWithin is the share of the drift a flagged rank's samples are held
	// against: the flag's hysteresis (resolve_within), as for the line.
	holdWithin float64
	// least is the time of excess the height stands for, in seconds: half a block
	// whose means the noise also compares (signalSeries.block).
	least float64
}

func newEvidenceRule(sigma, line float64, minDuration time.Duration) evidenceRule {
	h := max(evidenceHeightFloor, evidenceHeightNoise*sigma)
	return evidenceRule{drift: max(evidenceDriftFloor, evidenceDriftNoise*sigma), height: h, line: line, perSecond: h / minDuration.Seconds(), least: minDuration.Seconds()}
}

// evidenceFloorDrift is the least drift, in spreads, where the signal's own MAD floor
// sets its cohort's spread: its ranks barely run on that signal (a job whose host work
// sleeps uses a few per cent of a CPU), and a difference of about a floor is noise by
// the signal's own definition. A healthy rank of such a job ran 7 ms/s more CPU time
// than its cohort's 45 from its start, one floor of 1.4826 × 5 ms, and its evidence
// flagged it with the drift at 0.3 (TestARankOnAFailingLinkIsNamedWithTheFabricCause
// in CI). Where the MAD or the relative floor set the spread the drift is left alone:
// raised there too, it slowed the 10% slowdown of the 8-rank recording from 5.3 to
// 28.5 s.
const evidenceFloorDrift = 1.25

// floored raises the drift to evidenceFloorDrift when the signal's MAD floor (madFloor,
// in its units) is what set a line's spread (spread).
func (r evidenceRule) floored(spread, madFloor float64) evidenceRule {
	if floor := series.MADScale * madFloor; spread > 0 && floor > 0 && floor >= spread*(1-1e-6) {
		r.drift = max(r.drift, evidenceFloorDrift)
	}
	return r
}

// evidenceVerdict is what a rank's evidence says after a sample.
type evidenceVerdict struct {
	// beyond: the total reached the height; held: it is above half of it; pastDrift:
	// this sample's score was past the drift.
	beyond, held, pastDrift bool
	since                   time.Time // when the total last rose from zero
	score                   float64   // the sample's, for a node's record
}

// accumulate adds a sample's score (spanning span seconds, ending at at) to the series'
// evidence, and notes the difference from its previous score in noise.
func (s *signalSeries) accumulate(score, span float64, at time.Time, r evidenceRule, noise *scoreNoise) evidenceVerdict {
	if s.scored {
		noise.add(score - s.lastScore)
	}
	// inRun: the sample continues a run past the sample line (below).
	past := score > r.line
	inRun := past && s.lastPast
	s.block(r.counted(score, inRun), span, r.least, noise)
	s.lastScore, s.scored = score, true
	if r.height <= 0 {
		return evidenceVerdict{}
	}
	drift := r.drift
	if s.flagged && r.holdWithin > 0 {
		drift *= r.holdWithin
	}
	add := min(score-drift, r.perSecond*span, r.height/2)
	if inRun {
		// A run of samples past the sample line: a stall, or a slowdown the samples
		// rule judges; only its first sample counts. A rank stalled for a second,
		// then half a second later again, is a healthy rank of the busy-host model;
		// counted here, its stalls added up. A slowdown whose samples straddle the
		// line (30% of host work on the busy host: about k spreads of CPU time) is
		// past it every other sample, too seldom for the samples rule: counting none
		// of them, the evidence took half its samples too.
		add = 0
	}
	s.lastPast = past
	if s.evidence == 0 && add > 0 {
		s.evidenceSince = at.Add(-time.Duration(span * float64(time.Second)))
	}
	s.evidence = min(max(0, s.evidence+add), r.height)
	return evidenceVerdict{beyond: s.evidence >= r.height, held: s.evidence > r.height/2, pastDrift: score > r.drift, since: s.evidenceSince}
}

// A pause of a rank's input is not evidence about the rank. When its node's collector,
// its host or the path to the evaluator stalls for a second (a collector throttled by
// its cgroup, a VM descheduled, a gateway writing its store), the samples that follow
// are bunched, span the pause, and for a second or two score ranks that were caught
// mid-step apart from their peers: in the matrix's healthy windows, after such pauses
// (three evaluations with no new sample from any rank; one node's samples held 1.5 s),
// healthy ranks scored 0.5 to 3 spreads for about 2 s and their evidence reached its
// height (a GPU-row and a 30%-row false flag, 2026-11-28). So for min_duration of the
// rank's data time after a pause its samples add no evidence: a total only drains.
// The samples rule (a run past the line) and the windows still judge them: a rank
// slow past its line is found as fast, one slightly slow at most min_duration later.

// pauseEvaluations is how many evaluation intervals, besides the series' own cadence,
// a rank's sample may come after its previous one before the gap is a pause.
const pauseEvaluations = 2

// pausedBefore tells whether a rank's input paused before its new sample of a series
// (spanning span, received now): it came more than 1.5 of the series' cadence (its
// previous sample's span) and pauseEvaluations evaluation intervals after the previous
// one, or it spans that much (its sampler stalled). Only a series that comes at a
// steady cadence tells: not a paced one (its spans are the rank's steps), a gauge, or
// one the gateway makes from records.
func (d *detector) pausedBefore(s *signalSeries, p point, span float64, now time.Time) bool {
	sig := d.cfg.Signals[p.signal]
	prev := s.latest
	if p.gauge || sig.Paced || gatewayOnly[sig.Metric] || prev.received.IsZero() || !(prev.span > 0) {
		return false
	}
	allowed := 1.5*prev.span + pauseEvaluations*d.cfg.EvaluationInterval.Seconds()
	return now.Sub(prev.received).Seconds() > allowed || span > allowed
}

// settling is the rule for a sample that ended at at, for a rank settling until until
// after a pause of its input: no sample adds evidence then.
func (r evidenceRule) settling(at, until time.Time) evidenceRule {
	if !at.After(until) {
		r.perSecond = 0
	}
	return r
}

// forgetEvidence starts a series' evidence anew (another process: a restarted rank).
func (s *signalSeries) forgetEvidence() {
	s.evidence, s.evidenceSince, s.scored, s.lastPast, s.recent = 0, time.Time{}, false, false, s.recent[:0]
}

// What flagged a straggler, as its record says (semconv.StragglerRule) and its
// gateway's verdict names it to its node.
const (
	ruleSamples  = pushback.RuleSamples
	ruleWindow   = pushback.RuleWindow
	ruleEvidence = pushback.RuleEvidence
)

// evidenceRule is the rule for signal sig with scores whose noise is sigma (0: not
// measured yet, taken as one spread): none for a signal judged without evidence
// (Config.evidenced: windows or evidence off, or min_duration 0). Its height stands for
// the persistence's share of min_duration: what the samples rule asks of a rank past
// the line (5 of 6 samples of 250 ms: 1.25 s). Replayed on the recordings at the
// whole min_duration instead, the gateway's 20% took 0.25 s longer (base 2.06 against
// 1.81 s, 8 ranks 1.85 against 1.60) and 10% up to 4 s longer, with no false flag
// either way (TestRecordedJobsAreJudgedRight).
func (d *detector) evidenceRule(sig int, sigma float64) evidenceRule {
	p := d.cfg.persistence(sig)
	return d.evidenceRuleOver(sig, sigma, d.cfg.MinDuration*time.Duration(p.Beyond)/time.Duration(p.Of))
}

// evidenceRuleOver is the rule whose height stands for least of excess (a pair's:
// the whole min_duration).
func (d *detector) evidenceRuleOver(sig int, sigma float64, least time.Duration) evidenceRule {
	if !d.cfg.evidenced(sig) {
		return evidenceRule{}
	}
	if !(sigma > 0) {
		sigma = 1
	}
	r := newEvidenceRule(sigma, d.cfg.K, least)
	r.holdWithin = d.cfg.ResolveWithin
	return r
}
