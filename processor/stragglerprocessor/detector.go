package stragglerprocessor

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/fathom-gpu/fathom/internal/pushback"
	"github.com/fathom-gpu/fathom/internal/series"
)

// cohortKey names a group of ranks compared with each other: one communicator of one
// cluster, or, when the node never saw the communicator, one job.
type cohortKey struct {
	cluster, cohort string
}

// sample is one rank's value of one signal over one interval, per second of it.
type sample struct {
	value    float64
	at       time.Time // end of the interval, from the point's timestamp
	received time.Time // when the processor saw it
	// gauge is true for a signal sent as a gauge, whose value is judged as it is
	// rather than per second; detail is the point's fathom.signal.detail.
	gauge  bool
	detail string
	// span is the interval's length in seconds; seconds says the signal is time
	// spent per second (unit "s"), so that a lag in it is time the peers waited.
	span    float64
	seconds bool
}

// signalSeries turns a rank's points of one signal into per-interval samples.
type signalSeries struct {
	// cumulative follows a cumulative series (series.Next's rule); lastTime, pid and
	// haveLast are a gauge's last point.
	cumulative series.Cumulative
	lastTime   int64 // unix nanos
	pid        int64
	haveLast   bool

	latest sample
	// unjudged are the samples that came since the last judgement, oldest first, at
	// most maxUnjudged: a node that samples its ranks faster than the processor
	// evaluates (rank_signals.interval) sends several between two evaluations, and
	// each one counts towards persistence.
	unjudged []sample
	// waitingSince is when the oldest sample not yet judged came (node mode): a node
	// waits for a newer line at most lineWait from then, however many samples follow.
	waitingSince time.Time

	// verdicts holds whether each of the last samples was beyond the line (newest
	// last), at most persistence.Of of them.
	verdicts []verdict
	flagged  bool
	since    time.Time
	// window is the window that flagged the rank, 0 when its samples or its
	// evidence did; rule says which (semconv.StragglerRule's values).
	window time.Duration
	rule   string

	// evidence is the CUSUM of the rank's scores (evidence.go), since when it last
	// rose from zero; lastScore its latest score, when scored.
	evidence      float64
	evidenceSince time.Time
	lastScore     float64
	scored        bool
	// lastPast: the latest score was past the sample line (evidence.go).
	lastPast bool
	// recent are the latest scores, oldest first, at most 3 × maxBlock: the blocks
	// the noise compares (signalSeries.block). Single precision: a score's noise
	// needs no more, and a gateway holds one of these per rank and signal.
	recent []float32

	// history holds the samples of the longest window (windows.go), oldest first, of
	// the process historyPID; crossings, per window line, since when its median has
	// been past the line.
	history    []windowSample
	historyPID int64
	crossings  []crossing
	// windowsHeld is the last judgement's: some window past its resolve line. It
	// stands for the windows between judgements.
	windowsHeld bool
	// medians are the window medians taken at the sample that ended at mediansAt.
	medians   []windowValue
	mediansAt int64

	// stall is the run of samples past the line while the rank is not flagged
	// (stall.go).
	stall stallEpisode
}

type verdict struct {
	// beyond: past the line; held: past the resolve line (ResolveWithin of the way from
	// the median to the line), which keeps a flagged rank flagged; pastDrift: its score
	// past the evidence's drift (evidence.go).
	beyond, held, pastDrift bool
	at                      time.Time
	span                    float64 // seconds the sample covered
}

type rankState struct {
	node     string
	job      string
	series   []signalSeries // by signal index
	lastSeen time.Time
	silent   bool
	// silentSince is the end of the last interval the rank reported before it fell
	// silent.
	silentSince time.Time
	// lastStall is the span of the last stall recorded for the rank, on any signal
	// (stall.go).
	lastStall stallSpan
	// settleUntil is the end of the time after a pause of the rank's input in which
	// its samples add no evidence (evidence.go, pausedBefore).
	settleUntil time.Time
}

type cohort struct {
	key   cohortKey
	ranks map[int64]*rankState
	// order is ranks' keys in ascending order, nil when membership changed since it
	// was made: the loops that feed the noise ring go in it, so which differences the
	// ring keeps, and so every verdict, does not depend on map order (a replay gives
	// the same answer twice).
	order       []int64
	evaluations []int // per signal: evaluations with a quorum, for the warm-up
	lastSeen    time.Time
	// lines are each signal's last median and line (gateway), pushed back to nodes.
	lines []line
	// noise is, per signal, the differences between its ranks' consecutive scores
	// (evidence.go).
	noise []scoreNoise
	// pushed says, per signal, whether a pushed-back line was held at the last
	// evaluation (node), so that losing it is said once; heldAt is when it last was.
	pushed []bool
	heldAt []time.Time
	// pairs are, per signal, what a cohort of two fresh ranks learned about the
	// difference between them (pair.go); nil until it had two.
	pairs []*pairState
	// adopted are the pair verdicts a node holds flagged, by rank and signal
	// (adoptPairVerdict); none on the gateway.
	adopted []adoptedFlag
	// spreads are, per signal, the samples' spread at each evaluation over the longest
	// window, for the window lines (windows.go).
	spreads [][]windowSample
}

