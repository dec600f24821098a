//go:build unix

// Process CPU time comes from getrusage, which only unix systems have; the gateway
// runs on Linux.

package stragglerprocessor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/extension/extensionmiddleware"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/fathom-gpu/fathom/extension/thresholdsextension"
	"github.com/fathom-gpu/fathom/internal/pushback"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/processor/stragglerprocessor/internal/metadata"
)

// The gateway's cost of the straggler loop, as `make bench` measures it: the thresholds
// extension's server middleware around the straggler processor's metrics pipeline, fed
// one request per node of eight ranks every interval, and the processor's evaluation
// once per interval. One benchmark op is one interval of the whole fleet. What the
// otlp receiver and the store spend on the same points is theirs, not the loop's, and
// is left out, except in the with-otlp-decode case, which adds the receiver's decode.

const (
	ranksPerNode   = 8
	ranksPerCohort = 1024
	benchCluster   = "prod-us-east-1"
)

// rankSlot is one rank process on a node: the job it belongs to and its rank in it.
type rankSlot struct {
	job  int
	rank int64
}

// jobsOnWholeNodes lays out jobs of 1,024 ranks each on nodes of eight ranks, every node
// in one job: the usual shape of a large training cluster.
func jobsOnWholeNodes(jobs int) [][]rankSlot {
	var nodes [][]rankSlot
	for j := range jobs {
		for n := range ranksPerCohort / ranksPerNode {
			node := make([]rankSlot, ranksPerNode)
			for i := range node {
				node[i] = rankSlot{job: j, rank: int64(n*ranksPerNode + i)}
			}
			nodes = append(nodes, node)
		}
	}
	return nodes
}

// jobsSharingNodes lays out nodes whose eight ranks belong to cohortsPerNode jobs (1,
// 2, 4 or 8), each job spread over every node: the shape that puts the most lines into
// one answer.
func jobsSharingNodes(nodes, cohortsPerNode int) [][]rankSlot {
	perJob := ranksPerNode / cohortsPerNode
	out := make([][]rankSlot, nodes)
	for n := range out {
		out[n] = make([]rankSlot, ranksPerNode)
		for i := range out[n] {
			out[n][i] = rankSlot{job: i % cohortsPerNode, rank: int64(n*perJob + i/cohortsPerNode)}
		}
	}
	return out
}

func jobName(j int) string { return fmt.Sprintf("llama3-70b-pretrain-%02d", j) }

// jobCommunicator is the cohort the gpuebpf receiver names for a job's ranks: its
// world communicator's id.
func jobCommunicator(j int) string { return fmt.Sprintf("nccl:%016x", 0x9e3779b97f4a7c15*uint64(j+1)) }

// rankSignals are the signals of the processor's default configuration, in the order
// nodeExport puts them at the end of each rank's metrics, with what a healthy rank and
// the slow one gain per second. The slow rank's host is slow: its peers wait for it, so
// it waits least and leads most.
var rankSignals = []struct {
	metric        string
	healthy, slow float64
}{
	{semconv.MetricRankDeviceWait, 0.30, 0.10},
	{semconv.MetricRankHostLead, 0.20, 0.35},
}

// slowRank is the rank of every cohort whose host is slow; it is flagged after the
// warm-up.
const slowRank = 5

// fleet is the nodes' side: one OTLP request per node, in the shape the gpuebpf
// receiver exports (a resource per rank process, the signals among its other
// metrics), whose signal points are moved on by one interval before each send.
type fleet struct {
	layout [][]rankSlot
	// requests are the nodes' requests, refreshed in place each interval; encoded
	// holds them as protobuf instead when every send is decoded, as the otlp
	// receiver does.
	requests []pmetric.Metrics
	encoded  [][]byte
	// samplesPerInterval > 1 sends, before each node's request, that many less one
	// rank-signal samples (the rank signals alone, under semconv.RankSignalsScope, as
	// with the receiver's rank_signals.interval), each followed by an evaluation.
	samplesPerInterval int
	samples            []pmetric.Metrics
	samplesEncoded     [][]byte
	// totals are each rank's cumulative signal values, by node, then slot and signal.
	totals [][]float64
	start  time.Time
	jitter *rand.Rand
}

