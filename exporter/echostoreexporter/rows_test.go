package echostoreexporter

import (
	"encoding/json"
	"math"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/echoschema"
)

func TestMetricRowsLiftColumnsAndSummariseHistograms(t *testing.T) {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	res := rm.Resource().Attributes()
	res.PutStr("fathom.cluster.name", "c1")
	res.PutStr("host.name", "gpu-07")
	res.PutInt("fathom.world_size", 64)
	res.PutStr("cloud.provider", "aws")
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	ts := pcommon.NewTimestampFromTime(time.Unix(1_700_000_000, 0))

	g := ms.AppendEmpty()
	g.SetName("host.run_queue.wait")
	g.SetUnit("s")
	gp := g.SetEmptyGauge().DataPoints().AppendEmpty()
	gp.SetTimestamp(ts)
	gp.SetIntValue(3)
	gp.Attributes().PutStr("fathom.rank", "5") // a rank typed as a string still lands
	gp.Attributes().PutStr("note", "quote\" and \x01")

	h := ms.AppendEmpty()
	h.SetName("cuda.kernel.duration")
	h.SetUnit("ms")
	hp := h.SetEmptyHistogram().DataPoints().AppendEmpty()
	hp.SetTimestamp(ts)
	hp.ExplicitBounds().FromRaw([]float64{1, 2, 4})
	hp.BucketCounts().FromRaw([]uint64{0, 50, 40, 10}) // 100 values
	hp.SetCount(100)
	hp.SetSum(250)
	hp.SetMin(1.5)
	hp.SetMax(8)
	hp.Attributes().PutStr("cuda.api.name", "cudaLaunchKernel")

	e := ms.AppendEmpty()
	e.SetName("nccl.allreduce.duration")
	ep := e.SetEmptyExponentialHistogram().DataPoints().AppendEmpty()
	ep.SetTimestamp(ts)
	ep.SetStartTimestamp(ts - 30e9)
	ep.SetScale(0) // buckets (2^i, 2^(i+1)]
	ep.Positive().SetOffset(0)
	ep.Positive().BucketCounts().FromRaw([]uint64{10, 10}) // (1,2] and (2,4]
	ep.SetCount(20)
	ep.SetSum(50)
	ep.Attributes().PutStr("nccl.op", "allreduce")

	rows, _ := metricRows(nil, md)
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rows))
	}
	gr := rows[0]
	if gr.Kind != echoschema.KindGauge || gr.Cluster != "c1" || gr.Node != "gpu-07" || gr.Rank != 5 ||
		gr.WorldSize != 64 || gr.Value != 3 || gr.Unit != "s" || !gr.Time.Equal(time.Unix(1_700_000_000, 0)) {
		t.Fatalf("gauge row: %+v", gr)
	}
	var attrs map[string]any
	if err := json.Unmarshal([]byte(gr.Attributes), &attrs); err != nil {
		t.Fatalf("attributes %q: %v", gr.Attributes, err)
	}
	if attrs["cloud.provider"] != "aws" || attrs["note"] != "quote\" and \x01" || len(attrs) != 2 {
		t.Fatalf("attributes: %v", attrs)
	}
	hr := rows[1]
	// p50: rank 50 falls at the top of the (1,2] bucket, clamped below by min 1.5.
	// p95: rank 95 is half way through (4,+inf), clamped above by max 8 -> 6.
	if hr.API != "cudaLaunchKernel" || hr.Count != 100 || hr.Value != 2.5 || hr.P50 != 2 || hr.P95 != 6 || hr.Min != 1.5 {
		t.Fatalf("histogram row: %+v", hr)
	}
	er := rows[2]
	if er.API != "allreduce" || er.P50 != 2 || math.Abs(er.P99-3.96) > 1e-9 || er.Value != 2.5 {
		t.Fatalf("exp histogram row: %+v", er)
	}
	// What a window's totals need: when the series began, and the buckets.
	if !er.Start.Equal(time.Unix(1_700_000_000-30, 0)) || er.Scale != 0 || er.BucketOffset != 0 || er.ZeroCount != 0 ||
		!slices.Equal(er.BucketCounts, []uint64{10, 10}) || er.Bounds != nil {
		t.Fatalf("exp histogram buckets: %+v", er)
	}
	if !hr.Start.IsZero() || !slices.Equal(hr.Bounds, []float64{1, 2, 4}) || !slices.Equal(hr.BucketCounts, []uint64{0, 50, 40, 10}) {
		t.Fatalf("histogram buckets: %+v", hr)
	}
	if !gr.Start.IsZero() || gr.BucketCounts != nil {
		t.Fatalf("gauge row has a start or buckets: %+v", gr)
	}
}

// TestSumAndHistogramRowsCarryTheirTemporality: a window total is "last minus the point
// before" for cumulative series and "the sum" for delta ones, so the row must say which;
// gauges have none, and the exporter's own member wins over a sender's attribute.
func TestSumAndHistogramRowsCarryTheirTemporality(t *testing.T) {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("host.name", "gpu-1")
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	cum := ms.AppendEmpty()
	cum.SetName("host.process.forks")
	cum.SetEmptySum().SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	cum.Sum().DataPoints().AppendEmpty().SetIntValue(3)
	del := ms.AppendEmpty()
	del.SetName("host.thread.off_cpu.duration")
	del.SetEmptyExponentialHistogram().SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	dp := del.ExponentialHistogram().DataPoints().AppendEmpty()
	dp.Attributes().PutStr("fathom.metric.temporality", "cumulative") // a sender's claim
	dp.Attributes().PutStr("fathom.thread.role", "cuda")
	g := ms.AppendEmpty()
	g.SetName("gauge")
	g.SetEmptyGauge().DataPoints().AppendEmpty().SetDoubleValue(1)

	rows, _ := metricRows(nil, md)
	want := []string{
		`{"fathom.metric.temporality":"cumulative"}`,
		`{"fathom.metric.temporality":"delta","fathom.metric.temporality":"cumulative","fathom.thread.role":"cuda"}`,
		`{}`,
	}
	for i, r := range rows {
		if r.Attributes != want[i] {
			t.Errorf("row %d (%s): attributes %s, want %s", i, r.Name, r.Attributes, want[i])
		}
	}
}

// The gpuebpf receiver's fathom.node.check record (a map body, list attributes) lands
// with its body and its lists as JSON that the Echo store's node_readiness reads back.
func TestNodeCheckRecordKeepsItsChecksQueryable(t *testing.T) {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("host.name", "gpu-1")
	lr := rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	lr.SetEventName("fathom.node.check")
	lr.Attributes().PutBool("fathom.node.ready", false)
	lr.Attributes().PutEmptySlice("fathom.node.checks.failed").AppendEmpty().SetStr("privileges")
	body := lr.Body().SetEmptyMap()
	body.PutStr("kernel", "6.8.0")
	c := body.PutEmptySlice("checks").AppendEmpty().SetEmptyMap()
	c.PutStr("name", "privileges")
	c.PutBool("ok", false)

	rows, _ := logRows(nil, ld)
	if len(rows) != 1 || rows[0].Name != "fathom.node.check" || rows[0].Node != "gpu-1" ||
		rows[0].Attributes != `{"fathom.node.ready":false,"fathom.node.checks.failed":["privileges"]}` ||
		rows[0].Body != `{"checks":[{"name":"privileges","ok":false}],"kernel":"6.8.0"}` {
		t.Fatalf("row: %+v", rows)
	}
}
