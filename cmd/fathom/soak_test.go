//go:build soak

package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/pki"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// The soak: `make soak` (not CI). A node collector on the example node.yaml traces fake
// GPU workloads making ~100k CUDA calls/s, a gateway on the example gateway.yaml stores
// what the node sends plus a steady synthetic OTLP ingest, for FATHOM_SOAK_DURATION.
// Every FATHOM_SOAK_SAMPLE it samples both collectors (RSS, goroutines, open files,
// threads) and the gateway's DuckDB, prints a row, and at the end writes the table to
// build/soak.md and checks that nothing grew after warm-up.
//
// It is built only with the soak tag, so `make test` neither runs nor lists it.
// Knobs (environment): FATHOM_SOAK_DURATION (default 30m), FATHOM_SOAK_SAMPLE
// (default 1m), FATHOM_SOAK_CALLS (CUDA calls/s, default 100000), FATHOM_SOAK_ROWS
// (synthetic gateway rows/s, default 20000).

// The soak overlays are layered over each shipped config: a pprof listener (for goroutine
// counts), and on the gateway a store size bound that retention reaches within the run,
// so the store is in its steady state (deleting as fast as it takes) for most of it.
// The gateway's debug exporter is left out: a line per batch for 30 minutes says
// nothing here.
const soakNodeOverlay = `
extensions:
  pprof:
    endpoint: ${env:FATHOM_PPROF_ENDPOINT}
service:
  extensions: [health_check, zpages, thresholds, pprof]
`

const soakGatewayOverlay = `
extensions:
  pprof:
    endpoint: ${env:FATHOM_PPROF_ENDPOINT}
  echo:
    retention:
      max_size_mib: 256
      check_interval: 1m
service:
  extensions: [health_check, zpages, echo, thresholds, nodecert, pprof]
  pipelines:
    metrics:
      exporters: [duckdb]
    logs:
      exporters: [duckdb]
`

type soakSample struct {
	at                             time.Duration
	rss, goroutines, fds, threads  [2]int64 // node, gateway
	duckdbMemory, storeUsed        int64
	callsPerSec, rowsPerSec        float64
	nodeDrops, nodeFailed, refused int64
	logsOverRate                   int64
}