func newFleet(b *testing.B, layout [][]rankSlot, decode bool, samplesPerInterval int) *fleet {
	b.Helper()
	f := &fleet{layout: layout, start: time.Unix(1_800_000_000, 0), jitter: rand.New(rand.NewPCG(18, 1024)), samplesPerInterval: max(samplesPerInterval, 1)}
	encode := func(md pmetric.Metrics) []byte {
		raw, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
		if err != nil {
			b.Fatal(err)
		}
		return raw
	}
	for n, slots := range layout {
		req, sample := nodeExport(n, slots, f.start), nodeSample(n, slots, f.start)
		f.totals = append(f.totals, make([]float64, len(slots)*len(rankSignals)))
		if !decode {
			f.requests, f.samples = append(f.requests, req), append(f.samples, sample)
			continue
		}
		f.encoded, f.samplesEncoded = append(f.encoded, encode(req)), append(f.samplesEncoded, encode(sample))
	}
	return f
}

// nodeExport is one node's request: per rank process, the resource attributes the
// gpuebpf receiver sets (the processor looks its keys up among all of them) and,
// beside the device wait, a few of the metrics it sends every interval (the processor
// must look past them).
func nodeExport(node int, slots []rankSlot, start time.Time) pmetric.Metrics {
	md := pmetric.NewMetrics()
	startTS := pcommon.NewTimestampFromTime(start)
	for i, slot := range slots {
		rm := md.ResourceMetrics().AppendEmpty()
		res := rm.Resource().Attributes()
		res.PutStr(semconv.HostName, fmt.Sprintf("gpu-node-%04d", node))
		res.PutStr(semconv.ClusterName, benchCluster)
		res.PutInt(semconv.ProcessPID, int64(41000+i))
		res.PutStr(semconv.ProcessExecutableName, "python3")
		res.PutStr(semconv.ProcessCommandLine, "/usr/bin/python3 -u train.py --config configs/llama3-70b.yaml --data /mnt/datasets/pretrain --save /mnt/ckpt/llama3-70b")
		res.PutStr(semconv.CgroupPath, fmt.Sprintf("/kubepods.slice/kubepods-pod%04d.slice/cri-containerd-%064x.scope", node, node))
		res.PutStr(semconv.ContainerID, fmt.Sprintf("%064x", node))
		res.PutStr(semconv.K8sPodUID, fmt.Sprintf("5f1c2a4e-0000-4000-8000-%012d", node))
		res.PutStr(semconv.JobName, jobName(slot.job))
		res.PutStr(semconv.Cohort, jobCommunicator(slot.job))
		res.PutInt(semconv.Rank, slot.rank)
		res.PutInt(semconv.LocalRank, int64(i))
		res.PutInt(semconv.WorldSize, ranksPerCohort)
		sm := rm.ScopeMetrics().AppendEmpty()
		sm.Scope().SetName("github.com/fathom-gpu/fathom/receiver/gpuebpfreceiver")
		ms := sm.Metrics()
		for _, api := range []string{"cudaLaunchKernel", "cudaStreamSynchronize", "cudaMemcpyAsync"} {
			calls := ms.AppendEmpty()
			calls.SetName(semconv.MetricCUDAAPICalls)
			sum := calls.SetEmptySum()
			sum.SetIsMonotonic(true)
			sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
			dp := sum.DataPoints().AppendEmpty()
			dp.SetStartTimestamp(startTS)
			dp.SetIntValue(123456)
			dp.Attributes().PutStr(semconv.CUDAAPIName, api)
			duration := ms.AppendEmpty()
			duration.SetName(semconv.MetricCUDAAPIDuration)
			hist := duration.SetEmptyExponentialHistogram()
			hist.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
			hdp := hist.DataPoints().AppendEmpty()
			hdp.SetStartTimestamp(startTS)
			hdp.SetCount(123456)
			hdp.SetSum(98.7)
			hdp.SetScale(3)
			hdp.Positive().BucketCounts().FromRaw([]uint64{10, 200, 3000, 40000, 50000, 20000, 10000, 246})
			hdp.Attributes().PutStr(semconv.CUDAAPIName, api)
		}
		for _, signal := range rankSignals { // last in the scope: see signalPoint
			m := ms.AppendEmpty()
			m.SetName(signal.metric)
			m.SetUnit("s")
			sum := m.SetEmptySum()
			sum.SetIsMonotonic(true)
			sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
			sum.DataPoints().AppendEmpty().SetStartTimestamp(startTS)
		}
	}
	return md
}

