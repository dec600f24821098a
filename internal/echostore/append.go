package echostore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/fathom-gpu/fathom/internal/echoschema"
)

// appenderConn is one writer on its own connection. Several of them write in
// parallel: DuckDB appends into per-connection local storage and serialises only the
// commit, so two writers use two cores for the per-value work of filling columns.
type appenderConn struct {
	conn *sql.Conn
	raw  driver.Conn
	// batch carries the rows into the events table; the rollups, a few rows per
	// batch, go through Appenders.
	batch   *rowBatch
	rollup  *duckdb.Appender
	signals *duckdb.Appender
}

func (a *appenderConn) close() error {
	var errs []error
	if a.batch != nil {
		a.batch.release()
		a.batch = nil
	}
	if a.rollup != nil {
		errs = append(errs, a.rollup.Close())
		a.rollup = nil
	}
	if a.signals != nil {
		errs = append(errs, a.signals.Close())
		a.signals = nil
	}
	if a.conn != nil {
		errs = append(errs, a.conn.Close())
		a.conn = nil
	}
	return errors.Join(errs...)
}

// Append writes rows with an Appender and flushes before returning: when it returns nil
// the rows are committed to the WAL, so they survive a kill -9 of the process. Callers
// acknowledge their senders only after that.
func (s *Store) Append(ctx context.Context, rows []echoschema.Row) error {
	if len(rows) == 0 {
		return nil
	}
	rows = validUTF8Rows(rows)
	var a *appenderConn
	select {
	case a = <-s.appenders:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { s.appenders <- a }()
	if s.closed.Load() {
		return ErrClosed
	}
	if err := s.ensureAppender(ctx, a); err != nil {
		return err
	}
	if err := a.write(ctx, rows); err != nil {
		// A failed append or flush leaves the Appenders unusable; the whole batch is
		// reported failed (and rolled back) so that its sender sends it again, and the
		// next batch gets fresh ones.
		_ = a.close()
		return storageError(err)
	}
	return nil
}

// StorageError is a write the file system under the store refused: the disk is full,
// failed or read-only. The batch was rolled back; the same write can succeed only once
// the file system is back, so the sender should keep its data and send it again later.
type StorageError struct {
	// Reason is one of disk_full, io_error, read_only, permission_denied.
	Reason string
	Err    error
}

func (e *StorageError) Error() string {
	return fmt.Sprintf("echo store cannot write: %s; retry later (%v)", storageReasons[e.Reason], e.Err)
}

func (e *StorageError) Unwrap() error { return e.Err }

// storageReasons says each reason in the words of strerror(3), which is what an
// operator will search the gateway's logs for.
var storageReasons = map[string]string{
	"disk_full":         "no space left on device",
	"io_error":          "input/output error",
	"read_only":         "read-only file system",
	"permission_denied": "permission denied",
}

// storageError classifies a failed write. DuckDB reports file system errors as text
// (an IOException carrying strerror), so the text is all there is to match.
func storageError(err error) error {
	msg := err.Error()
	for _, c := range [...]struct{ strerror, reason string }{
		{"No space left on device", "disk_full"},
		{"Disk quota exceeded", "disk_full"},
		{"Input/output error", "io_error"},
		{"Read-only file system", "read_only"},
		{"Permission denied", "permission_denied"},
	} {
		if strings.Contains(msg, c.strerror) {
			return &StorageError{Reason: c.reason, Err: err}
		}
	}
	return err
}

// validUTF8Rows returns rows with invalid UTF-8 in their strings replaced by U+FFFD:
// the same slice when there is none, a copy otherwise. OTLP strings arrive as the sender
// wrote them (pdata does not check protobuf strings), and DuckDB refuses a whole batch
// over one bad byte sequence in a VARCHAR; the exporter would then retry that batch,
// good rows included, until it gave up on all of them.
func validUTF8Rows(rows []echoschema.Row) []echoschema.Row {
	var fixed []echoschema.Row
	for i := range rows {
		if !slices.ContainsFunc(rowStrings(&rows[i]), func(s *string) bool { return !utf8.ValidString(*s) }) {
			continue
		}
		if fixed == nil {
			fixed = slices.Clone(rows)
		}
		for _, s := range rowStrings(&fixed[i]) {
			*s = strings.ToValidUTF8(*s, "\uFFFD")
		}
	}
	if fixed == nil {
		return rows
	}
	return fixed
}

// rowStrings lists every string column of a row.
func rowStrings(r *echoschema.Row) []*string {
	return []*string{&r.Kind, &r.Cluster, &r.Node, &r.Job, &r.Cohort, &r.Process, &r.Name, &r.API,
		&r.CommID, &r.Unit, &r.Severity, &r.Body, &r.TraceID, &r.Attributes}
}

// write appends the rows and their rollup in one transaction: either both are
// committed or neither.
func (a *appenderConn) write(ctx context.Context, rows []echoschema.Row) error {
	exec := a.raw.(driver.ExecerContext)
	if _, err := exec.ExecContext(ctx, "BEGIN TRANSACTION", nil); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_, _ = exec.ExecContext(context.Background(), "ROLLBACK", nil)
		}
	}()
	if err := a.batch.insertRows(ctx, a.raw, rows); err != nil {
		return err
	}
	calls, signals := rollupOf(rows)
	for key, n := range calls {
		if err := a.rollup.AppendRow(time.UnixMicro(key.minute).UTC(), str(key.cluster), key.node, key.api, key.name, str(key.unit), key.bucket, n); err != nil {
			return fmt.Errorf("append trace rollup: %w", err)
		}
	}
	if err := a.rollup.FlushWithCancel(ctx); err != nil {
		return fmt.Errorf("flush trace rollup: %w", err)
	}
	for key, agg := range signals {
		if err := a.signals.AppendRow(time.UnixMicro(key.minute).UTC(), str(key.cluster), key.node, i32(key.rank),
			key.name, str(key.unit), i32(agg.worldSize), agg.count, agg.sum); err != nil {
			return fmt.Errorf("append signal rollup: %w", err)
		}
	}
	if err := a.signals.FlushWithCancel(ctx); err != nil {
		return fmt.Errorf("flush signal rollup: %w", err)
	}
	if _, err := exec.ExecContext(ctx, "COMMIT", nil); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	committed = true
	return nil
}

