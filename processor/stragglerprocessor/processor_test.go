package stragglerprocessor

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/processor/stragglerprocessor/internal/metadata"
)

// putRankResource fills a rank process's resource as the gpuebpf receiver does, in
// cluster c1 with pid 4000+rank; an empty job leaves fathom.job.name out.
func putRankResource(res pcommon.Map, node, cohort, job string, rank int64) {
	res.PutStr(semconv.HostName, node)
	res.PutStr(semconv.ClusterName, "c1")
	res.PutStr(semconv.Cohort, cohort)
	if job != "" {
		res.PutStr(semconv.JobName, job)
	}
	res.PutInt(semconv.Rank, rank)
	res.PutInt(semconv.ProcessPID, 4000+rank)
}

// nodeRequest is one node collector's export: a resource per rank process with its
// cumulative device wait, as the gpuebpf receiver sends it.
func nodeRequest(node string, ranks []int64, totals map[int64]float64, start, ts time.Time) pmetric.Metrics {
	md := pmetric.NewMetrics()
	for _, rank := range ranks {
		rm := md.ResourceMetrics().AppendEmpty()
		putRankResource(rm.Resource().Attributes(), node, "comm-1", "llama", rank)
		ms := rm.ScopeMetrics().AppendEmpty().Metrics()
		other := ms.AppendEmpty() // passes through, not a signal
		other.SetName(semconv.MetricCUDAAPICalls)
		other.SetEmptySum().SetIsMonotonic(true)
		other.Sum().DataPoints().AppendEmpty().SetIntValue(7)
		m := ms.AppendEmpty()
		m.SetName(semconv.MetricRankDeviceWait)
		m.SetUnit("s")
		sum := m.SetEmptySum()
		sum.SetIsMonotonic(true)
		sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		dp := sum.DataPoints().AppendEmpty()
		dp.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		dp.SetTimestamp(pcommon.NewTimestampFromTime(ts))
		dp.SetDoubleValue(totals[rank])
	}
	return md
}

