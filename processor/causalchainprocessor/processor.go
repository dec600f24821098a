package causalchainprocessor

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/series"
	"github.com/fathom-gpu/fathom/processor/causalchainprocessor/internal/metadata"
)

const scopeName = "github.com/fathom-gpu/fathom/processor/causalchainprocessor"

// States of a chain, the values of fathom.chain.state.
const (
	StateOpen     = "open"
	StateUpdate   = "update"
	StateResolved = "resolved"
)

// Severities, the values of fathom.chain.severity.
const (
	SeverityHigh   = "HIGH"
	SeverityMedium = "MEDIUM"
	SeverityLow    = "LOW"
)

// minWindowShare: a process is judged once its window covers 1/minWindowShare of the
// configured span.
const minWindowShare = 5

// timelineIntervals is how many of the window's last intervals a record's timeline shows.
const timelineIntervals = 5

type processID struct {
	host string
	pid  int64
}

// process is everything kept about one traced process.
type process struct {
	id         processID
	resource   pcommon.Resource
	label      string
	firstStart time.Time
	lastEnd    time.Time
	heard      time.Time // wall clock of its last point, for forgetting it
	intervals  []interval
	series     map[seriesKey]*windowSeries
	chains     map[string]*chain // open chains by root cause
	// healthyRates are the process's launch rates (per second) in its last intervals
	// no rule fired in; their median is its baseline, so a symptom can say how far the
	// rate fell (an interval at the cause's onset, before a rule fires, moves no median).
	healthyRates []float64
}

// healthyIntervals bounds the launch rates kept for the baseline.
const healthyIntervals = 10

// launchBaseline is the median of the process's healthy launch rates, 0 if none.
func (p *process) launchBaseline() float64 {
	if len(p.healthyRates) == 0 {
		return 0
	}
	r := append([]float64(nil), p.healthyRates...)
	sort.Float64s(r)
	return r[len(r)/2]
}

// chain is one open finding: it keeps its identity while the cause persists.
type chain struct {
	id          string
	since       time.Time
	lastFired   time.Time
	lastWritten time.Time
	severity    string
	finding     finding
	timeline    string
}

// chains is one processor instance, shared by the metrics and logs pipelines that name
// the same component ID.
type chains struct {
	cfg    *Config
	logger *zap.Logger
	now    func() time.Time
	// horizon is when the processor began watching (unix nanos): a cumulative series
	// that began after it counts from its start, one that began before from its second
	// point (series.Next).
	horizon int64

	mu        sync.Mutex
	processes map[processID]*process
	// stacks are the Python processes' recent stacked call records (processLogs).
	stacks   map[processID]*stackTally
	logsNext consumer.Logs
	starts   int

	// telemetry is the processor's own metrics, as metadata.yaml declares them.
	telemetry *metadata.TelemetryBuilder
}

func newChains(cfg *Config, set processor.Settings) (*chains, error) {
	c := &chains{cfg: cfg, logger: set.Logger, now: time.Now, horizon: time.Now().UnixNano(), processes: map[processID]*process{}, stacks: map[processID]*stackTally{}}
	var err error
	if c.telemetry, err = metadata.NewTelemetryBuilder(set.TelemetrySettings); err != nil {
		return nil, err
	}
	err = c.telemetry.RegisterFathomCausalchainOpenCallback(func(_ context.Context, o metric.Int64Observer) error {
		c.mu.Lock()
		n := 0
		for _, p := range c.processes {
			n += len(p.chains)
		}
		c.mu.Unlock()
		o.Observe(int64(n))
		return nil
	})
	return c, err
}

func (c *chains) start(context.Context, component.Host) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.starts == 0 && c.logsNext == nil {
		c.logger.Warn("the causalchain processor is in no logs pipeline: chains are counted in the fathom.causal_chains gauge, but no fathom.causal_chain records are written; add it to a logs pipeline under the same name")
	}
	c.starts++
	return nil
}

func (c *chains) shutdown(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.starts > 0 {
		if c.starts--; c.starts == 0 {
			c.telemetry.Shutdown()
		}
	}
	return nil
}

