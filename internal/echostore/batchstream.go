//go:build duckdb_arrow

package echostore

/*
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static long long fathom_malloc_in_use(void) { return (long long)mallinfo2().uordblks; }

// The Arrow C data and stream interfaces, as the Arrow specification fixes them (the
// guards let another header's identical definitions win).
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE
struct ArrowSchema {
	const char *format;
	const char *name;
	const char *metadata;
	int64_t flags;
	int64_t n_children;
	struct ArrowSchema **children;
	struct ArrowSchema *dictionary;
	void (*release)(struct ArrowSchema *);
	void *private_data;
};
struct ArrowArray {
	int64_t length;
	int64_t null_count;
	int64_t offset;
	int64_t n_buffers;
	int64_t n_children;
	const void **buffers;
	struct ArrowArray **children;
	struct ArrowArray *dictionary;
	void (*release)(struct ArrowArray *);
	void *private_data;
};
#endif
#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE
struct ArrowArrayStream {
	int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *out);
	int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *out);
	const char *(*get_last_error)(struct ArrowArrayStream *);
	void (*release)(struct ArrowArrayStream *);
	void *private_data;
};
#endif

// One writer's stream: its own export of the events schema, made once, and the batch
// of the INSERT under way.
struct fathom_batch_stream {
	struct ArrowSchema schema;
	struct ArrowArray batch;
	int pending;
};

// A copy handed out by get_schema owns nothing: releasing it only marks it released.
static void fathom_schema_copy_release(struct ArrowSchema *s) { s->release = NULL; }

// get_schema hands out a shallow copy of the schema made once. DuckDB's arrow scan
// (duckdb_arrow_scan and every bind of its view, DuckDB 1.5.5) never releases what
// get_schema returns, so a schema exported per call leaked ~5 KB each time, ~32 KB
// per batch; a copy of one kept schema leaks nothing.
static int fathom_get_schema(struct ArrowArrayStream *st, struct ArrowSchema *out) {
	struct fathom_batch_stream *p = st->private_data;
	*out = p->schema;
	out->release = fathom_schema_copy_release;
	return 0;
}

// get_next moves the pending batch out once (the reader then owns and releases it),
// then reports the end of the stream (a released array).
static int fathom_get_next(struct ArrowArrayStream *st, struct ArrowArray *out) {
	struct fathom_batch_stream *p = st->private_data;
	if (p->pending) {
		*out = p->batch;
		p->batch.release = NULL;
		p->pending = 0;
	} else {
		memset(out, 0, sizeof(*out));
	}
	return 0;
}

static const char *fathom_get_last_error(struct ArrowArrayStream *st) { return NULL; }

// DuckDB releases only its own copies of the stream; the writer frees the original.
static void fathom_stream_release(struct ArrowArrayStream *st) { st->release = NULL; }

static struct ArrowArrayStream *fathom_stream_new(void) {
	struct ArrowArrayStream *st = calloc(1, sizeof(*st));
	struct fathom_batch_stream *p = calloc(1, sizeof(*p));
	if (!st || !p) {
		free(st);
		free(p);
		return NULL;
	}
	st->get_schema = fathom_get_schema;
	st->get_next = fathom_get_next;
	st->get_last_error = fathom_get_last_error;
	st->release = fathom_stream_release;
	st->private_data = p;
	return st;
}

static struct ArrowSchema *fathom_stream_schema(struct ArrowArrayStream *st) {
	return &((struct fathom_batch_stream *)st->private_data)->schema;
}

static struct ArrowArray *fathom_stream_batch(struct ArrowArrayStream *st) {
	return &((struct fathom_batch_stream *)st->private_data)->batch;
}

static void fathom_stream_set_pending(struct ArrowArrayStream *st) {
	((struct fathom_batch_stream *)st->private_data)->pending = 1;
}

// fathom_stream_clear releases a batch nobody read (a failed INSERT).
static void fathom_stream_clear(struct ArrowArrayStream *st) {
	struct fathom_batch_stream *p = st->private_data;
	if (p->pending && p->batch.release) {
		p->batch.release(&p->batch);
	}
	p->pending = 0;
}

static void fathom_stream_free(struct ArrowArrayStream *st) {
	struct fathom_batch_stream *p = st->private_data;
	fathom_stream_clear(st);
	if (p->schema.release) {
		p->schema.release(&p->schema);
	}
	free(p);
	free(st);
}
*/
import "C"

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/cdata"
	bindings "github.com/duckdb/duckdb-go-bindings"
)

// batchStream is one writer's Arrow stream into DuckDB's arrow scan, reused batch
// after batch.
type batchStream struct {
	c    *C.struct_ArrowArrayStream
	conn bindings.Connection
}

func newBatchStream(raw driver.Conn, schema *arrow.Schema) (*batchStream, error) {
	conn, err := duckdbConnection(raw)
	if err != nil {
		return nil, err
	}
	c := C.fathom_stream_new()
	if c == nil {
		return nil, errors.New("arrow stream: out of memory")
	}
	cdata.ExportArrowSchema(schema, (*cdata.CArrowSchema)(unsafe.Pointer(C.fathom_stream_schema(c))))
	return &batchStream{c: c, conn: conn}, nil
}

// register makes rec readable as the view name on the writer's connection, until the
// view is dropped; DuckDB releases rec's exported array when its scan is done.
func (s *batchStream) register(rec arrow.RecordBatch, name string) error {
	C.fathom_stream_clear(s.c)
	cdata.ExportArrowRecordBatch(rec, (*cdata.CArrowArray)(unsafe.Pointer(C.fathom_stream_batch(s.c))), nil)
	C.fathom_stream_set_pending(s.c)
	if bindings.ArrowScan(s.conn, name, bindings.ArrowStream{Ptr: unsafe.Pointer(s.c)}) != bindings.StateSuccess {
		C.fathom_stream_clear(s.c)
		return fmt.Errorf("register ingest view %s", name)
	}
	return nil
}

// done releases the batch if the INSERT did not read it.
func (s *batchStream) done() { C.fathom_stream_clear(s.c) }

func (s *batchStream) close() {
	if s.c != nil {
		C.fathom_stream_free(s.c)
		s.c = nil
	}
}

// cHeapInUse is what malloc has handed out and not had back, process-wide (glibc's
// mallinfo2): the tests use it to check that an ingest batch leaves no C memory behind.
func cHeapInUse() int64 { return int64(C.fathom_malloc_in_use()) }

// duckdbConnection finds the C connection behind a duckdb-go driver connection.
// duckdb-go registers Arrow views only through a stream it exports itself, whose
// schema DuckDB leaks on every call; handing DuckDB this package's stream needs the
// connection handle, which duckdb-go (v2.10505.0) keeps in an unexported field. A
// version that moves it fails here, at the writer's first batch, with this error, and
// the store's tests catch it before a release.
func duckdbConnection(raw driver.Conn) (bindings.Connection, error) {
	v := reflect.ValueOf(raw)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return bindings.Connection{}, fmt.Errorf("arrow ingest: driver connection is %T, not duckdb-go's", raw)
	}
	ptr := v.Elem().FieldByName("conn").FieldByName("Ptr")
	if !ptr.IsValid() || ptr.Kind() != reflect.UnsafePointer || ptr.IsNil() {
		return bindings.Connection{}, fmt.Errorf("arrow ingest: %T has no conn.Ptr connection handle (duckdb-go changed; see batchstream.go)", raw)
	}
	return bindings.Connection{Ptr: ptr.UnsafePointer()}, nil
}