// rankOrder returns the cohort's ranks in ascending order.
func (c *cohort) rankOrder() []int64 {
	if c.order == nil {
		c.order = slices.Sorted(maps.Keys(c.ranks))
	}
	return c.order
}

type line struct {
	median, threshold float64
	at                time.Time
	// drawn is when the newest sample the line was drawn from ended: a node waits
	// for a line drawn from samples as new as the one it judges.
	drawn time.Time
	// flagged are the ranks flagged on the signal after the evaluation that drew the
	// line, in rank order: what the gateway's verdicts to the nodes are taken from,
	// without a pass over every rank of the cohort for each answer.
	flagged []int64
	ok      bool
	// noise is the cohort's score noise (evidence.go), pushed back with the line.
	noise float64
	// windows are the lines over each window (windows.go), pushed back with it.
	windows []windowLine
}

// point is what the processor extracted from one OTLP data point.
type point struct {
	cohort     cohortKey
	job, node  string
	rank, pid  int64
	signal     int
	cumulative bool
	gauge      bool
	seconds    bool // a sum in seconds (unit "s")
	value      float64
	start, ts  int64 // unix nanos
	detail     string
}

// event is a change of a rank's state, written as a fathom.straggler record.
type event struct {
	cohort    cohortKey
	job, node string
	rank      int64
	signal    int
	state     string // straggler, silent, resolved, stall, no_thresholds
	value     float64
	median    float64
	threshold float64
	score     float64
	since     time.Time
	at        time.Time
	rule      string // what flagged a straggler: samples, window or evidence
	// gauge and detail come from the rank's latest sample (see sample); seconds, for
	// a stall, from its worst sample.
	gauge   bool
	detail  string
	seconds bool
	// window is the window whose median put the rank past its line (value, median,
	// threshold and score are then that window's), 0 when its samples did.
	window time.Duration
}

// rankGauge and cohortGauge are one evaluation's per-rank and per-cohort outputs.
type rankGauge struct {
	cohort    cohortKey
	job, node string
	rank      int64
	signal    int
	score     float64
	flagged   bool
	// unscored: no score to write, only the flag (a node that adopts its gateway's
	// verdict on a pair, or has judged none of the rank's samples yet).
	unscored bool
}

// timeLost is the GPU time a flagged rank's peers spent waiting for it over one of its
// intervals: its lag behind the median, in seconds per second, times the interval,
// times the peers that were judged with it.
type timeLost struct {
	cohort     cohortKey
	job, node  string
	rank       int64
	signal     int
	gpuSeconds float64
	peers      int
	start, end time.Time
}

type cohortGauge struct {
	cohort            cohortKey
	signal            int
	median, threshold float64
	ranks             int
}

type evaluation struct {
	events []event
	ranks  []rankGauge
	groups []cohortGauge
	lost   []timeLost
}

// detector holds every cohort's ranks and judges them. It is not safe for concurrent
// use; the processor serialises calls.
type detector struct {
	cfg     *Config
	cohorts map[cohortKey]*cohort
	// horizon is when the detector began (unix nanos): a cumulative series that began
	// after it is counted from its start, one that began before only from its second
	// point (series.Next).
	horizon int64
	// drops counts what bounded state turned away, by reason.
	drops map[string]int64
	// longest is the longest window a series keeps samples for (0: none); scratch
	// holds a window's values while its median is taken.
	longest time.Duration
	scratch []float64
}

func newDetector(cfg *Config) *detector {
	d := &detector{cfg: cfg, cohorts: map[cohortKey]*cohort{}, drops: map[string]int64{}, horizon: time.Now().UnixNano()}
	if w := cfg.windows(); len(w) > 0 {
		d.longest = w[len(w)-1]
	}
	return d
}