// processLogs passes records on, keeping what the CUDA call records of Python processes
// say of their stacks: a chain names the stack most of its process's recorded call time
// came from.
func (c *chains) processLogs(_ context.Context, ld plog.Logs) (plog.Logs, error) {
	c.mu.Lock()
	c.ingestStacks(ld)
	c.mu.Unlock()
	return ld, nil
}

// written is one record to write.
type written struct {
	p     *process
	ch    *chain
	state string
	at    time.Time
}

func (c *chains) processMetrics(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	c.mu.Lock()
	var out []written
	var hostResource pcommon.Resource
	hasHost, ingested := false, false
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		rm := rms.At(i)
		pid, ok := rm.Resource().Attributes().Get(semconv.ProcessPID)
		if !ok {
			if !hasHost {
				hostResource, hasHost = rm.Resource(), true
			}
			continue
		}
		if onlyRankSamples(rm) {
			continue
		}
		host, _ := rm.Resource().Attributes().Get(semconv.HostName)
		p := c.ingest(ctx, processID{host.AsString(), pid.Int()}, rm)
		if p != nil {
			ingested = true
			out = append(out, c.evaluate(p)...)
		}
	}
	out = append(out, c.forget(ctx)...)
	// The gauge rides on an export of the node's processes (the receiver's, with its
	// host resource), not on whatever else passes through the pipeline.
	if hasHost && ingested {
		c.appendGauge(md, hostResource)
	}
	ld := c.recordsOf(out)
	next := c.logsNext
	c.mu.Unlock()
	for _, w := range out {
		c.telemetry.FathomCausalchainRecords.Add(ctx, 1, metric.WithAttributes(attribute.String("state", w.state), attribute.String("root_cause", w.ch.finding.cause)))
	}
	if next != nil && ld.LogRecordCount() > 0 {
		if err := next.ConsumeLogs(ctx, ld); err != nil {
			c.logger.Warn("could not pass on causal chain records", zap.Error(err))
		}
	}
	return md, nil
}

// onlyRankSamples says whether rm is a rank-signal sample the receiver sent between
// its collections (semconv.RankSignalsScope). Each export of a process is one interval
// here, and a sample carries a few signals of a fraction of one: the next collection's
// cumulative points cover its time.
func onlyRankSamples(rm pmetric.ResourceMetrics) bool {
	sms := rm.ScopeMetrics()
	for i := 0; i < sms.Len(); i++ {
		if sms.At(i).Scope().Name() != semconv.RankSignalsScope {
			return false
		}
	}
	return sms.Len() > 0
}

// ingest adds one export of one process; nil when nothing new came.
func (c *chains) ingest(ctx context.Context, id processID, rm pmetric.ResourceMetrics) *process {
	p := c.processes[id]
	if p == nil {
		if len(c.processes) >= c.cfg.Limits.MaxProcesses {
			c.telemetry.FathomCausalchainDropped.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", "process_cap")))
			return nil
		}
		p = &process{id: id, resource: pcommon.NewResource(), series: map[seriesKey]*windowSeries{}, chains: map[string]*chain{}}
		c.processes[id] = p
	}
	rm.Resource().CopyTo(p.resource)
	p.label = label(rm.Resource())
	// Every point of one export carries the same time: the end of this interval.
	var end, start pcommon.Timestamp
	forEachPoint(rm, func(_ pmetric.Metric, ts, st pcommon.Timestamp) {
		if ts > end {
			end, start = ts, st
		}
	})
	if end == 0 {
		return nil
	}
	endTime := end.AsTime()
	if !p.lastEnd.IsZero() && !endTime.After(p.lastEnd) {
		c.telemetry.FathomCausalchainDropped.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", "out_of_order")))
		return nil
	}
	iv := interval{start: p.lastEnd, end: endTime}
	if p.lastEnd.IsZero() {
		iv.start = start.AsTime()
		if start == 0 || !iv.start.Before(endTime) {
			iv.start = endTime.Add(-time.Second)
		}
		p.firstStart = iv.start
	}
	p.lastEnd, p.heard = endTime, c.now()
	p.intervals = append(p.intervals, iv)
	from := endTime.Add(-c.cfg.Window)
	for len(p.intervals) > 0 && (!p.intervals[0].end.After(from) || len(p.intervals) > c.cfg.Limits.MaxIntervalsInWindow) {
		p.intervals = p.intervals[1:]
	}

	sms := rm.ScopeMetrics()
	for i := 0; i < sms.Len(); i++ {
		ms := sms.At(i).Metrics()
		for j := 0; j < ms.Len(); j++ {
			m := ms.At(j)
			if !wanted[m.Name()] {
				continue
			}
			c.ingestMetric(ctx, p, m, endTime)
		}
	}
	// A series not heard from for two windows (an exited thread, a preemptor gone)
	// is let go, so a long-lived process's churn does not fill its cap.
	stale := endTime.Add(-2 * c.cfg.Window)
	for k, s := range p.series {
		s.keepDeltas(from, c.cfg.Limits.MaxIntervalsInWindow)
		if s.seen.Before(stale) {
			delete(p.series, k)
		}
	}
	return p
}

