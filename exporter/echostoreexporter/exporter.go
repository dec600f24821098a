package echostoreexporter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fathom-gpu/fathom/exporter/echostoreexporter/internal/metadata"
	"github.com/fathom-gpu/fathom/extension/echoextension"
	"github.com/fathom-gpu/fathom/internal/echoschema"
)

type duckdbExporter struct {
	cfg    *Config
	set    exporter.Settings
	writer echoextension.RowWriter
	// truncatedValues counts maps and arrays cut at MaxValueDepth: the row is kept,
	// but part of what the sender sent is not in it.
	truncatedValues metric.Int64Counter
	// storageFailures counts batches the file system refused, by reason.
	storageFailures metric.Int64Counter
}

func newDuckDBExporter(cfg *Config, set exporter.Settings) (*duckdbExporter, error) {
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	return &duckdbExporter{cfg: cfg, set: set, truncatedValues: tb.FathomDuckdbTruncatedValues, storageFailures: tb.FathomDuckdbStorageFailures}, nil
}

func (e *duckdbExporter) start(_ context.Context, host component.Host) error {
	ext, ok := host.GetExtensions()[e.cfg.Store]
	if !ok {
		return fmt.Errorf("duckdb: store %q is not an extension of this collector: add it under `extensions:` and `service.extensions`", e.cfg.Store)
	}
	w, ok := ext.(echoextension.RowWriter)
	if !ok {
		return fmt.Errorf("duckdb: extension %q is not an echo store", e.cfg.Store)
	}
	e.writer = w
	return nil
}

// pushLogs and pushMetrics leave failed writes retryable (the default for a plain
// error): the OTLP receiver answers them Unavailable (HTTP 503), and the sender, which
// still holds the data, sends it again. Nothing in a batch can be malformed by then, the
// receiver has already decoded it.
func (e *duckdbExporter) pushLogs(ctx context.Context, ld plog.Logs) error {
	buf := rowBuffers.Get().(*[]echoschema.Row)
	defer putRowBuffer(buf)
	rows, truncated := logRows(*buf, ld)
	*buf = rows
	e.countTruncated(ctx, truncated)
	if err := e.writer.AppendRows(ctx, rows); err != nil {
		return e.refusal(ctx, fmt.Errorf("write %d log records: %w", len(rows), err))
	}
	return nil
}

func (e *duckdbExporter) pushMetrics(ctx context.Context, md pmetric.Metrics) error {
	buf := rowBuffers.Get().(*[]echoschema.Row)
	defer putRowBuffer(buf)
	rows, truncated := metricRows(*buf, md)
	*buf = rows
	e.countTruncated(ctx, truncated)
	if err := e.writer.AppendRows(ctx, rows); err != nil {
		return e.refusal(ctx, fmt.Errorf("write %d data points: %w", len(rows), err))
	}
	return nil
}

// StorageRetryDelay is how long a sender refused for a storage failure is asked to
// wait (gRPC RetryInfo, HTTP Retry-After): long enough that a fleet of nodes does not
// hammer a gateway whose disk is full, short enough that they catch up soon after an
// operator frees space.
const StorageRetryDelay = 5 * time.Second

// refusal turns a storage failure into the status the sender sees: Unavailable with a
// retry delay and the reason in its message, counted by reason. Other failures pass
// through (retryable too).
func (e *duckdbExporter) refusal(ctx context.Context, err error) error {
	var se *echoextension.StorageError
	if !errors.As(err, &se) {
		return err
	}
	e.storageFailures.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", se.Reason)))
	st, detailErr := status.New(codes.Unavailable, err.Error()).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(StorageRetryDelay)})
	if detailErr != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	return st.Err()
}

func (e *duckdbExporter) countTruncated(ctx context.Context, n int) {
	if n > 0 {
		e.truncatedValues.Add(ctx, int64(n))
	}
}

// rowBuffers recycles the row slices batches are converted into: the store has
// copied the rows into DuckDB by the time a push returns, and a fresh slice per batch
// was ~350 bytes per row of garbage for the collector's GC.
var rowBuffers = sync.Pool{New: func() any { return new([]echoschema.Row) }}

// putRowBuffer clears the rows first so that a pooled slice does not keep the last
// batch's strings alive.
func putRowBuffer(buf *[]echoschema.Row) {
	clear(*buf)
	*buf = (*buf)[:0]
	rowBuffers.Put(buf)
}