// observe takes one point. A cumulative point becomes a sample of what it added to its
// series (series.Cumulative: once a previous point of the same process and start time
// is there to difference against, or from its start when the series began after the
// detector); a delta point is a sample by itself.
func (d *detector) observe(p point, now time.Time) {
	c := d.cohorts[p.cohort]
	if c == nil {
		if len(d.cohorts) >= d.cfg.Limits.MaxCohorts {
			d.evictOldestCohort()
		}
		c = &cohort{key: p.cohort, ranks: map[int64]*rankState{}, evaluations: make([]int, len(d.cfg.Signals)),
			lines: make([]line, len(d.cfg.Signals)), noise: make([]scoreNoise, len(d.cfg.Signals)), spreads: make([][]windowSample, len(d.cfg.Signals)),
			pushed: make([]bool, len(d.cfg.Signals)), heldAt: make([]time.Time, len(d.cfg.Signals))}
		d.cohorts[p.cohort] = c
	}
	c.lastSeen = now
	r := c.ranks[p.rank]
	if r == nil {
		if len(c.ranks) >= d.cfg.Limits.MaxRanksPerCohort {
			d.drops["rank_cap"]++
			return
		}
		r = &rankState{series: make([]signalSeries, len(d.cfg.Signals))}
		c.ranks[p.rank] = r
		c.order = nil
	}
	r.node, r.job, r.lastSeen = p.node, p.job, now
	s := &r.series[p.signal]
	var value, span float64
	var ok bool
	if p.gauge {
		// A gauge is already a per-interval reading (a GPU's clock): judged as it is,
		// once per new point.
		if !s.haveLast || s.pid != p.pid || p.ts > s.lastTime {
			value, ok = p.value, true
			if s.haveLast && s.pid == p.pid {
				span = float64(p.ts-s.lastTime) / 1e9 // how often it comes, for staleness
			}
		}
		s.lastTime, s.pid, s.haveLast = p.ts, p.pid, true
	} else if p.cumulative {
		// A restarted rank is a new process whose series start anew: its start time
		// or its fallen total tells series.Next so.
		if inc, added := s.cumulative.Add(series.Mark{Start: p.start, Time: p.ts, Total: p.value}, d.horizon); added && inc.Seconds() > 0 {
			span = inc.Seconds()
			value, ok = inc.Value/span, true
		}
	} else if inc := series.Delta(p.start, p.ts, p.value); inc.Seconds() > 0 {
		span = inc.Seconds()
		value, ok = inc.Value/span, true
	}
	if !ok || math.IsNaN(value) || math.IsInf(value, 0) {
		return
	}
	if d.pausedBefore(s, p, span, now) {
		r.settleUntil = time.Unix(0, p.ts).Add(d.cfg.MinDuration)
	}
	s.latest = sample{value: value, at: time.Unix(0, p.ts), received: now, gauge: p.gauge, detail: p.detail, span: span, seconds: p.seconds}
	s.remember(s.latest, p.pid, d.longest, d.drops)
	if len(s.unjudged) == maxUnjudged {
		s.unjudged = s.unjudged[1:]
		d.drops["unjudged"]++
	}
	s.unjudged = append(s.unjudged, s.latest)
}

// keptReporting is when the quorum-th latest sample of signal sig in c came: a quorum
// of ranks reported at that time or later.
func keptReporting(c *cohort, sig, quorum int) time.Time {
	var times []time.Time
	for _, r := range c.ranks {
		if at := r.series[sig].latest.received; !at.IsZero() {
			times = append(times, at)
		}
	}
	if len(times) < quorum {
		return time.Time{}
	}
	slices.SortFunc(times, func(a, b time.Time) int { return b.Compare(a) })
	return times[quorum-1]
}

// sampledSince says whether a rank of c sent a sample of signal sig after t.
func sampledSince(c *cohort, sig int, t time.Time) bool {
	for _, r := range c.ranks {
		if r.series[sig].latest.received.After(t) {
			return true
		}
	}
	return false
}

// behind says whether a sample ended too long before the newest of its cohort to be
// judged against the line drawn from the others' latest, or to be part of it. The
// ranks of a job move together (a gateway starting up takes CPU from all of them), so
// samples are compared only with samples of about the same time. A node's queue
// replayed after the gateway was away brings seconds of old samples at once: judged
// against the others' line of now, a healthy node's ranks were twice flagged for a
// second after a restart. Twice the sample's own interval and half a second leaves
// room for nodes exporting out of phase and for clocks apart.
func (sm sample) behind(newest time.Time) bool {
	return newest.Sub(sm.at) > 2*time.Duration(sm.span*float64(time.Second))+aligned
}

const aligned = 500 * time.Millisecond

// keepLatestUnjudged lets go of every unjudged sample but the latest, while there is
// no line to judge them by (no quorum, or no line pushed back yet): the latest is
// judged by the first line, as when a series held only it, and a long wait neither
// fills the series nor counts drops.
func (s *signalSeries) keepLatestUnjudged() {
	if n := len(s.unjudged); n > 1 {
		s.unjudged = append(s.unjudged[:0], s.unjudged[n-1])
	}
}

// maxUnjudged bounds the samples a series holds between two judgements: more than the
// 2 s a node waits for a newer line (lineWait) of 100 ms samples, as often as a
// receiver samples.
const maxUnjudged = 32

// evictOldestCohort makes room for a new cohort by dropping the one heard from least
// recently; its ranks are forgotten (counted).
func (d *detector) evictOldestCohort() {
	var oldest *cohort
	for _, c := range d.cohorts {
		if oldest == nil || c.lastSeen.Before(oldest.lastSeen) {
			oldest = c
		}
	}
	if oldest != nil {
		delete(d.cohorts, oldest.key)
		d.drops["cohort_cap"]++
	}
}

