package echostore

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/echoschema"
)

// Every column goes through the Arrow batch with its own type, and the Row's absent
// markers (empty string, Absent, NaN and infinities) come out as NULL.
func TestAppendStoresEveryColumn(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "echo.duckdb"))
	defer s.Close()
	at := time.Date(2026, 11, 21, 9, 30, 15, 123456000, time.UTC)
	full := echoschema.Row{
		Time: at, Kind: echoschema.KindHistogram, Cluster: "c1", Node: "gpu-07", Job: "llama", Cohort: "a",
		Rank: 5, LocalRank: 1, WorldSize: 64, PID: 4242, Process: "python3", ThreadID: 4243,
		Name: "cuda.api.duration", API: "cudaLaunchKernel", CommID: "0xfeed", Value: 1.5, Count: 7,
		Sum: 10.5, Min: 0.25, Max: 4, P50: 1, P95: 3.5, P99: 3.9, Unit: "ms", Severity: "WARN",
		SeverityNumber: 13, Body: "slow launch", TraceID: "0af7651916cd43dd8448eb211c80319c",
		Attributes: `{"k":"v"}`,
	}
	empty := echoschema.NewRow()
	empty.Time, empty.Kind, empty.Name, empty.Attributes = at.Add(time.Second), echoschema.KindLog, "x", ""
	empty.Sum, empty.Max = math.Inf(1), math.Inf(-1)
	if err := s.Append(context.Background(), []echoschema.Row{full, empty}); err != nil {
		t.Fatal(err)
	}
	got := func(order int) string {
		var out string
		err := s.DB().QueryRow(`SELECT concat_ws('|', strftime(ts, '%Y-%m-%dT%H:%M:%S.%f'), kind,
			coalesce(cluster, '∅'), coalesce(node, '∅'), coalesce(job, '∅'), coalesce(cohort, '∅'),
			coalesce(rank::VARCHAR, '∅'), coalesce(local_rank::VARCHAR, '∅'), coalesce(world_size::VARCHAR, '∅'),
			coalesce(pid::VARCHAR, '∅'), coalesce(process, '∅'), coalesce(thread_id::VARCHAR, '∅'), name,
			coalesce(api, '∅'), coalesce(comm_id, '∅'), coalesce(value::VARCHAR, '∅'), coalesce(count::VARCHAR, '∅'),
			coalesce(sum::VARCHAR, '∅'), coalesce(min::VARCHAR, '∅'), coalesce(max::VARCHAR, '∅'),
			coalesce(p50::VARCHAR, '∅'), coalesce(p95::VARCHAR, '∅'), coalesce(p99::VARCHAR, '∅'),
			coalesce(unit, '∅'), coalesce(severity, '∅'), coalesce(severity_number::VARCHAR, '∅'),
			coalesce(body, '∅'), coalesce(trace_id, '∅'), attributes)
			FROM events ORDER BY ts LIMIT 1 OFFSET ?`, order).Scan(&out)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	wantFull := "2026-11-21T09:30:15.123456|histogram|c1|gpu-07|llama|a|5|1|64|4242|python3|4243|cuda.api.duration|" +
		"cudaLaunchKernel|0xfeed|1.5|7|10.5|0.25|4.0|1.0|3.5|3.9|ms|WARN|13|slow launch|0af7651916cd43dd8448eb211c80319c|{\"k\":\"v\"}"
	if g := got(0); g != wantFull {
		t.Errorf("full row\n got %s\nwant %s", g, wantFull)
	}
	wantEmpty := "2026-11-21T09:30:16.123456|log" + strings.Repeat("|∅", 10) + "|x" + strings.Repeat("|∅", 15) + "|{}"
	if g := got(1); g != wantEmpty {
		t.Errorf("empty row\n got %s\nwant %s", g, wantEmpty)
	}
	// The batch's view lives only inside its own transaction.
	var views int
	if err := s.DB().QueryRow(`SELECT count(*) FROM duckdb_views() WHERE view_name LIKE 'echo_ingest%'`).Scan(&views); err != nil || views != 0 {
		t.Fatalf("ingest views left after append: %d (%v)", views, err)
	}
}

// The batches' column buffers live in C memory: every byte goes back when its INSERT
// is done, also when the INSERT fails.
func TestBatchesGiveBackTheirColumnMemory(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "echo.duckdb"))
	defer s.Close()
	start := time.Now().UTC()
	for i := range 5 {
		if err := s.Append(context.Background(), testRows(3000+i, "gpu-01", start)); err != nil {
			t.Fatal(err)
		}
		if n := columnMemory.AllocatedBytes(); n != 0 {
			t.Fatalf("after batch %d: %d bytes of column memory still allocated", i, n)
		}
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	a := <-s.appenders
	err := a.batch.insertRows(canceled, a.raw, testRows(100, "gpu-01", start))
	s.appenders <- a
	if err == nil {
		t.Fatal("insert on a canceled context succeeded")
	}
	if n := columnMemory.AllocatedBytes(); n != 0 {
		t.Fatalf("after a failed insert: %d bytes of column memory still allocated", n)
	}
	if got := count(t, s); got != 15010 {
		t.Fatalf("events: %d rows, want 15010", got)
	}
}
