package causalchainprocessor

import (
	"testing"
	"time"
)

// BenchmarkNodeInterval: one op is one 1 s export of 64 CUDA processes, each with a
// dispatcher thread under CPU contention, ingested and judged over a 10 s window.
func BenchmarkNodeInterval(b *testing.B) {
	l := newLoop(b, testConfig())
	start := time.Now().Add(-time.Hour).Truncate(time.Second)
	sims := make([]*sim, 64)
	for i := range sims {
		sims[i] = newSim(int64(1000+i), int64(i), start)
		sims[i].delta = true
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for _, s := range sims {
			b.StopTimer()
			s.healthy(dispatcher).preempted(dispatcher, "hog", false, 100, time.Millisecond, 2)
			md := s.export(time.Second)
			b.StartTimer()
			l.feed(md)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(sims)), "µs/process-interval")
}