// evaluate judges every cohort with a quorum of fresh ranks, per signal, and returns
// the state changes and this evaluation's gauges.
func (d *detector) evaluate(now time.Time) evaluation {
	var out evaluation
	for _, c := range d.live(now) {
		for sig := range d.cfg.Signals {
			d.evaluateSignal(c, sig, now, &out)
		}
	}
	return out
}

// live forgets the ranks and cohorts heard nothing from for forget_after and returns
// the cohorts left.
func (d *detector) live(now time.Time) []*cohort {
	var cohorts []*cohort
	for key, c := range d.cohorts {
		if now.Sub(c.lastSeen) > d.cfg.ForgetAfter {
			delete(d.cohorts, key)
			d.drops["forgotten"] += int64(len(c.ranks))
			continue
		}
		for rank, r := range c.ranks {
			if now.Sub(r.lastSeen) > d.cfg.ForgetAfter {
				delete(c.ranks, rank)
				c.order = nil
				d.drops["forgotten"]++
			}
		}
		cohorts = append(cohorts, c)
	}
	return cohorts
}

// pushed is what the gateway answers a node's export with for cohort key and signal
// sig: the cohort's line, or, where its last evaluation judged the cohort as a pair,
// its verdict on the pair.
func (d *detector) pushed(key cohortKey, sig int) (pushback.Threshold, bool) {
	c := d.cohorts[key]
	if c == nil {
		return pushback.Threshold{}, false
	}
	signal := d.cfg.Signals[sig]
	l := c.lines[sig]
	if sig < len(c.pairs) {
		if p := c.pairs[sig]; p != nil && !p.judgedAt.IsZero() && (!l.ok || p.judgedAt.After(l.at)) {
			return pushback.Threshold{Cluster: key.cluster, Cohort: key.cohort, Signal: signal.Metric, Worse: signal.Worse,
				At: p.judgedAt.UnixMilli(), Pair: true, Flagged: p.verdict(c, sig)}, true
		}
	}
	if !l.ok {
		return pushback.Threshold{}, false
	}
	return pushback.Threshold{Cluster: key.cluster, Cohort: key.cohort, Signal: signal.Metric, Median: l.median, Line: l.threshold,
		Worse: signal.Worse, At: l.at.UnixMilli(), Drawn: l.drawn.UnixMilli(), Windows: toPushback(l.windows), Noise: l.noise}, true
}

// flagsOn is the gateway's verdict on signal sig of cohort key for the ranks of nodes:
// those it holds flagged, in rank order.
func (d *detector) flagsOn(key cohortKey, sig int, nodes []string) []pushback.Flag {
	c := d.cohorts[key]
	if c == nil {
		return nil
	}
	var out []pushback.Flag
	for _, rank := range c.lines[sig].flagged {
		// A rank forgotten since the evaluation is no longer held.
		r := c.ranks[rank]
		if r == nil {
			continue
		}
		if s := &r.series[sig]; s.flagged && slices.Contains(nodes, r.node) {
			out = append(out, pushback.Flag{Rank: rank, Since: s.since.UnixMilli(), Rule: s.rule, Window: s.window.Seconds()})
		}
	}
	return out
}