// Through the factory, as the gateway runs it: the same `straggler` in a metrics and a
// logs pipeline. Eight ranks on four nodes send their device wait each second; rank 5
// waits far less from interval 10. Requests pass through unchanged; exactly one
// fathom.straggler record names rank 5 and its node, with the numbers; the gauges flag
// rank 5 alone; the processor's own telemetry counts the record.
func TestTheGatewayFlagsASlowRankThroughItsPipelines(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	set := processortest.NewNopSettings(metadata.Type)
	set.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	p := startPipelines(t, set, createDefaultConfig())
	mp, lp, s, metricsOut, logsOut := p.metrics, p.logs, p.s, p.metricsOut, p.logsOut
	ctx := context.Background()
	start := time.Unix(1_800_000_000, 0)
	sent := slowRankScenario(t, mp, s, start, func(c time.Time) { p.clock = c })
	// The nodes' requests, each passed on as it came, then gauge batches.
	all := metricsOut.AllMetrics()
	passed := 0
	for _, md := range all {
		if md.ResourceMetrics().At(0).Resource().Attributes().Len() > 0 {
			if _, ok := md.ResourceMetrics().At(0).Resource().Attributes().Get(semconv.ProcessPID); ok {
				passed++
				if md.MetricCount() != 4 {
					t.Fatalf("a node request lost or gained metrics: %d", md.MetricCount())
				}
			}
		}
	}
	if passed != sent {
		t.Errorf("%d node requests passed on, %d sent", passed, sent)
	}
	flags := map[int64]float64{}
	last := all[len(all)-1]
	ms := last.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	for i := range ms.Len() {
		if m := ms.At(i); m.Name() == semconv.MetricStragglerFlag {
			for j := range m.Gauge().DataPoints().Len() {
				dp := m.Gauge().DataPoints().At(j)
				r, _ := dp.Attributes().Get(semconv.Rank)
				flags[r.Int()] = dp.DoubleValue()
			}
		}
	}
	if len(flags) != 8 || flags[5] != 1 || flags[0]+flags[1]+flags[2]+flags[3]+flags[4]+flags[6]+flags[7] != 0 {
		t.Errorf("last flags %v, want rank 5 alone", flags)
	}
	// While flagged (intervals 13 to 20), rank 5 cost its seven peers 0.301-0.1 s of
	// waiting per second each: 1.407 GPU-seconds an interval, one delta point each.
	var lost []string
	for _, md := range all {
		for i := range md.ResourceMetrics().Len() {
			ms := md.ResourceMetrics().At(i).ScopeMetrics().At(0).Metrics()
			for j := range ms.Len() {
				m := ms.At(j)
				if m.Name() != semconv.MetricStragglerTimeLost {
					continue
				}
				if m.Unit() != "s" || m.Sum().AggregationTemporality() != pmetric.AggregationTemporalityDelta {
					t.Errorf("%s: unit %q, %v", m.Name(), m.Unit(), m.Sum().AggregationTemporality())
				}
				for k := range m.Sum().DataPoints().Len() {
					dp := m.Sum().DataPoints().At(k)
					a := dp.Attributes().AsRaw()
					lost = append(lost, fmt.Sprintf("rank %v of %v on %v by %v: %.6f over %v..%v", a[semconv.Rank], a[semconv.WorldSize], a[semconv.HostName], a[semconv.StragglerSignal],
						dp.DoubleValue(), dp.StartTimestamp().AsTime().Sub(start), dp.Timestamp().AsTime().Sub(start)))
				}
			}
		}
	}
	var want []string
	for i := 13; i <= 20; i++ {
		want = append(want, fmt.Sprintf("rank 5 of 8 on node-2 by %s: 1.407000 over %v..%v", semconv.MetricRankDeviceWait, time.Duration(i-1)*time.Second, time.Duration(i)*time.Second))
	}
	if strings.Join(lost, "\n") != strings.Join(want, "\n") {
		t.Errorf("time lost:\n%s\nwant\n%s", strings.Join(lost, "\n"), strings.Join(want, "\n"))
	}

	var records []plog.LogRecord
	var resources []pcommon.Map
	for _, ld := range logsOut.AllLogs() {
		for i := range ld.ResourceLogs().Len() {
			rl := ld.ResourceLogs().At(i)
			lrs := rl.ScopeLogs().At(0).LogRecords()
			for j := range lrs.Len() {
				records = append(records, lrs.At(j))
				resources = append(resources, rl.Resource().Attributes())
			}
		}
	}
	if len(records) != 1 {
		t.Fatalf("%d fathom.straggler records, want 1", len(records))
	}
	lr, res := records[0], resources[0]
	attr := func(m pcommon.Map, k string) string {
		v, _ := m.Get(k)
		return v.AsString()
	}
	// Interval 11 is the first beyond; with persistence 3 of 4 it is flagged at 13.
	if lr.EventName() != semconv.EventStraggler || lr.SeverityText() != "WARN" ||
		attr(res, semconv.HostName) != "node-2" || attr(res, semconv.Rank) != "5" || attr(res, semconv.Cohort) != "comm-1" ||
		attr(res, semconv.ClusterName) != "c1" || attr(res, semconv.JobName) != "llama" ||
		attr(lr.Attributes(), semconv.StragglerState) != "straggler" || attr(lr.Attributes(), semconv.StragglerSignal) != semconv.MetricRankDeviceWait ||
		attr(lr.Attributes(), semconv.StragglerSince) != start.Add(11*time.Second).UTC().Format(time.RFC3339Nano) ||
		!lr.Timestamp().AsTime().Equal(start.Add(13*time.Second)) {
		t.Errorf("record: %s %s at %v; resource %v; attributes %v", lr.EventName(), lr.SeverityText(), lr.Timestamp().AsTime(), res.AsRaw(), lr.Attributes().AsRaw())
	}
	if v, _ := lr.Attributes().Get(semconv.StragglerValue); v.Double() < 0.0999 || v.Double() > 0.1001 {
		t.Errorf("value %v, want 0.10 s/s", v.Double())
	}
	if body := lr.Body().Str(); !strings.HasPrefix(body, "rank 5 on node-2 is a straggler in comm-1: fathom.rank.device_wait.time 0.1/s vs cohort median 0.301/s (line 0.2341/s, lower is worse)") {
		t.Errorf("body: %s", body)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					got[m.Name] += dp.Value
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					got[m.Name] = dp.Value
				}
			}
		}
	}
	if got["otelcol_fathom_straggler_events"] != 1 || got["otelcol_fathom_straggler_cohorts"] != 1 || got["otelcol_fathom_straggler_ranks"] != 8 {
		t.Errorf("telemetry %v, want 1 event, 1 cohort, 8 ranks", got)
	}
	for _, c := range []interface{ Shutdown(context.Context) error }{mp, lp} {
		if err := c.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if instances.Len() != 0 {
		t.Errorf("the shared instance outlived both pipelines")
	}
}

