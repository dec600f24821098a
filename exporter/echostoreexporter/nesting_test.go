package echostoreexporter

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/protobuf/encoding/protowire"
)

type nesting int

const (
	nestKVList nesting = iota // AnyValue{kvlist_value: {values: [{key: "k", value: ...}]}}
	nestArray                 // AnyValue{array_value: {values: [...]}}
)

// nestedLogsRequest is an OTLP logs request, written with protowire as a hostile sender
// would, whose one record has a body and an attribute "deep" both nested depth maps (or
// arrays) deep around the string "x". Each level is a few bytes, so a request of a few
// MiB nests hundreds of thousands deep; the lengths are worked out from the inside
// first so that the request is built in one pass.
func nestedLogsRequest(depth int, kind nesting) []byte {
	value := nestedAnyValue(depth, kind)
	kv := protowire.AppendTag(nil, 1, protowire.BytesType) // KeyValue.key
	kv = protowire.AppendString(kv, "deep")
	kv = protowire.AppendTag(kv, 2, protowire.BytesType) // KeyValue.value
	kv = protowire.AppendBytes(kv, value)
	lr := protowire.AppendTag(nil, 5, protowire.BytesType) // LogRecord.body
	lr = protowire.AppendBytes(lr, value)
	lr = protowire.AppendTag(lr, 6, protowire.BytesType) // LogRecord.attributes
	lr = protowire.AppendBytes(lr, kv)
	sl := protowire.AppendTag(nil, 2, protowire.BytesType) // ScopeLogs.log_records
	sl = protowire.AppendBytes(sl, lr)
	rl := protowire.AppendTag(nil, 2, protowire.BytesType) // ResourceLogs.scope_logs
	rl = protowire.AppendBytes(rl, sl)
	req := protowire.AppendTag(nil, 1, protowire.BytesType) // ExportLogsServiceRequest.resource_logs
	return protowire.AppendBytes(req, rl)
}

func nestedAnyValue(depth int, kind nesting) []byte {
	leaf := protowire.AppendTag(nil, 1, protowire.BytesType) // AnyValue.string_value
	leaf = protowire.AppendString(leaf, "x")
	// size[i] is the encoded size of the AnyValue i levels above the leaf.
	size := make([]int, depth+1)
	size[0] = len(leaf)
	inner := func(i int) int { // size of what level i wraps: a KeyValue or an AnyValue
		if kind == nestArray {
			return size[i-1]
		}
		return 1 + 1 + 1 + 1 + protowire.SizeVarint(uint64(size[i-1])) + size[i-1] // key "k", value
	}
	for i := 1; i <= depth; i++ {
		n := inner(i)
		list := 1 + protowire.SizeVarint(uint64(n)) + n
		size[i] = 1 + protowire.SizeVarint(uint64(list)) + list
	}
	out := make([]byte, 0, size[depth])
	for i := depth; i >= 1; i-- {
		n := inner(i)
		if kind == nestArray {
			out = protowire.AppendTag(out, 5, protowire.BytesType) // AnyValue.array_value
		} else {
			out = protowire.AppendTag(out, 6, protowire.BytesType) // AnyValue.kvlist_value
		}
		out = protowire.AppendVarint(out, uint64(1+protowire.SizeVarint(uint64(n))+n))
		out = protowire.AppendTag(out, 1, protowire.BytesType) // values
		out = protowire.AppendVarint(out, uint64(n))
		if kind == nestKVList {
			out = protowire.AppendTag(out, 1, protowire.BytesType)
			out = protowire.AppendString(out, "k")
			out = protowire.AppendTag(out, 2, protowire.BytesType)
			out = protowire.AppendVarint(out, uint64(size[i-1]))
		}
	}
	return append(out, leaf...)
}

// wantNested is the JSON of a value nested depth levels as nestedAnyValue builds it,
// once cut at MaxValueDepth.
func wantNested(depth int, kind nesting) string {
	open, close := `{"k":`, `}`
	if kind == nestArray {
		open, close = `[`, `]`
	}
	kept := min(depth, MaxValueDepth)
	inner := `"x"`
	if depth > MaxValueDepth {
		inner = `"` + TruncatedValue + `"`
	}
	return strings.Repeat(open, kept) + inner + strings.Repeat(close, kept)
}

// A value nested 100,000 levels (a 1.2 MB request) once took 42 s and 128 MB of stack
// on its way into the store; now the body and the attribute each keep 64 levels, end in
// the marker, and are counted. Depths up to the limit are written whole.
func TestDeepNestingIsCutAtMaxValueDepth(t *testing.T) {
	cases := []struct {
		depth         int
		kind          nesting
		wantTruncated int
	}{
		{1, nestKVList, 0},
		{MaxValueDepth, nestKVList, 0},
		{MaxValueDepth, nestArray, 0},
		{MaxValueDepth + 1, nestKVList, 2},
		{MaxValueDepth + 1, nestArray, 2},
		{100_000, nestKVList, 2},
		{100_000, nestArray, 2},
	}
	for _, c := range cases {
		raw := nestedLogsRequest(c.depth, c.kind)
		req := plogotlp.NewExportRequest()
		if err := req.UnmarshalProto(raw); err != nil {
			t.Fatalf("depth %d: pdata refused the request: %v", c.depth, err)
		}
		rows, truncated := logRows(nil, req.Logs())
		if len(rows) != 1 || truncated != c.wantTruncated {
			t.Fatalf("depth %d kind %d: %d rows, %d truncated, want 1 and %d", c.depth, c.kind, len(rows), truncated, c.wantTruncated)
		}
		want := wantNested(c.depth, c.kind)
		if rows[0].Body != want {
			t.Errorf("depth %d kind %d: body %.120q..., want %.120q...", c.depth, c.kind, rows[0].Body, want)
		}
		if wantAttrs := `{"deep":` + want + `}`; rows[0].Attributes != wantAttrs {
			t.Errorf("depth %d kind %d: attributes %.120q..., want %.120q...", c.depth, c.kind, rows[0].Attributes, wantAttrs)
		}
		if !json.Valid([]byte(rows[0].Body)) || !json.Valid([]byte(rows[0].Attributes)) {
			t.Errorf("depth %d kind %d: not JSON", c.depth, c.kind)
		}
	}
}

// A NaN or infinity inside a map made encoding/json (behind pdata's AsString) write
// nothing at all, so the stored attributes read `{"m":}` and no JSON function could
// parse the row; such numbers are null, as they are at the top level.
func TestNaNInsideMapsIsNull(t *testing.T) {
	ld := plog.NewLogs()
	lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	m := lr.Attributes().PutEmptyMap("m")
	m.PutDouble("nan", math.NaN())
	m.PutDouble("inf", math.Inf(1))
	m.PutDouble("n", 1.5)
	m.PutEmptyBytes("b").FromRaw([]byte{0, 1, 0xff})
	l := lr.Attributes().PutEmptySlice("l")
	l.AppendEmpty().SetDouble(math.Inf(-1))
	l.AppendEmpty().SetInt(2)
	lr.Body().SetEmptyMap().PutDouble("nan", math.NaN())

	rows, truncated := logRows(nil, ld)
	if len(rows) != 1 || truncated != 0 ||
		rows[0].Attributes != `{"m":{"b":"AAH/","inf":null,"n":1.5,"nan":null},"l":[null,2]}` ||
		rows[0].Body != `{"nan":null}` {
		t.Fatalf("rows: %+v", rows)
	}
}
