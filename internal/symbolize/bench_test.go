package symbolize

import (
	"runtime"
	"testing"
)

// BenchmarkSymbolCacheMemory reports the heap the symbol table of CPython 3.11's
// executable takes once read (its exported functions), and the cost of naming a frame
// then.
func BenchmarkSymbolCacheMemory(b *testing.B) {
	pid, fn := python311(b)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := New("/proc")
	s.Frames(pid, []uint64{fn + 5})
	runtime.GC()
	runtime.ReadMemStats(&after)
	_, _, symbols := s.Size()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Frames(pid, []uint64{fn + 5})
	}
	// After the loop: ResetTimer deletes reported metrics.
	b.ReportMetric((float64(after.HeapAlloc)-float64(before.HeapAlloc))/1024, "KiB-cache")
	b.ReportMetric(float64(symbols), "symbols")
}