// slowRankScenario sends 20 one-second intervals of eight ranks on four nodes, rank 5
// waiting far less from interval 11, evaluating after each; it returns the requests sent.
func slowRankScenario(t *testing.T, mp processor.Metrics, s *straggler, start time.Time, setClock func(time.Time)) int {
	t.Helper()
	ctx := context.Background()
	totals := map[int64]float64{}
	sent := 0
	for i := 1; i <= 20; i++ {
		now := start.Add(time.Duration(i) * time.Second)
		setClock(now)
		for rank := range int64(8) {
			rate := 0.30 + 0.002*float64(rank%3)
			if rank == 5 && i > 10 {
				rate = 0.10
			}
			totals[rank] += rate
		}
		for node := range 4 {
			ranks := []int64{int64(2 * node), int64(2*node + 1)}
			if err := mp.ConsumeMetrics(ctx, nodeRequest(fmt.Sprintf("node-%d", node), ranks, totals, start, now)); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		s.evaluate(ctx)
	}
	return sent
}

// Started, the processor judges on its own every evaluation_interval: gauges arrive in
// the metrics pipeline without anyone calling it.
func TestTheProcessorEvaluatesOnItsOwn(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.EvaluationInterval = 20 * time.Millisecond
	out := new(consumertest.MetricsSink)
	ctx := context.Background()
	mp, err := NewFactory().CreateMetrics(ctx, processortest.NewNopSettings(metadata.Type), cfg, out)
	if err != nil {
		t.Fatal(err)
	}
	if err := mp.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	defer mp.Shutdown(ctx)
	feedTwoIntervals(t, mp)
	deadline := time.Now().Add(10 * time.Second)
	for out.DataPointCount() <= 2*3*2 { // the two requests' points
		if time.Now().After(deadline) {
			t.Fatal("no gauges from the evaluation loop")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pipelines is one straggler processor in a metrics and a logs pipeline, as a collector
// runs it, evaluated by hand on the test's clock.
type pipelines struct {
	metrics    processor.Metrics
	logs       processor.Logs
	s          *straggler
	metricsOut *consumertest.MetricsSink
	logsOut    *consumertest.LogsSink
	clock      time.Time
}

func startPipelines(t *testing.T, set processor.Settings, cfg *Config) *pipelines {
	t.Helper()
	cfg.EvaluationInterval = time.Hour // evaluated by hand, on the test's clock
	p := &pipelines{metricsOut: new(consumertest.MetricsSink), logsOut: new(consumertest.LogsSink)}
	ctx := context.Background()
	var err error
	if p.metrics, err = NewFactory().CreateMetrics(ctx, set, cfg, p.metricsOut); err != nil {
		t.Fatal(err)
	}
	if p.logs, err = NewFactory().CreateLogs(ctx, set, cfg, p.logsOut); err != nil {
		t.Fatal(err)
	}
	for _, c := range []interface {
		Start(context.Context, component.Host) error
	}{p.metrics, p.logs} {
		if err := c.Start(ctx, componenttest.NewNopHost()); err != nil {
			t.Fatal(err)
		}
	}
	p.s, _ = instances.Get(set.ID)
	p.s.now = func() time.Time { return p.clock }
	return p
}

// With pass_through off (a gateway that runs the loop and leaves storing to others),
// the nodes' requests and records stop here and only what the processor writes goes on:
// its gauges, and the record that names rank 5.
func TestPassThroughOffForwardsOnlyWhatTheProcessorWrites(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.PassThrough = false
	p := startPipelines(t, processortest.NewNopSettings(metadata.Type), cfg)
	mp, lp, s, metricsOut, logsOut := p.metrics, p.logs, p.s, p.metricsOut, p.logsOut
	ctx := context.Background()
	defer mp.Shutdown(ctx)
	defer lp.Shutdown(ctx)
	start := time.Unix(1_800_000_000, 0)
	node := plog.NewLogs()
	node.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().Body().SetStr("a node's record")
	if err := lp.ConsumeLogs(ctx, node); err != nil {
		t.Fatal(err)
	}
	slowRankScenario(t, mp, s, start, func(c time.Time) { p.clock = c })
	gauges := 0
	for _, md := range metricsOut.AllMetrics() {
		for i := range md.ResourceMetrics().Len() {
			if _, ok := md.ResourceMetrics().At(i).Resource().Attributes().Get(semconv.ProcessPID); ok {
				t.Fatal("a node's request went on past the processor")
			}
			gauges++
		}
	}
	var bodies []string
	for _, ld := range logsOut.AllLogs() {
		for i := range ld.ResourceLogs().Len() {
			lrs := ld.ResourceLogs().At(i).ScopeLogs().At(0).LogRecords()
			for j := range lrs.Len() {
				bodies = append(bodies, lrs.At(j).Body().Str())
			}
		}
	}
	if gauges == 0 || len(bodies) != 1 || !strings.HasPrefix(bodies[0], "rank 5 on node-2 is a straggler") {
		t.Errorf("%d gauge resources; records %q: want the gauges and rank 5's record alone", gauges, bodies)
	}
}

// stoppedExporter stands for an exporter that was shut down and waits for a write's
// result (the duckdb exporter's queue): a write to it blocks until its context ends.
type stoppedExporter struct {
	consumertest.MetricsSink
	stopped   atomic.Bool
	lateCalls atomic.Int64
}

func (e *stoppedExporter) ConsumeMetrics(ctx context.Context, md pmetric.Metrics) error {
	if e.stopped.Load() {
		e.lateCalls.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	return e.MetricsSink.ConsumeMetrics(ctx, md)
}

// The collector shuts its pipelines down from the receivers on, so once the straggler
// processor of one pipeline is shut down, the exporters after it may be too. The
// evaluation loop, which writes into both pipelines, ends at that first shutdown: no
// gauge goes to the metrics pipeline's stopped exporter after it, and the second
// shutdown returns at once. (A CI gateway hung 30 s in its shutdown when the loop
// ran until the last.)
func TestTheLoopEndsAtTheFirstShutdown(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.EvaluationInterval = 10 * time.Millisecond
	set := processortest.NewNopSettings(metadata.Type)
	set.ID = component.MustNewIDWithName(metadata.Type.String(), "first-shutdown")
	ctx := context.Background()
	metricsOut, logsOut := new(stoppedExporter), new(consumertest.LogsSink)
	mp, err := NewFactory().CreateMetrics(ctx, set, cfg, metricsOut)
	if err != nil {
		t.Fatal(err)
	}
	lp, err := NewFactory().CreateLogs(ctx, set, cfg, logsOut)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []component.Component{mp, lp} {
		if err := c.Start(ctx, componenttest.NewNopHost()); err != nil {
			t.Fatal(err)
		}
	}
	feedTwoIntervals(t, mp)
	collectortest.WaitFor(t, "gauges from the evaluation loop", 10*time.Second, func() bool { return metricsOut.DataPointCount() > 2*3*2 })

	if err := lp.Shutdown(ctx); err != nil { // the logs pipeline's processor first
		t.Fatal(err)
	}
	metricsOut.stopped.Store(true) // then, as the collector may, the metrics exporter
	time.Sleep(10 * cfg.EvaluationInterval)
	if n := metricsOut.lateCalls.Load(); n != 0 {
		t.Errorf("%d writes into the stopped exporter after the first shutdown", n)
	}
	done := make(chan error, 1)
	go func() { done <- mp.Shutdown(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second shutdown did not return")
	}
}

// feedTwoIntervals sends node-0's three ranks, waiting 0.3 s per second each, over the
// last two seconds: one sample per rank, enough for the loop to draw a line.
func feedTwoIntervals(t *testing.T, mp processor.Metrics) {
	t.Helper()
	now := time.Now()
	totals := map[int64]float64{0: 1, 1: 1, 2: 1}
	for _, ts := range []time.Time{now.Add(-time.Second), now} {
		if err := mp.ConsumeMetrics(context.Background(), nodeRequest("node-0", []int64{0, 1, 2}, totals, now.Add(-time.Minute), ts)); err != nil {
			t.Fatal(err)
		}
		for r := range totals {
			totals[r] += 0.3
		}
	}
}
