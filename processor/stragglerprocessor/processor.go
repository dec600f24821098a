package stragglerprocessor

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/fathom-gpu/fathom/internal/pushback"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/series"
	"github.com/fathom-gpu/fathom/processor/stragglerprocessor/internal/metadata"
)

const scopeName = "github.com/fathom-gpu/fathom/processor/stragglerprocessor"

// straggler is one processor instance, shared by the metrics and logs pipelines that
// name the same component ID: the metrics side reads the signals and writes the gauges,
// the logs side writes the fathom.straggler records.
type straggler struct {
	cfg    *Config
	logger *zap.Logger
	now    func() time.Time

	signalIndex map[string]int

	mu   sync.Mutex
	det  *detector
	jobs *jobCohorts
	// arr matches collective instances for the arrival-lag signal (the gateway's, when
	// it is among the signals); nil otherwise.
	arr *arrivals
	// reported is what of det.drops the telemetry counter already has.
	reported map[string]int64

	metricsNext consumer.Metrics
	logsNext    consumer.Logs
	// role is the gateway's or a node's part, chosen from the mode once.
	role role
	// verdicts is the remediation hook, nil when off.
	verdicts *verdictSinks

	starts int
	// stop ends the evaluation loop (done once it has), at the first shutdown of the
	// pipelines it serves; cancel ends what it is writing downstream.
	stop   chan struct{}
	done   chan struct{}
	cancel context.CancelFunc

	// telemetry is the processor's own metrics, as metadata.yaml declares them.
	telemetry *metadata.TelemetryBuilder
}

func newStraggler(cfg *Config, set processor.Settings) (*straggler, error) {
	s := &straggler{
		cfg: cfg, logger: set.Logger, now: time.Now,
		signalIndex: map[string]int{}, det: newDetector(cfg), reported: map[string]int64{},
		jobs: newJobCohorts(cfg.Limits.MaxCohorts),
	}
	for i, sig := range cfg.Signals {
		s.signalIndex[sig.Metric] = i
	}
	s.role = newRole(cfg, s.det, s.signalIndex)
	s.arr = s.role.arrivals()
	var err error
	if s.telemetry, err = metadata.NewTelemetryBuilder(set.TelemetrySettings); err != nil {
		return nil, err
	}
	if cfg.Verdicts.enabled() {
		if s.verdicts, err = newVerdictSinks(cfg.Verdicts, set.Logger, s.telemetry); err != nil {
			return nil, err
		}
	}
	if err = s.telemetry.RegisterFathomStragglerCohortsCallback(func(_ context.Context, o metric.Int64Observer) error {
		s.mu.Lock()
		c, _ := s.det.counts()
		s.mu.Unlock()
		o.Observe(int64(c))
		return nil
	}); err != nil {
		return nil, err
	}
	err = s.telemetry.RegisterFathomStragglerRanksCallback(func(_ context.Context, o metric.Int64Observer) error {
		s.mu.Lock()
		_, r := s.det.counts()
		s.mu.Unlock()
		o.Observe(int64(r))
		return nil
	})
	return s, err
}

func (s *straggler) start(_ context.Context, host component.Host) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.starts > 0 {
		s.starts++
		return nil
	}
	if err := s.role.start(host); err != nil {
		return err
	}
	if s.verdicts != nil {
		if err := s.verdicts.start(); err != nil {
			return err
		}
	}
	s.starts++
	if s.logsNext == nil {
		s.logger.Warn("the straggler processor is in no logs pipeline: ranks are flagged in the fathom.straggler.flag gauge, but no fathom.straggler records are written; add it to a logs pipeline under the same name")
	}
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	var ctx context.Context
	ctx, s.cancel = context.WithCancel(context.Background())
	go s.loop(ctx, s.stop, s.done)
	return nil
}

