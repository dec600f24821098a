//go:build linux

package gpuebpfreceiver_test

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// deltaSeries is one series of one process summed over every export, with the time
// windows its points covered.
type deltaSeries struct {
	total      int64  // sums: the points' values added up
	count      uint64 // histograms: the points' counts added up
	points     int
	nonZero    int
	windows    [][2]pcommon.Timestamp // (start, time) of each point, in export order
	cumulative bool                   // some point was not delta
}

// deltaView folds pid's delta points from every export.
func deltaView(sink *collectortest.Sink, pid int) map[string]*deltaSeries {
	out := map[string]*deltaSeries{}
	add := func(key string, start, now pcommon.Timestamp, temporality pmetric.AggregationTemporality) *deltaSeries {
		s := out[key]
		if s == nil {
			s = &deltaSeries{}
			out[key] = s
		}
		s.points++
		s.windows = append(s.windows, [2]pcommon.Timestamp{start, now})
		s.cumulative = s.cumulative || temporality != pmetric.AggregationTemporalityDelta
		return s
	}
	eachMetric(sink, func(p int64, _ pcommon.Map, m pmetric.Metric) {
		if p != int64(pid) {
			return
		}
		switch m.Type() {
		case pmetric.MetricTypeSum:
			for k := 0; k < m.Sum().DataPoints().Len(); k++ {
				dp := m.Sum().DataPoints().At(k)
				s := add(seriesKey(m.Name(), dp.Attributes()), dp.StartTimestamp(), dp.Timestamp(), m.Sum().AggregationTemporality())
				s.total += dp.IntValue()
				if dp.IntValue() != 0 {
					s.nonZero++
				}
			}
		case pmetric.MetricTypeExponentialHistogram:
			for k := 0; k < m.ExponentialHistogram().DataPoints().Len(); k++ {
				dp := m.ExponentialHistogram().DataPoints().At(k)
				s := add(seriesKey(m.Name(), dp.Attributes()), dp.StartTimestamp(), dp.Timestamp(), m.ExponentialHistogram().AggregationTemporality())
				s.count += dp.Count()
				if dp.Count() != 0 {
					s.nonZero++
				}
			}
		}
	})
	return out
}

// With temporality: delta, each export carries what happened since the one before:
// the points of a run spread over many exports add up to exactly the workload's
// counts and bytes, and their windows follow one another without overlapping.
func TestDeltaTemporalityAddsUpToTheWorkload(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	// Ten steps 150 ms apart: the calls fall into several 200 ms intervals.
	w := fakegpu.Start(t, paths, fakegpu.Options{
		Gate: true, Steps: 10, StepGap: 150 * time.Millisecond, Launches: 2000, H2D: 50, H2DBytes: 1 << 20, Syncs: 20,
	})
	sink, col := startNodeCollector(t, nodeConfig("collection_interval: 200ms\ntemporality: delta", false))
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	report, err := w.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	launches := seriesKey(semconv.MetricCUDAAPICalls, attrs("cuda.api.name", "cudaLaunchKernel", "cuda.library", "libcudart"))
	var v map[string]*deltaSeries
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if v = deltaView(sink, w.Pid); v[launches] != nil && v[launches].total == report.Calls["cudaLaunchKernel"] {
			break
		}
	}
	// A process's series end with the export that follows its exit; let it pass.
	time.Sleep(time.Second)
	v = deltaView(sink, w.Pid)
	if v[launches] == nil {
		t.Fatalf("no launch series for pid %d; exported pids %v", w.Pid, exportedPIDs(sink))
	}

	h2d := seriesKey(semconv.MetricCUDAAPICalls, attrs("cuda.api.name", "cudaMemcpy", "cuda.library", "libcudart", "cuda.memcpy.direction", "host_to_device"))
	h2dBytes := seriesKey(semconv.MetricCUDAMemcpyBytes, attrs("cuda.api.name", "cudaMemcpy", "cuda.memcpy.direction", "host_to_device"))
	launchDurations := seriesKey(semconv.MetricCUDAAPIDuration, attrs("cuda.api.name", "cudaLaunchKernel", "cuda.library", "libcudart"))
	for key, want := range map[string]int64{launches: 2000, h2d: 50, h2dBytes: 50 << 20} {
		s := v[key]
		if s == nil {
			t.Errorf("no series %s", key)
			continue
		}
		if s.total != want {
			t.Errorf("%s: deltas add up to %d over %d points, want %d", key, s.total, s.points, want)
		}
	}
	if got := report.Calls["cudaLaunchKernel"]; got != 2000 || report.Bytes.H2D != 50<<20 {
		t.Errorf("the workload made %d launches and copied %d bytes to the device", got, report.Bytes.H2D)
	}
	if s := v[launchDurations]; s == nil || s.count != 2000 {
		t.Errorf("launch duration histograms: %+v, want counts adding up to 2000", s)
	}
	// Ten steps over about 1.5 s: the launches must have been spread, not sent once.
	if s := v[launches]; s.nonZero < 3 {
		t.Errorf("launches came in %d non-zero points; the run spanned several intervals", s.nonZero)
	}
	for key, s := range v {
		if s.cumulative {
			t.Errorf("%s: a point was not delta", key)
		}
		for i, win := range s.windows {
			if win[0] >= win[1] {
				t.Errorf("%s point %d: start %v not before %v", key, i, win[0], win[1])
			}
			if i > 0 && win[0] < s.windows[i-1][1] {
				t.Errorf("%s point %d: starts at %v, inside the previous window ending %v", key, i, win[0], s.windows[i-1][1])
			}
		}
	}

	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}
