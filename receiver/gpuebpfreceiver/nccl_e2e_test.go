//go:build linux

package gpuebpfreceiver_test

import (
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// ncclE2EConfig logs every collective (sample_every: 1) so the test can check every
// sequence; the RDMA poller reads a fixture tree.
var ncclE2EConfig = nodeConfig(`
collection_interval: 300ms
cluster_name: e2e
logs:
  policy: notable
  nccl:
    sample_every: 1
    max_per_second: 100000
rdma:
  sysfs_root: ${env:SYSFS}
  poll_interval: 200ms`, true)

func writeCounters(t *testing.T, root, device, linkLayer string, values map[string]uint64) {
	t.Helper()
	dir := filepath.Join(root, device, "ports", "1")
	if err := os.MkdirAll(filepath.Join(dir, "counters"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "link_layer"), []byte(linkLayer+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, v := range values {
		// Written whole and renamed, so the poller never reads a half-written number.
		tmp := filepath.Join(dir, "counters", "."+name)
		if err := os.WriteFile(tmp, []byte(strconv.FormatUint(v, 10)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "counters", name)); err != nil {
			t.Fatal(err)
		}
	}
}

// hostView folds the node resource's sums and gauges (the resource without process.pid).
func hostView(sink *collectortest.Sink) processView {
	v := processView{series: map[string]point{}}
	eachMetric(sink, func(pid int64, _ pcommon.Map, m pmetric.Metric) {
		if pid != 0 {
			return
		}
		switch m.Type() {
		case pmetric.MetricTypeSum:
			for k := 0; k < m.Sum().DataPoints().Len(); k++ {
				dp := m.Sum().DataPoints().At(k)
				v.series[seriesKey(m.Name(), dp.Attributes())] = point{value: dp.IntValue(), start: dp.StartTimestamp(), now: dp.Timestamp()}
			}
		case pmetric.MetricTypeGauge:
			for k := 0; k < m.Gauge().DataPoints().Len(); k++ {
				dp := m.Gauge().DataPoints().At(k)
				v.series[seriesKey(m.Name(), dp.Attributes())] = point{value: dp.IntValue(), now: dp.Timestamp()}
			}
		}
	})
	return v
}

func waitForHost(t *testing.T, sink *collectortest.Sink, what string, cond func(processView) bool) processView {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if v := hostView(sink); cond(v) {
			return v
		}
		time.Sleep(100 * time.Millisecond)
	}
	v := hostView(sink)
	t.Fatalf("node: %s never showed up; series:\n%s\n%s", what, v.keys(), sinkSummary(sink))
	return v
}

// sinkSummary says what did arrive, for a failure whose series list is empty: how many
// exports, and per resource kind (node or process) which metric names.
func sinkSummary(sink *collectortest.Sink) string {
	names := map[string]map[string]int{"node": {}, "process": {}}
	eachMetric(sink, func(pid int64, _ pcommon.Map, m pmetric.Metric) {
		kind := "node"
		if pid != 0 {
			kind = "process"
		}
		names[kind][m.Name()+" ("+m.Type().String()+")"]++
	})
	return fmt.Sprintf("%d metric exports; node resources carried %v; process resources carried %v", len(sink.Metrics()), names["node"], names["process"])
}

// ncclRecords returns pid's log records of one event name.
func ncclRecords(sink *collectortest.Sink, pid int, event string) []pcommon.Map {
	var out []pcommon.Map
	for _, ld := range sink.Logs() {
		for i := 0; i < ld.ResourceLogs().Len(); i++ {
			rl := ld.ResourceLogs().At(i)
			if p, ok := rl.Resource().Attributes().Get(semconv.ProcessPID); !ok || p.Int() != int64(pid) {
				continue
			}
			lrs := rl.ScopeLogs().At(0).LogRecords()
			for j := 0; j < lrs.Len(); j++ {
				if lrs.At(j).EventName() == event {
					out = append(out, lrs.At(j).Attributes())
				}
			}
		}
	}
	return out
}

func TestNCCLAndRDMAThroughTheRealCollector(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	sysfs := filepath.Join(t.TempDir(), "infiniband")
	writeCounters(t, sysfs, "mlx5_0", "InfiniBand", map[string]uint64{
		"port_rcv_errors": 5, "symbol_error": 0, "link_downed": 1, "port_xmit_data": 1000, "port_rcv_data": 2000, "port_xmit_wait": 7,
	})
	writeCounters(t, sysfs, "mlx5_1", "Ethernet", map[string]uint64{"port_rcv_errors": 0})
	fifo := filepath.Join(t.TempDir(), "ibv-events")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	events, err := os.OpenFile(fifo, os.O_RDWR, 0) // read-write: open never blocks
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()

	const ranks, steps, bucket, ring = 4, 100, 32 << 10, 2048
	// At their gates (libraries mapped, no call made) before the collector starts, so its
	// first scan of /proc finds libnccl and libibverbs.
	run := fakegpu.StartDDP(t, paths, fakegpu.DDPOptions{
		Ranks: ranks, Steps: steps, BucketBytes: bucket, RingBytes: ring, KernelTime: 10 * time.Microsecond,
		IB: true, Gate: true, Env: []string{"FAKEIBV_EVENT_FIFO=" + fifo},
	})
	sink, col := startNodeCollector(t, ncclE2EConfig, "SYSFS="+sysfs)

	// Written before the gate opens (the FIFO holds it until a rank's event thread,
	// started after the gate, reads it): written after, it could come after the job.
	if _, err := events.WriteString("10 1\n"); err != nil { // IBV_EVENT_PORT_ERR on port 1
		t.Fatal(err)
	}
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	reports, err := run.Wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var ibEvents int64
	for _, r := range reports {
		if ibEvents += r.IBEvents; r.IBEvents > 0 && r.IBLastEvent != 10 {
			t.Fatalf("rank %d got verbs event type %d, want 10 (PORT_ERR)", r.Rank, r.IBLastEvent)
		}
	}
	if ibEvents != 1 {
		t.Fatalf("the ranks got %d verbs events between them, want the 1 injected", ibEvents)
	}
	raw, _ := hex.DecodeString(reports[0].UniqueID)
	h := fnv.New64a()
	h.Write(raw)
	comm := fmt.Sprintf("%016x", h.Sum64())

	t.Run("per (communicator, rank, op) metrics on each rank's process", func(t *testing.T) {
		for _, r := range reports {
			series := func(name, op string) string {
				return seriesKey(name, attrs(semconv.NCCLCommID, comm, semconv.NCCLOp, op, semconv.NCCLRank, strconv.Itoa(r.Rank), semconv.NCCLNRanks, strconv.Itoa(ranks)))
			}
			calls := series(semconv.MetricNCCLCalls, "all_reduce")
			v := waitFor(t, sink, r.Pid, "every all-reduce", func(v processView) bool { return v.series[calls].value == steps })
			if got := v.value(t, series(semconv.MetricNCCLBytes, "all_reduce")); got != steps*bucket {
				t.Errorf("rank %d: all-reduce bytes %d, want %d", r.Rank, got, steps*bucket)
			}
			hist := v.series[series(semconv.MetricNCCLDuration, "all_reduce")]
			own := float64(r.TotalNS["ncclAllReduce"]) / 1e9
			if hist.count != steps || hist.sum > own || hist.sum < own*0.5 {
				t.Errorf("rank %d: duration histogram count %d sum %.4fs, the rank timed %.4fs", r.Rank, hist.count, hist.sum, own)
			}
			for _, op := range []string{"send", "recv"} {
				if got := v.value(t, series(semconv.MetricNCCLCalls, op)); got != steps {
					t.Errorf("rank %d: %s calls %d, want %d", r.Rank, op, got, steps)
				}
				if got := v.value(t, series(semconv.MetricNCCLBytes, op)); got != steps*ring {
					t.Errorf("rank %d: %s bytes %d, want %d", r.Rank, op, got, steps*ring)
				}
			}
			if got := v.value(t, seriesKey(semconv.MetricNCCLCalls, attrs(semconv.NCCLOp, "group_end"))); got != steps {
				t.Errorf("rank %d: group_end calls %d, want %d", r.Rank, got, steps)
			}
			if rank, _ := v.resource.Get(semconv.Rank); rank.Int() != int64(r.Rank) {
				t.Errorf("pid %d: resource rank %d, want %d", r.Pid, rank.Int(), r.Rank)
			}
			if cohort, _ := v.resource.Get(semconv.Cohort); cohort.Str() != "nccl:"+comm {
				t.Errorf("pid %d: resource cohort %q, want the world communicator nccl:%s", r.Pid, cohort.Str(), comm)
			}
		}
	})

	t.Run("one nccl.collective record per all-reduce, with sequence and times", func(t *testing.T) {
		for _, r := range reports {
			var records []pcommon.Map
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				records = ncclRecords(sink, r.Pid, semconv.EventNCCLCollective)
				if len(records) >= 3*steps {
					break
				}
			}
			seqs := map[int64]int{}
			peers := map[string]int64{}
			for _, a := range records {
				op, _ := a.Get(semconv.NCCLOp)
				id, _ := a.Get(semconv.NCCLCommID)
				rank, _ := a.Get(semconv.NCCLRank)
				if id.Str() != comm || rank.Int() != int64(r.Rank) {
					t.Fatalf("rank %d: record on comm %s rank %d", r.Rank, id.Str(), rank.Int())
				}
				if op.Str() != "all_reduce" {
					peer, _ := a.Get(semconv.NCCLPeer)
					peers[op.Str()] = peer.Int()
					continue
				}
				seq, _ := a.Get(semconv.NCCLSeq)
				entry, _ := a.Get(semconv.NCCLEntryTime)
				ret, _ := a.Get(semconv.NCCLReturnTime)
				bytes, _ := a.Get(semconv.NCCLBytes)
				if entry.Int() <= 0 || ret.Int() < entry.Int() || bytes.Int() != bucket {
					t.Fatalf("rank %d all-reduce seq %d: entry %d return %d bytes %d", r.Rank, seq.Int(), entry.Int(), ret.Int(), bytes.Int())
				}
				seqs[seq.Int()]++
			}
			if len(records) != 3*steps || len(seqs) != steps {
				t.Fatalf("rank %d: %d collective records, %d distinct all-reduce sequences; want %d and %d", r.Rank, len(records), len(seqs), 3*steps, steps)
			}
			for s := int64(0); s < steps; s++ {
				if seqs[s] != 1 {
					t.Fatalf("rank %d: all-reduce seq %d logged %d times", r.Rank, s, seqs[s])
				}
			}
			if peers["send"] != int64((r.Rank+1)%ranks) || peers["recv"] != int64((r.Rank+ranks-1)%ranks) {
				t.Errorf("rank %d: peers %v", r.Rank, peers)
			}
		}
	})

	t.Run("the injected port error is one async event; sysfs counters are exact sums", func(t *testing.T) {
		portErr := seriesKey(semconv.MetricRDMAAsyncEvents, attrs(semconv.RDMAEventType, "PORT_ERR", semconv.RDMAFabricError, "true"))
		v := waitForHost(t, sink, "the port error", func(v processView) bool { return v.series[portErr].value > 0 })
		var asyncEvents int64
		for key, p := range v.series {
			if strings.HasPrefix(key, semconv.MetricRDMAAsyncEvents+"{") {
				asyncEvents += p.value
			}
		}
		if got := v.series[portErr].value; got != 1 || asyncEvents != 1 {
			t.Errorf("port errors %d and async events %d of any type, want 1 and 1", got, asyncEvents)
		}
		port := func(extra ...string) pcommon.Map {
			return attrs(append([]string{semconv.RDMADevice, "mlx5_0", semconv.RDMAPort, "1", semconv.RDMATransport, "infiniband"}, extra...)...)
		}
		rcvErrors := seriesKey(semconv.MetricRDMAPortErrors, port(semconv.RDMACounter, "port_rcv_errors"))
		v = waitForHost(t, sink, "port counters", func(v processView) bool { return v.series[rcvErrors].value == 5 })
		for key, want := range map[string]int64{
			seriesKey(semconv.MetricRDMAPortErrors, port(semconv.RDMACounter, "link_downed")):                                                                                          1,
			seriesKey(semconv.MetricRDMAPortErrors, port(semconv.RDMACounter, "symbol_error")):                                                                                         0,
			seriesKey(semconv.MetricRDMAPortIO, port(semconv.NetworkDirection, "transmit")):                                                                                            4000,
			seriesKey(semconv.MetricRDMAPortIO, port(semconv.NetworkDirection, "receive")):                                                                                             8000,
			seriesKey(semconv.MetricRDMAPortXmitWait, port()):                                                                                                                          7,
			seriesKey(semconv.MetricRDMAPortErrors, attrs(semconv.RDMADevice, "mlx5_1", semconv.RDMAPort, "1", semconv.RDMATransport, "roce", semconv.RDMACounter, "port_rcv_errors")): 0,
		} {
			if got := v.value(t, key); got != want {
				t.Errorf("%s = %d, want %d", key, got, want)
			}
		}
		writeCounters(t, sysfs, "mlx5_0", "InfiniBand", map[string]uint64{"port_rcv_errors": 12, "symbol_error": 3, "port_xmit_data": 1500})
		v = waitForHost(t, sink, "the increased counters", func(v processView) bool { return v.series[rcvErrors].value == 12 })
		symbol := seriesKey(semconv.MetricRDMAPortErrors, port(semconv.RDMACounter, "symbol_error"))
		tx := seriesKey(semconv.MetricRDMAPortIO, port(semconv.NetworkDirection, "transmit"))
		v = waitForHost(t, sink, "all increased counters", func(v processView) bool { return v.series[symbol].value == 3 && v.series[tx].value == 6000 })
		if p := v.series[rcvErrors]; p.start == 0 || p.start >= p.now {
			t.Errorf("cumulative start %v not before %v", p.start, p.now)
		}
	})

	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}
