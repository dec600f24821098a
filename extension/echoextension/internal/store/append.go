package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/fathom-gpu/fathom/internal/echoschema"
)

// Append writes rows with the Appender and flushes before returning: when it returns nil
// the rows are committed to the WAL, so they survive a kill -9 of the process. Callers
// acknowledge their senders only after that.
func (s *Store) Append(ctx context.Context, rows []echoschema.Row) error {
	if len(rows) == 0 {
		return nil
	}
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if s.db == nil {
		return errors.New("echo store is closed")
	}
	if err := s.ensureAppender(ctx); err != nil {
		return err
	}
	values := make([]driver.Value, len(Columns))
	for i := range rows {
		rowValues(&rows[i], values)
		if err := s.appender.AppendRow(values...); err != nil {
			s.resetAppender()
			return fmt.Errorf("append row: %w", err)
		}
	}
	if err := s.appender.FlushWithCancel(ctx); err != nil {
		// A failed flush leaves the Appender unusable; the whole batch is reported
		// failed so the exporter's retry sends it again on a fresh one.
		s.resetAppender()
		return fmt.Errorf("flush rows: %w", err)
	}
	return nil
}

func (s *Store) ensureAppender(ctx context.Context) error {
	if s.appender != nil {
		return nil
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("appender connection: %w", err)
	}
	var app *duckdb.Appender
	err = conn.Raw(func(dc any) error {
		var err error
		app, err = duckdb.NewAppenderFromConn(dc.(driver.Conn), "", "events")
		return err
	})
	if err != nil {
		conn.Close()
		return fmt.Errorf("create appender: %w", err)
	}
	s.appendConn, s.appender = conn, app
	return nil
}

func (s *Store) resetAppender() {
	if s.appender != nil {
		_ = s.appender.Close()
		s.appender = nil
	}
	if s.appendConn != nil {
		_ = s.appendConn.Close()
		s.appendConn = nil
	}
}

func rowValues(r *echoschema.Row, v []driver.Value) {
	v[0] = r.Time.UTC()
	v[1] = r.Kind
	v[2] = str(r.Cluster)
	v[3] = str(r.Node)
	v[4] = str(r.Job)
	v[5] = str(r.Cohort)
	v[6] = i32(r.Rank)
	v[7] = i32(r.LocalRank)
	v[8] = i32(r.WorldSize)
	v[9] = i64(r.PID)
	v[10] = str(r.Process)
	v[11] = i64(r.ThreadID)
	v[12] = r.Name
	v[13] = str(r.API)
	v[14] = str(r.CommID)
	v[15] = f64(r.Value)
	v[16] = i64(r.Count)
	v[17] = f64(r.Sum)
	v[18] = f64(r.Min)
	v[19] = f64(r.Max)
	v[20] = f64(r.P50)
	v[21] = f64(r.P95)
	v[22] = f64(r.P99)
	v[23] = str(r.Unit)
	v[24] = str(r.Severity)
	if r.SeverityNumber > 0 {
		v[25] = r.SeverityNumber
	} else {
		v[25] = nil
	}
	v[26] = str(r.Body)
	v[27] = str(r.TraceID)
	if r.Attributes == "" {
		v[28] = "{}"
	} else {
		v[28] = r.Attributes
	}
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

func i64(n int64) driver.Value {
	if n < 0 {
		return nil
	}
	return n
}

func f64(f float64) driver.Value {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return f
}
