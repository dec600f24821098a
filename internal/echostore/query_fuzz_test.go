package echostore

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// FuzzQueryReadOnly sends any text through the read path the SQL tools use (the
// parse-tree policy, then the query in a read-only transaction) against a real small
// store. Whatever the text, the answer is rows or one of the four errors the API maps
// to a status, and afterwards the store holds the same rows, every DuckDB setting has
// its old value, and the store's directory has the same files: the process is still
// there to check, so nothing ended it.
func FuzzQueryReadOnly(f *testing.F) {
	for _, q := range []string{
		`SELECT count(*), min(ts), max(value) FROM events`,
		`SELECT node, json_extract_string(attributes, '$.k') FROM events WHERE rank < 4 ORDER BY ts LIMIT 5`,
		`WITH w AS (SELECT * FROM events) SELECT * FROM w, w AS x LIMIT 3`,
		`SELECT * FROM events_rollup_1m`,
		`SELECT * FROM read_csv('/etc/passwd')`,
		`SELECT * FROM '/etc/hostname'`,
		`COPY events TO '/tmp/fathom-fuzz-out.csv'`,
		`SET enable_external_access = true`,
		`SELECT 1; DELETE FROM events`,
		`WITH d AS (DELETE FROM events RETURNING *) SELECT count(*) FROM d`,
		`SELECT * FROM enable_logging(storage := 'file', storage_path := '/tmp/x')`,
		`SELECT current_setting('threads')`,
		`SELECT setseed(0.5)`,
		`ATTACH '/tmp/fathom-fuzz.duckdb' AS o`,
		`PRAGMA enable_profiling`,
		`SELECT * FROM range(100000000000) a, range(100000000000) b`,
		`SELECT repeat('x', 100000000)`,
		`SELECT ((((((((((1))))))))))`,
		`SELECT 'unterminated`,
		";;;",
		"SELECT \xff\xfe",
		"",
	} {
		f.Add(q)
	}
	dir := f.TempDir()
	s, err := Open(context.Background(), Options{Path: filepath.Join(dir, "echo.duckdb"), Threads: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	const planted = 50
	if err := s.Append(context.Background(), testRows(planted, "n1", time.Unix(1_700_000_000, 0))); err != nil {
		f.Fatal(err)
	}
	lim := QueryLimits{MaxRows: 100, MaxBytes: 64 << 10, Timeout: time.Second}
	var settingsBefore map[string]string
	var filesBefore []string
	f.Fuzz(func(t *testing.T, query string) {
		if settingsBefore == nil {
			settingsBefore, filesBefore = settings(t, s), files(t, dir)
		}
		res, err := s.QueryReadOnly(context.Background(), query, lim)
		switch {
		case err == nil:
			if len(res.Rows) > lim.MaxRows {
				t.Fatalf("%q: %d rows past the cap of %d", query, len(res.Rows), lim.MaxRows)
			}
		case errors.Is(err, ErrNotReadOnly), errors.Is(err, ErrQueryFailed), errors.Is(err, ErrQueryTimeout), errors.Is(err, ErrResultTooLarge):
		default:
			t.Fatalf("%q: unclassified error %v", query, err)
		}
		if n := count(t, s); n != planted {
			t.Fatalf("%q: the store holds %d rows, want %d", query, n, planted)
		}
		if after := settings(t, s); !maps.Equal(after, settingsBefore) {
			for name, v := range after {
				if settingsBefore[name] != v {
					t.Errorf("%q changed setting %s: %q -> %q", query, name, settingsBefore[name], v)
				}
			}
			t.FailNow()
		}
		if after := files(t, dir); !slices.Equal(after, filesBefore) {
			t.Fatalf("%q changed the store's directory: %v -> %v", query, filesBefore, after)
		}
	})
}