// nodeSample is one node's rank-signal sample between collections: the same resources,
// the rank signals alone.
func nodeSample(node int, slots []rankSlot, start time.Time) pmetric.Metrics {
	md := nodeExport(node, slots, start)
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		sm := md.ResourceMetrics().At(i).ScopeMetrics().At(0)
		sm.Scope().SetName(semconv.RankSignalsScope)
		sm.Metrics().RemoveIf(func(m pmetric.Metric) bool { return !isRankSignal(m.Name()) })
	}
	return md
}

func isRankSignal(name string) bool {
	for _, s := range rankSignals {
		if s.metric == name {
			return true
		}
	}
	return false
}

func signalPoint(md pmetric.Metrics, slot, signal int) pmetric.NumberDataPoint {
	ms := md.ResourceMetrics().At(slot).ScopeMetrics().At(0).Metrics()
	return ms.At(ms.Len() - len(rankSignals) + signal).Sum().DataPoints().At(0)
}

// send returns node n's request (or its rank-signal sample) for the span ending at now
// (a whole interval, or one sample's share of it): each rank has gained its signal's
// healthy rate ±5% (slowRank the slow rate).
func (f *fleet) send(b *testing.B, n int, now time.Time, sample bool) pmetric.Metrics {
	var md pmetric.Metrics
	requests, encoded := f.requests, f.encoded
	if sample {
		requests, encoded = f.samples, f.samplesEncoded
	}
	if encoded != nil {
		req := pmetricotlp.NewExportRequest()
		if err := req.UnmarshalProto(encoded[n]); err != nil {
			b.Fatal(err)
		}
		md = req.Metrics()
	} else {
		md = requests[n]
	}
	ts := pcommon.NewTimestampFromTime(now)
	for i, slot := range f.layout[n] {
		for sig, signal := range rankSignals {
			rate := signal.healthy * (0.95 + 0.1*f.jitter.Float64())
			if slot.rank == slowRank {
				rate = signal.slow
			}
			total := &f.totals[n][i*len(rankSignals)+sig]
			*total += rate / float64(f.samplesPerInterval)
			dp := signalPoint(md, i, sig)
			dp.SetTimestamp(ts)
			dp.SetDoubleValue(*total)
		}
	}
	return md
}

func (f *fleet) ranks() int { return len(f.layout) * ranksPerNode }

// gatewayLoop is the gateway's half of the loop as the collector wires it: the
// thresholds extension's HTTP server middleware around a stand-in for the otlp
// receiver that hands each request to the straggler processor's metrics pipeline, and
// the processor's evaluation, on a clock the benchmark moves one second per interval.
type gatewayLoop struct {
	metrics processor.Metrics
	logs    processor.Logs
	s       *straggler
	serve   http.Handler
	request *http.Request
	answer  *answer
	// pending is the request the stand-in receiver passes on; consumeErr what the
	// pipeline said to the last one.
	pending    pmetric.Metrics
	consumeErr error
	clock      time.Time
	started    []component.Component
}

// answer is the response the middleware writes into; only its header is read.
type answer struct{ header http.Header }

func (a *answer) Header() http.Header         { return a.header }
func (a *answer) Write(p []byte) (int, error) { return len(p), nil }
func (a *answer) WriteHeader(int)             {}