func (d *detector) evaluateSignal(c *cohort, sig int, now time.Time, out *evaluation) {
	cfg := d.cfg
	signal := cfg.Signals[sig]
	// The newest sample of the cohort says what time the line is drawn for.
	var newest time.Time
	for _, r := range c.ranks {
		if s := &r.series[sig]; !s.latest.received.IsZero() && now.Sub(s.latest.received) <= cfg.SilentAfter && s.latest.at.After(newest) {
			newest = s.latest.at
		}
	}
	var values []float64
	var fresh []*signalSeries
	for _, r := range c.ranks {
		s := &r.series[sig]
		if !s.latest.received.IsZero() && now.Sub(s.latest.received) <= cfg.SilentAfter && !s.latest.behind(newest) {
			values = append(values, s.latest.value)
			fresh = append(fresh, s)
		}
	}
	if len(values) < cfg.Quorum {
		if len(fresh) == 2 && d.pairsJudge(sig) {
			// Two ranks have no median to judge by, but a difference over time.
			d.evaluateFreshPair(c, sig, newest, now, out)
			return
		}
		// Nothing is judged without a quorum; only each rank's latest sample waits
		// for the first line drawn once there is one.
		for _, r := range c.ranks {
			r.series[sig].keepLatestUnjudged()
		}
		return
	}
	median, spread := d.spreadOf(values, sig)
	peers := len(values) - 1
	worse := 1.0 // direction in which a value is worse
	if signal.Worse == WorseLower {
		worse = -1
	}
	threshold := median + worse*cfg.K*spread
	windows := d.drawWindowLines(fresh, sig, c.rememberSpread(sig, spread, now, d.longest, d.drops), worse)
	var noise float64
	if cfg.evidenced(sig) {
		// Only a signal with evidence has a noise to send.
		noise = c.noise[sig].measured()
	}
	rule := d.evidenceRule(sig, noise).floored(spread, signal.MADFloor)
	c.evaluations[sig]++
	c.lines[sig] = line{median: median, threshold: threshold, at: now, drawn: newest, ok: true, windows: windows, noise: noise, flagged: c.lines[sig].flagged}
	warm := c.evaluations[sig] > cfg.Warmup
	out.groups = append(out.groups, cohortGauge{cohort: c.key, signal: sig, median: median, threshold: threshold, ranks: len(values)})

	// When a quorum last reported, taken once per evaluation, and only if some rank
	// went quiet: a job that ended leaves every rank quiet at once.
	var kept time.Time
	keptKnown := false
	for _, rank := range c.rankOrder() {
		r := c.ranks[rank]
		s := &r.series[sig]
		if s.latest.received.IsZero() {
			continue
		}
		ev := event{cohort: c.key, job: r.job, node: r.node, rank: rank, signal: sig, value: s.latest.value,
			median: median, threshold: threshold, at: now, gauge: s.latest.gauge, detail: s.latest.detail}
		if now.Sub(s.latest.received) > cfg.SilentAfter {
			if gatewayOnly[signal.Metric] {
				// The gateway's own signals come from records, which can pause for
				// one rank (a node's record budget) while its metrics flow: silence
				// is judged on what the nodes send themselves.
				continue
			}
			// Silent while its cohort keeps reporting: the unreachable node is often
			// the one in trouble. Kept reporting means a quorum of ranks sent samples
			// for silent_after past the rank's last: a cohort its ranks all left (a
			// job's, once its nodes saw the communicator) stops over a second or two,
			// and the rank that left first is not silent.
			if !r.silent && warm && !keptKnown {
				kept, keptKnown = keptReporting(c, sig, cfg.Quorum), true
			}
			if !r.silent && warm && kept.After(s.latest.received.Add(cfg.SilentAfter)) {
				r.silent, r.silentSince = true, s.latest.at
				ev.state, ev.since = "silent", s.latest.at
				out.events = append(out.events, ev)
			}
			continue
		}
		score := worse * (s.latest.value - median) / spread
		out.ranks = append(out.ranks, rankGauge{cohort: c.key, job: r.job, node: r.node, rank: rank, signal: sig, score: score, flagged: s.flagged})
		ev.score = score
		if r.silent {
			r.silent = false
			ev.state, ev.since = "resolved", r.silentSince
			out.events = append(out.events, ev)
		}
		// The windows are judged once, at the latest sample; every sample since the
		// last evaluation is judged against the line, in order.
		wv := windowVerdict{held: s.windowsHeld}
		if len(s.unjudged) > 0 && !s.latest.behind(newest) {
			wv = s.judgeWindows(windows, worse, cfg.K, cfg.ResolveWithin, &d.scratch)
		}
		for _, sm := range s.unjudged {
			if sm.behind(newest) {
				d.drops["stale"]++
				continue
			}
			median, spread, threshold := median, spread, threshold
			if sm.at.Before(s.latest.at) {
				// A sample that waited (its node's export held, or this evaluation
				// late) is judged against the line of its own interval: the ranks of
				// a job move together, and against the others' latest it scored by
				// how the whole job moved since.
				if m, sp, ok := d.lineAt(fresh, sig, sm.at); ok {
					median, spread, threshold = m, sp, m+worse*cfg.K*sp
				}
			}
			score := worse * (sm.value - median) / spread
			evid := s.accumulate(score, sm.span, sm.at, rule.settling(sm.at, r.settleUntil), &c.noise[sig])
			if state := s.judge(sm, score > cfg.K, score > cfg.K*cfg.ResolveWithin, wv, evid, warm, cfg.persistence(sig), cfg.persistenceCovers(sig)); state != "" {
				ev.state, ev.since, ev.value, ev.score = state, s.since, sm.value, score
				ev.median, ev.threshold, ev.window, ev.rule = median, threshold, 0, s.rule
				if state == "straggler" && s.window > 0 {
					ev.value, ev.median, ev.threshold, ev.score, ev.window = wv.value, wv.median, wv.threshold, wv.score, wv.window
				}
				out.events = append(out.events, ev)
				out.ranks[len(out.ranks)-1].flagged = s.flagged
			}
			if ep, ended := s.followStall(sm, score > cfg.K, worse*(sm.value-median), sm.seconds && worse > 0, median, threshold, score, warm, d.stallLeast()); ended {
				d.recordStall(r, ep, ev, out)
			}
			if lag := worse * (sm.value - median); s.flagged && sm.seconds && lag > 0 && sm.span > 0 {
				span := time.Duration(sm.span * 1e9)
				out.lost = append(out.lost, timeLost{cohort: c.key, job: r.job, node: r.node, rank: rank, signal: sig,
					gpuSeconds: lag * sm.span * float64(peers), peers: peers, start: sm.at.Add(-span), end: sm.at})
			}
		}
		s.unjudged = s.unjudged[:0]
	}
	l := &c.lines[sig]
	l.flagged = l.flagged[:0]
	for _, rank := range c.rankOrder() {
		if c.ranks[rank].series[sig].flagged {
			l.flagged = append(l.flagged, rank)
		}
	}
}