func (c *chains) seriesOf(ctx context.Context, p *process, k seriesKey) *windowSeries {
	if k.metric == "" {
		return nil
	}
	s := p.series[k]
	if s == nil {
		if len(p.series) >= c.cfg.Limits.MaxSeriesPerProcess {
			c.telemetry.FathomCausalchainDropped.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", "series_cap")))
			return nil
		}
		s = &windowSeries{}
		p.series[k] = s
	}
	s.seen = p.lastEnd
	return s
}

func (c *chains) ingestMetric(ctx context.Context, p *process, m pmetric.Metric, end time.Time) {
	switch m.Type() {
	case pmetric.MetricTypeSum:
		cumulative := m.Sum().AggregationTemporality() == pmetric.AggregationTemporalityCumulative
		dps := m.Sum().DataPoints()
		for i := 0; i < dps.Len(); i++ {
			dp := dps.At(i)
			if s := c.seriesOf(ctx, p, key(m.Name(), dp.Attributes())); s != nil {
				if d, ok := s.addSum(series.Value(dp), dp.StartTimestamp(), dp.Timestamp(), cumulative, c.horizon); ok && d > 0 {
					s.deltas = append(s.deltas, delta{end: end, value: d})
				}
			}
		}
	case pmetric.MetricTypeGauge:
		dps := m.Gauge().DataPoints()
		for i := 0; i < dps.Len(); i++ {
			dp := dps.At(i)
			if s := c.seriesOf(ctx, p, key(m.Name(), dp.Attributes())); s != nil {
				s.deltas = append(s.deltas, delta{end: end, value: series.Value(dp)})
			}
		}
	case pmetric.MetricTypeExponentialHistogram:
		cumulative := m.ExponentialHistogram().AggregationTemporality() == pmetric.AggregationTemporalityCumulative
		dps := m.ExponentialHistogram().DataPoints()
		for i := 0; i < dps.Len(); i++ {
			dp := dps.At(i)
			s := c.seriesOf(ctx, p, key(m.Name(), dp.Attributes()))
			if s == nil {
				continue
			}
			h, ok := s.addHistogram(dp, cumulative, c.horizon)
			if !ok && dp.Scale() != 3 {
				c.telemetry.FathomCausalchainDropped.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", "scale")))
			}
			if ok && h.Count > 0 {
				s.deltas = append(s.deltas, delta{end: end, value: h.Sum, count: h.Count, hist: h})
			}
		}
	}
}

func forEachPoint(rm pmetric.ResourceMetrics, f func(pmetric.Metric, pcommon.Timestamp, pcommon.Timestamp)) {
	sms := rm.ScopeMetrics()
	for i := 0; i < sms.Len(); i++ {
		ms := sms.At(i).Metrics()
		for j := 0; j < ms.Len(); j++ {
			m := ms.At(j)
			if !wanted[m.Name()] {
				continue
			}
			switch m.Type() {
			case pmetric.MetricTypeSum:
				for k := 0; k < m.Sum().DataPoints().Len(); k++ {
					dp := m.Sum().DataPoints().At(k)
					f(m, dp.Timestamp(), dp.StartTimestamp())
				}
			case pmetric.MetricTypeGauge:
				for k := 0; k < m.Gauge().DataPoints().Len(); k++ {
					dp := m.Gauge().DataPoints().At(k)
					f(m, dp.Timestamp(), dp.StartTimestamp())
				}
			case pmetric.MetricTypeExponentialHistogram:
				for k := 0; k < m.ExponentialHistogram().DataPoints().Len(); k++ {
					dp := m.ExponentialHistogram().DataPoints().At(k)
					f(m, dp.Timestamp(), dp.StartTimestamp())
				}
			}
		}
	}
}

