//go:build linux

package gpuebpfreceiver_test

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/fathom-gpu/fathom/internal/semconv"
)

// Fifty times slower syncs on rank 2: outliers against the node's median, so the
// notable log policy has records to send.
var syntheticConfig = nodeConfig(`
mode: synthetic
collection_interval: 200ms
synthetic:
  ranks: 4
  calls_per_second: 2000
  slow_rank: 2
  slow_factor: 50`, true)

// Synthetic mode needs no privileges and no BPF: it runs the same pipeline on made-up
// ranks, every record says so, and the slow rank it was told to simulate is the one
// whose synchronizations take longest.
func TestSyntheticModeIsLabelledAndShowsTheSlowRank(t *testing.T) {
	sink, col := startNodeCollector(t, syntheticConfig)
	syncKey := seriesKey(semconv.MetricCUDAAPIDuration, attrs("cuda.api.name", "cudaStreamSynchronize", "cuda.library", "libcudart"))
	const base = 4_200_000
	meanSync := map[int]float64{}
	for rank := 0; rank < 4; rank++ {
		v := waitFor(t, sink, base+rank, "synchronizations", func(v processView) bool { return v.series[syncKey].count >= 20 })
		if s, ok := v.resource.Get(semconv.Synthetic); !ok || !s.Bool() {
			t.Fatalf("rank %d resource is not labelled %s", rank, semconv.Synthetic)
		}
		if r, _ := v.resource.Get(semconv.Rank); r.Int() != int64(rank) {
			t.Fatalf("pid %d has rank %d, want %d", base+rank, r.Int(), rank)
		}
		p := v.series[syncKey]
		meanSync[rank] = p.sum / float64(p.count)
	}
	for rank, mean := range meanSync {
		if rank != 2 && meanSync[2] < 5*mean {
			t.Errorf("slow rank 2 syncs in %.1f ms on average, rank %d in %.1f ms: want ≥ 5x", meanSync[2]*1e3, rank, mean*1e3)
		}
	}
	// Every resource says it is made up: the ranks', the node's, and the logs' too.
	var logRecords int
	for deadline := time.Now().Add(20 * time.Second); logRecords == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, ld := range sink.Logs() {
			logRecords += ld.LogRecordCount()
		}
	}
	if logRecords == 0 {
		t.Errorf("no log records from a rank 50x slower than the others")
	}
	unlabelled := func(kind string, res pcommon.Map) {
		if s, ok := res.Get(semconv.Synthetic); !ok || !s.Bool() {
			t.Errorf("a %s resource is not labelled %s: %v", kind, semconv.Synthetic, res.AsRaw())
		}
	}
	for _, md := range sink.Metrics() {
		for i := 0; i < md.ResourceMetrics().Len(); i++ {
			unlabelled("metrics", md.ResourceMetrics().At(i).Resource().Attributes())
		}
	}
	for _, ld := range sink.Logs() {
		for i := 0; i < ld.ResourceLogs().Len(); i++ {
			unlabelled("logs", ld.ResourceLogs().At(i).Resource().Attributes())
		}
	}
	if code := col.Terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
}