// spreadOf is the line's median of values, one a rank, and their spread: the scaled
// MAD, at least the configured floors.
func (d *detector) spreadOf(values []float64, sig int) (median, spread float64) {
	median = series.Median(values)
	mad := series.MAD(values, median)
	return median, series.MADScale * max(mad, d.cfg.MADFloor.Relative*math.Abs(median), d.cfg.Signals[sig].MADFloor)
}

// lineAt is the median and spread of the samples of fresh that ended nearest to at,
// each within its own interval of it (from the series' window history): the line of
// the interval a waited sample belongs to. False when fewer than a quorum have one, or
// there is no history (no windows configured).
func (d *detector) lineAt(fresh []*signalSeries, sig int, at time.Time) (median, spread float64, ok bool) {
	t := at.UnixNano()
	values := make([]float64, 0, len(fresh))
	for _, s := range fresh {
		best, found := int64(math.MaxInt64), false
		var value float64
		for i := len(s.history) - 1; i >= 0; i-- {
			h := s.history[i]
			off := h.at - t
			if off < 0 {
				off = -off
			}
			if off <= int64(h.span*1e9) && off < best {
				best, value, found = off, h.value, true
			}
			if h.at < t-int64(h.span*1e9) {
				break // older ones end further away
			}
		}
		if found {
			values = append(values, value)
		}
	}
	if len(values) < d.cfg.Quorum {
		return 0, 0, false
	}
	median, spread = d.spreadOf(values, sig)
	return median, spread, true
}

// judge records the verdict on one sample and returns the state change it makes, if
// any: flagged when p.Beyond of the last p.Of samples were beyond the line (of fewer,
// in that share, when fewer cover the time the persistence stands for, covers:
// persisting), a window's median was (wv), or the rank's evidence reached its height
// (evid); resolved when no more than the rest were beyond the resolve line (held), no
// window's median is and the evidence no longer holds. Before the warm-up ends
// verdicts are kept but change nothing.
func (s *signalSeries) judge(sm sample, beyond, held bool, wv windowVerdict, evid evidenceVerdict, warm bool, p PersistenceConfig, covers time.Duration) string {
	s.verdicts = append(s.verdicts, verdict{beyond: beyond, held: held || beyond, pastDrift: evid.pastDrift, at: sm.at, span: sm.span})
	if len(s.verdicts) > p.Of {
		s.verdicts = s.verdicts[1:]
	}
	if !warm {
		return ""
	}
	counted, byTime, need := persisting(s.verdicts, p, covers)
	var n, kept, drifting, all float64
	for _, v := range counted {
		w := 1.0
		if byTime {
			w = v.span
		}
		all += w
		if v.beyond {
			n += w
		}
		if v.held {
			kept += w
		}
		if v.pastDrift {
			drifting += w
		}
	}
	switch {
	case !s.flagged && n >= need:
		s.flagged, s.window, s.rule = true, 0, ruleSamples
		s.since = counted[slices.IndexFunc(counted, func(v verdict) bool { return v.beyond })].at
		return "straggler"
	case !s.flagged && wv.beyond:
		s.flagged, s.window, s.rule, s.since = true, wv.window, ruleWindow, wv.since
		return "straggler"
	case !s.flagged && evid.beyond && drifting >= need:
		s.flagged, s.window, s.rule, s.since = true, 0, ruleEvidence, evid.since
		return "straggler"
	case s.flagged && kept <= all-need && !wv.held && !evid.held:
		// The evidence starts anew: a flag stands for one slowdown. What was left of
		// it (up to half the height) once primed the next flag on a sample or two,
		// with the old slowdown's since (TestAResolvedRanksEvidenceStartsAnew).
		s.flagged, s.evidence, s.evidenceSince = false, 0, time.Time{}
		return "resolved"
	}
	return ""
}

// persisting is what the persistence counts of verdicts (the latest p.Of at most) and
// how much of them must be past: p.Beyond of p.Of samples, or, where fewer of the
// latest cover the time the persistence stands for (covers, Config.persistenceCovers),
// those, of whose time the same share (byTime, in seconds). "5 of 6" of the shipped
// configs is a rank past its line for 1.25 s of the latest 1.5 s of quarter-second
// samples. A rank whose samples come once a step or a few (its CPU time a collective:
// spans of half a second or more) or once a collection (its GPU's clock) would
// otherwise need 5 of 6 samples, 4 to 5 s, however plainly each says it is slow; past
// its line for 1.25 s of the latest that cover 1.5 s, it says it as long. Counted in
// samples (5 of 6 of those), spans of 0.65 s (three steps of 200 ms of host work) took
// three where two cover 1.3 s.
func persisting(verdicts []verdict, p PersistenceConfig, covers time.Duration) (counted []verdict, byTime bool, need float64) {
	if covers > 0 {
		covered := 0.0
		for i := len(verdicts) - 1; i >= 0; i-- {
			if covered += verdicts[i].span; covered >= covers.Seconds() {
				if len(verdicts)-i >= p.Of {
					break
				}
				return verdicts[i:], true, covers.Seconds() * float64(p.Beyond) / float64(p.Of)
			}
		}
	}
	return verdicts, false, float64(p.Beyond)
}