// label names a process the way a person reads it: python3[4121] rank 3.
func label(r pcommon.Resource) string {
	a := r.Attributes()
	name := "process"
	if v, ok := a.Get(semconv.ProcessExecutableName); ok && v.AsString() != "" {
		name = v.AsString()
	}
	s := name
	if v, ok := a.Get(semconv.ProcessPID); ok {
		s = fmt.Sprintf("%s[%d]", name, v.Int())
	}
	if v, ok := a.Get(semconv.Rank); ok {
		s += fmt.Sprintf(" rank %d", v.Int())
	}
	return s
}

// evaluate judges the process's window and opens, updates or resolves its chains.
func (c *chains) evaluate(p *process) []written {
	now := p.lastEnd
	v := p.viewOf(now.Add(-c.cfg.Window), now)
	v.launchBaseline = p.launchBaseline()
	found := map[string]finding{}
	// Shares and rates over a sliver of time are noise: a process's first export can
	// cover a few milliseconds of its start-up. Nothing is judged until the window
	// holds a fifth of its span.
	if v.wall >= c.cfg.Window.Seconds()/minWindowShare {
		for _, r := range rules {
			if f := r.judge(c.cfg, v); f.fired {
				found[r.cause] = f
			}
		}
	}
	if _, ok := found[CauseDataloader]; ok {
		delete(found, CauseCPUContention)
	}
	if len(found) == 0 && len(p.chains) == 0 {
		last := p.intervals[len(p.intervals)-1]
		if lv := p.intervalView(last); lv.wall > 0 {
			p.healthyRates = append(p.healthyRates, lv.calls(launchAPIs...)/lv.wall)
			if len(p.healthyRates) > healthyIntervals {
				p.healthyRates = p.healthyRates[1:]
			}
		}
	}
	var out []written
	for _, cause := range slices.Sorted(maps.Keys(found)) {
		f := found[cause]
		sev := c.severity(f.cost)
		ch := p.chains[cause]
		state := StateUpdate
		if ch == nil {
			ch = &chain{id: chainID(p, cause, now), since: c.causeStart(p, cause, now)}
			p.chains[cause] = ch
			state = StateOpen
		}
		ch.lastFired, ch.finding = now, f
		if state == StateOpen || sev != ch.severity || now.Sub(ch.lastWritten) >= c.cfg.UpdateEvery {
			ch.severity, ch.lastWritten = sev, now
			ch.timeline = c.timeline(p, cause, now)
			out = append(out, written{p: p, ch: ch, state: state, at: now})
		}
	}
	// In the order of the causes, so that chains resolved together are written alike
	// every time (a map's order changes from run to run). A chain that a cause found
	// now explains is resolved at once rather than after resolve_after.
	for _, cause := range slices.Sorted(maps.Keys(p.chains)) {
		if _, ok := found[cause]; !ok && (now.Sub(p.chains[cause].lastFired) >= c.cfg.ResolveAfter || superseded(cause, found)) {
			ch := p.chains[cause]
			delete(p.chains, cause)
			out = append(out, written{p: p, ch: ch, state: StateResolved, at: now})
		}
	}
	return out
}

// supersededBy are the causes that explain another's symptom when they fire and it does
// not: CPU lost to a fork storm is the data loader's; CPU lost to the threads that hold
// the thread's own lock is the lock's (lockBound). Such a chain was opened on less
// evidence: in CI's scenario suite, a window in which one tokenizer thread had yet woken
// the dispatcher opened cpu_contention on the lock scenario, and it stayed open, and the
// costliest, while lock_contention was found in every window after.
var supersededBy = map[string][]string{CauseCPUContention: {CauseDataloader, CauseLockContention}}

