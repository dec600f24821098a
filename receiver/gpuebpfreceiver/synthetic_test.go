//go:build linux

package gpuebpfreceiver_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/collectortest"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

const syntheticConfig = `
receivers:
  gpuebpf:
    mode: synthetic
    collection_interval: 200ms
    synthetic:
      ranks: 4
      calls_per_second: 2000
      slow_rank: 2
      slow_factor: 10
exporters:
  otlp_grpc:
    endpoint: ${env:SINK}
    tls:
      insecure: true
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [gpuebpf]
      exporters: [otlp_grpc]
`

// Synthetic mode needs no privileges and no BPF: it runs the same pipeline on made-up
// ranks, every record says so, and the slow rank it was told to simulate is the one
// whose synchronizations take longest.
func TestSyntheticModeIsLabelledAndShowsTheSlowRank(t *testing.T) {
	sink := collectortest.StartSink(t)
	cfg := filepath.Join(t.TempDir(), "synthetic.yaml")
	if err := os.WriteFile(cfg, []byte(syntheticConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	col := collectortest.Start(t, cfg, "SINK="+sink.Addr)
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
	if code := col.Terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
}
