//go:build duckdb_arrow

package echostore

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// Each batch reaches DuckDB through this package's Arrow stream, whose schema is
// exported once per writer. duckdb-go's own stream had DuckDB's arrow scan leak an
// exported schema (~5 KB) at registration and at every bind, ~32 KB per batch: the
// 30-minute soak's gateway grew 30 MB a minute. After a warm-up, 2,000 more batches
// must leave less than 4 MB of malloc'd memory behind (the old path: ~64 MB). Row data
// goes to DuckDB's own allocator, which this does not count.
func TestAnIngestBatchLeavesNoCMemoryBehind(t *testing.T) {
	s, err := Open(context.Background(), Options{Path: filepath.Join(t.TempDir(), "e.duckdb")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	start := time.Now().Add(-time.Hour)
	appendBatches := func(from, n int) {
		for i := from; i < from+n; i++ {
			if err := s.Append(ctx, benchLogRows(10, start.Add(time.Duration(i)*time.Millisecond))); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendBatches(0, 300)
	before := cHeapInUse()
	appendBatches(300, 2000)
	grew := cHeapInUse() - before
	t.Logf("malloc'd memory in use grew %d KiB over 2,000 batches", grew>>10)
	if grew > 4<<20 {
		t.Errorf("2,000 batches left %d KiB of C memory behind (%d bytes a batch)", grew>>10, grew/2000)
	}
	var n int
	if err := s.DB().QueryRow(`SELECT count(*) FROM events`).Scan(&n); err != nil || n != 23000 {
		t.Errorf("%d rows stored (%v), want 23,000", n, err)
	}
}
