package causalchainprocessor

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/fathom-gpu/fathom/internal/expohisto"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/processor/causalchainprocessor/internal/metadata"
)

// sim is one process as the gpuebpf receiver reports it: cumulative series (or delta
// ones), exported once per interval. Each method adds what happened in the interval
// being built.
type sim struct {
	pid, rank int64
	exe       string
	start, t  time.Time
	delta     bool

	calls, bytes map[[2]string]float64
	dur          map[string]*expohisto.Histogram
	thread       map[threadSeries]*expohisto.Histogram
	preempt      map[preemptorSeries]*preemptorCount
	wakers       map[wakerSeries]*preemptorCount
	forks, pages float64
	retransmits  float64
	blockIO      map[string]*expohisto.Histogram
}

// threadSeries is one thread histogram: kind is preempted, voluntary or runq.
type threadSeries struct {
	tid  int64
	kind string
}

type preemptorSeries struct {
	tid  int64
	name string
	self bool
}

// wakerSeries is one blocked series: who woke the thread and what it waited on.
type wakerSeries struct {
	tid  int64
	name string
	self bool
	on   string
}

type preemptorCount struct {
	n, seconds, procs float64
}

func newSim(pid, rank int64, start time.Time) *sim {
	s := &sim{pid: pid, rank: rank, exe: "python3", start: start, t: start}
	s.reset()
	return s
}

func (s *sim) reset() {
	s.calls, s.bytes = map[[2]string]float64{}, map[[2]string]float64{}
	s.dur, s.thread = map[string]*expohisto.Histogram{}, map[threadSeries]*expohisto.Histogram{}
	s.preempt, s.blockIO = map[preemptorSeries]*preemptorCount{}, map[string]*expohisto.Histogram{}
	s.wakers = map[wakerSeries]*preemptorCount{}
	s.forks, s.pages, s.retransmits = 0, 0, 0
}

func hist(m map[string]*expohisto.Histogram, k string) *expohisto.Histogram {
	if m[k] == nil {
		m[k] = &expohisto.Histogram{}
	}
	return m[k]
}

// call adds n calls of api, each lasting each, moving bytes each (direction dir).
func (s *sim) call(api, dir string, n int, each time.Duration, bytes float64) *sim {
	for range n {
		hist(s.dur, api).Record(each.Seconds())
	}
	s.calls[[2]string{api, dir}] += float64(n)
	if dir != "" {
		s.bytes[[2]string{api, dir}] += float64(n) * bytes
	}
	return s
}

func (s *sim) threadHist(tid int64, kind string) *expohisto.Histogram {
	k := threadSeries{tid, kind}
	if s.thread[k] == nil {
		s.thread[k] = &expohisto.Histogram{}
	}
	return s.thread[k]
}

// preempted: thread tid was preempted n times for each, by name (procs processes).
func (s *sim) preempted(tid int64, name string, self bool, n int, each time.Duration, procs int) *sim {
	for range n {
		s.threadHist(tid, "preempted").Record(each.Seconds())
		s.threadHist(tid, "runq").Record(each.Seconds())
	}
	k := preemptorSeries{tid, name, self}
	if s.preempt[k] == nil {
		s.preempt[k] = &preemptorCount{}
	}
	s.preempt[k].n += float64(n)
	s.preempt[k].seconds += float64(n) * each.Seconds()
	s.preempt[k].procs = max(s.preempt[k].procs, float64(procs))
	return s
}

// slept: thread tid went off CPU voluntarily n times for each (woken at once).
func (s *sim) slept(tid int64, n int, each time.Duration) *sim {
	for range n {
		s.threadHist(tid, "voluntary").Record(each.Seconds())
		s.threadHist(tid, "runq").Record(20e-6)
	}
	return s
}

// blocked: thread tid went off CPU voluntarily n times for each, waiting on on, woken
// by name (threads distinct threads of that name; self: of its own process).
func (s *sim) blocked(tid int64, name string, self bool, on string, n int, each time.Duration, threads int) *sim {
	s.slept(tid, n, each)
	k := wakerSeries{tid, name, self, on}
	if s.wakers[k] == nil {
		s.wakers[k] = &preemptorCount{}
	}
	s.wakers[k].n += float64(n)
	s.wakers[k].seconds += float64(n) * each.Seconds()
	s.wakers[k].procs = max(s.wakers[k].procs, float64(threads))
	return s
}

func (s *sim) io(dir string, n int, each time.Duration) *sim {
	for range n {
		hist(s.blockIO, dir).Record(each.Seconds())
	}
	return s
}

// healthy is one second of a healthy GPU-feeding loop on thread tid: 1,000 launches of
// 20 µs, 50 step syncs of 12 ms (asleep), a little scheduling jitter, a few pages.
func (s *sim) healthy(tid int64) *sim {
	s.call("cudaLaunchKernel", "", 1000, 20*time.Microsecond, 0)
	s.call("cudaStreamSynchronize", "", 50, 12*time.Millisecond, 0)
	s.call("cudaMemcpyAsync", "host_to_device", 50, 15*time.Microsecond, 1<<20)
	s.slept(tid, 50, 12*time.Millisecond)
	s.preempted(tid, "kworker/0:1", false, 5, 200*time.Microsecond, 1)
	s.pages += 2000
	return s
}

