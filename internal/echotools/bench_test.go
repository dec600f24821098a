package echotools

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/echostore"
)

// benchRows is the size of the latency fixture: the 10M rows.
const benchRows = 10_000_000

var benchStart = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// fixture10M opens (building once, then reusing from the temp dir) a store of 10M rows
// spread over one hour: 256 nodes/ranks of one job, half NCCL all-reduce durations and
// half CUDA kernel durations over three APIs, node-17 about 2x slower than its peers.
func fixture10M(b *testing.B) *echostore.Store {
	b.Helper()
	dir := filepath.Join(os.TempDir(), "fathom-bench-echo-10m-v4")
	path := filepath.Join(dir, "echo.duckdb")
	ctx := context.Background()
	_, statErr := os.Stat(filepath.Join(dir, "complete"))
	if statErr != nil {
		os.RemoveAll(dir)
	}
	s, err := echostore.Open(ctx, echostore.Options{Path: path})
	if err != nil {
		b.Fatal(err)
	}
	if statErr == nil {
		return s
	}
	b.Logf("building the %d-row fixture in %s (once)", benchRows, dir)
	_, err = s.DB().ExecContext(ctx, fmt.Sprintf(`INSERT INTO events (ts, kind, cluster, node, job, rank, world_size, pid, process, name, api, value, unit, attributes)
		SELECT ?::TIMESTAMP + to_microseconds((i * 3600000000 // %[1]d)::BIGINT),
			'log', 'bench', 'node-' || (i %% 256), 'llama', (i %% 256)::INTEGER, 256, 4000 + i %% 256, 'python3',
			CASE WHEN (i // 256) %% 2 = 0 THEN 'nccl.allreduce.duration' ELSE 'cuda.kernel.duration' END,
			CASE WHEN (i // 256) %% 2 = 0 THEN 'allreduce' ELSE ['cudaLaunchKernel', 'cudaMemcpyAsync', 'cudaStreamSynchronize'][1 + (i // 512) %% 3] END,
			(10 + random() * 2) * CASE WHEN i %% 256 = 17 THEN 2 ELSE 1 END,
			'ms', '{"step":' || (i // 256) || '}'
		FROM range(%[1]d) t(i)`, benchRows), benchStart)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.RebuildRollup(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, "CHECKPOINT"); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "complete"), nil, 0o600); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkToolsOn10MRows: latency of the heavy tools over the whole 10M-row hour
// (every row in the window), reported as p50 and p95 in ms, plus the Go heap held.
func BenchmarkToolsOn10MRows(b *testing.B) {
	s := fixture10M(b)
	defer s.Close()
	env := &Env{Store: s, SQLLimits: echostore.QueryLimits{MaxRows: 1000, MaxBytes: 1 << 20, Timeout: 10 * time.Second},
		SQLSlots: make(chan struct{}, 2), Now: func() time.Time { return benchStart.Add(time.Hour) }}
	reg, err := NewRegistry(env)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, tool, args string }{
		{"find_outlier_nodes", "find_outlier_nodes", `{"signal":"nccl.allreduce.duration","since":"1h"}`},
		{"find_outlier_nodes/by_rank_15m", "find_outlier_nodes", `{"signal":"nccl.allreduce.duration","since":"15m","by":"rank"}`},
		{"get_trace_stats", "get_trace_stats", `{"since":"1h"}`},
		{"get_trace_stats/one_node_15m", "get_trace_stats", `{"since":"15m","node":"node-17"}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for range b.N {
				start := time.Now()
				res, err := reg.Call(context.Background(), c.tool, json.RawMessage(c.args))
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				if o, ok := res.(OutlierOutput); ok && (len(o.Outliers) == 0 || o.Outliers[0].Node != "node-17") {
					b.Fatalf("outlier is not node-17: %+v", o.Outliers)
				}
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
		})
	}
}