// newGatewayLoop starts the loop; the caller closes it. It is not left to b.Cleanup:
// the testing package keeps a run's cleanup functions reachable into the next run,
// and with them this run's rank state, which would spoil the next heap figure.
func newGatewayLoop(b *testing.B, start time.Time) *gatewayLoop {
	b.Helper()
	ctx := context.Background()
	g := &gatewayLoop{clock: start, answer: &answer{header: http.Header{}},
		request: httptest.NewRequest(http.MethodPost, "/v1/metrics", nil)}
	fail := func(err error) {
		g.close()
		b.Fatal(err)
	}
	thresholdsFactory := thresholdsextension.NewFactory()
	ext, err := thresholdsFactory.Create(ctx, extensiontest.NewNopSettings(thresholdsFactory.Type()), thresholdsFactory.CreateDefaultConfig())
	if err != nil {
		fail(err)
	}
	if err := ext.Start(ctx, componenttest.NewNopHost()); err != nil {
		fail(err)
	}
	g.started = append(g.started, ext)
	wrap, err := ext.(extensionmiddleware.HTTPServer).GetHTTPHandler(ctx)
	if err != nil {
		fail(err)
	}

	set := processortest.NewNopSettings(metadata.Type)
	set.ID = component.MustNewIDWithName(metadata.Type.String(), "bench")
	cfg := createDefaultConfig()
	cfg.EvaluationInterval = time.Hour // evaluated by the benchmark, once per interval
	// The fleet's nodes have no NVML, so they send the host-side signals only, which
	// come first in the default configuration.
	if len(cfg.Signals) < len(rankSignals) {
		fail(fmt.Errorf("the default configuration compares %d signals, the fleet sends %d: update rankSignals", len(cfg.Signals), len(rankSignals)))
	}
	for i, signal := range cfg.Signals[:len(rankSignals)] {
		if signal.Metric != rankSignals[i].metric {
			fail(fmt.Errorf("the default configuration's signal %d is %s, the fleet sends %s: update rankSignals", i, signal.Metric, rankSignals[i].metric))
		}
	}
	// The gauges and records go nowhere: what the store spends on them is the store's.
	if g.metrics, err = NewFactory().CreateMetrics(ctx, set, cfg, consumertest.NewNop()); err != nil {
		fail(err)
	}
	if g.logs, err = NewFactory().CreateLogs(ctx, set, cfg, consumertest.NewNop()); err != nil {
		fail(err)
	}
	for _, c := range []component.Component{g.metrics, g.logs} {
		if err := c.Start(ctx, componenttest.NewNopHost()); err != nil {
			fail(err)
		}
		g.started = append(g.started, c)
	}
	g.s, _ = instances.Get(set.ID)
	g.s.now = func() time.Time { return g.clock }
	receiver := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.consumeErr = g.metrics.ConsumeMetrics(r.Context(), g.pending)
		w.WriteHeader(http.StatusOK)
	})
	if g.serve, err = wrap(ctx, receiver); err != nil {
		fail(err)
	}
	return g
}

// close shuts down what was started, the pipelines before the extension.
func (g *gatewayLoop) close() {
	for i := len(g.started) - 1; i >= 0; i-- {
		_ = g.started[i].Shutdown(context.Background())
	}
	g.started = nil
}

// exchange sends node n's request through the middleware and the pipeline and returns
// the thresholds value of the answer. Each node comes from its own address, as each
// node collector holds its own connection to the gateway.
func (g *gatewayLoop) exchange(b *testing.B, n int, md pmetric.Metrics) string {
	g.pending = md
	g.request.RemoteAddr = nodeAddr(n)
	clear(g.answer.header)
	g.serve.ServeHTTP(g.answer, g.request)
	g.pending = pmetric.Metrics{} // held no longer than the request, as in the receiver
	if g.consumeErr != nil {
		b.Fatal(g.consumeErr)
	}
	return g.answer.header.Get(pushback.HTTPHeader)
}

