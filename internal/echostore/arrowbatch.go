//go:build duckdb_arrow

package echostore

import (
	"context"
	"database/sql/driver"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory/mallocator"

	"github.com/fathom-gpu/fathom/internal/echoschema"
)

// Rows reach DuckDB as one Arrow record per batch, not through the Appender. The
// Appender boxes each of the 35 values of a row into an interface and crosses cgo once
// per string and once per NULL; filling Arrow columns is plain Go, and DuckDB reads the
// whole record through the C data interface in one INSERT. Sustained ingest in
// BenchmarkIngestWhileQuerying (3M rows, checkpoints included) went from ~105k to
// ~130-155k rows/s on this 2-core machine, measured back to back.

// eventsSchema is the events table as Arrow columns, in Columns order; the INSERT
// matches them by name.
var eventsSchema = func() *arrow.Schema {
	str, i32, i64, f64 := arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Float64
	types := map[string]arrow.DataType{
		"ts": &arrow.TimestampType{Unit: arrow.Microsecond}, "rank": i32, "local_rank": i32, "world_size": i32,
		"pid": i64, "thread_id": i64, "count": i64, "severity_number": i32,
		"value": f64, "sum": f64, "min": f64, "max": f64, "p50": f64, "p95": f64, "p99": f64,
		"start_ts": &arrow.TimestampType{Unit: arrow.Microsecond}, "scale": i32, "bucket_offset": i32,
		"zero_count": arrow.PrimitiveTypes.Uint64, "bucket_counts": arrow.ListOf(arrow.PrimitiveTypes.Uint64),
		"explicit_bounds": arrow.ListOf(f64),
	}
	fields := make([]arrow.Field, len(Columns))
	for i, name := range Columns {
		t, ok := types[name]
		if !ok {
			t = str
		}
		fields[i] = arrow.Field{Name: name, Type: t, Nullable: true}
	}
	return arrow.NewSchema(fields, nil)
}()

// columnMemory holds the batches' column buffers in C memory. Each batch's buffers are
// freed when its INSERT is done, and malloc hands the same memory to the next batch;
// from Go's heap they were ~500 bytes per row of fresh garbage (growing builders
// reallocate), which made the collector's GC a sixth of the gateway's CPU under ingest.
var columnMemory = mallocator.NewMallocator()

// ingestViews numbers the views batches are scanned through. The view is created and
// dropped inside the batch's own transaction, so no other transaction ever sees it;
// two writers creating the same name at once would still conflict, so each writer
// has its own.
var ingestViews atomic.Int64

// rowBatch fills Arrow columns from rows; one per writer, reused batch after batch.
type rowBatch struct {
	view    string
	stream  *batchStream
	builder *array.RecordBuilder
	ts      *array.TimestampBuilder
	startTS *array.TimestampBuilder
	// counts and bounds are the histogram bucket lists; their values go to
	// countValues and boundValues.
	counts, bounds *array.ListBuilder
	countValues    *array.Uint64Builder
	boundValues    *array.Float64Builder
	zeroCount      *array.Uint64Builder
	strs           map[string]*array.StringBuilder
	i32s           map[string]*array.Int32Builder
	i64s           map[string]*array.Int64Builder
	f64s           map[string]*array.Float64Builder
}

func newRowBatch(raw driver.Conn) (*rowBatch, error) {
	stream, err := newBatchStream(raw, eventsSchema)
	if err != nil {
		return nil, err
	}
	b := &rowBatch{
		view:    fmt.Sprintf("echo_ingest_%d", ingestViews.Add(1)),
		stream:  stream,
		builder: array.NewRecordBuilder(columnMemory, eventsSchema),
		strs:    map[string]*array.StringBuilder{},
		i32s:    map[string]*array.Int32Builder{},
		i64s:    map[string]*array.Int64Builder{},
		f64s:    map[string]*array.Float64Builder{},
	}
	for i, f := range b.builder.Fields() {
		name := eventsSchema.Field(i).Name
		switch fb := f.(type) {
		case *array.TimestampBuilder:
			if name == "start_ts" {
				b.startTS = fb
			} else {
				b.ts = fb
			}
		case *array.Uint64Builder:
			b.zeroCount = fb
		case *array.ListBuilder:
			if name == "bucket_counts" {
				b.counts, b.countValues = fb, fb.ValueBuilder().(*array.Uint64Builder)
			} else {
				b.bounds, b.boundValues = fb, fb.ValueBuilder().(*array.Float64Builder)
			}
		case *array.StringBuilder:
			b.strs[name] = fb
		case *array.Int32Builder:
			b.i32s[name] = fb
		case *array.Int64Builder:
			b.i64s[name] = fb
		case *array.Float64Builder:
			b.f64s[name] = fb
		}
	}
	return b, nil
}

func (b *rowBatch) release() {
	b.builder.Release()
	b.stream.close()
}

