package probes

import (
	"math"

	"github.com/fathom-gpu/fathom/internal/expohisto"
)

// The kernel's call_stats histogram: DurationBuckets buckets of the OTLP exponential
// scale expohisto.Scale, bucket b being exponential bucket DurationFirstIndex+b. At
// scale 3 that spans 16 ns to 4.5 h; shorter and longer calls land in the end buckets.
const (
	DurationBuckets          = 320 // DURATION_BUCKETS in bpf/common.h
	DurationFirstIndex int32 = -208
	durationBoundsLen        = 512 // DURATION_BOUNDS
	// ProcSlots is how many processes have call statistics in the kernel at once
	// (PROC_SLOTS); the calls of any further process go out as records.
	ProcSlots = 64
	// CopyKinds indexes CallStats.Calls and Bytes: MemcpyKind 0..4, then calls that
	// copy nothing.
	CopyKinds = 6
)

// durationBounds is the table the kernel's bucket search reads: the exact integer
// upper bounds of the buckets, then ~0 so the last bucket takes the rest.
var durationBounds = func() [durationBoundsLen]uint64 {
	var t [durationBoundsLen]uint64
	copy(t[:], expohisto.UpperBoundsNS(DurationFirstIndex, DurationBuckets-1))
	for i := DurationBuckets - 1; i < len(t); i++ {
		t[i] = math.MaxUint64
	}
	return t
}()

// CallStats are the totals of one process's calls of one API since it got its slot:
// calls and bytes by copy kind (CopyKinds), failed calls, summed duration (ns) and the
// duration histogram. Buckets are 32-bit and wrap: take differences modulo 2^32.
type CallStats = cudaCallStats

// TotalCalls sums the calls of every copy kind.
func (s CallStats) TotalCalls() uint64 {
	var n uint64
	for _, c := range s.Calls {
		n += c
	}
	return n
}

// CopyKindIndex is the Calls/Bytes index of a call with this MemcpyKind.
func CopyKindIndex(k MemcpyKind) int { return min(int(k), CopyKinds-1) }

// ProcessCallStats is one process's call statistics as read from the kernel.
type ProcessCallStats struct {
	PID   uint32
	ByAPI [APICount]CallStats // indexed by API ID
	slot  uint32
}

// NeverNotable is a threshold no call reaches: only failed calls become records.
const NeverNotable = math.MaxUint64