// evaluateAgainst is the node's judgement: its own ranks against the lines the
// gateway pushed back (src), with the same persistence. A cohort whose line is no
// longer held (expired, the gateway unreachable) is said once, as a no_thresholds
// event, and its ranks keep their state until a line comes back.
func (d *detector) evaluateAgainst(src pushback.Source, now time.Time) evaluation {
	var out evaluation
	away := gatewayAway(src, now)
	for _, c := range d.live(now) {
		for sig, signal := range d.cfg.Signals {
			if gatewayOnly[signal.Metric] {
				continue
			}
			t, ok := src.Threshold(pushback.Key{Cluster: c.key.cluster, Cohort: c.key.cohort, Signal: signal.Metric}, now)
			if !ok {
				// No line to judge by: only each rank's latest sample waits for one.
				for _, r := range c.ranks {
					r.series[sig].keepLatestUnjudged()
				}
				// Said once a sample came that no line judges. A cohort whose ranks
				// send nothing more (a job's cohort its ranks left for their
				// communicator's, once their node saw it) lost nothing worth a record
				// when its line ran out.
				if c.pushed[sig] && sampledSince(c, sig, c.heldAt[sig]) {
					c.pushed[sig] = false
					// Said for the cohort, not a rank; the node is this collector's.
					var node, job string
					for _, r := range c.ranks {
						node, job = r.node, r.job
						break
					}
					out.events = append(out.events, event{cohort: c.key, node: node, job: job, rank: -1, signal: sig, state: "no_thresholds", at: now, since: now})
				}
				continue
			}
			c.pushed[sig], c.heldAt[sig] = true, now
			if t.Pair {
				d.adoptPairVerdict(c, sig, t, now, &out)
				continue
			}
			windows := pushedWindows(t)
			worse := 1.0
			if t.Worse == WorseLower {
				worse = -1
			}
			// The line's spread, and the evidence's rule: by the gateway's noise, from
			// every rank of the cohort, where it sent one (a node's few ranks share its
			// sampling's noise, which may be the cohort's loudest), else by this
			// node's own ranks'.
			spread := worse * (t.Line - t.Median) / d.cfg.K
			noise := t.Noise
			if !(noise > 0) && d.cfg.evidenced(sig) {
				noise = c.noise[sig].measured()
			}
			rule := d.evidenceRule(sig, noise).floored(spread, signal.MADFloor)
			for _, rank := range c.rankOrder() {
				r := c.ranks[rank]
				s := &r.series[sig]
				if s.latest.received.IsZero() || now.Sub(s.latest.received) > d.cfg.SilentAfter {
					continue
				}
				g := rankGauge{cohort: c.key, job: r.job, node: r.node, rank: rank, signal: sig, flagged: s.flagged}
				if len(s.unjudged) > 0 && s.waitingSince.IsZero() {
					s.waitingSince = s.unjudged[0].received
				}
				// The samples the line is new enough for are judged, oldest first; the
				// rest wait for the next answer (or until lineWait). The windows are
				// judged with them, once a line is new enough for the oldest: a node
				// has its own samples before the gateway does, so a line is seldom new
				// enough for the latest.
				wv := windowVerdict{held: s.windowsHeld}
				if !t.Verdicts && len(s.unjudged) > 0 && !waitsForLine(t, s.unjudged[0], s.waitingSince, now, away) {
					wv = s.judgeWindows(windows, worse, d.cfg.K, d.cfg.ResolveWithin, &d.scratch)
				}
				judged := 0
				for _, sm := range s.unjudged {
					if waitsForLine(t, sm, s.waitingSince, now, away) {
						break
					}
					judged++
					var evid evidenceVerdict
					if spread > 0 {
						score := worse * (sm.value - t.Median) / spread
						evid = s.accumulate(score, sm.span, sm.at, rule.settling(sm.at, r.settleUntil), &c.noise[sig])
						evid.score = score
					}
					ev := event{cohort: c.key, job: r.job, node: r.node, rank: rank, signal: sig, value: sm.value,
						median: t.Median, threshold: t.Line, at: now, gauge: sm.gauge, detail: sm.detail}
					// With its gateway's verdict the node says that (below), and judges
					// its samples only for the stalls it records.
					if !t.Verdicts {
						held := t.Beyond(sm.value) || (pushback.Threshold{Median: t.Median, Line: t.Median + (t.Line-t.Median)*d.cfg.ResolveWithin, Worse: t.Worse}).Beyond(sm.value)
						if state := s.judge(sm, t.Beyond(sm.value), held, wv, evid, true, d.cfg.persistence(sig), d.cfg.persistenceCovers(sig)); state != "" {
							ev.state, ev.since, ev.rule, ev.score = state, s.since, s.rule, evid.score
							if state == "straggler" && s.window > 0 {
								ev.value, ev.median, ev.threshold, ev.score, ev.window = wv.value, wv.median, wv.threshold, wv.score, wv.window
							}
							out.events = append(out.events, ev)
							g.flagged = s.flagged
						}
					}
					if ep, ended := s.followStall(sm, t.Beyond(sm.value), worse*(sm.value-t.Median), sm.seconds && worse > 0, t.Median, t.Line, evid.score, true, d.stallLeast()); ended {
						d.recordStall(r, ep, ev, &out)
					}
				}
				if judged > 0 {
					s.unjudged = slices.Delete(s.unjudged, 0, judged)
					s.waitingSince = time.Time{}
					if len(s.unjudged) > 0 {
						s.waitingSince = s.unjudged[0].received
					}
				}
				if away {
					// Nothing to wait for while the gateway is away: the latest sample
					// waits for its next line, as with no line at all.
					s.keepLatestUnjudged()
				}
				if t.Verdicts && !away {
					// A gateway that is away (shutting down, restarting) has not
					// changed its mind: the rank keeps its state until it answers.
					d.adoptVerdict(c, rank, sig, t, now, &out)
					g.flagged = s.flagged
				}
				// The score of its latest sample judged against the gateway's line:
				// what the gateway scored it, seen from its node.
				g.score, g.unscored = s.lastScore, !s.scored
				out.ranks = append(out.ranks, g)
			}
		}
	}
	return out
}