func (s *straggler) shutdown(context.Context) error {
	s.mu.Lock()
	if s.starts == 0 { // shut down without having started
		s.mu.Unlock()
		return nil
	}
	s.starts--
	last := s.starts == 0
	// The loop ends at the first shutdown, not the last: it writes into both
	// pipelines, and the collector may already have shut down the other pipeline's
	// exporters, where a write that waits for its result (the duckdb exporter's) would
	// wait for ever. A CI gateway once hung 30 s in its shutdown.
	stop, done, cancel := s.stop, s.done, s.cancel
	s.stop = nil
	s.mu.Unlock()
	if stop != nil {
		cancel()
		close(stop)
		<-done
	}
	if last {
		if s.verdicts != nil {
			s.verdicts.shutdown()
		}
		s.telemetry.Shutdown()
	}
	return nil
}

func (s *straggler) loop(ctx context.Context, stop, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(s.cfg.EvaluationInterval)
	defer tick.Stop()
	out := startDownstream(ctx, s.send, func(reason string, n int64) { s.dropped(context.Background(), reason, n) })
	defer out.wait() // the sender ends with ctx, which shutdown cancels before stop
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if o, ok := s.judgeOnce(ctx); ok && !out.offer(o) {
				s.dropped(ctx, "downstream_full", 1)
			}
		}
	}
}

// processMetrics reads the signals out of a request and passes it on unchanged.
func (s *straggler) processMetrics(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	now := s.now()
	var points []point
	var sent []sentCohort // each point's cohort as its node named it
	var clocks []clockPoint
	var noRank, noCohort int64
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		rm := rms.At(i)
		var signals []pmetric.Metric
		sms := rm.ScopeMetrics()
		for j := range sms.Len() {
			ms := sms.At(j).Metrics()
			for k := range ms.Len() {
				m := ms.At(k)
				if m.Name() == semconv.MetricNodeClockOffset && m.Type() == pmetric.MetricTypeGauge && s.arr != nil {
					clocks = append(clocks, clockPoints(rm.Resource().Attributes(), m)...)
					continue
				}
				if (m.Type() == pmetric.MetricTypeSum && m.Sum().IsMonotonic()) || m.Type() == pmetric.MetricTypeGauge {
					if _, ok := s.signalIndex[m.Name()]; ok {
						signals = append(signals, m)
					}
				}
			}
		}
		if len(signals) == 0 {
			continue
		}
		res := rm.Resource().Attributes()
		rp, why := rankOf(res)
		switch why {
		case "no_rank":
			noRank += int64(len(signals))
			continue
		case "no_cohort":
			noCohort += int64(len(signals))
			continue
		}
		key, job, byJob, rank, pid, node := rp.cohort, rp.job, rp.byJob, rp.rank, rp.pid, rp.node
		for _, m := range signals {
			gauge := m.Type() == pmetric.MetricTypeGauge
			var dps pmetric.NumberDataPointSlice
			cumulative := false
			if gauge {
				dps = m.Gauge().DataPoints()
			} else {
				dps = m.Sum().DataPoints()
				cumulative = m.Sum().AggregationTemporality() == pmetric.AggregationTemporalityCumulative
			}
			for d := range dps.Len() {
				dp := dps.At(d)
				v := series.Value(dp)
				var detail string
				if dv, ok := dp.Attributes().Get(semconv.SignalDetail); ok {
					detail = truncate(dv.AsString(), maxDetail)
				}
				sent = append(sent, sentCohort{cohort: key.cohort, byJob: byJob})
				points = append(points, point{
					cohort: key, job: job, node: node, rank: rank, pid: pid, signal: s.signalIndex[m.Name()],
					cumulative: cumulative, gauge: gauge, detail: detail, seconds: !gauge && m.Unit() == "s",
					value: v, start: int64(dp.StartTimestamp()), ts: int64(dp.Timestamp()),
				})
			}
		}
	}
	resp := pushback.FromContext(ctx)
	s.mu.Lock()
	for _, c := range clocks {
		s.arr.clockOffset(c.key, nodeClock{offset: c.offset, at: now})
	}
	for i, p := range points {
		if !sent[i].byJob && p.job != "" {
			s.jobs.learn(p.cohort.cluster, p.job, p.cohort.cohort, isRecovered(sent[i].cohort), now)
		}
	}
	for i := range points {
		if c := s.jobs.resolve(points[i].cohort.cluster, points[i].job); (sent[i].byJob || isRecovered(sent[i].cohort)) && c != "" {
			points[i].cohort.cohort = c
		}
		s.det.observe(points[i], now)
	}
	s.role.answer(resp, points, sent)
	s.mu.Unlock()
	if noRank > 0 {
		s.telemetry.FathomStragglerDropped.Add(ctx, noRank, metric.WithAttributes(attribute.String("reason", "no_rank")))
	}
	if noCohort > 0 {
		s.telemetry.FathomStragglerDropped.Add(ctx, noCohort, metric.WithAttributes(attribute.String("reason", "no_cohort")))
	}
	if !s.cfg.PassThrough {
		return md, processorhelper.ErrSkipProcessingData
	}
	return md, nil
}