func superseded(cause string, found map[string]finding) bool {
	return slices.ContainsFunc(supersededBy[cause], func(by string) bool { _, ok := found[by]; return ok })
}

// causeStart is the end of the first interval of the window in which the rule's cost
// reached its threshold share, as near to the cause's start as the window shows.
func (c *chains) causeStart(p *process, cause string, now time.Time) time.Time {
	from := now.Add(-c.cfg.Window)
	r := ruleOf(cause)
	for _, iv := range p.intervals {
		if !iv.end.After(from) {
			continue
		}
		if f := r.judge(c.cfg, p.intervalView(iv)); f.cost > 0 {
			return iv.start
		}
	}
	return now
}

// timeline is the rule's cost in each of the window's last intervals.
func (c *chains) timeline(p *process, cause string, now time.Time) string {
	r := ruleOf(cause)
	ivs := p.intervals
	if len(ivs) > timelineIntervals {
		ivs = ivs[len(ivs)-timelineIntervals:]
	}
	parts := make([]string, 0, len(ivs))
	for _, iv := range ivs {
		if iv.end.Before(now.Add(-c.cfg.Window)) {
			continue
		}
		f := r.judge(c.cfg, p.intervalView(iv))
		parts = append(parts, fmt.Sprintf("%s %s", iv.end.UTC().Format("15:04:05"), percent(f.cost)))
	}
	return strings.Join(parts, ", ")
}

func ruleOf(cause string) rule {
	for _, r := range rules {
		if r.cause == cause {
			return r
		}
	}
	panic("causalchain: no rule for " + cause)
}

func (c *chains) severity(cost float64) string {
	switch {
	case cost >= c.cfg.Severity.High:
		return SeverityHigh
	case cost >= c.cfg.Severity.Medium:
		return SeverityMedium
	default:
		return SeverityLow
	}
}

func chainID(p *process, cause string, since time.Time) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00%s\x00%d", p.id.host, p.id.pid, p.firstStart.UnixNano(), cause, since.UnixNano())
	return fmt.Sprintf("%016x", h.Sum64())
}

// forget resolves the chains of processes not heard from for a window and
// resolve_after (exited, or no longer traced), and lets them go.
func (c *chains) forget(ctx context.Context) []written {
	var out []written
	cutoff := c.now().Add(-(c.cfg.Window + c.cfg.ResolveAfter))
	for id, p := range c.processes {
		if p.heard.After(cutoff) {
			continue
		}
		for _, cause := range slices.Sorted(maps.Keys(p.chains)) {
			out = append(out, written{p: p, ch: p.chains[cause], state: StateResolved, at: p.lastEnd})
		}
		delete(c.processes, id)
		c.telemetry.FathomCausalchainDropped.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", "forgotten")))
	}
	for id, t := range c.stacks {
		if t.keepWindow(c.cfg.Window); len(t.calls) == 0 || !t.heard.After(cutoff) {
			delete(c.stacks, id)
		}
	}
	return out
}

// appendGauge adds fathom.causal_chains (open chains by root cause and severity) on the
// host's resource.
func (c *chains) appendGauge(md pmetric.Metrics, host pcommon.Resource) {
	counts := map[[2]string]int64{}
	for _, p := range c.processes {
		for cause, ch := range p.chains {
			counts[[2]string{cause, ch.severity}]++
		}
	}
	rm := md.ResourceMetrics().AppendEmpty()
	host.CopyTo(rm.Resource())
	sm := rm.ScopeMetrics().AppendEmpty()
	sm.Scope().SetName(scopeName)
	m := sm.Metrics().AppendEmpty()
	m.SetName(semconv.MetricCausalChains)
	m.SetUnit("{chain}")
	m.SetDescription("Causal chains open on the node, by root cause and severity")
	g := m.SetEmptyGauge()
	ts := pcommon.NewTimestampFromTime(c.now())
	keys := make([][2]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+keys[i][1] < keys[j][0]+keys[j][1] })
	for _, k := range keys {
		dp := g.DataPoints().AppendEmpty()
		dp.SetTimestamp(ts)
		dp.SetIntValue(counts[k])
		dp.Attributes().PutStr(semconv.ChainRootCause, k[0])
		dp.Attributes().PutStr(semconv.ChainSeverity, k[1])
	}
	if g.DataPoints().Len() == 0 {
		dp := g.DataPoints().AppendEmpty()
		dp.SetTimestamp(ts)
		dp.SetIntValue(0)
	}
}