// record turns rows into one Arrow record, with the same NULL rules the Row type
// documents: empty strings, Absent integers and NaN or infinite floats are NULL.
func (b *rowBatch) record(rows []echoschema.Row) arrow.RecordBatch {
	b.builder.Reserve(len(rows))
	kind, cluster, node, job, cohort := b.strs["kind"], b.strs["cluster"], b.strs["node"], b.strs["job"], b.strs["cohort"]
	process, name, api, commID := b.strs["process"], b.strs["name"], b.strs["api"], b.strs["comm_id"]
	unit, severity, body, traceID, attrs := b.strs["unit"], b.strs["severity"], b.strs["body"], b.strs["trace_id"], b.strs["attributes"]
	rank, localRank, worldSize, severityNumber := b.i32s["rank"], b.i32s["local_rank"], b.i32s["world_size"], b.i32s["severity_number"]
	pid, threadID, count := b.i64s["pid"], b.i64s["thread_id"], b.i64s["count"]
	value, sum, minimum, maximum := b.f64s["value"], b.f64s["sum"], b.f64s["min"], b.f64s["max"]
	p50, p95, p99 := b.f64s["p50"], b.f64s["p95"], b.f64s["p99"]
	scale, offset := b.i32s["scale"], b.i32s["bucket_offset"]
	for i := range rows {
		r := &rows[i]
		b.ts.Append(arrow.Timestamp(r.Time.UnixMicro()))
		kind.Append(r.Kind)
		appendStr(cluster, r.Cluster)
		appendStr(node, r.Node)
		appendStr(job, r.Job)
		appendStr(cohort, r.Cohort)
		appendI32(rank, r.Rank)
		appendI32(localRank, r.LocalRank)
		appendI32(worldSize, r.WorldSize)
		appendI64(pid, r.PID)
		appendStr(process, r.Process)
		appendI64(threadID, r.ThreadID)
		name.Append(r.Name)
		appendStr(api, r.API)
		appendStr(commID, r.CommID)
		appendF64(value, r.Value)
		appendI64(count, r.Count)
		appendF64(sum, r.Sum)
		appendF64(minimum, r.Min)
		appendF64(maximum, r.Max)
		appendF64(p50, r.P50)
		appendF64(p95, r.P95)
		appendF64(p99, r.P99)
		appendStr(unit, r.Unit)
		appendStr(severity, r.Severity)
		if r.SeverityNumber > 0 {
			severityNumber.Append(r.SeverityNumber)
		} else {
			severityNumber.AppendNull()
		}
		appendStr(body, r.Body)
		appendStr(traceID, r.TraceID)
		if r.Attributes == "" {
			attrs.Append("{}")
		} else {
			attrs.Append(r.Attributes)
		}
		if r.Start.IsZero() {
			b.startTS.AppendNull()
		} else {
			b.startTS.Append(arrow.Timestamp(r.Start.UnixMicro()))
		}
		b.appendBuckets(r, scale, offset)
	}
	return b.builder.NewRecordBatch()
}

// insertRows writes rows into the events table inside the caller's transaction on raw.
func (b *rowBatch) insertRows(ctx context.Context, raw driver.Conn, rows []echoschema.Row) error {
	rec := b.record(rows)
	defer rec.Release()
	if err := b.stream.register(rec, b.view); err != nil {
		return err
	}
	// The view points at this batch's memory: it is dropped before that is freed, so
	// nothing on the connection can scan it afterwards.
	defer b.stream.done()
	exec := raw.(driver.ExecerContext)
	if _, err := exec.ExecContext(ctx, "INSERT INTO events BY NAME SELECT * FROM "+b.view, nil); err != nil {
		return fmt.Errorf("insert rows: %w", err)
	}
	if _, err := exec.ExecContext(ctx, "DROP VIEW "+b.view, nil); err != nil {
		return fmt.Errorf("drop ingest view: %w", err)
	}
	return nil
}

// appendBuckets writes a histogram's buckets: scale, offset and zero count only for
// exponential histograms, bounds only for explicit ones, NULL everywhere else.
func (b *rowBatch) appendBuckets(r *echoschema.Row, scale, offset *array.Int32Builder) {
	exp := r.BucketCounts != nil && r.Kind == echoschema.KindExpHistogram
	explicit := r.BucketCounts != nil && r.Kind == echoschema.KindHistogram
	if exp {
		scale.Append(r.Scale)
		offset.Append(r.BucketOffset)
		b.zeroCount.Append(r.ZeroCount)
	} else {
		scale.AppendNull()
		offset.AppendNull()
		b.zeroCount.AppendNull()
	}
	if exp || explicit {
		b.counts.Append(true)
		b.countValues.AppendValues(r.BucketCounts, nil)
	} else {
		b.counts.AppendNull()
	}
	if explicit {
		b.bounds.Append(true)
		b.boundValues.AppendValues(r.Bounds, nil)
	} else {
		b.bounds.AppendNull()
	}
}

func appendStr(b *array.StringBuilder, s string) {
	if s == "" {
		b.AppendNull()
		return
	}
	b.Append(s)
}

func appendI32(b *array.Int32Builder, n int32) {
	if n < 0 {
		b.AppendNull()
		return
	}
	b.Append(n)
}

func appendI64(b *array.Int64Builder, n int64) {
	if n < 0 {
		b.AppendNull()
		return
	}
	b.Append(n)
}

func appendF64(b *array.Float64Builder, f float64) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		b.AppendNull()
		return
	}
	b.Append(f)
}
