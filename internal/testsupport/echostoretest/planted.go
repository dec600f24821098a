// Package echostoretest plants a store with known data, for the tests of the packages
// above internal/echostore (the tools, the API, the socket, stdio): each asserts its
// answers against the same numbers, so they live once, here.
package echostoretest

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/echoschema"
	"github.com/fathom-gpu/fathom/internal/echostore"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// What the planted rows hold, for assertions. Eight nodes gpu-0..gpu-7 of cluster c1,
// rank n on gpu-n, each report nccl.allreduce.duration (ms) once a second for 100 s from
// the start, at NodeAllReduceMS[n]: gpu-5 is 2.5x slower than its peers, gpu-2 a little
// slow but within the default threshold. The median of the node means is 10.1 and the
// MAD 0.3.
var NodeAllReduceMS = []float64{9.6, 9.8, 11, 10.0, 10.2, 25, 10.4, 10.0}

// PlantedRows is how many rows Plant writes: 800 all-reduce points, 100 cudaMemcpy
// calls, 101 cudaStreamSynchronize calls and 3 causal chains.
const PlantedRows = 1004

// Node is the name of the planted node i.
func Node(i int) string { return "gpu-" + string(rune('0'+i)) }

// Open opens a fresh store in a test directory, closed when the test ends.
func Open(t testing.TB) *echostore.Store {
	t.Helper()
	st, err := echostore.Open(context.Background(), echostore.Options{Path: filepath.Join(t.TempDir(), "echo.duckdb"), Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Planted is a fresh store holding Rows(start).
func Planted(t testing.TB, start time.Time) *echostore.Store {
	t.Helper()
	st := Open(t)
	if err := st.Append(context.Background(), Rows(start)); err != nil {
		t.Fatal(err)
	}
	return st
}

// PlantedFile is the path of a closed store file holding Rows(start): what `fathom mcp
// --db` is given, a file no gateway holds.
func PlantedFile(t testing.TB, start time.Time) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "echo.duckdb")
	st, err := echostore.Open(context.Background(), echostore.Options{Path: path, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Append(context.Background(), Rows(start)); err != nil {
		st.Close()
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// Rows are the planted rows (see NodeAllReduceMS), all within ten minutes of start:
//   - gpu-0 made 100 cudaMemcpy calls of 1..100 us in the first 100 ms;
//   - gpu-1's rank 1 (pid 4242, python3.11) made 60 cudaStreamSynchronize calls of
//     1..60 ms from Net.forward (/job/train.py:33), 40 of 100 ms from main
//     (/job/train.py:59), and one without a stack;
//   - gpu-5's rank 5 wrote three causal chains (ERROR), run_queue_wait twice and
//     page_fault once, a minute apart.
func Rows(start time.Time) []echoschema.Row {
	var rows []echoschema.Row
	for n, v := range NodeAllReduceMS {
		for i := range 100 {
			r := echoschema.NewRow()
			r.Time = start.Add(time.Duration(i) * time.Second)
			r.Kind, r.Name, r.Unit, r.Value = echoschema.KindGauge, "nccl.allreduce.duration", "ms", v
			r.Cluster, r.Node, r.Rank, r.WorldSize = "c1", Node(n), int32(n), 8
			r.Attributes = `{"cloud.provider":"aws","fathom.gpu.model":"H100"}`
			rows = append(rows, r)
		}
	}
	for i := 1; i <= 100; i++ {
		r := echoschema.NewRow()
		r.Time = start.Add(time.Duration(i) * time.Millisecond)
		r.Kind, r.Name, r.API, r.Value, r.Unit = echoschema.KindLog, "cuda.api.call", "cudaMemcpy", float64(i), "us"
		r.Cluster, r.Node = "c1", "gpu-0"
		rows = append(rows, r)
	}
	// By time the loop's stack comes first, by count forward's.
	forward := stack{"a1b2c3d4e5f60001", "Net.forward", "/job/train.py", 33, "Net.forward (/job/train.py:33) < main (/job/train.py:54)"}
	loop := stack{"a1b2c3d4e5f60002", "main", "/job/train.py", 59, "main (/job/train.py:59)"}
	for i := 1; i <= 100; i++ {
		r := echoschema.NewRow()
		r.Time = start.Add(time.Duration(i) * 10 * time.Millisecond)
		r.Kind, r.Name, r.API = echoschema.KindLog, "cuda.api.call", "cudaStreamSynchronize"
		r.Cluster, r.Node, r.Rank, r.PID, r.Process = "c1", "gpu-1", 1, 4242, "python3.11"
		if i <= 60 {
			r.Attributes = forward.attributes(float64(i) / 1000)
		} else {
			r.Attributes = loop.attributes(0.1)
		}
		rows = append(rows, r)
	}
	unstacked := echoschema.NewRow()
	unstacked.Time, unstacked.Kind, unstacked.Name, unstacked.API = start, echoschema.KindLog, "cuda.api.call", "cudaStreamSynchronize"
	unstacked.Cluster, unstacked.Node, unstacked.Rank, unstacked.PID = "c1", "gpu-1", 1, 4242
	unstacked.Attributes = `{"fathom.duration_s":5}`
	rows = append(rows, unstacked)
	for i, cause := range []string{"run_queue_wait", "page_fault", "run_queue_wait"} {
		r := echoschema.NewRow()
		r.Time = start.Add(time.Duration(i) * time.Minute)
		r.Kind, r.Name, r.Cluster, r.Node, r.Rank = echoschema.KindLog, echoschema.EventCausalChain, "c1", "gpu-5", 5
		r.SeverityNumber, r.Severity = 17, "ERROR"
		r.Attributes = `{"fathom.chain.root_cause":"` + cause + `","fathom.chain.severity":"high","fathom.chain.fix":"pin the data loader","extra":1}`
		rows = append(rows, r)
	}
	return rows
}

// stack is a Python stack as a CUDA call record carries it.
type stack struct {
	id, function, file string
	line               int
	frames             string
}

func (s stack) attributes(seconds float64) string {
	b, _ := json.Marshal(map[string]any{
		semconv.StackID: s.id, semconv.CodeFunction: s.function, semconv.CodeFilepath: s.file,
		semconv.CodeLineno: s.line, semconv.PythonStack: s.frames, semconv.DurationSeconds: seconds,
	})
	return string(b)
}
