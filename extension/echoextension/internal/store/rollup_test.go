package store

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