// rankProcess is what a rank process's resource says of it.
type rankProcess struct {
	cohort    cohortKey
	job, node string
	byJob     bool // the node knew the rank's job, not its communicator
	rank, pid int64
}

// rankOf reads a rank process's resource: its rank, and its cohort (the communicator,
// else the job); why is "no_rank" or "no_cohort" when it cannot be compared.
func rankOf(res pcommon.Map) (rp rankProcess, why string) {
	rank, ok := intAttr(res, semconv.Rank)
	if !ok {
		return rp, "no_rank"
	}
	rp.rank = rank
	rp.cohort = cohortKey{cluster: strAttr(res, semconv.ClusterName), cohort: strAttr(res, semconv.Cohort)}
	rp.job = strAttr(res, semconv.JobName)
	rp.byJob = rp.cohort.cohort == "" && rp.job != ""
	if rp.byJob {
		rp.cohort.cohort = "job:" + rp.job
	}
	if rp.cohort.cohort == "" {
		return rp, "no_cohort"
	}
	rp.pid, _ = intAttr(res, semconv.ProcessPID)
	rp.node = strAttr(res, semconv.HostName)
	return rp, ""
}

// clockPoint is what a node said of its clock (fathom.node.clock.offset).
type clockPoint struct {
	key    clockKey
	offset time.Duration
}

func clockPoints(res pcommon.Map, m pmetric.Metric) []clockPoint {
	key := clockKey{cluster: strAttr(res, semconv.ClusterName), node: strAttr(res, semconv.HostName)}
	if key.node == "" {
		return nil
	}
	var out []clockPoint
	dps := m.Gauge().DataPoints()
	for i := range dps.Len() {
		v := series.Value(dps.At(i))
		if !math.IsNaN(v) && !math.IsInf(v, 0) && math.Abs(v) < 1e6 {
			out = append(out, clockPoint{key: key, offset: time.Duration(v * 1e9)})
		}
	}
	return out
}

// processLogs reads the sampled nccl.collective records for the arrival-lag signal
// (gateway); every record passes on untouched.
func (s *straggler) processLogs(_ context.Context, ld plog.Logs) (plog.Logs, error) {
	if s.arr == nil {
		return s.passLogs(ld)
	}
	now := s.now()
	type entry struct {
		key    instanceKey
		nranks int
		rank   arrivalRank
		// local marks a recovered communicator's record: key.seq is the rank's own
		// count (nccl.seq.local), shape its collective's.
		local bool
		shape uint64
	}
	var entries []entry
	rls := ld.ResourceLogs()
	for i := range rls.Len() {
		rl := rls.At(i)
		rp, why := rankOf(rl.Resource().Attributes())
		if why != "" || rp.node == "" {
			continue // not a rank process (the node's own records), or not comparable
		}
		sls := rl.ScopeLogs()
		for j := range sls.Len() {
			lrs := sls.At(j).LogRecords()
			for k := range lrs.Len() {
				lr := lrs.At(k)
				if lr.EventName() != semconv.EventNCCLCollective {
					continue
				}
				a := lr.Attributes()
				comm := strAttr(a, semconv.NCCLCommID)
				seq, okSeq := intAttr(a, semconv.NCCLSeq)
				nranks, okN := intAttr(a, semconv.NCCLNRanks)
				commRank, okR := intAttr(a, semconv.NCCLRank)
				entryNS, okE := intAttr(a, semconv.NCCLEntryTime)
				if !okE {
					entryNS, okE = int64(lr.Timestamp()), lr.Timestamp() != 0
				}
				local := false
				if !okSeq {
					seq, okSeq = intAttr(a, semconv.NCCLSeqLocal)
					local = okSeq
				}
				if comm == "" || !okSeq || !okN || !okR || !okE {
					continue
				}
				e := entry{key: instanceKey{cluster: rp.cohort.cluster, comm: comm, seq: seq}, nranks: int(nranks),
					rank: arrivalRank{commRank: commRank, rank: rp.rank, pid: rp.pid, cohort: rp.cohort, job: rp.job, node: rp.node, entry: entryNS}}
				if local {
					e.local, e.shape = true, collectiveShape(a)
				}
				entries = append(entries, e)
			}
		}
	}
	if len(entries) > 0 {
		s.mu.Lock()
		for _, e := range entries {
			if c := s.jobs.resolve(e.rank.cohort.cluster, e.rank.job); givesWayToItsJob(e.rank.cohort.cohort) && c != "" {
				e.rank.cohort.cohort = c
			}
			if e.local {
				s.arr.addLocal(recoveredKey{cluster: e.key.cluster, comm: e.key.comm}, e.key.seq, e.shape, e.nranks, e.rank, now)
				continue
			}
			s.arr.add(e.key, e.nranks, e.rank, now)
		}
		s.arr.align(now)
		s.mu.Unlock()
	}
	return s.passLogs(ld)
}

