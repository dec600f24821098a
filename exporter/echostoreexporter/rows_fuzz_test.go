package echostoreexporter

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"

	"github.com/fathom-gpu/fathom/extension/echoextension"
	"github.com/fathom-gpu/fathom/internal/echoschema"
)

// The fuzz targets start from OTLP protobuf bytes, as the gateway's receiver gets them:
// whatever pdata accepts must become rows that the real Echo store takes. A request
// pdata refuses is answered 400 by the receiver and never reaches the exporter.

// startStore opens a real Echo store in a temporary directory, the writer the exporter
// hands its rows to in the gateway.
func startStore(tb testing.TB) echoextension.RowWriter {
	tb.Helper()
	factory := echoextension.NewFactory()
	cfg := factory.CreateDefaultConfig()
	conf := confmap.NewFromStringMap(map[string]any{"path": filepath.Join(tb.TempDir(), "echo.duckdb"), "threads": 1})
	if err := conf.Unmarshal(cfg); err != nil {
		tb.Fatal(err)
	}
	ext, err := factory.Create(context.Background(), extensiontest.NewNopSettings(factory.Type()), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := ext.Shutdown(context.Background()); err != nil {
			tb.Error(err)
		}
	})
	return ext.(echoextension.RowWriter)
}

// checkRows holds for every row of any batch: the attributes are one JSON object, a
// structured body is JSON, and the names the store needs are there.
func checkRows(t *testing.T, rows []echoschema.Row) {
	t.Helper()
	for i, r := range rows {
		var attrs map[string]any
		if err := json.Unmarshal([]byte(r.Attributes), &attrs); err != nil {
			t.Fatalf("row %d: attributes %q are not a JSON object: %v", i, r.Attributes, err)
		}
		if !utf8.ValidString(r.Attributes) {
			t.Fatalf("row %d: attributes are not UTF-8: %q", i, r.Attributes)
		}
		if r.Kind == "" {
			t.Fatalf("row %d: no kind", i)
		}
		if r.Kind == echoschema.KindLog && r.Name == "" {
			t.Fatalf("row %d: log row without a name", i)
		}
	}
}

func writeRows(t *testing.T, w echoextension.RowWriter, rows []echoschema.Row) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.AppendRows(ctx, rows); err != nil {
		t.Fatalf("store refused %d rows: %v", len(rows), err)
	}
}

func logsRequest(ld plog.Logs) []byte {
	raw, err := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	if err != nil {
		panic(err)
	}
	return raw
}

func metricsRequestBytes(md pmetric.Metrics) []byte {
	raw, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
	if err != nil {
		panic(err)
	}
	return raw
}

// TestHugeAttributeIsStoredWhole: a 1 MiB attribute value and a 64 KiB key, full of
// characters JSON must escape, are written out whole and escaped, and the store takes
// the row.
func TestHugeAttributeIsStoredWhole(t *testing.T) {
	ld := plog.NewLogs()
	lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	key, value := strings.Repeat("k", 64<<10), strings.Repeat("v\x00\"\\", 256<<10)
	lr.Attributes().PutStr(key, value)
	rows, truncated := logRows(nil, ld)
	if len(rows) != 1 || truncated != 0 {
		t.Fatalf("%d rows, %d truncated", len(rows), truncated)
	}
	want := `{"` + key + `":"` + strings.Repeat(`v\u0000\"\\`, 256<<10) + `"}`
	if rows[0].Attributes != want {
		t.Fatalf("attributes: %d bytes, want %d", len(rows[0].Attributes), len(want))
	}
	writeRows(t, startStore(t), rows)
}

// logSeeds are requests at the edges: empty, empty and huge attributes, invalid UTF-8,
// NaN and infinite numbers in bodies and nested maps, no timestamps, deep nesting.
func logSeeds() [][]byte {
	var seeds [][]byte
	seeds = append(seeds, logsRequest(plog.NewLogs()))

	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("", "")
	rl.Resource().Attributes().PutStr("host.name", "gpu-1")
	rl.Resource().Attributes().PutInt("fathom.rank", -7)
	rl.Resource().Attributes().PutDouble("fathom.world_size", math.Inf(1))
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	lrs.AppendEmpty() // no timestamp, no body, no name
	lr := lrs.AppendEmpty()
	lr.SetTimestamp(pcommon.Timestamp(math.MaxUint64))
	lr.Body().SetDouble(math.NaN())
	// Big enough to cross DuckDB's inline string size many times, small enough that the
	// fuzzer's mutations of this seed stay quick; TestHugeAttributeIsStoredWhole goes
	// to a MiB.
	lr.Attributes().PutStr(strings.Repeat("k", 3000), strings.Repeat("v\x00\"\\", 1000))
	lr.Attributes().PutStr("bad utf8 \xff", "\xc3\x28 \xed\xa0\x80")
	lr = lrs.AppendEmpty()
	lr.Body().SetStr("\xff\xfe not UTF-8")
	lr.SetSeverityNumber(plog.SeverityNumber(99))
	lr = lrs.AppendEmpty()
	m := lr.Body().SetEmptyMap()
	m.PutDouble("nan", math.NaN())
	m.PutDouble("inf", math.Inf(-1))
	m.PutEmptyBytes("raw").FromRaw([]byte{0, 1, 2, 0xff})
	m.PutStr("dup", "first")
	m.PutStr("dup", "second")
	lr.Attributes().PutEmptyMap("nested").PutDouble("nan", math.NaN())
	lr.Attributes().PutEmptySlice("list").AppendEmpty().SetDouble(math.Inf(1))
	lr = lrs.AppendEmpty()
	v := lr.Body().SetEmptyMap()
	for range MaxValueDepth + 2 {
		v = v.PutEmptyMap("k")
	}
	seeds = append(seeds, logsRequest(ld))
	seeds = append(seeds, nestedLogsRequest(MaxValueDepth+1, nestKVList))
	seeds = append(seeds, nestedLogsRequest(200, nestArray))
	return seeds
}