// interval is one second of the fleet: every node's samples, each round followed by an
// evaluation, and then every node's request and the evaluation. It returns the header
// bytes the answers to the requests carried and the wall time the evaluations took.
func (g *gatewayLoop) interval(b *testing.B, f *fleet) (answerBytes int, evaluation time.Duration) {
	for k := 1; k <= f.samplesPerInterval; k++ {
		g.clock = g.clock.Add(time.Second / time.Duration(f.samplesPerInterval))
		sample := k < f.samplesPerInterval
		for n := range f.layout {
			if v := g.exchange(b, n, f.send(b, n, g.clock, sample)); v != "" && !sample {
				answerBytes += headerLineBytes(v)
			}
		}
		start := time.Now()
		g.s.evaluate(context.Background())
		evaluation += time.Since(start)
	}
	return answerBytes, evaluation
}

// nodeAddrs are the nodes' addresses, made once: the benchmark times the loop, not
// fmt.
var nodeAddrs []string

func nodeAddr(n int) string {
	for len(nodeAddrs) <= n {
		i := len(nodeAddrs)
		nodeAddrs = append(nodeAddrs, fmt.Sprintf("10.%d.%d.%d:41234", i>>16&0xff, i>>8&0xff, i&0xff))
	}
	return nodeAddrs[n]
}

// headerLineBytes is what the thresholds add to an HTTP/1.1 answer: the header's name,
// ": ", the value and CRLF. Over gRPC the same value goes out as header metadata.
func headerLineBytes(v string) int { return len(pushback.HTTPHeader) + 2 + len(v) + 2 }

// processCPU is the CPU time this process has used, user and system, every thread
// (GC workers on the other core included): wall time on a two-core machine that does
// other work is too noisy to compare with a goal.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// liveHeap is the heap still reachable after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// warmupIntervals takes every cohort past its warm-up (3) and fills each rank's
// persistence window (4), so that the timed intervals are the steady state.
const warmupIntervals = 8

// BenchmarkGatewayInterval: one op is one second of the fleet through the gateway.
// cpu-ns/rank-interval is process CPU (ingest, push-back and evaluation) per rank and
// interval, and ranks/core what one core carries at a 1 s evaluation_interval;
// eval-wall-ns/rank-interval is the evaluation's part of the wall time.
// heap-B/rank is the live heap the processor holds per tracked rank in the steady
// state, measured with the fleet's own requests already allocated. With otlp-decode
// every request is decoded from protobuf first, as the otlp receiver does, so the
// rank state holds strings of its own and not the fleet's (the honest heap figure).
func BenchmarkGatewayInterval(b *testing.B) {
	for _, c := range []struct {
		name    string
		jobs    int
		decode  bool
		samples int
	}{
		{"ranks=1024", 1, false, 1},
		{"ranks=16384", 16, false, 1},
		{"ranks=16384/otlp-decode", 16, true, 1},
		{"ranks=16384/otlp-decode/rank-samples-250ms", 16, true, 4},
	} {
		b.Run(c.name, func(b *testing.B) {
			f := newFleet(b, jobsOnWholeNodes(c.jobs), c.decode, c.samples)
			before := liveHeap()
			g := newGatewayLoop(b, f.start)
			defer g.close()
			for range warmupIntervals {
				g.interval(b, f)
			}
			held := int64(liveHeap()) - int64(before)
			if _, tracked := g.s.det.counts(); tracked != f.ranks() {
				b.Fatalf("%d ranks tracked, %d sent", tracked, f.ranks())
			}
			runtime.KeepAlive(f)

			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			mallocs := ms.Mallocs
			answerBytes, evaluation := 0, time.Duration(0)
			b.ResetTimer()
			cpu, wall := processCPU(b), time.Now()
			for range b.N {
				n, e := g.interval(b, f)
				answerBytes, evaluation = answerBytes+n, evaluation+e
			}
			cpuUsed, wallUsed := processCPU(b)-cpu, time.Since(wall)
			b.StopTimer()
			runtime.ReadMemStats(&ms)

			rankIntervals := float64(b.N) * float64(f.ranks())
			cpuPerRank := float64(cpuUsed.Nanoseconds()) / rankIntervals
			b.ReportMetric(cpuPerRank, "cpu-ns/rank-interval")
			b.ReportMetric(1e9/cpuPerRank, "ranks/core")
			b.ReportMetric(float64(wallUsed.Nanoseconds())/rankIntervals, "wall-ns/rank-interval")
			b.ReportMetric(float64(evaluation.Nanoseconds())/rankIntervals, "eval-wall-ns/rank-interval")
			b.ReportMetric(float64(ms.Mallocs-mallocs)/rankIntervals, "allocs/rank-interval")
			b.ReportMetric(float64(held)/float64(f.ranks()), "heap-B/rank")
			b.ReportMetric(float64(answerBytes)/(float64(b.N)*float64(len(f.layout))), "bytes/response")
		})
	}
}

