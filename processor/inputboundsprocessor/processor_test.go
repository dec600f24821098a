package inputboundsprocessor

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/processor/inputboundsprocessor/internal/metadatatest"
)

// hostileLogs is one request: a good record, a record with a 3 MB attribute value, one
// with 20,000 attributes, one whose body is 3 MB of two-byte characters, and one with a
// long value deep in a map; the resource carries a 3 MB value too.
func hostileLogs() plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("host.name", "node-1")
	rl.Resource().Attributes().PutStr("huge", strings.Repeat("r", 3<<20))
	recs := rl.ScopeLogs().AppendEmpty().LogRecords()
	good := recs.AppendEmpty()
	good.Body().SetStr("a good record")
	good.Attributes().PutStr("fathom.chain.cause", "cpu_contention")
	recs.AppendEmpty().Attributes().PutStr("huge", strings.Repeat("x", 3<<20))
	flood := recs.AppendEmpty()
	for i := range 20000 {
		flood.Attributes().PutInt(fmt.Sprintf("a%05d", i), int64(i))
	}
	recs.AppendEmpty().Body().SetStr(strings.Repeat("é", 3<<19))
	nested := recs.AppendEmpty().Attributes().PutEmptyMap("outer").PutEmptySlice("list")
	nested.AppendEmpty().SetStr(strings.Repeat("n", 10000))
	nested.AppendEmpty().SetStr("short")
	return ld
}

func TestHostileLogsAreCutAndCounted(t *testing.T) {
	tt := componenttest.NewTelemetry()
	defer func() { _ = tt.Shutdown(context.Background()) }()
	sink := new(consumertest.LogsSink)
	p, err := NewFactory().CreateLogs(context.Background(), metadatatest.NewSettings(tt), createDefaultConfig(), sink)
	if err != nil {
		t.Fatal(err)
	}
	want := hostileLogs().ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0)
	if err := p.ConsumeLogs(context.Background(), hostileLogs()); err != nil {
		t.Fatal(err)
	}
	got := sink.AllLogs()[0].ResourceLogs().At(0)
	res := got.Resource().Attributes()
	if v, _ := res.Get("huge"); len(v.Str()) != 4096 || cutOf(res) != "attribute_value" {
		t.Errorf("resource: huge value of %d bytes, cut %q; want 4,096 and attribute_value", len(v.Str()), cutOf(res))
	}
	recs := got.ScopeLogs().At(0).LogRecords()
	if recs.Len() != 5 {
		t.Fatalf("%d records passed on, want all 5", recs.Len())
	}
	// The good record passes exactly as sent.
	if !recs.At(0).Attributes().Equal(want.Attributes()) || recs.At(0).Body().Str() != want.Body().Str() {
		t.Errorf("the good record changed: %v", recs.At(0).Attributes().AsRaw())
	}
	if v, _ := recs.At(1).Attributes().Get("huge"); len(v.Str()) != 4096 || cutOf(recs.At(1).Attributes()) != "attribute_value" {
		t.Errorf("record 1: %d bytes, cut %q", len(v.Str()), cutOf(recs.At(1).Attributes()))
	}
	// 128 attributes kept, the first ones sent, and the note (129 in all).
	flood := recs.At(2).Attributes()
	if _, first := flood.Get("a00000"); flood.Len() != 129 || !first || cutOf(flood) != "attributes" {
		t.Errorf("record 2: %d attributes (first kept %v), cut %q; want 128 and the note", flood.Len(), first, cutOf(flood))
	}
	// A body of two-byte characters is cut at a character boundary.
	if body := recs.At(3).Body().Str(); len(body) != 4096 || !utf8Valid(body) || cutOf(recs.At(3).Attributes()) != "attribute_value" {
		t.Errorf("record 3: body of %d bytes (valid UTF-8 %v), cut %q", len(body), utf8Valid(body), cutOf(recs.At(3).Attributes()))
	}
	outer, _ := recs.At(4).Attributes().Get("outer")
	list, _ := outer.Map().Get("list")
	if len(list.Slice().At(0).Str()) != 4096 || list.Slice().At(1).Str() != "short" {
		t.Errorf("record 4: nested values %d bytes and %q", len(list.Slice().At(0).Str()), list.Slice().At(1).Str())
	}
	metadatatest.AssertEqualFathomInputboundsCut(t, tt, []metricdata.DataPoint[int64]{
		{Attributes: attribute.NewSet(attribute.String("reason", "attribute_value")), Value: 4},
		{Attributes: attribute.NewSet(attribute.String("reason", "attributes")), Value: 20000 - 128},
	}, metricdatatest.IgnoreTimestamp())
}

func cutOf(m pcommon.Map) string {
	v, _ := m.Get(semconv.InputCut)
	return v.Str()
}

func utf8Valid(s string) bool { return utf8.ValidString(s) }