// A node judges a fresh sample against the line drawn with it, as the gateway judges
// it, not the line it held when the sample came: that line was drawn before the peers'
// samples of the same interval, and when a rank slows down, the peers' waits move the
// median, so the old line is an interval late; on a busy host the whole cohort's level
// moves from one interval to the next, and a sample judged against another interval's
// line scores that move. The gateway says with each line when the newest sample it was
// drawn from ended (pushback.Threshold.Drawn); that is at or after the sample's own end
// once the gateway has the sample, whatever the nodes' clocks, since the sample is one
// of those it was drawn from. The line comes in the answer to the export after the one
// that carried the sample: the node's batch delay, a round trip and up to an
// evaluation interval later. A gateway that does not say (older) is taken at its
// evaluation time: a line computed lineSkew before the sample came is new enough. Past
// lineWait (an answer lost, a line polled by GET) the sample is judged against what is
// held. The wait runs from the first sample left unjudged: counted from each new
// sample, a node whose lines always come a little late would wait forever.
//
// Replayed on the recordings with the line an evaluation late (replay_test.go), a node
// judging by the line it held when its samples came flagged the 10% slowdown of the
// 8-rank recording in 28.5 s against its gateway's 9.5 s, and a slow rank flagged, then
// resolved and flagged again within one slowdown, where judging by the line drawn with
// its samples is as fast as its gateway plus the answer's delay.
const (
	lineSkew = 300 * time.Millisecond
	lineWait = 2 * time.Second
)

// waitsForLine says whether sample sm should wait for a line newer than t: while none
// is new enough for it, for lineWait, and for as long as the gateway is away.
func waitsForLine(t pushback.Threshold, sm sample, waitingSince, now time.Time, away bool) bool {
	early := time.UnixMilli(t.At).Before(sm.received.Add(-lineSkew))
	if t.Drawn != 0 {
		early = t.Drawn < sm.at.UnixMilli()
	}
	return early && (away || now.Sub(waitingSince) < lineWait)
}

// gatewayAway says whether the gateway has not answered this node for lineWait, when the
// source knows (pushback.Reachability). A gateway that shuts down takes CPU from the
// ranks of its host unevenly, and judged against the line it drew before, a node flagged
// one of them about one run in three (TestARealJobRidesOutAGatewayRestart).
func gatewayAway(src pushback.Source, now time.Time) bool {
	r, ok := src.(pushback.Reachability)
	if !ok {
		return false
	}
	last := r.LastAnswer()
	return !last.IsZero() && now.Sub(last) > lineWait
}

// nodes are the (cluster, node) pairs of the ranks held, sorted.
func (d *detector) nodes() []clockKey {
	seen := map[clockKey]bool{}
	var out []clockKey
	for _, c := range d.cohorts {
		for _, r := range c.ranks {
			k := clockKey{cluster: c.key.cluster, node: r.node}
			if r.node != "" && !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	slices.SortFunc(out, func(a, b clockKey) int { return cmp.Or(cmp.Compare(a.cluster, b.cluster), cmp.Compare(a.node, b.node)) })
	return out
}

// counts reports the state held, for the processor's own telemetry.
func (d *detector) counts() (cohorts, ranks int) {
	for _, c := range d.cohorts {
		ranks += len(c.ranks)
	}
	return len(d.cohorts), ranks
}
