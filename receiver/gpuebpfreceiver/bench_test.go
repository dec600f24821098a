package gpuebpfreceiver

import (
	"testing"
	"unsafe"

	"github.com/fathom-gpu/fathom/internal/probes"
)

// BenchmarkDecodeAndAggregate measures what one core does per kernel event in
// userspace: decode the ring-buffer record and fold it into the per-process series
// (histogram, counters, log policy). Goal: ≥ 2M events/s per core.
func BenchmarkDecodeAndAggregate(b *testing.B) {
	cfg := createDefaultConfig()
	clock := &wallClock{}
	clock.refresh()
	agg := newAggregator(cfg, clock, nil, true)
	agg.logs = newLogSink(cfg, clock, &agg.drops, hostIdentity("", true))
	apis := []string{"cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize", "cuLaunchKernel"}
	var raws [][]byte
	for i := 0; i < 256; i++ {
		var ev probes.CUDACall
		ev.Hdr.Kind = uint8(probes.KindCUDACall)
		ev.Hdr.Pid = uint32(syntheticPIDBase + i%8)
		ev.Hdr.Tid = ev.Hdr.Pid
		ev.Hdr.TsNs = uint64(i) * 1000
		ev.Api = apiID(apis[i%len(apis)])
		ev.DurationNs = uint64(2000 + (i*7919)%50000)
		ev.MemcpyKind = uint8(probes.MemcpyNone)
		if i%4 == 1 {
			ev.MemcpyKind = uint8(probes.MemcpyHostToDevice)
			ev.Bytes = 4 << 20
		}
		raw := make([]byte, unsafe.Sizeof(ev))
		copy(raw, unsafe.Slice((*byte)(unsafe.Pointer(&ev)), unsafe.Sizeof(ev)))
		raws = append(raws, raw)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := probes.Decode(raws[i&255], agg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