// recordsOf writes one fathom.causal_chain record per written chain state.
func (c *chains) recordsOf(ws []written) plog.Logs {
	ld := plog.NewLogs()
	for _, w := range ws {
		rl := ld.ResourceLogs().AppendEmpty()
		w.p.resource.CopyTo(rl.Resource())
		sl := rl.ScopeLogs().AppendEmpty()
		sl.Scope().SetName(scopeName)
		lr := sl.LogRecords().AppendEmpty()
		lr.SetTimestamp(pcommon.NewTimestampFromTime(w.at))
		lr.SetObservedTimestamp(pcommon.NewTimestampFromTime(c.now()))
		lr.SetEventName(semconv.EventCausalChain)
		f := w.ch.finding
		switch {
		case w.state == StateResolved:
			lr.SetSeverityNumber(plog.SeverityNumberInfo)
			lr.SetSeverityText("INFO")
		case w.ch.severity == SeverityHigh:
			lr.SetSeverityNumber(plog.SeverityNumberError)
			lr.SetSeverityText("ERROR")
		default:
			lr.SetSeverityNumber(plog.SeverityNumberWarn)
			lr.SetSeverityText("WARN")
		}
		lr.Body().SetStr(describe(w, f))
		a := lr.Attributes()
		a.PutStr(semconv.ChainID, w.ch.id)
		a.PutStr(semconv.ChainState, w.state)
		a.PutStr(semconv.ChainRootCause, f.cause)
		a.PutStr(semconv.ChainSeverity, w.ch.severity)
		a.PutStr(semconv.ChainFix, f.fix)
		a.PutStr(semconv.ChainSymptom, f.symptom)
		a.PutStr(semconv.ChainEvidence, f.evidence)
		a.PutStr(semconv.ChainTimeline, w.ch.timeline)
		a.PutDouble(semconv.ChainCost, roundTo(f.cost, 4))
		a.PutStr(semconv.ChainSince, w.ch.since.UTC().Format(time.RFC3339Nano))
		if f.tid >= 0 {
			a.PutInt(semconv.ThreadID, f.tid)
		}
		if t := c.stacks[w.p.id]; t != nil && w.state != StateResolved {
			if id, info, share, ok := t.dominant(w.at.Add(-c.cfg.Window), f.tid); ok {
				a.PutStr(semconv.ChainStackID, id)
				a.PutStr(semconv.ChainStack, info.frames)
				a.PutDouble(semconv.ChainStackShare, roundTo(share, 4))
				if info.file != "" {
					a.PutStr(semconv.CodeFunction, info.function)
					a.PutStr(semconv.CodeFilepath, info.file)
					a.PutInt(semconv.CodeLineno, info.line)
					lr.Body().SetStr(describeAt(w, f, info.where(), share))
				}
			}
		}
	}
	return ld
}

// describeAt is describe with where in the program the symptom's calls came from.
func describeAt(w written, f finding, where string, share float64) string {
	return fmt.Sprintf("%s %s in %s, from %s (%.0f%% of its recorded call time): %s; %s.", w.ch.severity, f.symptom, w.p.label, where, 100*share, f.evidence, f.fix)
}

func describe(w written, f finding) string {
	if w.state == StateResolved {
		return fmt.Sprintf("resolved: %s in %s (since %s)", strings.ReplaceAll(f.cause, "_", " "), w.p.label, w.ch.since.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("%s %s in %s: %s; %s.", w.ch.severity, f.symptom, w.p.label, f.evidence, f.fix)
}

func roundTo(v float64, digits int) float64 {
	scale := math.Pow(10, float64(digits))
	return math.Round(v*scale) / scale
}