type rollupKey struct {
	minute                         int64
	cluster, node, api, name, unit string
	bucket                         int32
}

type signalKey struct {
	minute                    int64
	cluster, node, name, unit string
	rank                      int32
}

type signalAgg struct {
	count     int64
	sum       float64
	worldSize int32
}

// rollupOf summarises a batch for the rollups: per-call latency events (log records
// naming a CUDA API or NCCL op, with a positive value) counted by minute, node, API and
// log bucket; and every valued row of a node summed by minute, node, rank and name.
func rollupOf(rows []echoschema.Row) (map[rollupKey]int64, map[signalKey]*signalAgg) {
	calls := map[rollupKey]int64{}
	signals := map[signalKey]*signalAgg{}
	for i := range rows {
		r := &rows[i]
		if r.Node == "" || math.IsNaN(r.Value) || math.IsInf(r.Value, 0) {
			continue
		}
		minute := r.Time.UTC().Truncate(time.Minute).UnixMicro()
		sk := signalKey{minute: minute, cluster: r.Cluster, node: r.Node, name: r.Name, unit: r.Unit, rank: r.Rank}
		agg := signals[sk]
		if agg == nil {
			agg = &signalAgg{worldSize: echoschema.Absent}
			signals[sk] = agg
		}
		agg.count++
		agg.sum += r.Value
		agg.worldSize = max(agg.worldSize, r.WorldSize)
		if r.Kind != echoschema.KindLog || r.API == "" || !(r.Value > 0) {
			continue
		}
		calls[rollupKey{
			minute: minute, cluster: r.Cluster, node: r.Node, api: r.API, name: r.Name, unit: r.Unit,
			bucket: Bucket(r.Value),
		}]++
	}
	return calls, signals
}

// Bucket is the rollup bucket of a positive value (see BucketsPerOctave).
func Bucket(v float64) int32 {
	b := math.Floor(math.Log2(v) * BucketsPerOctave)
	return int32(max(min(b, 32000), -32000))
}

// BucketBounds is the value range [lower, upper) of a rollup bucket.
func BucketBounds(b int32) (float64, float64) {
	return math.Exp2(float64(b) / BucketsPerOctave), math.Exp2(float64(b+1) / BucketsPerOctave)
}

func (s *Store) ensureAppender(ctx context.Context, a *appenderConn) error {
	if a.batch != nil {
		return nil
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("appender connection: %w", err)
	}
	// The driver connection outlives Raw's callback on purpose: the Appenders and the
	// transaction statements use it while a.conn holds it out of the pool.
	err = conn.Raw(func(dc any) error {
		a.raw = dc.(driver.Conn)
		var err error
		if a.rollup, err = duckdb.NewAppenderFromConn(a.raw, "", "trace_rollup"); err != nil {
			return err
		}
		a.signals, err = duckdb.NewAppenderFromConn(a.raw, "", "signal_rollup")
		return err
	})
	a.conn = conn
	if err == nil {
		a.batch, err = newRowBatch(a.raw)
	}
	if err != nil {
		_ = a.close()
		return fmt.Errorf("create appender: %w", err)
	}
	return nil
}

func str(s string) driver.Value {
	if s == "" {
		return nil
	}
	return s
}

func i32(n int32) driver.Value {
	if n < 0 {
		return nil
	}
	return n
}
