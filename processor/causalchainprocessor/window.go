package causalchainprocessor

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/expohisto"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/series"
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

// windowSeries turns one cumulative (or delta) stream into per-interval deltas, and
// keeps those of the last window.
type windowSeries struct {
	sum       series.Cumulative
	histogram series.CumulativeHistogram
	deltas    []delta
	// seen is the end of the last interval that carried a point of this series.
	seen time.Time
}

// keepDeltas drops what ended before from, and the oldest beyond max.
func (s *windowSeries) keepDeltas(from time.Time, max int) {
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

// addSum records a monotonic sum's point: what it added (series.Cumulative), and false
// when it added nothing countable. horizon is when the processor began watching.
func (s *windowSeries) addSum(v float64, start, ts pcommon.Timestamp, cumulative bool, horizon int64) (float64, bool) {
	if !cumulative {
		return v, true
	}
	inc, ok := s.sum.Add(series.Mark{Start: int64(start), Time: int64(ts), Total: v}, horizon)
	return inc.Value, ok
}

// addHistogram records an exponential histogram's point as the buckets it gained
// (series.CumulativeHistogram); false when it is not on the receiver's scale or added
// nothing countable.
func (s *windowSeries) addHistogram(dp pmetric.ExponentialHistogramDataPoint, cumulative bool, horizon int64) (*expohisto.Histogram, bool) {
	if dp.Scale() != expohisto.Scale {
		return nil, false
	}
	pos := dp.Positive()
	b := series.Buckets{Offset: pos.Offset(), Counts: pos.BucketCounts().AsRaw(), Zero: dp.ZeroCount(), Sum: dp.Sum()}
	if cumulative {
		var ok bool
		if b, _, ok = s.histogram.Add(int64(dp.StartTimestamp()), int64(dp.Timestamp()), b, horizon); !ok {
			return nil, false
		}
	}
	h := &expohisto.Histogram{}
	h.AddBuckets(b.Offset, b.Counts, b.Sum)
	h.ZeroCount, h.Count = b.Zero, h.Count+b.Zero
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
	case semconv.MetricThreadBlockedTime, semconv.MetricThreadBlocks, semconv.MetricThreadWakerThreads:
		if str(semconv.ThreadRole) != "cuda" {
			return seriesKey{}
		}
		if v, ok := attrs.Get(semconv.ThreadID); ok {
			k.tid = v.Int()
		}
		k.name, k.attr = str(semconv.WakerName), str(semconv.BlockedOn)
		if v, ok := attrs.Get(semconv.WakerSelf); ok {
			k.self = v.Bool()
		}
		return k
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
	semconv.MetricThreadBlockedTime: true, semconv.MetricThreadBlocks: true, semconv.MetricThreadWakerThreads: true,
	semconv.MetricProcessForks: true, semconv.MetricProcessPageAllocs: true, semconv.MetricBlockIODuration: true,
	semconv.MetricRankTCPRetransmits: true, semconv.MetricRankLaunches: true, semconv.MetricRankDeviceWait: true,
}
