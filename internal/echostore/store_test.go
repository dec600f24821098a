package echostore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/echoschema"
)

func testRows(n int, node string, start time.Time) []echoschema.Row {
	rows := make([]echoschema.Row, n)
	for i := range rows {
		r := echoschema.NewRow()
		r.Time = start.Add(time.Duration(i) * time.Millisecond)
		r.Kind = echoschema.KindGauge
		r.Cluster = "c1"
		r.Node = node
		r.Rank = int32(i % 8)
		r.Name = "nccl.allreduce.duration"
		r.Value = float64(i)
		r.Unit = "ms"
		r.Attributes = `{"k":"v"}`
		rows[i] = r
	}
	return rows
}

func openTest(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{Path: path, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func count(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.DB().QueryRow(`SELECT count(*) FROM events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAppendReopenAndLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "echo.duckdb")
	s := openTest(t, path)
	if err := s.Append(context.Background(), testRows(1000, "n1", time.Now())); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), Options{Path: path}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open of a locked store: got %v, want ErrLocked", err)
	}
	var node string
	var rank, nullPID int
	if err := s.DB().QueryRow(`SELECT node, rank, count(*) FILTER (WHERE pid IS NULL) FROM events WHERE value = 9 GROUP BY ALL`).Scan(&node, &rank, &nullPID); err != nil {
		t.Fatal(err)
	}
	if node != "n1" || rank != 1 || nullPID != 1 {
		t.Fatalf("row 9: node=%s rank=%d nullPID=%d", node, rank, nullPID)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, path)
	defer s.Close()
	if got := count(t, s); got != 1000 {
		t.Fatalf("after reopen: %d rows, want 1000", got)
	}
	var versions int
	if err := s.DB().QueryRow(`SELECT count(*) FROM echo_schema_version`).Scan(&versions); err != nil || versions != SchemaVersion {
		t.Fatalf("ledger has %d rows (%v), want %d: migrations must be idempotent", versions, err, SchemaVersion)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "echo.duckdb")
	s := openTest(t, path)
	if _, err := s.DB().Exec(`INSERT INTO echo_schema_version (version, description) VALUES (99, 'from the future')`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := Open(context.Background(), Options{Path: path})
	if !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("open of a v99 file: got %v, want ErrNewerSchema", err)
	}
	// The refusal must release the lock, so the right build can open it.
	if _, err := lockFile(path + ".lock"); err != nil {
		t.Fatalf("lock not released after refused open: %v", err)
	}
}

func TestRetentionByAgeAndSize(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "echo.duckdb"))
	defer s.Close()
	now := time.Now()
	ctx := context.Background()
	if err := s.Append(ctx, testRows(500, "old", now.Add(-48*time.Hour))); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, testRows(500, "new", now.Add(-time.Minute))); err != nil {
		t.Fatal(err)
	}
	res, err := s.ApplyRetention(ctx, now, 24*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.DeletedByAge != 500 || count(t, s) != 500 {
		t.Fatalf("age retention deleted %d, %d left; want 500 and 500", res.DeletedByAge, count(t, s))
	}
	res, err = s.ApplyRetention(ctx, now, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.DeletedBySize != 500 {
		t.Fatalf("size retention over a 1-byte cap deleted %d, want all 500", res.DeletedBySize)
	}
}

// The hostile suite: every statement here must change nothing and read nothing outside
// the store, whatever error it gets.
func TestQueryReadOnlyHostileSuite(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, filepath.Join(dir, "echo.duckdb"))
	defer s.Close()
	ctx := context.Background()
	if err := s.Append(ctx, testRows(100, "n1", time.Now())); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret.csv")
	if err := os.WriteFile(secret, []byte("password\nhunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(dir, "out")
	lim := QueryLimits{MaxRows: 1000, MaxBytes: 1 << 20, Timeout: 2 * time.Second}
	settingsBefore := settings(t, s)
	filesBefore := files(t, dir)

	hostile := map[string]error{
		"read_csv":          ErrNotReadOnly,
		"bare file":         ErrNotReadOnly,
		"read_text":         ErrNotReadOnly,
		"glob":              ErrNotReadOnly,
		"read_parquet http": ErrNotReadOnly,
		// Refused by the parse-tree policy; behind it, the engine has file access disabled.
		"copy to":            ErrNotReadOnly,
		"copy from":          ErrNotReadOnly,
		"export database":    ErrNotReadOnly,
		"attach":             ErrNotReadOnly,
		"install":            ErrNotReadOnly,
		"load":               ErrNotReadOnly,
		"set":                ErrNotReadOnly,
		"reset":              ErrNotReadOnly,
		"pragma":             ErrNotReadOnly,
		"select then delete": ErrNotReadOnly,
		"delete then select": ErrNotReadOnly,
		"dml in cte":         ErrQueryFailed,
		"delete":             ErrNotReadOnly,
		"update":             ErrNotReadOnly,
		"insert":             ErrNotReadOnly,
		"drop":               ErrNotReadOnly,
		"create table as":    ErrNotReadOnly,
		"alter":              ErrNotReadOnly,
		"temp table":         ErrNotReadOnly,
		"macro":              ErrNotReadOnly,
		"checkpoint":         ErrNotReadOnly,
		"vacuum":             ErrNotReadOnly,
		"call checkpoint":    ErrNotReadOnly,
		"detach":             ErrNotReadOnly,
		"use":                ErrNotReadOnly,
		"begin":              ErrNotReadOnly,
		"getenv":             ErrNotReadOnly,
		"arrow_scan":         ErrNotReadOnly,
		"huge result":        ErrResultTooLarge,
		"long query":         ErrQueryTimeout,
		// Table functions that run inside a SELECT: they changed the whole instance, and
		// logging to a file aborted the process. The parse-tree policy refuses them.
		"enable_logging":             ErrNotReadOnly,
		"enable_logging to a file":   ErrNotReadOnly,
		"enable_logging bad config":  ErrNotReadOnly,
		"enable_logging in subquery": ErrNotReadOnly,
		"enable_logging in argument": ErrNotReadOnly,
		"enable_logging in where":    ErrNotReadOnly,
		"enable_profiling":           ErrNotReadOnly,
		"checkpoint function":        ErrNotReadOnly,
		"force_checkpoint":           ErrNotReadOnly,
		"truncate_duckdb_logs":       ErrNotReadOnly,
		"enable_peg_parser":          ErrNotReadOnly,
		"query function":             ErrNotReadOnly,
		"json_execute_serialized":    ErrNotReadOnly,
		"table macro":                ErrNotReadOnly,
		// Functions and views that reveal the server's files or settings.
		"duckdb_settings":      ErrNotReadOnly,
		"duckdb_databases":     ErrNotReadOnly,
		"pragma_database_list": ErrNotReadOnly,
		"duckdb_logs view":     ErrNotReadOnly,
		"pg_settings":          ErrNotReadOnly,
		"qualified view":       ErrNotReadOnly,
		"current_setting":      ErrNotReadOnly,
		"current_database":     ErrNotReadOnly,
		"sql_auto_complete":    ErrNotReadOnly,
		"show tables":          ErrNotReadOnly,
		// Scalar functions DuckDB marks as having side effects.
		"write_log": ErrNotReadOnly,
		"setseed":   ErrNotReadOnly,
		"pg_sleep":  ErrNotReadOnly,
		// A CTE that takes a system view's name: out of its scope the name is the view.
		"cte shadowing a view": ErrNotReadOnly,
		"syntax error":         ErrQueryFailed,
	}
	sqlFor := map[string]string{
		"read_csv":           fmt.Sprintf(`SELECT * FROM read_csv('%s')`, secret),
		"bare file":          fmt.Sprintf(`SELECT * FROM '%s'`, secret),
		"read_text":          `SELECT * FROM read_text('/etc/hostname')`,
		"glob":               `SELECT * FROM glob('/*')`,
		"read_parquet http":  `SELECT * FROM read_parquet('https://example.com/x.parquet')`,
		"copy to":            fmt.Sprintf(`COPY events TO '%s.csv'`, outside),
		"copy from":          fmt.Sprintf(`COPY events FROM '%s'`, secret),
		"export database":    fmt.Sprintf(`EXPORT DATABASE '%s'`, outside),
		"attach":             fmt.Sprintf(`ATTACH '%s.duckdb' AS o`, outside),
		"install":            `INSTALL httpfs`,
		"load":               `LOAD httpfs`,
		"set":                `SET enable_external_access = true`,
		"reset":              `RESET lock_configuration`,
		"pragma":             `PRAGMA enable_profiling`,
		"select then delete": `SELECT 1; DELETE FROM events`,
		"delete then select": `DELETE FROM events; SELECT 1`,
		"dml in cte":         `WITH d AS (DELETE FROM events RETURNING *) SELECT count(*) FROM d`,
		"delete":             `DELETE FROM events`,
		"update":             `UPDATE events SET node = 'x'`,
		"insert":             `INSERT INTO events (ts, kind, name, attributes) VALUES (now(), 'log', 'x', '{}')`,
		"drop":               `DROP TABLE events`,
		"create table as":    `CREATE TABLE stolen AS SELECT * FROM events`,
		"alter":              `ALTER TABLE events ADD COLUMN x INT`,
		"temp table":         `CREATE TEMP TABLE t AS SELECT 1`,
		"macro":              `CREATE MACRO m(a) AS a + 1`,
		"checkpoint":         `CHECKPOINT`,
		"vacuum":             `VACUUM`,
		"call checkpoint":    `CALL checkpoint()`,
		"detach":             `DETACH echo`,
		"use":                `USE memory`,
		"begin":              `BEGIN TRANSACTION`,
		"getenv":             `SELECT getenv('HOME')`,
		// The writers scan Arrow memory by pointer; SQL has no way to name a pointer.
		"arrow_scan":                 `SELECT * FROM arrow_scan(140000000000000, 140000000000008, 140000000000016)`,
		"huge result":                `SELECT repeat('x', 100000) FROM range(100)`,
		"enable_logging":             `SELECT * FROM enable_logging()`,
		"enable_logging to a file":   fmt.Sprintf(`SELECT * FROM enable_logging(storage := 'file', storage_path := '%s.log')`, outside),
		"enable_logging bad config":  `SELECT * FROM enable_logging(storage_config := {'a': 1})`,
		"enable_logging in subquery": `SELECT (SELECT count(*) FROM enable_logging()) AS n`,
		"enable_logging in argument": `SELECT * FROM range((SELECT 1 FROM enable_logging(level := 'trace')))`,
		"enable_logging in where":    `SELECT count(*) FROM events WHERE EXISTS (SELECT * FROM Enable_Logging())`,
		"enable_profiling":           `SELECT * FROM enable_profiling(mode := 'detailed')`,
		"checkpoint function":        `SELECT * FROM checkpoint()`,
		"force_checkpoint":           `SELECT * FROM force_checkpoint()`,
		"truncate_duckdb_logs":       `SELECT * FROM truncate_duckdb_logs()`,
		"enable_peg_parser":          `SELECT * FROM enable_peg_parser()`,
		"query function":             `SELECT * FROM query('SELECT 1')`,
		"json_execute_serialized":    `SELECT * FROM json_execute_serialized_sql(json_serialize_sql('SELECT 1'))`,
		"table macro":                `SELECT * FROM histogram(events, value)`,
		"duckdb_settings":            `SELECT * FROM duckdb_settings()`,
		"duckdb_databases":           `SELECT path FROM duckdb_databases()`,
		"pragma_database_list":       `SELECT * FROM pragma_database_list`,
		"duckdb_logs view":           `SELECT * FROM duckdb_logs`,
		"pg_settings":                `SELECT * FROM pg_catalog.pg_settings`,
		"qualified view":             `SELECT * FROM system.main.duckdb_databases`,
		"current_setting":            `SELECT current_setting('memory_limit')`,
		"current_database":           `SELECT current_database()`,
		"sql_auto_complete":          `SELECT * FROM sql_auto_complete('SELECT * FROM ''/')`,
		"show tables":                `SHOW ALL TABLES`,
		"write_log":                  `SELECT write_log('hello', log_type := 'x')`,
		"setseed":                    `SELECT setseed(0.5)`,
		"pg_sleep":                   `SELECT pg_sleep(1)`,
		"cte shadowing a view":       `WITH a AS (SELECT * FROM duckdb_logs), duckdb_logs AS (SELECT 1) SELECT * FROM a`,
		"syntax error":               `SELEC 1`,
		"long query":                 `SELECT count(*) FROM range(100000) a, range(100000) b WHERE a.range * b.range = -1`,
	}
	for name, want := range hostile {
		t.Run(name, func(t *testing.T) {
			res, err := s.QueryReadOnly(ctx, sqlFor[name], lim)
			if !errors.Is(err, want) {
				t.Fatalf("%s: got (%v, %v), want %v", sqlFor[name], res, err, want)
			}
		})
	}
	if n := count(t, s); n != 100 {
		t.Fatalf("hostile suite changed the store: %d rows, want 100", n)
	}
	var tables int
	if err := s.DB().QueryRow(`SELECT count(*) FROM duckdb_tables() WHERE NOT internal`).Scan(&tables); err != nil || tables != 4 {
		t.Fatalf("tables after hostile suite: %d (%v), want 4 (events, two rollups, ledger)", tables, err)
	}
	var external string
	if err := s.DB().QueryRow(`SELECT current_setting('enable_external_access')::VARCHAR`).Scan(&external); err != nil || external != "false" {
		t.Fatalf("enable_external_access = %q (%v)", external, err)
	}
	if after := settings(t, s); !maps.Equal(after, settingsBefore) {
		for name, v := range after {
			if settingsBefore[name] != v {
				t.Errorf("hostile suite changed setting %s: %q -> %q", name, settingsBefore[name], v)
			}
		}
	}
	if after := files(t, dir); !slices.Equal(after, filesBefore) {
		t.Fatalf("hostile suite changed the store's directory: %v -> %v", filesBefore, after)
	}
}

// settings is every DuckDB setting of the instance, read on the store's own pool.
func settings(t *testing.T, s *Store) map[string]string {
	t.Helper()
	rows, err := s.DB().Query(`SELECT name, coalesce(value, '') FROM duckdb_settings()`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			t.Fatal(err)
		}
		out[name] = value
	}
	if len(out) < 100 || out["enable_logging"] != "0" {
		t.Fatalf("settings read back %d entries, enable_logging=%q", len(out), out["enable_logging"])
	}
	return out
}

// files lists a directory, sizes left out: the WAL grows with ingest.
func files(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestQueryReadOnlyAnswersAndTruncates(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "echo.duckdb"))
	defer s.Close()
	if err := s.Append(context.Background(), testRows(50, "n1", time.Now())); err != nil {
		t.Fatal(err)
	}
	lim := QueryLimits{MaxRows: 10, MaxBytes: 1 << 20, Timeout: 2 * time.Second}
	res, err := s.QueryReadOnly(context.Background(), `SELECT node, count(*) AS n FROM events GROUP BY node;`, lim)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 1 || res.Rows[0][0] != "n1" || res.Rows[0][1] != int64(50) || res.Truncated {
		t.Fatalf("got %+v", res)
	}
	res, err = s.QueryReadOnly(context.Background(), `SELECT * FROM events`, lim)
	if err != nil {
		t.Fatal(err)
	}
	if res.RowCount != 10 || !res.Truncated {
		t.Fatalf("row cap: %d rows, truncated=%v; want 10, true", res.RowCount, res.Truncated)
	}
}

// Retention runs while writers append: neither fails, and the old rows go.
func TestRetentionBesideIngest(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "echo.duckdb"))
	defer s.Close()
	ctx := context.Background()
	now := time.Now()
	if err := s.Append(ctx, testRows(5000, "old", now.Add(-48*time.Hour))); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	appendErr := make(chan error, 1)
	appended := 0
	go func() {
		defer close(appendErr)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.Append(ctx, testRows(1000, "new", time.Now())); err != nil {
				appendErr <- err
				return
			}
			appended += 1000
		}
	}()
	time.Sleep(50 * time.Millisecond)
	res, err := s.ApplyRetention(ctx, now, 24*time.Hour, 0)
	close(stop)
	if e := <-appendErr; e != nil {
		t.Fatalf("append failed while retention ran: %v", e)
	}
	if err != nil {
		t.Fatalf("retention failed beside ingest: %v", err)
	}
	if res.DeletedByAge != 5000 || count(t, s) != appended {
		t.Fatalf("deleted %d (want 5000); %d rows left, %d appended", res.DeletedByAge, count(t, s), appended)
	}
}

func TestDefaultThreadsLeaveTheWritersTheirCores(t *testing.T) {
	for _, c := range []struct{ cores, writers, want int }{{1, 2, 1}, {2, 2, 1}, {4, 2, 2}, {16, 2, 14}, {16, 4, 12}} {
		if got := DefaultThreads(c.cores, c.writers); got != c.want {
			t.Errorf("DefaultThreads(%d cores, %d writers) = %d, want %d", c.cores, c.writers, got, c.want)
		}
	}
	s, err := Open(context.Background(), Options{Path: filepath.Join(t.TempDir(), "echo.duckdb")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var threads int
	if err := s.DB().QueryRow(`SELECT current_setting('threads')::INTEGER`).Scan(&threads); err != nil {
		t.Fatal(err)
	}
	if want := DefaultThreads(runtime.NumCPU(), 2); threads != want {
		t.Fatalf("threads = %d on %d cores, want %d", threads, runtime.NumCPU(), want)
	}
}

// The policy admits what agents write: CTEs (recursive too), window functions, lambdas,
// PIVOT, DESCRIBE and SUMMARIZE of a query, JSON and list functions, and the schema
// functions, with the answers DuckDB gives.
func TestQueryReadOnlyAdmitsReadsOfTheStore(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "echo.duckdb"))
	defer s.Close()
	if err := s.Append(context.Background(), testRows(100, "n1", time.Now())); err != nil {
		t.Fatal(err)
	}
	lim := QueryLimits{MaxRows: 100, MaxBytes: 1 << 20, Timeout: 5 * time.Second}
	for query, want := range map[string]string{
		`WITH r AS (SELECT rank, count(*) AS n FROM events GROUP BY rank)
		 SELECT list(n ORDER BY rank), max(rn) FROM (SELECT *, row_number() OVER (ORDER BY rank) AS rn FROM r)`: `[[[13 13 13 13 12 12 12 12] 8]]`,
		`WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 5) SELECT sum(n) FROM t`:                        `[[15]]`,
		`SELECT COUNT(*) FROM Events E JOIN (SELECT DISTINCT node FROM main.signal_rollup) s ON s.node = E.node WHERE E.rank = 3`: `[[13]]`,
		`SELECT (SELECT count(*) FROM trace_rollup), (SELECT count(*) FROM echo_schema_version)`:                                  `[[0 3]]`,
		`SELECT list_filter([1, 2, 3], x -> x > 1), [v * 2 FOR v IN [1, 2]]`:                                                      `[[[2 3] [2 4]]]`,
		`SELECT count(*) FROM json_each('{"a": 1, "b": 2}')`:                                                                      `[[2]]`,
		`SELECT sum(x) FROM unnest([1, 2, 3]) AS u(x), generate_series(1, 2) AS g(y), range(1)`:                                   `[[12]]`,
		`SELECT count(*) FROM (DESCRIBE SELECT * FROM events)`:                                                                    `[[35]]`,
		`SELECT count(*) FROM (SUMMARIZE SELECT value, rank FROM events)`:                                                         `[[2]]`,
		`SELECT count(*) FROM duckdb_columns() WHERE table_name = 'events'`:                                                       `[[35]]`,
		`SELECT count(*) FROM information_schema.columns WHERE table_name = 'events'`:                                             `[[35]]`,
		`SELECT count(*) FROM duckdb_tables() WHERE NOT internal`:                                                                 `[[4]]`,
		`SELECT "0", "7" FROM (PIVOT (SELECT rank FROM events) ON rank IN (0, 7) USING count(*))`:                                 `[[13 12]]`,
		`SELECT quantile_cont(value, 0.5), regexp_matches(any_value(node), '^n[0-9]$') FROM events`:                               `[[49.5 true]]`,
		`SELECT count(*) FILTER (WHERE ts > now() - INTERVAL 1 DAY) FROM events`:                                                  `[[100]]`,
	} {
		res, err := s.QueryReadOnly(context.Background(), query, lim)
		if err != nil {
			t.Errorf("%s: %v", query, err)
			continue
		}
		if got := fmt.Sprint(res.Rows); got != want {
			t.Errorf("%s: got %s, want %s", query, got, want)
		}
	}
}
