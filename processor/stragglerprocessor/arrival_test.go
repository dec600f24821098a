package stragglerprocessor

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/processor/stragglerprocessor/internal/metadata"
)

// collectiveRecords is one node's export of sampled nccl.collective records, in the
// gpuebpf receiver's shape: a resource per rank process, one record per instance with
// the rank's entry time on the node's clock.
func collectiveRecords(node string, ranks []int64, seqs []int64, entry func(rank, seq int64) time.Time) plog.Logs {
	ld := plog.NewLogs()
	for _, rank := range ranks {
		rl := ld.ResourceLogs().AppendEmpty()
		putRankResource(rl.Resource().Attributes(), node, "nccl:00000000000000aa", "llama", rank)
		lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
		for _, seq := range seqs {
			lr := lrs.AppendEmpty()
			lr.SetEventName(semconv.EventNCCLCollective)
			at := entry(rank, seq)
			lr.SetTimestamp(pcommon.NewTimestampFromTime(at))
			a := lr.Attributes()
			a.PutStr(semconv.NCCLCommID, "00000000000000aa")
			a.PutInt(semconv.NCCLSeq, seq)
			a.PutInt(semconv.NCCLRank, rank)
			a.PutInt(semconv.NCCLNRanks, 8)
			a.PutInt(semconv.NCCLEntryTime, at.UnixNano())
		}
	}
	return ld
}

// clockRequest is a node's fathom.node.clock.offset, as its straggler processor sends it.
func clockRequest(node string, offset time.Duration) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr(semconv.ClusterName, "c1")
	rm.Resource().Attributes().PutStr(semconv.HostName, node)
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName(semconv.MetricNodeClockOffset)
	m.SetEmptyGauge().DataPoints().AppendEmpty().SetDoubleValue(offset.Seconds())
	return md
}

// arrivalScenario runs a gateway straggler processor over 20 one-second intervals of
// eight ranks on four nodes, each entering 50 sampled collective instances a second
// with up to ±0.3 ms of jitter; node-3's clock (ranks 6 and 7) is 50 ms ahead, and rank
// 5 enters every instance 4 ms late from interval 11. sayClock says whether the nodes
// send their clock offsets. It returns the processor's records and its last arrival-lag
// gauges by rank.
func arrivalScenario(t *testing.T, sayClock bool) (string, map[int64]float64, *straggler) {
	t.Helper()
	p := startPipelines(t, processortest.NewNopSettings(metadata.Type), createDefaultConfig())
	mp, lp, s, metricsOut, logsOut := p.metrics, p.logs, p.s, p.metricsOut, p.logsOut
	ctx := context.Background()
	t.Cleanup(func() { _ = mp.Shutdown(ctx); _ = lp.Shutdown(ctx) })
	start := time.Unix(1_800_000_000, 0)
	var seq int64
	for i := 1; i <= 20; i++ {
		p.clock = start.Add(time.Duration(i) * time.Second)
		clock := p.clock
		var seqs []int64
		for range 50 {
			seq += 16
			seqs = append(seqs, seq)
		}
		entry := func(rank, seq int64) time.Time {
			at := clock.Add(-time.Second).Add(time.Duration(seq/16%50) * 20 * time.Millisecond)
			at = at.Add(time.Duration(math.Sin(float64(seq*7+rank*13))*300) * time.Microsecond)
			if rank == 5 && i > 10 {
				at = at.Add(4 * time.Millisecond)
			}
			if rank >= 6 {
				at = at.Add(50 * time.Millisecond) // node-3's clock
			}
			return at
		}
		for node := range 4 {
			name := fmt.Sprintf("node-%d", node)
			if sayClock {
				offset := time.Duration(0)
				if node == 3 {
					offset = 50*time.Millisecond + 120*time.Microsecond // as measured: within its uncertainty
				}
				if err := mp.ConsumeMetrics(ctx, clockRequest(name, offset)); err != nil {
					t.Fatal(err)
				}
			}
			if err := lp.ConsumeLogs(ctx, collectiveRecords(name, []int64{int64(2 * node), int64(2*node + 1)}, seqs, entry)); err != nil {
				t.Fatal(err)
			}
		}
		s.evaluate(ctx)
	}
	var records []string
	for _, ld := range logsOut.AllLogs() {
		for i := range ld.ResourceLogs().Len() {
			rl := ld.ResourceLogs().At(i)
			lrs := rl.ScopeLogs().At(0).LogRecords()
			for j := range lrs.Len() {
				a := lrs.At(j).Attributes().AsRaw()
				r, _ := rl.Resource().Attributes().Get(semconv.Rank)
				if lrs.At(j).EventName() == semconv.EventStraggler {
					records = append(records, fmt.Sprintf("%v rank %d on %v", a[semconv.StragglerState], r.Int(), a[semconv.StragglerSignal]))
				}
			}
		}
	}
	sort.Strings(records)
	lags := map[int64]float64{}
	all := metricsOut.AllMetrics()
	for _, md := range all[len(all)-1:] {
		for i := range md.ResourceMetrics().Len() {
			ms := md.ResourceMetrics().At(i).ScopeMetrics().At(0).Metrics()
			for j := range ms.Len() {
				if m := ms.At(j); m.Name() == semconv.MetricRankArrivalLag {
					for k := range m.Gauge().DataPoints().Len() {
						dp := m.Gauge().DataPoints().At(k)
						r, _ := dp.Attributes().Get(semconv.Rank)
						lags[r.Int()] = dp.DoubleValue()
					}
				}
			}
		}
	}
	return strings.Join(records, "; "), lags, s
}