// export ends the interval after step and returns the receiver's metrics for it.
func (s *sim) export(step time.Duration) pmetric.Metrics {
	prev := s.t
	s.t = s.t.Add(step)
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	a := rm.Resource().Attributes()
	a.PutStr(semconv.HostName, "node-a")
	a.PutInt(semconv.ProcessPID, s.pid)
	a.PutStr(semconv.ProcessExecutableName, s.exe)
	a.PutInt(semconv.Rank, s.rank)
	sm := rm.ScopeMetrics().AppendEmpty()
	start := pcommon.NewTimestampFromTime(s.start)
	if s.delta {
		start = pcommon.NewTimestampFromTime(prev)
	}
	ts := pcommon.NewTimestampFromTime(s.t)
	metric := map[string]pmetric.Metric{}
	get := func(name string, kind pmetric.MetricType) pmetric.Metric {
		if m, ok := metric[name]; ok {
			return m
		}
		m := sm.Metrics().AppendEmpty()
		m.SetName(name)
		temporality := pmetric.AggregationTemporalityCumulative
		if s.delta {
			temporality = pmetric.AggregationTemporalityDelta
		}
		switch kind {
		case pmetric.MetricTypeSum:
			m.SetEmptySum().SetIsMonotonic(true)
			m.Sum().SetAggregationTemporality(temporality)
		case pmetric.MetricTypeExponentialHistogram:
			m.SetEmptyExponentialHistogram().SetAggregationTemporality(temporality)
		case pmetric.MetricTypeGauge:
			m.SetEmptyGauge()
		}
		metric[name] = m
		return m
	}
	sum := func(name string, v float64) pcommon.Map {
		dp := get(name, pmetric.MetricTypeSum).Sum().DataPoints().AppendEmpty()
		dp.SetStartTimestamp(start)
		dp.SetTimestamp(ts)
		dp.SetDoubleValue(v)
		return dp.Attributes()
	}
	histogram := func(name string, h *expohisto.Histogram) pcommon.Map {
		dp := get(name, pmetric.MetricTypeExponentialHistogram).ExponentialHistogram().DataPoints().AppendEmpty()
		dp.SetStartTimestamp(start)
		dp.SetTimestamp(ts)
		h.CopyTo(dp)
		return dp.Attributes()
	}
	for api, h := range s.dur {
		histogram(semconv.MetricCUDAAPIDuration, h).PutStr(semconv.CUDAAPIName, api)
	}
	for k, n := range s.calls {
		a := sum(semconv.MetricCUDAAPICalls, n)
		a.PutStr(semconv.CUDAAPIName, k[0])
		if k[1] != "" {
			a.PutStr(semconv.CUDAMemcpyDir, k[1])
		}
	}
	for k, n := range s.bytes {
		a := sum(semconv.MetricCUDAMemcpyBytes, n)
		a.PutStr(semconv.CUDAAPIName, k[0])
		a.PutStr(semconv.CUDAMemcpyDir, k[1])
	}
	for k, h := range s.thread {
		name, reason := semconv.MetricThreadOffCPU, k.kind
		if k.kind == "runq" {
			name, reason = semconv.MetricThreadRunQueue, ""
		}
		a := histogram(name, h)
		a.PutStr(semconv.ThreadRole, "cuda")
		a.PutInt(semconv.ThreadID, k.tid)
		if reason != "" {
			a.PutStr(semconv.OffCPUReason, reason)
		}
	}
	for k, c := range s.preempt {
		put := func(a pcommon.Map) {
			a.PutStr(semconv.ThreadRole, "cuda")
			a.PutInt(semconv.ThreadID, k.tid)
			a.PutStr(semconv.PreemptorName, k.name)
			a.PutBool(semconv.PreemptorSelf, k.self)
		}
		put(sum(semconv.MetricThreadPreemptions, c.n))
		put(sum(semconv.MetricThreadPreemptTime, c.seconds))
		g := get(semconv.MetricThreadPreemptors, pmetric.MetricTypeGauge).Gauge().DataPoints().AppendEmpty()
		g.SetTimestamp(ts)
		g.SetIntValue(int64(c.procs))
		put(g.Attributes())
	}
	for k, c := range s.wakers {
		put := func(a pcommon.Map) {
			a.PutStr(semconv.ThreadRole, "cuda")
			a.PutInt(semconv.ThreadID, k.tid)
			a.PutStr(semconv.WakerName, k.name)
			a.PutBool(semconv.WakerSelf, k.self)
			a.PutStr(semconv.BlockedOn, k.on)
		}
		put(sum(semconv.MetricThreadBlocks, c.n))
		put(sum(semconv.MetricThreadBlockedTime, c.seconds))
		g := get(semconv.MetricThreadWakerThreads, pmetric.MetricTypeGauge).Gauge().DataPoints().AppendEmpty()
		g.SetTimestamp(ts)
		g.SetIntValue(int64(c.procs))
		put(g.Attributes())
	}
	sum(semconv.MetricProcessForks, s.forks)
	sum(semconv.MetricProcessPageAllocs, s.pages)
	sum(semconv.MetricRankTCPRetransmits, s.retransmits)
	for dir, h := range s.blockIO {
		histogram(semconv.MetricBlockIODuration, h).PutStr(semconv.DiskIODirection, dir)
	}
	host := md.ResourceMetrics().AppendEmpty()
	host.Resource().Attributes().PutStr(semconv.HostName, "node-a")
	if s.delta {
		s.reset()
	}
	return md
}

