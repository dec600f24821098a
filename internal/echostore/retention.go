package echostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/duckdb/duckdb-go/v2"
)

// RetentionResult says what one retention pass removed.
type RetentionResult struct {
	DeletedByAge  int64
	DeletedBySize int64
	UsedBytes     int64
	// CheckpointDeferred: writers were busy, so the freed blocks return to the free
	// list at ingest's next automatic checkpoint rather than now.
	CheckpointDeferred bool
}

// ApplyRetention deletes rows older than maxAge and then, while the data blocks in use
// exceed maxBytes, the oldest rows in proportion to the excess. It runs on its own
// connection: DuckDB's MVCC lets the Appender keep committing meanwhile (deletes touch
// old rows, appends add new ones, so they do not conflict). Freed blocks are reused by
// later appends; the file itself does not shrink. Zero disables a limit.
func (s *Store) ApplyRetention(ctx context.Context, now time.Time, maxAge time.Duration, maxBytes int64) (RetentionResult, error) {
	var res RetentionResult
	err := s.Read(ctx, func(ctx context.Context) error {
		var err error
		res, err = s.applyRetention(ctx, now, maxAge, maxBytes)
		return err
	})
	return res, err
}

func (s *Store) applyRetention(ctx context.Context, now time.Time, maxAge time.Duration, maxBytes int64) (RetentionResult, error) {
	var res RetentionResult
	if maxAge > 0 {
		cutoff := now.Add(-maxAge).UTC()
		r, err := s.db.ExecContext(ctx, `DELETE FROM events WHERE ts < ?`, cutoff)
		if err != nil {
			return res, fmt.Errorf("retention by age: %w", err)
		}
		res.DeletedByAge, _ = r.RowsAffected()
		if err := s.trimRollups(ctx, cutoff); err != nil {
			return res, fmt.Errorf("retention by age: %w", err)
		}
	}
	used, err := s.UsedBytes(ctx)
	if err != nil {
		return res, err
	}
	res.UsedBytes = used
	if maxBytes > 0 && used > maxBytes {
		// Drop a bit more than the excess so the next pass is not immediately due.
		fraction := float64(used-maxBytes)/float64(used) + 0.05
		if fraction > 1 {
			fraction = 1
		}
		var cutoff time.Time
		if err := s.db.QueryRowContext(ctx, `SELECT quantile_disc(ts, ?) FROM events`, fraction).Scan(&cutoff); err != nil {
			return res, fmt.Errorf("retention by size: %w", err)
		}
		r, err := s.db.ExecContext(ctx, `DELETE FROM events WHERE ts <= ?`, cutoff)
		if err != nil {
			return res, fmt.Errorf("retention by size: %w", err)
		}
		res.DeletedBySize, _ = r.RowsAffected()
		if err := s.trimRollups(ctx, cutoff); err != nil {
			return res, fmt.Errorf("retention by size: %w", err)
		}
	}
	if res.DeletedByAge+res.DeletedBySize > 0 {
		deferred, err := s.checkpointUnlessBusy(ctx)
		if err != nil {
			return res, fmt.Errorf("checkpoint after retention: %w", err)
		}
		res.CheckpointDeferred = deferred
		res.UsedBytes, _ = s.UsedBytes(ctx)
	}
	return res, nil
}

// checkpointUnlessBusy returns the deleted rows' blocks to the free list now if it can.
// DuckDB refuses an explicit CHECKPOINT while a writer's transaction is open; when
// ingest keeps one open, the automatic checkpoint that ingest itself triggers (every
// checkpoint_threshold of WAL) frees the blocks instead, so the pass is not failed.
func (s *Store) checkpointUnlessBusy(ctx context.Context) (deferred bool, err error) {
	for attempt := range 5 {
		_, err = s.db.ExecContext(ctx, `CHECKPOINT`)
		var derr *duckdb.Error
		if err == nil || !errors.As(err, &derr) || derr.Type != duckdb.ErrorTypeTransaction {
			return false, err
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 20 * time.Millisecond):
		}
	}
	return true, nil
}

// UsedBytes is the size of the data blocks in use, not the file size, which never
// shrinks.
func (s *Store) UsedBytes(ctx context.Context) (int64, error) {
	var used int64
	err := s.Read(ctx, func(ctx context.Context) error {
		return s.db.QueryRowContext(ctx,
			`SELECT used_blocks * block_size FROM pragma_database_size() WHERE database_name = current_database()`).Scan(&used)
	})
	if err != nil {
		return 0, fmt.Errorf("database size: %w", err)
	}
	return used, nil
}

// MemoryBytes is what DuckDB holds in memory for this instance: buffer pool, WAL
// staging and query state (the sum of duckdb_memory()).
func (s *Store) MemoryBytes(ctx context.Context) (int64, error) {
	var n int64
	err := s.Read(ctx, func(ctx context.Context) error {
		return s.db.QueryRowContext(ctx, `SELECT coalesce(sum(memory_usage_bytes), 0)::BIGINT FROM duckdb_memory()`).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("duckdb memory: %w", err)
	}
	return n, nil
}

// trimRollups drops the rollup minutes that ended before cutoff; the minute holding the
// cutoff stays, as some of its rows do.
func (s *Store) trimRollups(ctx context.Context, cutoff time.Time) error {
	for _, table := range []string{"trace_rollup", "signal_rollup"} {
		if _, err := s.db.ExecContext(ctx, `DELETE FROM `+table+` WHERE minute < date_trunc('minute', ?::TIMESTAMP)`, cutoff); err != nil {
			return fmt.Errorf("%s: %w", table, err)
		}
	}
	return nil
}