// Matched across nodes and with each node's clock taken out, the rank that enters every
// instance 4 ms late is the one flagged on arrival lag, and the ranks of the node whose
// clock is 50 ms ahead are not; the gauge says how late each rank was.
func TestArrivalLagNamesTheLateRankNotTheNodeWhoseClockIsOff(t *testing.T) {
	records, lags, s := arrivalScenario(t, true)
	if records != "straggler rank 5 on "+semconv.MetricRankArrivalLag {
		t.Errorf("records: %q, want rank 5 flagged on arrival lag alone", records)
	}
	if len(lags) != 8 {
		t.Fatalf("arrival lags %v, want 8 ranks", lags)
	}
	for rank, lag := range lags {
		want := 0.0
		if rank == 5 {
			want = 0.004
		}
		// The median moves by half a jitter when rank 5 is late; node-3's ranks keep
		// what is left of the offset past its measurement (0.12 ms).
		if math.Abs(lag-want) > 0.0004 {
			t.Errorf("rank %d: arrival lag %.6f s, want %.4f", rank, lag, want)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.det.drops["instance_incomplete"] + s.det.drops["instance_cap"]; n != 0 {
		t.Errorf("%d instances dropped from whole exports", n)
	}
}

// Without the clocks, node-3's ranks enter 50 ms "late" on the gateway's reading: they
// are what the signal would name, which is why the nodes measure their offsets.
func TestArrivalLagWithoutClocksTakesTheOffNodeForLate(t *testing.T) {
	records, _, _ := arrivalScenario(t, false)
	if !strings.Contains(records, "straggler rank 6 on "+semconv.MetricRankArrivalLag) || !strings.Contains(records, "straggler rank 7 on "+semconv.MetricRankArrivalLag) {
		t.Errorf("records: %q, want ranks 6 and 7 taken for late", records)
	}
}

// Bounds: an instance some rank's record never reached is dropped after the match
// window, counted, and names nobody; a rank's second record of one instance is
// counted, not matched twice; past max_instances the oldest waiting instance goes.
func TestArrivalMatchingIsBounded(t *testing.T) {
	drops := map[string]int64{}
	a := newArrivals(time.Second, 2, 16, drops)
	now := time.Unix(1_800_000_000, 0)
	r := func(commRank int64) arrivalRank {
		return arrivalRank{commRank: commRank, rank: commRank, cohort: cohortKey{"c1", "nccl:1"}, node: "n", entry: now.UnixNano() + commRank}
	}
	k := func(seq int64) instanceKey { return instanceKey{"c1", "1", seq} }
	a.add(k(16), 3, r(0), now)
	a.add(k(16), 3, r(1), now)
	a.add(k(16), 3, r(1), now) // duplicate
	a.add(k(32), 3, r(0), now)
	a.add(k(48), 3, r(0), now) // a third waiting instance: the oldest (16) goes
	a.add(k(64), 40, r(0), now)
	if got := a.drain(now.Add(2 * time.Second)); len(got) != 0 {
		t.Errorf("lags from incomplete instances: %+v", got)
	}
	want := map[string]int64{"arrival_duplicate": 1, "instance_cap": 1, "instance_incomplete": 2, "arrival_nranks": 1}
	if fmt.Sprint(drops) != fmt.Sprint(want) {
		t.Errorf("drops %v, want %v", drops, want)
	}
	for i := range int64(3) {
		a.add(k(80), 3, r(i), now.Add(3*time.Second))
	}
	got := a.drain(now.Add(3 * time.Second))
	sort.Slice(got, func(i, j int) bool { return got[i].rank < got[j].rank })
	if len(got) != 3 || got[0].sum != -1e-9 || got[1].sum != 0 || got[2].sum != 1e-9 || got[2].n != 1 {
		t.Errorf("a whole instance: %+v", got)
	}
}

// BenchmarkArrivalRecords is the gateway's cost of arrival lag: one op is one sampled
// instance of a 1,024-rank communicator, its records arriving from 128 nodes of 8 ranks
// (each node's export in the gpuebpf receiver's shape, already decoded), matched, and
// drained into samples as an evaluation does.
func BenchmarkArrivalRecords(b *testing.B) {
	const nodes, perNode = 128, 8
	cfg := createDefaultConfig()
	cfg.Limits.MaxRanksPerCohort = 2048
	s, err := newStraggler(cfg, processortest.NewNopSettings(metadata.Type))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return now }
	exports := make([]plog.Logs, nodes)
	for n := range nodes {
		ranks := make([]int64, perNode)
		for i := range ranks {
			ranks[i] = int64(n*perNode + i)
		}
		exports[n] = collectiveRecords(fmt.Sprintf("node-%03d", n), ranks, []int64{16}, func(rank, _ int64) time.Time {
			return now.Add(time.Duration(rank) * time.Microsecond)
		})
	}
	for _, ld := range exports {
		rls := ld.ResourceLogs()
		for i := range rls.Len() {
			lr := rls.At(i).ScopeLogs().At(0).LogRecords().At(0)
			lr.Attributes().PutInt(semconv.NCCLNRanks, nodes*perNode)
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for op := range b.N {
		seq := int64(op+1) * 16
		for _, ld := range exports {
			rls := ld.ResourceLogs()
			for i := range rls.Len() {
				rls.At(i).ScopeLogs().At(0).LogRecords().At(0).Attributes().PutInt(semconv.NCCLSeq, seq)
			}
			if _, err := s.processLogs(ctx, ld); err != nil {
				b.Fatal(err)
			}
		}
		s.mu.Lock()
		if got := s.arr.drain(now); len(got) != nodes*perNode {
			b.Fatalf("%d ranks matched, want %d", len(got), nodes*perNode)
		}
		s.mu.Unlock()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*nodes*perNode), "ns/record")
}

// A rank whose arrival lags stop (its node's records paused) while its device wait keeps
// coming is not called silent: silence is judged on what the nodes send, and a gateway
// signal that pauses for one rank only leaves it out of that signal's comparison.
func TestAPauseInOneRanksArrivalLagIsNotSilence(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.SilentAfter = 5 * time.Second
	det := newDetector(cfg)
	wait, lag := 0, 0
	for i, sig := range cfg.Signals {
		switch sig.Metric {
		case semconv.MetricRankDeviceWait:
			wait = i
		case semconv.MetricRankArrivalLag:
			lag = i
		}
	}
	start := time.Unix(1_800_000_000, 0)
	key := cohortKey{"c1", "nccl:1"}
	var events []event
	for i := 1; i <= 30; i++ {
		end := start.Add(time.Duration(i) * time.Second)
		for rank := range int64(6) {
			det.observe(point{cohort: key, node: "n", rank: rank, pid: 100 + rank, signal: wait, cumulative: true,
				value: 0.3 * float64(i), start: start.UnixNano(), ts: end.UnixNano()}, end)
			if rank != 2 || i <= 10 {
				det.observe(point{cohort: key, node: "n", rank: rank, pid: 100 + rank, signal: lag, gauge: true,
					value: 0.0001 * float64(rank%2), ts: end.UnixNano()}, end)
			}
		}
		events = append(events, det.evaluate(end).events...)
	}
	if len(events) != 0 {
		t.Errorf("events: %+v, want none", events)
	}
}
