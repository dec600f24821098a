package causalchainprocessor

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/expohisto"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// seriesKey names one series of one process by the attributes the rules read. Other
// attributes (library, NCCL communicator, ...) fold into the same series.
type seriesKey struct {
	metric string
	name   string // cuda.api.name, nccl.op, or fathom.preemptor.name
	attr   string // cuda.memcpy.direction, disk.io.direction or fathom.off_cpu.reason
	tid    int64  // thread.id of a CUDA-calling thread; -1 for none
	self   bool   // fathom.preemptor.self
}

// delta is what one series gained over one interval of its process.
type delta struct {
	end   time.Time
	value float64              // a sum's increase, a gauge's value, a histogram's sum
	count uint64               // a histogram's count
	hist  *expohisto.Histogram // a histogram's buckets (nil for sums and gauges)
}

// series turns one cumulative (or delta) stream into per-interval deltas, and keeps those
// of the last window.
type series struct {
	// The last cumulative point, to take the next difference from.
	start       pcommon.Timestamp
	hasPrev     bool
	prevValue   float64
	prevCount   uint64
	prevZero    uint64
	prevOffset  int32
	prevBuckets []uint64
	deltas      []delta
	// seen is the end of the last interval that carried a point of this series.
	seen time.Time
}

// keepDeltas drops what ended before from, and the oldest beyond max.
func (s *series) keepDeltas(from time.Time, max int) {
	i := 0
	for i < len(s.deltas) && !s.deltas[i].end.After(from) {
		i++
	}
	if len(s.deltas)-i > max {
		i = len(s.deltas) - max
	}
	if i > 0 {
		s.deltas = append(s.deltas[:0], s.deltas[i:]...)
	}
}

// addSum records a monotonic sum's point.
func (s *series) addSum(v float64, start, ts pcommon.Timestamp, cumulative bool) (float64, bool) {
	if !cumulative {
		return v, true
	}
	if !s.hasPrev || start != s.start || v < s.prevValue {
		// The first point of a series (or of a restarted one) only sets the baseline,
		// unless it began within the interval it reports, as a new process's does.
		first := !s.hasPrev
		s.start, s.prevValue, s.hasPrev = start, v, true
		return v, first && start != 0 && ts > start
	}
	d := v - s.prevValue
	s.prevValue = v
	return d, true
}

// addHistogram records an exponential histogram's point as the buckets it gained.
func (s *series) addHistogram(dp pmetric.ExponentialHistogramDataPoint, cumulative bool) (*expohisto.Histogram, bool) {
	if dp.Scale() != expohisto.Scale {
		return nil, false
	}
	pos := dp.Positive()
	cur := pos.BucketCounts().AsRaw()
	h := &expohisto.Histogram{}
	if !cumulative {
		h.AddBuckets(pos.Offset(), cur, dp.Sum())
		h.ZeroCount, h.Count = dp.ZeroCount(), h.Count+dp.ZeroCount()
		return h, true
	}
	restarted := !s.hasPrev || dp.StartTimestamp() != s.start || dp.Count() < s.prevCount
	first := !s.hasPrev
	if !restarted {
		diff := make([]uint64, len(cur))
		for i, n := range cur {
			idx := pos.Offset() + int32(i)
			var before uint64
			if j := idx - s.prevOffset; j >= 0 && int(j) < len(s.prevBuckets) {
				before = s.prevBuckets[j]
			}
			if n < before {
				restarted = true
				break
			}
			diff[i] = n - before
		}
		if !restarted {
			h.AddBuckets(pos.Offset(), diff, dp.Sum()-s.prevValue)
			h.ZeroCount = dp.ZeroCount() - min(s.prevZero, dp.ZeroCount())
			h.Count += h.ZeroCount
		}
	}
	s.start, s.hasPrev = dp.StartTimestamp(), true
	s.prevValue, s.prevCount, s.prevZero = dp.Sum(), dp.Count(), dp.ZeroCount()
	s.prevOffset, s.prevBuckets = pos.Offset(), append(s.prevBuckets[:0], cur...)
	if restarted {
		if first && dp.StartTimestamp() != 0 && dp.Timestamp() > dp.StartTimestamp() {
			h.AddBuckets(pos.Offset(), cur, dp.Sum())
			h.ZeroCount = dp.ZeroCount()
			h.Count += h.ZeroCount
			return h, true
		}
		return nil, false
	}
	return h, true
}

// interval is one export of a process: the span its deltas cover.
type interval struct {
	start, end time.Time
}

// key reads the attributes the rules use from a point's attributes.
func key(metric string, attrs pcommon.Map) seriesKey {
	k := seriesKey{metric: metric, tid: -1}
	str := func(name string) string {
		if v, ok := attrs.Get(name); ok {
			return v.AsString()
		}
		return ""
	}
	switch metric {
	case semconv.MetricCUDAAPIDuration, semconv.MetricCUDAAPICalls, semconv.MetricCUDAMemcpyBytes:
		k.name, k.attr = str(semconv.CUDAAPIName), str(semconv.CUDAMemcpyDir)
	case semconv.MetricNCCLDuration, semconv.MetricNCCLCalls:
		k.name = str(semconv.NCCLOp)
	case semconv.MetricBlockIODuration:
		k.attr = str(semconv.DiskIODirection)
	case semconv.MetricThreadOffCPU, semconv.MetricThreadRunQueue,
		semconv.MetricThreadPreemptions, semconv.MetricThreadPreemptTime, semconv.MetricThreadPreemptors:
		if str(semconv.ThreadRole) != "cuda" {
			return seriesKey{}
		}
		if v, ok := attrs.Get(semconv.ThreadID); ok {
			k.tid = v.Int()
		}
		k.attr = str(semconv.OffCPUReason)
		k.name = str(semconv.PreemptorName)
		if v, ok := attrs.Get(semconv.PreemptorSelf); ok {
			k.self = v.Bool()
		}
	}
	return k
}

// wanted are the metrics the rules read; everything else passes by untouched.
var wanted = map[string]bool{
	semconv.MetricCUDAAPIDuration: true, semconv.MetricCUDAAPICalls: true, semconv.MetricCUDAMemcpyBytes: true,
	semconv.MetricNCCLDuration: true, semconv.MetricNCCLCalls: true,
	semconv.MetricThreadOffCPU: true, semconv.MetricThreadRunQueue: true,
	semconv.MetricThreadPreemptions: true, semconv.MetricThreadPreemptTime: true, semconv.MetricThreadPreemptors: true,
	semconv.MetricProcessForks: true, semconv.MetricProcessPageAllocs: true, semconv.MetricBlockIODuration: true,
	semconv.MetricRankTCPRetransmits: true, semconv.MetricRankLaunches: true, semconv.MetricRankDeviceWait: true,
}