func TestSoak(t *testing.T) {
	duration := soakEnvDuration(t, "FATHOM_SOAK_DURATION", 30*time.Minute)
	privtest.RequireBPFFS(t)
	every := soakEnvDuration(t, "FATHOM_SOAK_SAMPLE", time.Minute)
	callsPerSec := soakEnvInt(t, "FATHOM_SOAK_CALLS", 100_000)
	rowsPerSec := soakEnvInt(t, "FATHOM_SOAK_ROWS", 20_000)
	certs := collectortest.NewOTLPTLS(t)
	gw := collectortest.Gateway(t).Merge(t, soakGatewayOverlay)
	gatewayOTLP, gatewayPprof := gw.Listen["FATHOM_GATEWAY_OTLP_GRPC"], collectortest.Addr(t)
	// The synthetic ingest speaks for 16 nodes over one connection: it shows the
	// certificate every node holds where certificates are shared (the chart's default).
	ingestCert := collectortest.IssueFiles(t, certs.CA, t.TempDir(), pki.NodeClient("fathom-node"))
	gateway := startGateway(t, gw, certs, "FATHOM_PPROF_ENDPOINT="+gatewayPprof, "FATHOM_NODE_SHARED_CERT_NAME=fathom-node")
	nd := collectortest.Node(t).Merge(t, soakNodeOverlay)
	nodePprof := collectortest.Addr(t)
	node := nd.Start(t, nodeEnv(t, certs, "node-1", "FATHOM_GATEWAY="+gatewayOTLP, "FATHOM_PPROF_ENDPOINT="+nodePprof, "FATHOM_CLUSTER=soak")...)
	gateway.WaitListening(t, gatewayOTLP, 30*time.Second)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls atomic.Int64
	paths := fakegpu.Build(t)
	// Two workload processes at a time, each ~60 s, so that processes also come and
	// go (attach on first use, exits, pinned per-process state) all through the run.
	for i := range 2 {
		wg.Go(func() { soakWorkloads(t, paths, i, callsPerSec/2, stop, &calls) })
	}
	var rows atomic.Int64
	wg.Go(func() { soakIngest(t, gatewayOTLP, clientTLS(t, certs, &ingestCert), rowsPerSec, stop, &rows) })

	var samples []soakSample
	start := time.Now()
	lastCalls, lastRows, lastAt := int64(0), int64(0), start
	t.Logf("soak for %v, a sample every %v: %d CUDA calls/s into the node, %d rows/s of synthetic ingest into the gateway", duration, every, callsPerSec, rowsPerSec)
	t.Log(soakHeader)
	for time.Since(start) < duration {
		time.Sleep(every)
		now := time.Now()
		s := soakSample{at: now.Sub(start).Round(time.Second)}
		for i, p := range []struct {
			pid   int
			pprof string
		}{{node.Pid(), nodePprof}, {gateway.Pid(), gatewayPprof}} {
			s.rss[i], s.threads[i] = procStatus(t, p.pid)
			s.fds[i] = openFiles(t, p.pid)
			s.goroutines[i] = goroutines(t, p.pprof)
		}
		gwMetrics, ndMetrics := scrape(t, metricsURL(gw)), scrape(t, metricsURL(nd))
		s.duckdbMemory = promValue(gwMetrics, "otelcol_fathom_echo_duckdb_memory_bytes", "")
		s.storeUsed = promValue(gwMetrics, "otelcol_fathom_echo_store_used_bytes", "")
		// Log records over the receiver's rate limit are dropped by design
		// (logs.max_per_second); every other reason is lost data.
		s.nodeDrops = promValue(ndMetrics, "otelcol_receiver_gpuebpf_drops", "") -
			promValue(ndMetrics, "otelcol_receiver_gpuebpf_drops", `reason="log_rate"`) -
			promValue(ndMetrics, "otelcol_receiver_gpuebpf_drops", `reason="nccl_log_rate"`)
		s.logsOverRate = promValue(ndMetrics, "otelcol_receiver_gpuebpf_drops", `reason="log_rate"`)
		s.nodeFailed = promValue(ndMetrics, "otelcol_exporter_send_failed_metric_points", "") +
			promValue(ndMetrics, "otelcol_exporter_send_failed_log_records", "")
		s.refused = promValue(gwMetrics, "otelcol_receiver_refused_metric_points", "") +
			promValue(gwMetrics, "otelcol_receiver_refused_log_records", "")
		c, r := calls.Load(), rows.Load()
		secs := now.Sub(lastAt).Seconds()
		s.callsPerSec, s.rowsPerSec = float64(c-lastCalls)/secs, float64(r-lastRows)/secs
		lastCalls, lastRows, lastAt = c, r, now
		samples = append(samples, s)
		t.Log(s.row())
	}
	close(stop)
	wg.Wait()
	for name, p := range map[string]*collectortest.Process{"node": node, "gateway": gateway} {
		if code := p.Terminate(t, 60*time.Second); code != 0 {
			t.Errorf("%s exited %d after the soak", name, code)
		}
	}

	report := soakReport(duration, every, callsPerSec, rowsPerSec, samples)
	out := filepath.Join(collectortest.RepoRoot(t), "build", "soak.md")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err == nil {
		_ = os.WriteFile(out, []byte(report), 0o644)
	}
	t.Logf("report written to %s", out)
	soakCheckFlat(t, samples)
}

const soakHeader = "| time | node RSS MiB | node goroutines | node files | node threads | gateway RSS MiB | gateway goroutines | gateway files | gateway threads | DuckDB MiB | store MiB | CUDA calls/s | ingest rows/s | node drops | logs over rate | node send failures | gateway refused |\n" +
	"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"

func (s soakSample) row() string {
	return fmt.Sprintf("| %v | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %.0f | %.0f | %d | %d | %d | %d |",
		s.at, s.rss[0]>>20, s.goroutines[0], s.fds[0], s.threads[0], s.rss[1]>>20, s.goroutines[1], s.fds[1], s.threads[1],
		s.duckdbMemory>>20, s.storeUsed>>20, s.callsPerSec, s.rowsPerSec, s.nodeDrops, s.logsOverRate, s.nodeFailed, s.refused)
}

