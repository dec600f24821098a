package echostore

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/echoschema"
)

func apiRows(n int, start time.Time) []echoschema.Row {
	rows := make([]echoschema.Row, n)
	for i := range rows {
		r := echoschema.NewRow()
		r.Time = start.Add(time.Duration(i) * time.Second)
		r.Kind, r.Name, r.API, r.Unit = echoschema.KindLog, "cuda.api.call", "cudaMemcpy", "us"
		r.Cluster, r.Node, r.Value = "c1", "n1", float64(i+1)
		rows[i] = r
	}
	return rows
}

func rollupTotal(t *testing.T, db *sql.DB) (rows, minutes int64) {
	t.Helper()
	if err := db.QueryRow(`SELECT coalesce(sum(count), 0), count(DISTINCT minute) FROM trace_rollup`).Scan(&rows, &minutes); err != nil {
		t.Fatal(err)
	}
	return rows, minutes
}

func TestRollupIsWrittenWithItsRows(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "echo.duckdb"))
	defer s.Close()
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if err := s.Append(context.Background(), append(apiRows(180, start), testRows(10, "n1", start)...)); err != nil {
		t.Fatal(err)
	}
	rows, minutes := rollupTotal(t, s.DB())
	if rows != 180 || minutes != 3 {
		t.Fatalf("rollup counts %d calls over %d minutes, want 180 over 3 (gauges are not calls)", rows, minutes)
	}
	var signals, points int64
	var sum float64
	if err := s.DB().QueryRow(`SELECT count(DISTINCT name), sum(count), sum(sum) FROM signal_rollup`).Scan(&signals, &points, &sum); err != nil {
		t.Fatal(err)
	}
	// 180 calls valued 1..180 and 10 gauge points valued 0..9.
	if signals != 2 || points != 190 || sum != 180*181/2+45 {
		t.Fatalf("signal rollup: %d signals, %d points, sum %g", signals, points, sum)
	}
	lo, hi := BucketBounds(Bucket(100))
	if !(lo <= 100 && 100 < hi) || hi/lo > 1.022 {
		t.Fatalf("bucket of 100 is [%g, %g)", lo, hi)
	}
}

// A file written by schema v1 is migrated to v2 at open, its rollup built from the rows
// it holds.
func TestMigrationFromV1BackfillsRollup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "echo.duckdb")
	db, err := sql.Open("duckdb", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE echo_schema_version (version INTEGER PRIMARY KEY, description VARCHAR, applied_at TIMESTAMP DEFAULT current_timestamp)`); err != nil {
		t.Fatal(err)
	}
	if err := apply(context.Background(), db, migrations[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO events (ts, kind, cluster, node, name, api, value, unit, attributes)
		SELECT TIMESTAMP '2026-03-01 12:00:00' + INTERVAL (i) SECOND, 'log', 'c1', 'n1', 'cuda.api.call', 'cudaMemcpy', i + 1, 'us', '{}'
		FROM range(120) t(i)`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s := openTest(t, path)
	defer s.Close()
	var version int
	if err := s.DB().QueryRow(`SELECT max(version) FROM echo_schema_version`).Scan(&version); err != nil || version != SchemaVersion {
		t.Fatalf("schema version %d (%v), want %d", version, err, SchemaVersion)
	}
	if rows, minutes := rollupTotal(t, s.DB()); rows != 120 || minutes != 2 {
		t.Fatalf("backfilled rollup: %d calls over %d minutes, want 120 over 2", rows, minutes)
	}
	var points int64
	if err := s.DB().QueryRow(`SELECT sum(count) FROM signal_rollup`).Scan(&points); err != nil || points != 120 {
		t.Fatalf("backfilled signal rollup: %d points (%v), want 120", points, err)
	}
	var goBucket, sqlBucket int32
	if err := s.DB().QueryRow(`SELECT min(bucket) FROM trace_rollup`).Scan(&sqlBucket); err != nil {
		t.Fatal(err)
	}
	goBucket = Bucket(1)
	if goBucket != sqlBucket {
		t.Fatalf("Go and SQL disagree on the bucket of 1: %d vs %d", goBucket, sqlBucket)
	}
}

// A file at schema v2 is migrated to v3 in place: its rows stay, with no start time
// and no buckets, and new rows carry both.
func TestMigrationFromV2KeepsRowsAndAddsStartAndBuckets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "echo.duckdb")
	db, err := sql.Open("duckdb", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE echo_schema_version (version INTEGER PRIMARY KEY, description VARCHAR, applied_at TIMESTAMP DEFAULT current_timestamp)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range migrations[:2] {
		if err := apply(context.Background(), db, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`INSERT INTO events (ts, kind, node, name, api, count, unit, attributes)
		VALUES (TIMESTAMP '2026-03-01 12:00:00', 'exp_histogram', 'n1', 'cuda.api.duration', 'cudaMemcpy', 7, 's', '{}')`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s := openTest(t, path)
	defer s.Close()
	start := time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)
	exp := echoschema.NewRow()
	exp.Time, exp.Start, exp.Kind, exp.Name, exp.Node = start.Add(2*time.Hour), start, echoschema.KindExpHistogram, "cuda.api.duration", "n1"
	exp.Scale, exp.BucketOffset, exp.BucketCounts, exp.ZeroCount, exp.Count = -2, -7, []uint64{1, 0, 5}, 3, 9
	explicit := echoschema.NewRow()
	explicit.Time, explicit.Kind, explicit.Name, explicit.Node = start.Add(2*time.Hour), echoschema.KindHistogram, "thread.off_cpu", "n1"
	explicit.Bounds, explicit.BucketCounts, explicit.Count = []float64{0.5, 1}, []uint64{2, 0, 1}, 3
	gauge := echoschema.NewRow()
	gauge.Time, gauge.Kind, gauge.Name, gauge.Node, gauge.Value = start.Add(2*time.Hour), echoschema.KindGauge, "g", "n1", 1
	if err := s.Append(context.Background(), []echoschema.Row{exp, explicit, gauge}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	rows, err := s.DB().Query(`SELECT kind, concat_ws('|', coalesce(strftime(start_ts, '%H:%M'), '-'), coalesce(scale::VARCHAR, '-'),
		coalesce(bucket_offset::VARCHAR, '-'), coalesce(zero_count::VARCHAR, '-'), coalesce(bucket_counts::VARCHAR, '-'),
		coalesce(explicit_bounds::VARCHAR, '-'), count) FROM events ORDER BY ts`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind, cols string
		if err := rows.Scan(&kind, &cols); err != nil {
			t.Fatal(err)
		}
		got[kind] += cols + ";"
	}
	want := map[string]string{
		"exp_histogram": "-|-|-|-|-|-|7;11:00|-2|-7|3|[1, 0, 5]|-|9;",
		"histogram":     "-|-|-|-|[2, 0, 1]|[0.5, 1.0]|3;",
		"gauge":         "-|-|-|-|-|-;",
	}
	if len(got) != len(want) {
		t.Fatalf("got %q", got)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %q, want %q", k, got[k], w)
		}
	}
}