// collectiveShape is FNV-1a 64 over what every rank passes alike to one collective:
// its op, count, data type and reduction.
func collectiveShape(a pcommon.Map) uint64 {
	h := fnv.New64a()
	count, _ := intAttr(a, semconv.NCCLCount)
	for _, part := range []string{strAttr(a, semconv.NCCLOp), strconv.FormatInt(count, 10), strAttr(a, semconv.NCCLDataType), strAttr(a, semconv.NCCLReduceOp)} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// passLogs passes the records read on, or drops them when pass_through is off.
func (s *straggler) passLogs(ld plog.Logs) (plog.Logs, error) {
	if !s.cfg.PassThrough {
		return ld, processorhelper.ErrSkipProcessingData
	}
	return ld, nil
}

// sentCohort is a point's cohort as its node named it: byJob when the node knew only
// the rank's job, not its communicator.
type sentCohort struct {
	cohort string
	byJob  bool
}

// recoveredCohortPrefix begins the cohort of a communicator the gpuebpf receiver named
// from its calls (its setup was not seen): nccl-recovered:<id>.
const recoveredCohortPrefix = "nccl-recovered:"

// isRecovered says whether cohort is one the node named from the communicator's calls
// (its collector started after the job): a communicator named by its unique id wins.
func isRecovered(cohort string) bool { return strings.HasPrefix(cohort, recoveredCohortPrefix) }

// givesWayToItsJob says whether a rank in cohort joins the communicator its job was
// seen in, when one is known: a cohort of the job's name alone, or a recovered one.
func givesWayToItsJob(cohort string) bool {
	return strings.HasPrefix(cohort, "job:") || isRecovered(cohort)
}

// evaluate judges the cohorts once and sends what came of it downstream, waiting for
// the next consumers (the tests' way; the loop does not wait, see loop).
func (s *straggler) evaluate(ctx context.Context) {
	if out, ok := s.judgeOnce(ctx); ok {
		s.send(ctx, out)
	}
}

// judgeOnce judges the cohorts once and returns what to send downstream: the gauges
// for the metrics pipeline, the state changes for the logs pipeline; false when there
// is nothing to send.
func (s *straggler) judgeOnce(ctx context.Context) (output, bool) {
	now := s.now()
	s.mu.Lock()
	ev, lagGauges, ok := s.role.judge(now)
	if !ok {
		s.mu.Unlock()
		return output{}, false
	}
	extra, hasExtra := s.role.extra(now)
	s.jobs.forget(now.Add(-s.cfg.ForgetAfter))
	drops := map[string]int64{}
	for reason, n := range s.det.drops {
		if d := n - s.reported[reason]; d > 0 {
			drops[reason] = d
			s.reported[reason] = n
		}
	}
	metricsNext, logsNext := s.metricsNext, s.logsNext
	s.mu.Unlock()
	for reason, n := range drops {
		s.dropped(ctx, reason, n)
	}
	var out output
	if metricsNext != nil && (len(ev.ranks) > 0 || len(ev.groups) > 0 || len(ev.lost) > 0 || len(lagGauges) > 0) {
		out.gauges = s.gauges(ev, now)
		s.arrivalLags(out.gauges, lagGauges, now)
	}
	if metricsNext != nil && hasExtra {
		out.extra = extra
	}
	for _, e := range ev.events {
		s.telemetry.FathomStragglerEvents.Add(ctx, 1, metric.WithAttributes(attribute.String("state", e.state)))
		s.logger.Info("straggler "+e.state, zap.String("cohort", e.cohort.cohort), zap.Int64("rank", e.rank), zap.String("node", e.node),
			zap.String("signal", s.cfg.Signals[e.signal].Metric), zap.Float64("value", e.value), zap.Float64("threshold", e.threshold))
	}
	if len(ev.events) > 0 && s.verdicts != nil {
		s.verdicts.publish(s.toVerdicts(ev.events))
	}
	if len(ev.events) > 0 && logsNext != nil {
		out.records = s.records(ev.events)
	}
	return out, out != (output{})
}

// send hands one evaluation's output to the next consumers and waits for them.
func (s *straggler) send(ctx context.Context, out output) {
	s.mu.Lock()
	metricsNext, logsNext := s.metricsNext, s.logsNext
	s.mu.Unlock()
	if metricsNext != nil && out.gauges != (pmetric.Metrics{}) {
		if err := metricsNext.ConsumeMetrics(ctx, out.gauges); err != nil {
			s.logger.Warn("straggler gauges not accepted downstream", zap.Error(err))
		}
	}
	if metricsNext != nil && out.extra != (pmetric.Metrics{}) {
		if err := metricsNext.ConsumeMetrics(ctx, out.extra); err != nil {
			s.logger.Warn("clock offset not accepted downstream", zap.Error(err))
		}
	}
	if logsNext != nil && out.records != (plog.Logs{}) {
		if err := logsNext.ConsumeLogs(ctx, out.records); err != nil {
			s.logger.Warn("fathom.straggler records not accepted downstream", zap.Error(err))
		}
	}
}

// dropped counts n of what the processor let go, by reason.
func (s *straggler) dropped(ctx context.Context, reason string, n int64) {
	s.telemetry.FathomStragglerDropped.Add(ctx, n, metric.WithAttributes(attribute.String("reason", reason)))
}

// gauges are one evaluation's per-rank scores and flags and per-cohort medians and
// lines, one resource per cohort with the rank and its node on each point (so that a
// Prometheus backend gets them as labels).
func (s *straggler) gauges(ev evaluation, now time.Time) pmetric.Metrics {
	md := pmetric.NewMetrics()
	ts := pcommon.NewTimestampFromTime(now)
	type out struct {
		score, flag, threshold, median pmetric.NumberDataPointSlice
	}
	byCohort := map[cohortKey]*out{}
	get := func(key cohortKey, job string) *out {
		if o := byCohort[key]; o != nil {
			return o
		}
		rm := md.ResourceMetrics().AppendEmpty()
		cohortResource(rm.Resource().Attributes(), key, job)
		sm := rm.ScopeMetrics().AppendEmpty()
		sm.Scope().SetName(scopeName)
		gauge := func(name, unit, desc string) pmetric.NumberDataPointSlice {
			m := sm.Metrics().AppendEmpty()
			m.SetName(name)
			m.SetUnit(unit)
			m.SetDescription(desc)
			return m.SetEmptyGauge().DataPoints()
		}
		o := &out{
			score:     gauge(semconv.MetricStragglerScore, "1", "Distance from the cohort's median in scaled MADs, positive in the worse direction"),
			flag:      gauge(semconv.MetricStragglerFlag, "1", "1 while the rank is flagged a straggler"),
			threshold: gauge(semconv.MetricStragglerThreshold, "", "The cohort's line for the signal"),
			median:    gauge(semconv.MetricStragglerMedian, "", "The cohort's median of the signal"),
		}
		byCohort[key] = o
		return o
	}
	for _, g := range ev.groups {
		o := get(g.cohort, "")
		signal := s.cfg.Signals[g.signal].Metric
		for _, p := range []struct {
			dps pmetric.NumberDataPointSlice
			v   float64
		}{{o.threshold, g.threshold}, {o.median, g.median}} {
			dp := p.dps.AppendEmpty()
			dp.SetTimestamp(ts)
			dp.SetDoubleValue(p.v)
			dp.Attributes().PutStr(semconv.StragglerSignal, signal)
		}
	}
	for _, r := range ev.ranks {
		o := get(r.cohort, r.job)
		signal := s.cfg.Signals[r.signal].Metric
		flag := 0.0
		if r.flagged {
			flag = 1
		}
		for _, p := range []struct {
			dps  pmetric.NumberDataPointSlice
			v    float64
			none bool
		}{{o.score, r.score, r.unscored}, {o.flag, flag, false}} {
			if p.none {
				continue
			}
			dp := p.dps.AppendEmpty()
			dp.SetTimestamp(ts)
			dp.SetDoubleValue(p.v)
			a := dp.Attributes()
			a.PutStr(semconv.StragglerSignal, signal)
			a.PutInt(semconv.Rank, r.rank)
			a.PutStr(semconv.HostName, r.node)
		}
	}
	s.timeLost(md, ev.lost)
	return md
}

// timeLost writes the GPU time each flagged rank's peers lost waiting for it, as a
// delta sum per rank and interval, so that a backend (and get_cost) adds it up over any
// window. A rank flagged on two time signals in one interval is counted once, by the
// larger: both measure the same wait.
func (s *straggler) timeLost(md pmetric.Metrics, lost []timeLost) {
	type key struct {
		cohort cohortKey
		rank   int64
		end    time.Time
	}
	worst := map[key]timeLost{}
	var order []key
	for _, l := range lost {
		k := key{l.cohort, l.rank, l.end}
		if prev, ok := worst[k]; !ok {
			order = append(order, k)
		} else if prev.gpuSeconds >= l.gpuSeconds {
			continue
		}
		worst[k] = l
	}
	points := perCohort{md: md, name: semconv.MetricStragglerTimeLost,
		desc: "GPU time the rank's peers spent waiting for it while it was flagged", deltaSum: true}
	for _, k := range order {
		l := worst[k]
		dp := points.add(l.cohort, l.job)
		dp.SetStartTimestamp(pcommon.NewTimestampFromTime(l.start))
		dp.SetTimestamp(pcommon.NewTimestampFromTime(l.end))
		dp.SetDoubleValue(l.gpuSeconds)
		a := dp.Attributes()
		a.PutStr(semconv.StragglerSignal, s.cfg.Signals[l.signal].Metric)
		a.PutInt(semconv.Rank, l.rank)
		a.PutStr(semconv.HostName, l.node)
		// The ranks judged together, the straggler included: get_cost's affected
		// ranks are the others.
		a.PutInt(semconv.WorldSize, int64(l.peers+1))
	}
}

// perCohort writes one metric in seconds (a gauge, or a delta sum) as one resource per
// cohort, a point per rank.
type perCohort struct {
	md         pmetric.Metrics
	name, desc string
	deltaSum   bool
	byCohort   map[cohortKey]pmetric.NumberDataPointSlice
}

// add returns a new point of the cohort's metric.
func (c *perCohort) add(key cohortKey, job string) pmetric.NumberDataPoint {
	if c.byCohort == nil {
		c.byCohort = map[cohortKey]pmetric.NumberDataPointSlice{}
	}
	dps, ok := c.byCohort[key]
	if !ok {
		rm := c.md.ResourceMetrics().AppendEmpty()
		cohortResource(rm.Resource().Attributes(), key, job)
		sm := rm.ScopeMetrics().AppendEmpty()
		sm.Scope().SetName(scopeName)
		m := sm.Metrics().AppendEmpty()
		m.SetName(c.name)
		m.SetUnit("s")
		m.SetDescription(c.desc)
		if c.deltaSum {
			sum := m.SetEmptySum()
			sum.SetIsMonotonic(true)
			sum.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
			dps = sum.DataPoints()
		} else {
			dps = m.SetEmptyGauge().DataPoints()
		}
		c.byCohort[key] = dps
	}
	return dps.AppendEmpty()
}

// rankValue is one rank's value of a signal the gateway makes (arrival lag).
type rankValue struct {
	cohort    cohortKey
	job, node string
	rank      int64
	value     float64
}

// arrivalLags writes each rank's arrival lag of this evaluation, one resource per
// cohort with the rank and its node on the point, like the other gauges.
func (s *straggler) arrivalLags(md pmetric.Metrics, lags []rankValue, now time.Time) {
	points := perCohort{md: md, name: semconv.MetricRankArrivalLag,
		desc: "How long after the median rank this rank entered the sampled collectives, clocks corrected (mean since the last evaluation)"}
	for _, l := range lags {
		dp := points.add(l.cohort, l.job)
		dp.SetTimestamp(pcommon.NewTimestampFromTime(now))
		dp.SetDoubleValue(l.value)
		dp.Attributes().PutInt(semconv.Rank, l.rank)
		dp.Attributes().PutStr(semconv.HostName, l.node)
	}
}

// records are the fathom.straggler log records, one resource per rank (its node,
// rank, cohort and job), so that a backend files each under the node in trouble.
func (s *straggler) records(events []event) plog.Logs {
	ld := plog.NewLogs()
	for _, e := range events {
		rl := ld.ResourceLogs().AppendEmpty()
		res := rl.Resource().Attributes()
		cohortResource(res, e.cohort, e.job)
		if e.node != "" {
			res.PutStr(semconv.HostName, e.node)
		}
		if e.rank >= 0 {
			res.PutInt(semconv.Rank, e.rank)
		}
		sl := rl.ScopeLogs().AppendEmpty()
		sl.Scope().SetName(scopeName)
		lr := sl.LogRecords().AppendEmpty()
		lr.SetTimestamp(pcommon.NewTimestampFromTime(e.at))
		lr.SetObservedTimestamp(pcommon.NewTimestampFromTime(e.at))
		lr.SetEventName(semconv.EventStraggler)
		signal := s.cfg.Signals[e.signal]
		if e.state == "resolved" || e.state == "no_thresholds" || e.state == "stall" {
			lr.SetSeverityNumber(plog.SeverityNumberInfo)
			lr.SetSeverityText("INFO")
		} else {
			lr.SetSeverityNumber(plog.SeverityNumberWarn)
			lr.SetSeverityText("WARN")
		}
		lr.Body().SetStr(describe(e, signal))
		a := lr.Attributes()
		a.PutStr(semconv.StragglerState, e.state)
		a.PutStr(semconv.StragglerSource, s.role.source())
		a.PutStr(semconv.StragglerSignal, signal.Metric)
		a.PutDouble(semconv.StragglerValue, e.value)
		a.PutDouble(semconv.StragglerMedian, e.median)
		a.PutDouble(semconv.StragglerThreshold, e.threshold)
		a.PutDouble(semconv.StragglerScore, e.score)
		a.PutStr(semconv.StragglerSince, e.since.UTC().Format(time.RFC3339Nano))
		if e.window > 0 {
			a.PutDouble(semconv.StragglerWindow, e.window.Seconds())
		}
		if e.state == "straggler" && e.rule != "" {
			a.PutStr(semconv.StragglerRule, e.rule)
		}
		if e.detail != "" {
			a.PutStr(semconv.SignalDetail, e.detail)
		}
	}
	return ld
}

func (s *straggler) toVerdicts(events []event) []Verdict {
	out := make([]Verdict, 0, len(events))
	for _, e := range events {
		if e.state == "stall" {
			// A stall is a record, not a state change: the rank was never flagged, and
			// an agent that acts on a verdict (cordons a GPU, restarts a rank) must not
			// act on one.
			continue
		}
		signal := s.cfg.Signals[e.signal]
		v := Verdict{Time: e.at.UTC(), State: e.state, Source: s.role.source(), Cluster: e.cohort.cluster, Cohort: e.cohort.cohort,
			Job: e.job, Node: e.node, Signal: signal.Metric, Value: e.value, Median: e.median, Threshold: e.threshold,
			Score: e.score, Since: e.since.UTC(), WindowSeconds: e.window.Seconds(), Message: describe(e, signal)}
		if e.state == "straggler" {
			v.Rule = e.rule
		}
		if e.rank >= 0 {
			rank := e.rank
			v.Rank = &rank
		}
		out = append(out, v)
	}
	return out
}

// describe is the record's body: one sentence an operator can act on.
func describe(e event, signal SignalConfig) string {
	who := fmt.Sprintf("rank %d on %s", e.rank, orUnknown(e.node))
	rate := "/s" // sums are judged per second, gauges as they are
	if e.gauge {
		rate = ""
	}
	switch e.state {
	case "straggler":
		over := ""
		if e.window > 0 {
			over = fmt.Sprintf(" (median over its last %v)", e.window)
		} else if e.rule == ruleEvidence {
			over = " (its excess over the cohort, accumulated)"
		}
		s := fmt.Sprintf("%s is a straggler in %s: %s %.4g%s%s vs cohort median %.4g%s (line %.4g%s, %s is worse), beyond since %s",
			who, e.cohort.cohort, signal.Metric, e.value, rate, over, e.median, rate, e.threshold, rate, signal.Worse, e.since.UTC().Format(time.RFC3339))
		if e.detail != "" {
			s += "; " + e.detail
		}
		return s
	case "stall":
		// A rank held up on a signal of time is a stall; past the line on a count
		// (link errors, retransmits) it had a burst, which is all that can be said.
		lasted := e.at.Sub(e.since).Round(time.Millisecond)
		what := fmt.Sprintf("stalled in %s for %v", e.cohort.cohort, lasted)
		if !e.seconds {
			what = fmt.Sprintf("was past its cohort's line in %s for %v and came back", e.cohort.cohort, lasted)
		}
		s := fmt.Sprintf("%s %s, shorter than a straggler: %s %.4g%s at its worst vs cohort median %.4g%s (line %.4g%s, %s is worse), from %s to %s",
			who, what, signal.Metric, e.value, rate, e.median, rate, e.threshold, rate, signal.Worse,
			e.since.UTC().Format(time.RFC3339Nano), e.at.UTC().Format(time.RFC3339Nano))
		if e.detail != "" {
			s += "; " + e.detail
		}
		return s
	case "no_thresholds":
		return fmt.Sprintf("this node holds no straggler threshold for %s in %s: none received within the TTL (is the gateway reachable?); its ranks are not judged until one arrives",
			signal.Metric, e.cohort.cohort)
	case "silent":
		return fmt.Sprintf("%s in %s stopped reporting %s at %s while its cohort reports; its node may be in trouble",
			who, e.cohort.cohort, signal.Metric, e.since.UTC().Format(time.RFC3339))
	default:
		return fmt.Sprintf("%s in %s is back within its cohort on %s: %.4g%s vs median %.4g%s", who, e.cohort.cohort, signal.Metric, e.value, rate, e.median, rate)
	}
}

// maxDetail bounds the fathom.signal.detail a node sends per point, which every record
// naming the rank carries.
const maxDetail = 256

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func cohortResource(res pcommon.Map, key cohortKey, job string) {
	if key.cluster != "" {
		res.PutStr(semconv.ClusterName, key.cluster)
	}
	res.PutStr(semconv.Cohort, key.cohort)
	if job != "" {
		res.PutStr(semconv.JobName, job)
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "an unnamed node"
	}
	return s
}

func strAttr(m pcommon.Map, key string) string {
	if v, ok := m.Get(key); ok {
		return v.AsString()
	}
	return ""
}

// intAttr reads an integer attribute a sender may have typed as int or string.
func intAttr(m pcommon.Map, key string) (int64, bool) {
	v, ok := m.Get(key)
	if !ok {
		return 0, false
	}
	switch v.Type() {
	case pcommon.ValueTypeInt:
		return v.Int(), v.Int() >= 0
	case pcommon.ValueTypeStr:
		n, err := strconv.ParseInt(v.Str(), 10, 64)
		return n, err == nil && n >= 0
	case pcommon.ValueTypeDouble:
		n := int64(v.Double())
		return n, float64(n) == v.Double() && n >= 0
	}
	return 0, false
}
