package echoextension

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fathom-gpu/fathom/extension/echoextension/internal/metadata"
	"github.com/fathom-gpu/fathom/internal/echoschema"
)

func rowsAt(n int, ts time.Time) []echoschema.Row {
	rows := make([]echoschema.Row, n)
	for i := range rows {
		r := echoschema.NewRow()
		r.Time, r.Kind, r.Name, r.Node, r.Value = ts, echoschema.KindGauge, "host.cpu", "n1", float64(i)
		rows[i] = r
	}
	return rows
}

// The running extension applies retention beside ingest and counts what it removed in
// its own telemetry.
func TestRetentionLoopDeletesAndCounts(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	set := extensiontest.NewNopSettings(metadata.Type)
	set.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	cfg := createDefaultConfig().(*Config)
	cfg.Path = filepath.Join(t.TempDir(), "echo.duckdb")
	cfg.Retention = RetentionConfig{MaxAge: time.Hour, CheckInterval: 20 * time.Millisecond}
	ext, err := NewFactory().Create(context.Background(), set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	defer ext.Shutdown(context.Background())
	w := ext.(RowWriter)
	if err := w.AppendRows(context.Background(), rowsAt(300, time.Now().Add(-2*time.Hour))); err != nil {
		t.Fatal(err)
	}
	if err := w.AppendRows(context.Background(), rowsAt(200, time.Now())); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		if deletedRows(rm) == 300 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retention did not count 300 deleted rows: %+v", rm)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var left int
	if err := ext.(*echoExtension).store.DB().QueryRow(`SELECT count(*) FROM events`).Scan(&left); err != nil || left != 200 {
		t.Fatalf("%d rows left (%v), want the 200 recent ones", left, err)
	}
}

func deletedRows(rm metricdata.ResourceMetrics) int64 {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "otelcol_fathom_echo_retention_deleted_rows" {
				var n int64
				for _, dp := range sum.DataPoints {
					n += dp.Value
				}
				return n
			}
		}
	}
	return 0
}

// The store's memory and data size are gauges of the extension's own telemetry: the
// data size matches what retention measures, and both are absent once the store is
// closed (a scrape never fails on the store).
func TestStoreGaugesReadTheOpenStore(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	set := extensiontest.NewNopSettings(metadata.Type)
	set.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	cfg := createDefaultConfig().(*Config)
	cfg.Path = filepath.Join(t.TempDir(), "echo.duckdb")
	ext, err := NewFactory().Create(context.Background(), set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	if err := ext.(RowWriter).AppendRows(context.Background(), rowsAt(5000, time.Now())); err != nil {
		t.Fatal(err)
	}
	st := ext.(*echoExtension).store
	if _, err := st.DB().Exec("CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	wantUsed, err := st.UsedBytes(context.Background())
	if err != nil || wantUsed <= 0 {
		t.Fatalf("used bytes %d (%v)", wantUsed, err)
	}
	gauges := func() map[string]int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if g, ok := m.Data.(metricdata.Gauge[int64]); ok {
					for _, dp := range g.DataPoints {
						got[m.Name] = dp.Value
					}
				}
			}
		}
		return got
	}
	got := gauges()
	if got["otelcol_fathom_echo_store_used_bytes"] != wantUsed {
		t.Errorf("otelcol_fathom_echo_store_used_bytes = %d, want %d", got["otelcol_fathom_echo_store_used_bytes"], wantUsed)
	}
	// DuckDB holds at least the blocks just written in its buffer pool.
	if mem := got["otelcol_fathom_echo_duckdb_memory_bytes"]; mem < 256<<10 {
		t.Errorf("otelcol_fathom_echo_duckdb_memory_bytes = %d, want the store's buffers (at least 256 KiB)", mem)
	}
	if err := ext.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := gauges(); len(got) != 0 {
		t.Errorf("gauges of a closed store: %v", got)
	}
}