// BenchmarkPushbackAnswer: what the thresholds add to each answer when a node's eight
// ranks belong to 1, 2, 4 or 8 cohorts (32 nodes, so every cohort has a quorum), against
// max_response_bytes (2,048 by default, which bounds the value). A request asks for one
// line per cohort and signal. One op is one interval of the 32 nodes.
// lines-left-out/response counts the lines of a request that did not fit, and
// lines-never-carried/node those a node got in no answer of the whole run: answers to
// one node take turns among its lines, so it is 0 whenever the run is longer than
// the turn.
func BenchmarkPushbackAnswer(b *testing.B) {
	maxValue := thresholdsextension.NewFactory().CreateDefaultConfig().(*thresholdsextension.Config).MaxResponseBytes
	for _, cohortsPerNode := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("cohorts-per-node=%d", cohortsPerNode), func(b *testing.B) {
			f := newFleet(b, jobsSharingNodes(32, cohortsPerNode), false, 1)
			g := newGatewayLoop(b, f.start)
			defer g.close()
			for range warmupIntervals {
				g.interval(b, f)
			}
			var answers, headerBytes, valueBytes, maxValueBytes, carried, leftOut int
			wanted := cohortsPerNode * len(rankSignals)
			carriedTo := make([]map[pushback.Key]bool, len(f.layout))
			for n := range carriedTo {
				carriedTo[n] = map[pushback.Key]bool{}
			}
			b.ResetTimer()
			for range b.N {
				g.clock = g.clock.Add(time.Second)
				for n := range f.layout {
					v := g.exchange(b, n, f.send(b, n, g.clock, false))
					lines, err := pushback.Decode(v)
					if err != nil || len(lines) == 0 {
						b.Fatalf("answer %q carries no lines the node can read: %v", v, err)
					}
					if len(v) > maxValue {
						b.Fatalf("answer value of %d bytes is over max_response_bytes %d", len(v), maxValue)
					}
					answers++
					headerBytes += headerLineBytes(v)
					valueBytes += len(v)
					maxValueBytes = max(maxValueBytes, len(v))
					carried += len(lines)
					leftOut += wanted - len(lines)
					for _, l := range lines {
						carriedTo[n][l.Key()] = true
					}
				}
				g.s.evaluate(context.Background())
			}
			b.StopTimer()
			neverCarried := 0
			for _, keys := range carriedTo {
				neverCarried += wanted - len(keys)
			}
			b.ReportMetric(float64(neverCarried)/float64(len(f.layout)), "lines-never-carried/node")
			b.ReportMetric(float64(headerBytes)/float64(answers), "bytes/response")
			b.ReportMetric(float64(valueBytes)/float64(answers), "value-bytes/response")
			b.ReportMetric(float64(maxValueBytes), "max-value-bytes")
			b.ReportMetric(float64(valueBytes)/float64(carried), "value-bytes/line")
			b.ReportMetric(float64(leftOut)/float64(answers), "lines-left-out/response")
		})
	}
}