func soakReport(duration, every time.Duration, calls, rows int, samples []soakSample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Soak of %v on %s, sampled every %v: %d CUDA calls/s asked of the workloads, %d rows/s of synthetic ingest.\n\n",
		duration, time.Now().UTC().Format("2006-01-02"), every, calls, rows)
	b.WriteString(soakHeader + "\n")
	for _, s := range samples {
		b.WriteString(s.row() + "\n")
	}
	return b.String()
}

// soakCheckFlat compares the last third of the run with the middle third (the first
// third is warm-up: buffers, the store reaching its retention bound). Memory may move
// with the garbage collector and DuckDB's buffer pool, so the bound is on growth of
// the peak, not on equality.
func soakCheckFlat(t *testing.T, samples []soakSample) {
	if len(samples) < 6 {
		t.Logf("%d samples: too few to judge flatness", len(samples))
		return
	}
	third := len(samples) / 3
	mid, last := samples[third:2*third], samples[2*third:]
	peak := func(ss []soakSample, f func(soakSample) int64) int64 {
		var m int64
		for _, s := range ss {
			m = max(m, f(s))
		}
		return m
	}
	for _, c := range []struct {
		name  string
		f     func(soakSample) int64
		slack func(int64) int64
	}{
		{"node RSS", func(s soakSample) int64 { return s.rss[0] }, func(v int64) int64 { return v / 5 }},
		{"gateway RSS", func(s soakSample) int64 { return s.rss[1] }, func(v int64) int64 { return v / 5 }},
		{"node goroutines", func(s soakSample) int64 { return s.goroutines[0] }, func(int64) int64 { return 10 }},
		{"gateway goroutines", func(s soakSample) int64 { return s.goroutines[1] }, func(int64) int64 { return 10 }},
		{"node open files", func(s soakSample) int64 { return s.fds[0] }, func(int64) int64 { return 10 }},
		{"gateway open files", func(s soakSample) int64 { return s.fds[1] }, func(int64) int64 { return 10 }},
		{"DuckDB memory", func(s soakSample) int64 { return s.duckdbMemory }, func(v int64) int64 { return v / 5 }},
	} {
		m, l := peak(mid, c.f), peak(last, c.f)
		if l > m+c.slack(m) {
			t.Errorf("%s grew after warm-up: peak %d in the middle third, %d in the last", c.name, m, l)
		}
	}
	if d := samples[len(samples)-1].nodeDrops; d > 0 {
		t.Errorf("node lost %d events over the run (by reason in otelcol_receiver_gpuebpf_drops)", d)
	}
}

// soakWorkloads runs fakegpu-workload processes one after another until stop, each
// asked for perSec CUDA calls a second for about 15 s, and adds the calls each made
// to total. A workload paces itself with a sleep after each step of 500 launches and
// a sync; the sleep is corrected after every run by how far the last run's steps were
// from their target, since what a call costs depends on how busy the machine is.
func soakWorkloads(t *testing.T, p fakegpu.Paths, worker, perSec int, stop <-chan struct{}, total *atomic.Int64) {
	const perStep = 500
	step := time.Duration(float64(time.Second) * perStep / float64(perSec))
	steps := int(15 * time.Second / step)
	gap := step / 2
	for run := 0; ; run++ {
		select {
		case <-stop:
			return
		default:
		}
		w := fakegpu.Start(t, p, fakegpu.Options{
			Steps: steps, Launches: steps * perStep, Syncs: steps, StepGap: gap,
			KernelTime: time.Microsecond, LaunchCost: time.Nanosecond,
			Env: []string{fmt.Sprintf("RANK=%d", worker), "FAKEGPU_SYNC=block"},
		})
		select {
		case <-stop:
			w.Kill()
			<-w.Exited()
			return
		case <-w.Exited():
		}
		res, err := w.Wait(time.Second)
		if err != nil {
			t.Errorf("workload %d.%d: %v", worker, run, err)
			return
		}
		var n int64
		for _, c := range res.Calls {
			n += c
		}
		total.Add(n)
		took := time.Duration(res.WallNS / int64(steps))
		gap = max(gap+step-took, 0)
	}
}