// loop is a causalchain processor in a metrics and a logs pipeline, as a node runs it.
type loop struct {
	t       testing.TB
	id      component.ID
	metrics processor.Metrics
	logs    processor.Logs
	out     *consumertest.MetricsSink
	records *consumertest.LogsSink
}

func newLoop(t testing.TB, cfg *Config) *loop {
	t.Helper()
	set := processortest.NewNopSettings(metadata.Type)
	set.ID = componentID(t)
	l := &loop{t: t, id: set.ID, out: &consumertest.MetricsSink{}, records: &consumertest.LogsSink{}}
	f := NewFactory()
	var err error
	if l.logs, err = f.CreateLogs(context.Background(), set, cfg, l.records); err != nil {
		t.Fatal(err)
	}
	if l.metrics, err = f.CreateMetrics(context.Background(), set, cfg, l.out); err != nil {
		t.Fatal(err)
	}
	// The simulated processes run on clocks set minutes back, so that a test feeds
	// minutes of them at once; they began after this processor did, which a horizon
	// before their start times says (a first point counts from its start).
	if c, ok := instances.Get(set.ID); ok {
		c.horizon = 0
	}
	host := componenttestHost{}
	for _, c := range []component.Component{l.logs, l.metrics} {
		if err := c.Start(context.Background(), host); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = l.metrics.Shutdown(context.Background())
		_ = l.logs.Shutdown(context.Background())
	})
	return l
}

// loops numbers the loops of a test, so that each has its own processor instance.
var loops atomic.Int64

// componentID is a new instance name for the test's next loop.
func componentID(t testing.TB) component.ID {
	return component.NewIDWithName(metadata.Type, fmt.Sprintf("%s_%d", strings.ReplaceAll(t.Name(), "/", "_"), loops.Add(1)))
}

type componenttestHost struct{ component.Host }

func (componenttestHost) GetExtensions() map[component.ID]component.Component { return nil }

func (l *loop) feed(md pmetric.Metrics) {
	l.t.Helper()
	if err := l.metrics.ConsumeMetrics(context.Background(), md); err != nil {
		l.t.Fatal(err)
	}
}

// rec is one fathom.causal_chain record, flattened.
type rec struct {
	id, state, cause, severity, symptom, evidence, timeline, fix, body string
	cost                                                               float64
	tid, pid                                                           int64
	at                                                                 time.Time
}

func (l *loop) chainRecords() []rec {
	var out []rec
	for _, ld := range l.records.AllLogs() {
		forEachRecord(ld, func(r pcommon.Resource, lr plog.LogRecord) {
			if lr.EventName() != semconv.EventCausalChain {
				return
			}
			a := lr.Attributes()
			str := func(k string) string { v, _ := a.Get(k); return v.AsString() }
			x := rec{id: str(semconv.ChainID), state: str(semconv.ChainState), cause: str(semconv.ChainRootCause),
				severity: str(semconv.ChainSeverity), symptom: str(semconv.ChainSymptom), evidence: str(semconv.ChainEvidence),
				timeline: str(semconv.ChainTimeline), fix: str(semconv.ChainFix), body: lr.Body().AsString(), tid: -1, at: lr.Timestamp().AsTime()}
			if v, ok := a.Get(semconv.ChainCost); ok {
				x.cost = v.Double()
			}
			if v, ok := a.Get(semconv.ThreadID); ok {
				x.tid = v.Int()
			}
			if v, ok := r.Attributes().Get(semconv.ProcessPID); ok {
				x.pid = v.Int()
			}
			out = append(out, x)
		})
	}
	return out
}

func forEachRecord(ld plog.Logs, f func(pcommon.Resource, plog.LogRecord)) {
	for i := 0; i < ld.ResourceLogs().Len(); i++ {
		rl := ld.ResourceLogs().At(i)
		for j := 0; j < rl.ScopeLogs().Len(); j++ {
			lrs := rl.ScopeLogs().At(j).LogRecords()
			for k := 0; k < lrs.Len(); k++ {
				f(rl.Resource(), lrs.At(k))
			}
		}
	}
}
