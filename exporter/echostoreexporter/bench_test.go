package echostoreexporter

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/fathom-gpu/fathom/exporter/echostoreexporter/internal/metadata"
	"github.com/fathom-gpu/fathom/extension/echoextension"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
)

type extensionHost map[component.ID]component.Component

func (h extensionHost) GetExtensions() map[component.ID]component.Component { return h }

const benchToken = "bench-token-0123456789abcdef"

// senders is how many nodes push at once: a gateway serves many.
const senders = 16

// requestsPerOp: one benchmark op is this many 1,000-row OTLP requests. 3M rows span
// at least one of DuckDB's automatic checkpoints (one every 1-2.3M rows here), which
// stall ingest for seconds, and the run ends with a checkpoint of the rest, so the
// rate includes the cost of writing every row into the file.
const requestsPerOp = 3000

// benchLogs is one node's OTLP export: 1,000 NCCL/CUDA events with the attributes the
// node collector sets.
func benchLogs(node int) plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	res := rl.Resource().Attributes()
	res.PutStr("fathom.cluster.name", "bench")
	res.PutStr("host.name", fmt.Sprintf("node-%03d", node))
	res.PutStr("fathom.job.name", "llama")
	res.PutInt("fathom.world_size", 64)
	res.PutInt("process.pid", int64(4000+node))
	res.PutStr("process.executable.name", "python3")
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	now := pcommon.NewTimestampFromTime(time.Now())
	for i := range 1000 {
		lr := lrs.AppendEmpty()
		lr.SetTimestamp(now)
		lr.SetEventName("nccl.allreduce.duration")
		lr.Body().SetDouble(10 + float64(i%50)*0.01)
		lr.Attributes().PutInt("fathom.rank", int64(node%64))
		lr.Attributes().PutStr("nccl.op", "allreduce")
		lr.Attributes().PutInt("thread.id", int64(i))
		lr.Attributes().PutStr("nccl.comm.id", "0x1f2e")
	}
	return ld
}

// BenchmarkIngestWhileQuerying drives the real exporter (exporterhelper queue and batch,
// OTLP-to-row conversion, the Arrow insert) from 16 concurrent senders while an MCP client
// runs find_outlier_nodes and get_trace_stats against /mcp every 100 ms. Each sender
// decodes its OTLP request first, as the receiver would. rows/s is the
// sustained ingest; heap-MiB and duckdb-MiB what the process holds at the end.
func BenchmarkIngestWhileQuerying(b *testing.B) {
	ctx := context.Background()
	b.Setenv("ECHO_BENCH_TOKEN", benchToken)
	addr := collectortest.Addr(b)
	extFactory := echoextension.NewFactory()
	extCfg := extFactory.CreateDefaultConfig().(*echoextension.Config)
	extCfg.Path = filepath.Join(b.TempDir(), "echo.duckdb")
	extCfg.Server.Endpoint = addr
	extCfg.Server.InsecureAllowPlaintext = true
	extCfg.Server.Tokens = []echoextension.TokenConfig{{Name: "bench", Env: "ECHO_BENCH_TOKEN", Scopes: []string{"tools", "sql"}}}
	extCfg.Server.RateLimit = echoextension.RateLimitConfig{RequestsPerSecond: 1e6, Burst: 1e6}
	ext, err := extFactory.Create(ctx, extensiontest.NewNopSettings(extFactory.Type()), extCfg)
	if err != nil {
		b.Fatal(err)
	}
	host := extensionHost{component.MustNewID("echo"): ext}
	if err := ext.Start(ctx, host); err != nil {
		b.Fatal(err)
	}
	defer ext.Shutdown(ctx) // a no-op after the timed shutdown below
	exp, err := NewFactory().CreateLogs(ctx, exportertest.NewNopSettings(metadata.Type), NewFactory().CreateDefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	if err := exp.Start(ctx, host); err != nil {
		b.Fatal(err)
	}
	// The timed run ends by shutting the exporter down; this covers a Fatal before
	// that (its Shutdown may run only once).
	expDown := false
	defer func() {
		if !expDown {
			_ = exp.Shutdown(ctx)
		}
	}()

	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	session, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{benchToken}}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer session.Close()

	// Requests arrive as OTLP bytes and are decoded in the timed loop, as the gateway's
	// receiver does; bytes also keep the pending data out of the GC's way.
	batches := make([][]byte, 256)
	for i := range batches {
		if batches[i], err = plogotlp.NewExportRequestFromLogs(benchLogs(i)).MarshalProto(); err != nil {
			b.Fatal(err)
		}
	}
	stopQueries := make(chan struct{})
	var queries atomic.Int64
	var queryWG sync.WaitGroup
	queryWG.Add(1)
	go func() {
		defer queryWG.Done()
		for {
			// An agent or a dashboard asks a few questions a second, not a tight loop.
			select {
			case <-stopQueries:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for _, c := range []struct{ tool, args string }{
				{"find_outlier_nodes", `{"signal":"nccl.allreduce.duration","since":"5m"}`},
				{"get_trace_stats", `{"since":"5m"}`},
			} {
				var args map[string]any
				_ = json.Unmarshal([]byte(c.args), &args)
				res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: args})
				if err != nil || res.IsError {
					b.Errorf("%s during ingest: %v %+v", c.tool, err, res)
					return
				}
				queries.Add(1)
			}
		}
	}()

	// push sends n requests from all senders at once.
	push := func(n int64) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1) - 1
					if i >= n {
						return
					}
					req := plogotlp.NewExportRequest()
					if err := req.UnmarshalProto(batches[i%256]); err != nil {
						b.Error(err)
						return
					}
					if err := exp.ConsumeLogs(ctx, req.Logs()); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	// Warm up (Appenders, connections, first checkpoint) before measuring the steady
	// rate; one op is requestsPerOp requests of 1,000 rows.
	push(100)
	b.ResetTimer()
	start := time.Now()
	push(int64(b.N) * requestsPerOp)
	ingested := time.Since(start)
	close(stopQueries)
	queryWG.Wait()
	b.ReportMetric(float64(queries.Load())/ingested.Seconds(), "queries/s")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "run_analysis",
		Arguments: map[string]any{"sql": "SELECT sum(memory_usage_bytes)::DOUBLE FROM duckdb_memory()"}})
	if err == nil && !res.IsError {
		var out struct{ Rows [][]float64 }
		raw, _ := json.Marshal(res.StructuredContent)
		if json.Unmarshal(raw, &out) == nil && len(out.Rows) == 1 {
			b.ReportMetric(out.Rows[0][0]/(1<<20), "duckdb-MiB")
		}
	}
	// The rows still only in the WAL owe the file a checkpoint (a second or more per
	// million rows); how many there are depends on where the run ends between two
	// automatic ones. Shutting down checkpoints them, so every run pays for all of
	// its rows and the rate is the sustained one.
	paused := time.Now()
	expDown = true
	if err := exp.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
	if err := ext.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
	elapsed := ingested + time.Since(paused)
	b.StopTimer()
	b.ReportMetric(float64(int64(b.N)*requestsPerOp*1000)/elapsed.Seconds(), "rows/s")
}

type bearerTransport struct{ token string }

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return http.DefaultTransport.RoundTrip(r)
}