func FuzzLogRows(f *testing.F) {
	for _, s := range logSeeds() {
		f.Add(s)
	}
	w := startStore(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		req := plogotlp.NewExportRequest()
		if err := req.UnmarshalProto(raw); err != nil {
			return
		}
		ld := req.Logs()
		rows, truncated := logRows(nil, ld)
		if len(rows) != ld.LogRecordCount() || truncated < 0 {
			t.Fatalf("%d rows (%d truncated values) for %d log records", len(rows), truncated, ld.LogRecordCount())
		}
		checkRows(t, rows)
		for i, r := range rows {
			if b := r.Body; strings.HasPrefix(b, "{") && !json.Valid([]byte(b)) {
				t.Fatalf("row %d: structured body is not JSON: %q", i, b)
			}
		}
		writeRows(t, w, rows)
	})
}

// metricSeeds have histograms whose buckets disagree with their bounds and count,
// exponential histograms at the scale and offset extremes, NaN and infinite values,
// and points without timestamps.
func metricSeeds() [][]byte {
	var seeds [][]byte
	seeds = append(seeds, metricsRequestBytes(pmetric.NewMetrics()))

	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("host.name", "gpu-1")
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()

	g := ms.AppendEmpty()
	g.SetName("gauge")
	g.SetEmptyGauge().DataPoints().AppendEmpty().SetDoubleValue(math.NaN())
	g.Gauge().DataPoints().AppendEmpty().SetDoubleValue(math.Inf(-1))
	g.Gauge().DataPoints().AppendEmpty().SetIntValue(math.MinInt64)

	h := ms.AppendEmpty()
	h.SetName("histogram")
	hist := h.SetEmptyHistogram()
	// More buckets than bounds+1, a count that is not their sum, min above max.
	hp := hist.DataPoints().AppendEmpty()
	hp.ExplicitBounds().FromRaw([]float64{1})
	hp.BucketCounts().FromRaw([]uint64{5, 5, 5, 5})
	hp.SetCount(3)
	hp.SetSum(math.Inf(1))
	hp.SetMin(10)
	hp.SetMax(-10)
	// Fewer buckets than bounds, unsorted and NaN bounds, counts that overflow a sum.
	hp = hist.DataPoints().AppendEmpty()
	hp.ExplicitBounds().FromRaw([]float64{5, math.NaN(), 1, math.Inf(-1)})
	hp.BucketCounts().FromRaw([]uint64{math.MaxUint64, math.MaxUint64})
	hp.SetCount(math.MaxUint64)
	hp.SetSum(math.NaN())
	// Bounds and no buckets.
	hp = hist.DataPoints().AppendEmpty()
	hp.ExplicitBounds().FromRaw([]float64{1, 2, 3})

	e := ms.AppendEmpty()
	e.SetName("exponential")
	eh := e.SetEmptyExponentialHistogram()
	for _, scale := range []int32{math.MinInt32, -10, 20, math.MaxInt32} {
		ep := eh.DataPoints().AppendEmpty()
		ep.SetScale(scale)
		ep.SetZeroCount(1)
		ep.Positive().SetOffset(math.MaxInt32)
		ep.Positive().BucketCounts().FromRaw([]uint64{1, 2, 3})
		ep.Negative().SetOffset(math.MinInt32)
		ep.Negative().BucketCounts().FromRaw([]uint64{4, 5})
		ep.SetCount(1)
		ep.SetMin(math.NaN())
		ep.SetMax(math.Inf(1))
	}

	s := ms.AppendEmpty()
	s.SetName("summary")
	sp := s.SetEmptySummary().DataPoints().AppendEmpty()
	sp.SetCount(0)
	sp.SetSum(math.Inf(1))
	q := sp.QuantileValues().AppendEmpty()
	q.SetQuantile(math.NaN())
	q.SetValue(1)

	sum := ms.AppendEmpty()
	sum.SetEmptySum().SetAggregationTemporality(pmetric.AggregationTemporality(42))
	sum.Sum().DataPoints().AppendEmpty().Attributes().PutEmptyMap("m").PutDouble("nan", math.NaN())

	seeds = append(seeds, metricsRequestBytes(md))
	return seeds
}

func FuzzMetricRows(f *testing.F) {
	for _, s := range metricSeeds() {
		f.Add(s)
	}
	w := startStore(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		req := pmetricotlp.NewExportRequest()
		if err := req.UnmarshalProto(raw); err != nil {
			return
		}
		md := req.Metrics()
		rows, truncated := metricRows(nil, md)
		if len(rows) != md.DataPointCount() || truncated < 0 {
			t.Fatalf("%d rows (%d truncated values) for %d data points", len(rows), truncated, md.DataPointCount())
		}
		checkRows(t, rows)
		writeRows(t, w, rows)
	})
}