// Points that cannot be right are dropped, one by one: a loop signal that is NaN or
// ±Inf (another metric's NaN passes), histograms whose counts do not add up, whose
// bounds do not fit their counts or run backwards, and those over the bucket cap. The
// good points of the same request pass exactly as sent; a metric left with no point is
// dropped.
// hostileMetrics is one request: a loop signal with a good point, NaN and ±Inf; another
// metric's NaN; a loop signal with only NaN; explicit histograms, one good, one whose
// counts do not add up, one whose bounds do not fit, one whose bounds fall, one with
// 2,000 buckets; and two exponential ones, one good and one whose buckets do not add up.
func hostileMetrics() pmetric.Metrics {
	md := pmetric.NewMetrics()
	ms := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics()
	wait := ms.AppendEmpty()
	wait.SetName(semconv.MetricRankDeviceWait)
	g := wait.SetEmptyGauge().DataPoints()
	for _, v := range []float64{0.3, math.NaN(), math.Inf(1), math.Inf(-1)} {
		g.AppendEmpty().SetDoubleValue(v)
	}
	other := ms.AppendEmpty()
	other.SetName("app.temperature")
	other.SetEmptyGauge().DataPoints().AppendEmpty().SetDoubleValue(math.NaN())
	onlyNaN := ms.AppendEmpty()
	onlyNaN.SetName("fathom.rank.host_lead.time")
	onlyNaN.SetEmptySum().DataPoints().AppendEmpty().SetDoubleValue(math.NaN())

	h := ms.AppendEmpty()
	h.SetName("fathom.call.duration")
	hs := h.SetEmptyHistogram().DataPoints()
	add := func(count uint64, counts []uint64, bounds []float64) {
		dp := hs.AppendEmpty()
		dp.SetCount(count)
		dp.BucketCounts().FromRaw(counts)
		dp.ExplicitBounds().FromRaw(bounds)
	}
	add(6, []uint64{1, 2, 3}, []float64{1, 2}) // good
	add(7, []uint64{1, 2, 3}, []float64{1, 2}) // counts do not add up
	add(6, []uint64{1, 2, 3}, []float64{1})    // bounds do not fit
	add(6, []uint64{1, 2, 3}, []float64{2, 1}) // bounds run backwards
	add(2000, make1(2000), seq(1999))          // past the bucket cap
	e := ms.AppendEmpty()
	e.SetName("cuda.call.duration")
	es := e.SetEmptyExponentialHistogram().DataPoints()
	good := es.AppendEmpty()
	good.SetCount(5)
	good.SetZeroCount(1)
	good.Positive().BucketCounts().FromRaw([]uint64{1, 3})
	bad := es.AppendEmpty()
	bad.SetCount(9)
	bad.Positive().BucketCounts().FromRaw([]uint64{1, 3})

	return md
}

func TestPointsThatCannotBeRightAreDropped(t *testing.T) {
	md := hostileMetrics()
	tt := componenttest.NewTelemetry()
	defer func() { _ = tt.Shutdown(context.Background()) }()
	sink := new(consumertest.MetricsSink)
	p, err := NewFactory().CreateMetrics(context.Background(), metadatatest.NewSettings(tt), createDefaultConfig(), sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ConsumeMetrics(context.Background(), md); err != nil {
		t.Fatal(err)
	}
	got := sink.AllMetrics()[0].ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	names := map[string]pmetric.Metric{}
	for _, m := range got.All() {
		names[m.Name()] = m
	}
	if _, ok := names["fathom.rank.host_lead.time"]; ok || len(names) != 4 {
		t.Errorf("metrics passed on: %v; want the one with no finite point dropped", keys(names))
	}
	if dps := names[semconv.MetricRankDeviceWait].Gauge().DataPoints(); dps.Len() != 1 || dps.At(0).DoubleValue() != 0.3 {
		t.Errorf("device wait: %d points", dps.Len())
	}
	if dps := names["app.temperature"].Gauge().DataPoints(); dps.Len() != 1 {
		t.Errorf("a metric outside finite_prefixes lost its NaN point")
	}
	if dps := names["fathom.call.duration"].Histogram().DataPoints(); dps.Len() != 1 || dps.At(0).Count() != 6 {
		t.Errorf("histogram: %d points left, want the good one", dps.Len())
	}
	if dps := names["cuda.call.duration"].ExponentialHistogram().DataPoints(); dps.Len() != 1 || dps.At(0).Count() != 5 {
		t.Errorf("exponential histogram: %d points left, want the good one", dps.Len())
	}
	metadatatest.AssertEqualFathomInputboundsCut(t, tt, []metricdata.DataPoint[int64]{
		{Attributes: attribute.NewSet(attribute.String("reason", "not_finite")), Value: 4},
		{Attributes: attribute.NewSet(attribute.String("reason", "histogram_inconsistent")), Value: 4},
		{Attributes: attribute.NewSet(attribute.String("reason", "histogram_buckets")), Value: 1},
	}, metricdatatest.IgnoreTimestamp())
}

func make1(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

func seq(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i + 1)
	}
	return out
}

func keys(m map[string]pmetric.Metric) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