// soakIngest sends perSec rows a second to the gateway over OTLP/gRPC, as 16 other
// nodes would: four senders, each every 100 ms one logs request and one metrics
// request. A sender that falls behind skips ticks; the rows it did send are counted.
func soakIngest(t *testing.T, addr string, tlsConfig *tls.Config, perSec int, stop <-chan struct{}, total *atomic.Int64) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig)))
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close()
	logs, metrics := plogotlp.NewGRPCClient(conn), pmetricotlp.NewGRPCClient(conn)
	const senders = 4
	perTick := perSec / 10 / senders
	var wg sync.WaitGroup
	for sender := range senders {
		wg.Go(func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				node := fmt.Sprintf("soak-node-%02d", sender*4+seq%4)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, lerr := logs.Export(ctx, plogotlp.NewExportRequestFromLogs(soakLogs(node, seq, perTick/2)))
				_, merr := metrics.Export(ctx, pmetricotlp.NewExportRequestFromMetrics(soakMetrics(node, seq, perTick-perTick/2)))
				cancel()
				if lerr == nil {
					total.Add(int64(perTick / 2))
				}
				if merr == nil {
					total.Add(int64(perTick - perTick/2))
				}
			}
		})
	}
	wg.Wait()
}

func soakResource(attrs pcommon.Map, node string) {
	attrs.PutStr("fathom.cluster.name", "soak")
	attrs.PutStr("host.name", node)
	attrs.PutInt("process.pid", 4000+int64(len(node)))
	attrs.PutStr("k8s.pod.name", "trainer-"+node)
}

// soakLogs are NCCL collective records, the most numerous log a node sends.
func soakLogs(node string, seq, n int) plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	soakResource(rl.Resource().Attributes(), node)
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	now := pcommon.NewTimestampFromTime(time.Now())
	for i := range n {
		lr := lrs.AppendEmpty()
		lr.SetTimestamp(now)
		lr.SetEventName("nccl.collective")
		a := lr.Attributes()
		a.PutStr("nccl.op", "AllReduce")
		a.PutStr("nccl.comm.id", "00000000deadbeef")
		a.PutInt("nccl.seq", int64(seq*n+i))
		a.PutInt("nccl.rank", int64(i%8))
		a.PutInt("nccl.nranks", 8)
		a.PutInt("nccl.bytes", 1<<20)
		a.PutDouble("duration_us", float64(100+i%50))
	}
	return ld
}

// soakMetrics are per-API latency gauges, the bulk of a node's metrics.
func soakMetrics(node string, seq, n int) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	soakResource(rm.Resource().Attributes(), node)
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("cuda.api.duration.p99")
	m.SetUnit("s")
	dps := m.SetEmptyGauge().DataPoints()
	now := pcommon.NewTimestampFromTime(time.Now())
	apis := []string{"cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize", "ncclAllReduce"}
	for i := range n {
		dp := dps.AppendEmpty()
		dp.SetTimestamp(now)
		dp.SetDoubleValue(float64(seq%100+i) * 1e-6)
		dp.Attributes().PutStr("cuda.api", apis[i%len(apis)])
		dp.Attributes().PutInt("thread.id", int64(i%64))
	}
	return md
}

// procStatus reads VmRSS (bytes) and Threads from /proc/<pid>/status.
func procStatus(t *testing.T, pid int) (rss, threads int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmRSS:":
			rss = n << 10
		case "Threads:":
			threads = n
		}
	}
	return rss, threads
}

func openFiles(t *testing.T, pid int) int64 {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	return int64(len(entries))
}

var goroutineTotal = regexp.MustCompile(`goroutine profile: total (\d+)`)

// goroutines reads the total from the pprof extension's goroutine profile.
func goroutines(t *testing.T, pprofAddr string) int64 {
	m := goroutineTotal.FindStringSubmatch(scrape(t, "http://"+pprofAddr+"/debug/pprof/goroutine?debug=1"))
	if m == nil {
		return -1
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// promValue sums a metric's samples (counters with or without _total) whose labels
// contain match.
func promValue(text, name, match string) int64 {
	re := regexp.MustCompile(`(?m)^` + name + `(?:_total)?(?:\{([^}]*)\})? ([0-9.e+]+)$`)
	var sum float64
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		if strings.Contains(m[1], match) {
			v, _ := strconv.ParseFloat(m[2], 64)
			sum += v
		}
	}
	return int64(sum)
}

func soakEnvDuration(t *testing.T, name string, fallback time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return fallback
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

func soakEnvInt(t *testing.T, name string, fallback int) int {
	v := os.Getenv(name)
	if v == "" {
		return fallback
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
