package echotools

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/echoschema"
	"github.com/fathom-gpu/fathom/internal/echostore"
	"github.com/fathom-gpu/fathom/internal/testsupport/echostoretest"
)

// fuzzEnv is a small real store with a gauge series over two nodes, CUDA call logs and
// a causal chain: enough for every tool to find something to compute on.
func fuzzEnv(tb testing.TB) *Env {
	tb.Helper()
	st, err := echostore.Open(context.Background(), echostore.Options{Path: filepath.Join(tb.TempDir(), "echo.duckdb"), Threads: 1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	var rows []echoschema.Row
	for i := range 40 {
		r := echoschema.NewRow()
		r.Time = t0.Add(time.Duration(i) * time.Second)
		r.Kind, r.Name, r.Unit, r.Value = echoschema.KindGauge, "nccl.allreduce.duration", "ms", float64(10+i%2*15)
		r.Cluster, r.Node, r.Rank, r.WorldSize = "c1", echostoretest.Node(i%2), int32(i%2), 2
		rows = append(rows, r)
		l := echoschema.NewRow()
		l.Time = r.Time
		l.Kind, l.Name, l.API, l.Value, l.Unit = echoschema.KindLog, "cuda.api.call", "cudaMemcpy", float64(i), "us"
		l.Cluster, l.Node, l.PID, l.Process = "c1", echostoretest.Node(i%2), 100, "train.py"
		rows = append(rows, l)
	}
	c := echoschema.NewRow()
	c.Time, c.Kind, c.Name, c.Cluster, c.Node = t0, echoschema.KindLog, echoschema.EventCausalChain, "c1", "gpu-1"
	c.Attributes = `{"fathom.chain.root_cause":"run_queue_wait","fathom.chain.severity":"high"}`
	rows = append(rows, c)
	if err := st.Append(context.Background(), rows); err != nil {
		tb.Fatal(err)
	}
	return &Env{
		Store:     st,
		SQLLimits: echostore.QueryLimits{MaxRows: 100, MaxBytes: 1 << 20, Timeout: 2 * time.Second},
		SQLSlots:  make(chan struct{}, 1),
		Now:       func() time.Time { return t0.Add(30 * time.Minute) },
	}
}

// FuzzRegistryCall calls every tool of the registry with any bytes as its arguments, as
// an MCP client or the HTTP API can. The answer is a result that encodes as JSON (the
// transport must be able to send it) or an error of a kind the API turns into a clear
// status; an internal error, a panic or a result JSON cannot carry (a NaN) is a bug.
func FuzzRegistryCall(f *testing.F) {
	env := fuzzEnv(f)
	reg, err := NewRegistry(env)
	if err != nil {
		f.Fatal(err)
	}
	tools := reg.List()
	for i := range tools {
		for _, args := range []string{
			``, `null`, `{}`, `[]`, `"x"`, `{"since":"-1h"}`, `{"since":"2026-03-01T12:00:00Z","until":"2026-03-01T11:00:00Z"}`,
			`{"cluster":"c1","metric":"nccl.allreduce.duration","limit":0}`, `{"limit":-1,"node":""}`,
			`{"limit":1e308,"since":"1000000h"}`, `{"sql":"SELECT count(*) FROM events"}`, `{"sql":"DELETE FROM events"}`,
			`{"pid":-1,"node":"gpu-0","bucket":"0s"}`, `{"unknown_field":{"a":[1,2,{"b":null}]}}`, "{\"node\":\"\xff\"}",
		} {
			f.Add(uint8(i), []byte(args))
		}
	}
	f.Add(uint8(255), []byte(`{}`)) // no such tool
	f.Fuzz(func(t *testing.T, which uint8, args []byte) {
		name := "no_such_tool"
		if int(which) < len(tools) {
			name = tools[which].Name
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := reg.Call(ctx, name, json.RawMessage(args))
		if err != nil {
			if errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrUnknownTool) || errors.Is(err, ErrBusy) ||
				errors.Is(err, echostore.ErrNotReadOnly) || errors.Is(err, echostore.ErrQueryFailed) ||
				errors.Is(err, echostore.ErrQueryTimeout) || errors.Is(err, echostore.ErrResultTooLarge) {
				return
			}
			t.Fatalf("%s(%q): internal error %v", name, args, err)
		}
		if _, err := json.Marshal(res); err != nil {
			t.Fatalf("%s(%q): the result cannot be sent: %v", name, args, err)
		}
	})
}
