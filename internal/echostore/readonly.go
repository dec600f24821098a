package echostore

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
	"time"

	"github.com/duckdb/duckdb-go/v2"
)

// Errors of QueryReadOnly; the API maps them to stable status codes.
var (
	// ErrNotReadOnly: the text is not a single SELECT that only reads the store.
	ErrNotReadOnly = errors.New("only a single SELECT that reads the store is allowed")
	// ErrResultTooLarge: the encoded result passed the byte cap.
	ErrResultTooLarge = errors.New("query result exceeds the response size limit")
	// ErrQueryTimeout: the query ran past its time limit and was interrupted.
	ErrQueryTimeout = errors.New("query exceeded its time limit")
	// ErrQueryFailed: DuckDB refused or failed the query (syntax, missing column, a
	// guard such as disabled external access).
	ErrQueryFailed = errors.New("query failed")
)

// QueryLimits bound one read-only query.
type QueryLimits struct {
	MaxRows  int
	MaxBytes int
	Timeout  time.Duration
}

// QueryResult is a read-only query's answer.
type QueryResult struct {
	Columns   []string `json:"columns"`
	Rows      [][]any  `json:"rows"`
	RowCount  int      `json:"row_count"`
	Truncated bool     `json:"truncated"`
}

// QueryReadOnly runs user SQL. The guards are the engine's, in depth:
//   - DuckDB's parser turns the text into a tree, and every relation, table function and
//     function it names must be a read of the store (readPolicy): a SELECT can call
//     table functions that change the instance or abort the process;
//   - the instance was opened with external access, extension loading and configuration
//     changes disabled (see dsn), so no statement can read files, attach databases or
//     undo those settings;
//   - a fresh connection per query, so nothing (temp objects, macros, variables) carries
//     over between callers; it is closed afterwards;
//   - the text must prepare as exactly one statement whose prepared type is SELECT
//     (duckdb-go's context-free Prepare refuses multi-statement text instead of running
//     the leading statements, as its PrepareContext would);
//   - it runs inside a READ ONLY transaction that is rolled back;
//   - it is wrapped in a subquery with a LIMIT of MaxRows+1, under a context timeout
//     that interrupts DuckDB, and the encoded rows are capped at MaxBytes.
//
// It is one Read of the store: after Close began it answers ErrClosed.
func (s *Store) QueryReadOnly(ctx context.Context, query string, lim QueryLimits) (*QueryResult, error) {
	var res *QueryResult
	err := s.Read(ctx, func(ctx context.Context) error {
		var err error
		res, err = s.queryReadOnly(ctx, query, lim)
		return err
	})
	return res, err
}

func (s *Store) queryReadOnly(ctx context.Context, query string, lim QueryLimits) (*QueryResult, error) {
	query = strings.TrimSpace(query)
	for strings.HasSuffix(query, ";") {
		query = strings.TrimSpace(strings.TrimSuffix(query, ";"))
	}
	if query == "" {
		return nil, fmt.Errorf("%w: empty query", ErrNotReadOnly)
	}
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()

	dc, err := s.connector.Connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("query connection: %w", err)
	}
	defer dc.Close()
	conn := dc.(*duckdb.Conn)

	if err := s.readPolicy.check(ctx, conn, query); err != nil {
		return nil, err
	}
	if err := checkSingleSelect(conn, query); err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN TRANSACTION READ ONLY", nil); err != nil {
		// The checks above can use up the query's time (DuckDB folds constants such as
		// repeat('x', 100000000) while it prepares): that is the caller's timeout, not
		// an internal error.
		return nil, classify(ctx, fmt.Errorf("begin read-only transaction: %w", err))
	}
	defer conn.ExecContext(context.Background(), "ROLLBACK", nil) //nolint:errcheck // nothing to undo

	wrapped := fmt.Sprintf("SELECT * FROM (\n%s\n) AS user_query LIMIT %d", query, lim.MaxRows+1)
	stmt, err := conn.Prepare(wrapped)
	if err != nil {
		return nil, classify(ctx, err)
	}
	defer stmt.Close()
	if err := requireSelect(stmt.(*duckdb.Stmt)); err != nil {
		return nil, err
	}
	rows, err := stmt.(driver.StmtQueryContext).QueryContext(ctx, nil)
	if err != nil {
		return nil, classify(ctx, err)
	}
	defer rows.Close()
	return readCapped(ctx, rows, lim)
}

func checkSingleSelect(conn *duckdb.Conn, query string) error {
	stmt, err := conn.Prepare(query)
	if err != nil {
		if strings.Contains(err.Error(), "multiple") || strings.Contains(err.Error(), "context") {
			return fmt.Errorf("%w: the text holds more than one statement", ErrNotReadOnly)
		}
		return fmt.Errorf("%w: %v", ErrQueryFailed, err)
	}
	defer stmt.Close()
	return requireSelect(stmt.(*duckdb.Stmt))
}

func requireSelect(stmt *duckdb.Stmt) error {
	t, err := stmt.StatementType()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrQueryFailed, err)
	}
	if t != duckdb.STATEMENT_TYPE_SELECT {
		return fmt.Errorf("%w: statement type %d is not SELECT", ErrNotReadOnly, t)
	}
	return nil
}

func classify(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ErrQueryTimeout
	}
	return fmt.Errorf("%w: %v", ErrQueryFailed, err)
}

func readCapped(ctx context.Context, rows driver.Rows, lim QueryLimits) (*QueryResult, error) {
	res := &QueryResult{Columns: rows.Columns(), Rows: [][]any{}}
	bytes := 0
	dest := make([]driver.Value, len(res.Columns))
	for {
		// Results stream in chunks after the statement ran; the deadline holds for
		// reading them too.
		if ctx.Err() != nil {
			return nil, ErrQueryTimeout
		}
		if err := rows.Next(dest); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, classify(ctx, err)
		}
		if len(res.Rows) == lim.MaxRows {
			res.Truncated = true
			break
		}
		row := make([]any, len(dest))
		for i, v := range dest {
			row[i] = jsonValue(v)
		}
		b, err := json.Marshal(row)
		if err != nil {
			return nil, fmt.Errorf("%w: encode row: %v", ErrQueryFailed, err)
		}
		bytes += len(b) + 1
		if bytes > lim.MaxBytes {
			return nil, fmt.Errorf("%w (%d bytes): add a LIMIT or aggregate", ErrResultTooLarge, lim.MaxBytes)
		}
		res.Rows = append(res.Rows, row)
	}
	if err := ctx.Err(); err != nil {
		return nil, ErrQueryTimeout
	}
	res.RowCount = len(res.Rows)
	return res, nil
}

// jsonValue turns DuckDB values JSON cannot encode (NaN, big integers, intervals,
// blobs) into ones it can.
func jsonValue(v driver.Value) any {
	switch x := v.(type) {
	case float64:
		if x != x || x > 1.7e308 || x < -1.7e308 {
			return nil
		}
		return x
	case float32:
		return jsonValue(float64(x))
	case *big.Int:
		return x.String()
	case []byte:
		return fmt.Sprintf("%x", x)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case duckdb.Interval:
		return fmt.Sprintf("%d months %d days %d us", x.Months, x.Days, x.Micros)
	default:
		return x
	}
}
