package echostore

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A copy of a store a running writer holds: the rows it committed (in the file or
// still in its WAL) are in the copy, the writer keeps its lock and its rows, and
// closing the copy leaves nothing behind.
func TestOpenCopyOfALockedStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "echo.duckdb")
	live := openTest(t, path)
	defer live.Close()
	if err := live.Append(context.Background(), testRows(500, "n1", time.Now())); err != nil {
		t.Fatal(err)
	}

	cp, err := OpenCopy(context.Background(), path)
	if err != nil {
		t.Fatalf("copy of a locked store: %v", err)
	}
	if got := count(t, cp); got != 500 {
		t.Errorf("the copy holds %d rows, want 500", got)
	}
	if filepath.Dir(cp.Path()) == filepath.Dir(path) {
		t.Errorf("the copy %s sits beside the original", cp.Path())
	}
	dir := filepath.Dir(cp.Path())
	if err := cp.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the copy's directory outlived Close: %v", err)
	}
	if err := live.Append(context.Background(), testRows(1, "n1", time.Now())); err != nil {
		t.Errorf("the writer after the copy: %v", err)
	}
	if got := count(t, live); got != 501 {
		t.Errorf("the original holds %d rows, want 501", got)
	}

	if _, err := OpenCopy(context.Background(), filepath.Join(t.TempDir(), "missing.duckdb")); err == nil {
		t.Error("a copy of a missing file opened")
	}
}
