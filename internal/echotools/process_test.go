package echotools

import (
	"context"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/echoschema"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// t1 is the start of the process-activity window, hours away from plantedStore's rows so
// that the two plantings never meet in one window.
var t1 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// processWindow is [t1, t1+10m).
const processWindow = `"since":"2026-03-01T09:00:00Z","until":"2026-03-01T09:10:00Z"`

// activity builds rows as the duckdb exporter stores the gpuebpf receiver's metrics: the
// process's resource attributes lifted into columns, the temporality member first in
// attributes, histograms as count/sum/max/p99. A cumulative point carries its series'
// start time, t1+start (when the receiver first saw the process), as the receiver
// sends it.
type activity struct {
	rows     []echoschema.Row
	node     string
	pid      int64
	process  string
	rank     int32
	temporal string
	start    time.Duration
}

func (a *activity) point(at time.Duration, name, unit, kind string, attrs string) *echoschema.Row {
	r := echoschema.NewRow()
	r.Time, r.Kind, r.Name, r.Unit = t1.Add(at), kind, name, unit
	r.Cluster, r.Node, r.PID, r.Process, r.Rank = "c1", a.node, a.pid, a.process, a.rank
	r.Attributes = `{"` + semconv.MetricTemporality + `":"` + a.temporal + `"` + attrs + `}`
	if a.temporal == "cumulative" {
		r.Start = t1.Add(a.start)
	}
	a.rows = append(a.rows, r)
	return &a.rows[len(a.rows)-1]
}

// sched adds one point of a thread's scheduler histogram (tid < 0: the "other" series).
func (a *activity) sched(at time.Duration, name string, tid int64, reason string, count int64, sum, maxV float64) {
	attrs := `,"fathom.thread.role":"cuda"`
	if tid < 0 {
		attrs = `,"fathom.thread.role":"other"`
	}
	if reason != "" {
		attrs += `,"fathom.off_cpu.reason":"` + reason + `"`
	}
	r := a.point(at, name, "s", echoschema.KindExpHistogram, attrs)
	r.ThreadID, r.Count, r.Sum, r.Max, r.Value = tid, count, sum, maxV, sum/float64(count)
	if tid < 0 {
		r.ThreadID = echoschema.Absent
	}
}

func (a *activity) runq(at time.Duration, tid, count int64, sum float64) {
	a.sched(at, semconv.MetricThreadRunQueue, tid, "", count, sum, sum)
}

func (a *activity) offCPU(at time.Duration, tid int64, reason string, count int64, sum, maxV float64) {
	a.sched(at, semconv.MetricThreadOffCPU, tid, reason, count, sum, maxV)
}

func (a *activity) sum(at time.Duration, name string, v float64, attrs string) {
	a.point(at, name, "1", echoschema.KindSum, attrs).Value = v
}

func (a *activity) latency(at time.Duration, name, unit, api string, p99 float64) {
	r := a.point(at, name, unit, echoschema.KindExpHistogram, "")
	r.API, r.Count, r.Sum, r.P99 = api, 10, p99, p99
}

const (
	before = -30 * time.Second // the lookback point of a cumulative series
	m1     = time.Minute
	m2     = 2 * time.Minute
	m3     = 3 * time.Minute
	m5     = 5 * time.Minute
	after  = 11 * time.Minute // outside the window: must not count
)

// plantProcessActivity writes four processes' host activity around [t1, t1+10m):
//
//	gpu-1 pid 100 (rank 1, cumulative): CUDA threads 101 (run-queue 0.5 before the
//	  window, 3.0 at its last point: 2.5 in it) and 102 (its series begins in the
//	  window, its start time says so: 0.5), so starvation 3.0; other threads 20 s of
//	  run-queue wait.
//	gpu-1 pid 200 (rank 0, delta): thread 201 waits 1.0+1.0+1.5 = 3.5 (a 100 s point
//	  before the window must not count).
//	gpu-2 pid 300 (rank 2, cumulative, restarted counters): begun in the window, 2 + 1,
//	  then a reset to 0.25 with a new start time: 3.25.
//	gpu-2 pid 400 (rank 3): CUDA latency only, starvation 0.
//
// So the ranking is 200, 300, 100, 400.
func plantProcessActivity(t *testing.T, env *Env) {
	t.Helper()
	a := &activity{node: "gpu-1", pid: 100, process: "python", rank: 1, temporal: "cumulative", start: -time.Hour}
	for _, p := range []struct {
		at          time.Duration
		runq        float64
		runqN       int64
		preN        int64
		preS, preM  float64
		volN        int64
		volS        float64
		forks, page float64
	}{
		{before, 0.5, 10, 10, 0.4, 0.05, 100, 5, 4, 1000},
		{m1, 1.5, 30, 25, 1.2, 0.05, 150, 7, 6, 1500},
		{m5, 3.0, 50, 40, 2.4, 0.2, 200, 9, 9, 4000},
		{after, 9, 70, 60, 9, 3, 300, 20, 50, 90000},
	} {
		a.runq(p.at, 101, p.runqN, p.runq)
		a.offCPU(p.at, 101, "preempted", p.preN, p.preS, p.preM)
		a.offCPU(p.at, 101, "voluntary", p.volN, p.volS, 0.3)
		a.sum(p.at, semconv.MetricProcessForks, p.forks, "")
		a.sum(p.at, semconv.MetricProcessPageAllocs, p.page, "")
	}
	a.start = 30 * time.Second // thread 102's series begin in the window
	a.runq(m1, 102, 5, 0.25)
	a.runq(m5, 102, 9, 0.5)
	a.offCPU(m1, 102, "preempted", 5, 0.25, 0.1)
	a.offCPU(m5, 102, "preempted", 9, 0.5, 0.1)
	a.start = -time.Hour
	for i, at := range []time.Duration{before, m1, m5} {
		a.runq(at, -1, int64(100*(i+1)), float64(10*(i+1)))
		a.offCPU(at, -1, "preempted", int64(100+50*i), float64(10+5*i), []float64{1, 1, 1.5}[i])
	}
	a.latency(m1, semconv.MetricCUDAAPIDuration, "s", "cudaStreamSynchronize", 0.02)
	a.latency(m5, semconv.MetricCUDAAPIDuration, "s", "cudaStreamSynchronize", 0.03)
	a.latency(m5, semconv.MetricCUDAAPIDuration, "s", "cudaLaunchKernel", 0.001)
	a.latency(after, semconv.MetricCUDAAPIDuration, "s", "cudaLaunchKernel", 9)
	a.latency(m5, semconv.MetricNCCLDuration, "ms", "all_reduce", 250)
	rows := a.rows

	b := &activity{node: "gpu-1", pid: 200, process: "python", rank: 0, temporal: "delta"}
	b.runq(before, 201, 10, 100)
	b.runq(m1, 201, 10, 1.0)
	b.runq(m2, 201, 10, 1.0)
	b.runq(m3, 201, 10, 1.5)
	b.offCPU(m1, 201, "preempted", 4, 0.8, 0.5)
	b.offCPU(m2, 201, "preempted", 4, 0.8, 0.3)
	b.offCPU(m3, 201, "preempted", 2, 0.4, 0.4)
	b.sum(before, semconv.MetricProcessForks, 40, "")
	b.sum(m1, semconv.MetricProcessForks, 1, "")
	b.sum(m2, semconv.MetricProcessForks, 2, "")
	rows = append(rows, b.rows...)

	c := &activity{node: "gpu-2", pid: 300, process: "torchrun", rank: 2, temporal: "cumulative", start: 30 * time.Second}
	c.runq(m1, 301, 10, 2)
	c.runq(m2, 301, 20, 3)
	c.start = m2 + 30*time.Second // the counters restarted
	c.runq(m3, 301, 5, 0.25)
	rows = append(rows, c.rows...)

	d := &activity{node: "gpu-2", pid: 400, process: "python", rank: 3, temporal: "cumulative", start: -time.Hour}
	d.latency(m2, semconv.MetricCUDAAPIDuration, "s", "cudaMemcpy", 0.004)
	rows = append(rows, d.rows...)

	if err := env.Store.Append(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
}

func TestProcessHostPressureTotalsBothTemporalitiesAndRanksByCPUWait(t *testing.T) {
	env := plantedStore(t)
	plantProcessActivity(t, env)
	r, err := NewRegistry(env)
	if err != nil {
		t.Fatal(err)
	}
	out := call[ProcessPressureOutput](t, r, "process_host_pressure", `{`+processWindow+`}`)
	var order []int64
	for _, p := range out.Processes {
		order = append(order, p.PID)
	}
	if len(order) != 4 || order[0] != 200 || order[1] != 300 || order[2] != 100 || order[3] != 400 || out.NextPageToken != "" {
		t.Fatalf("ranking %v (token %q), want [200 300 100 400]", order, out.NextPageToken)
	}

	// Delta: every point in the window adds itself; the one before does not.
	b := out.Processes[0]
	if b.Position != 1 || b.Node != "gpu-1" || *b.Rank != 0 || !near(b.StarvationS, 3.5) ||
		b.CUDAThreads.PreemptedSwitches != 10 || !near(b.CUDAThreads.PreemptedOffCPUS, 2.0) ||
		!near(*b.CUDAThreads.LongestStallS, 0.5) || b.Forks != 3 || len(b.Threads) != 1 || b.Threads[0].ThreadID != 201 {
		t.Errorf("delta process: %+v", b)
	}
	// A counter reset: the point after it adds itself whole.
	if c := out.Processes[1]; !near(c.StarvationS, 3.25) || c.Node != "gpu-2" || c.Process != "torchrun" {
		t.Errorf("reset process: %+v", c)
	}

	a := out.Processes[2]
	// Cumulative: the last point minus the one before the window (thread 101: 3.0-0.5),
	// plus a series that began inside it whole (thread 102: 0.5).
	if !near(a.StarvationS, 3.0) || !near(a.CUDAThreads.RunQueueWaitS, 3.0) || *a.Rank != 1 || a.Cluster != "c1" {
		t.Errorf("cumulative process score: %+v", a)
	}
	cuda := a.CUDAThreads
	// Preempted: 101 adds 40-10 switches and 2.4-0.4 s, 102 adds 9 and 0.5. Voluntary:
	// 101 only, 200-100 and 9-5. The longest stall: 101's max rose to 0.2 inside the
	// window; its voluntary max stayed at 0.3 from before it, so it is not this window's.
	if cuda.PreemptedSwitches != 39 || !near(cuda.PreemptedOffCPUS, 2.5) || cuda.VoluntarySwitches != 100 ||
		!near(cuda.VoluntaryOffCPUS, 4) || !near(*cuda.LongestStallS, 0.2) {
		t.Errorf("cumulative CUDA threads: %+v (stall %v)", cuda, *cuda.LongestStallS)
	}
	other := a.OtherThreads
	if !near(other.RunQueueWaitS, 20) || other.PreemptedSwitches != 100 || !near(other.PreemptedOffCPUS, 10) ||
		!near(*other.LongestStallS, 1.5) || other.VoluntarySwitches != 0 {
		t.Errorf("other threads: %+v", other)
	}
	if a.Forks != 5 || a.PageAllocs != 3000 || !near(*a.CUDAP99S, 0.03) || a.CUDAP99API != "cudaStreamSynchronize" ||
		!near(*a.NCCLP99S, 0.25) || a.NCCLP99Op != "all_reduce" {
		t.Errorf("cumulative process counters and latency: %+v", a)
	}
	if len(a.Threads) != 2 || a.Threads[0].ThreadID != 101 || !near(a.Threads[0].RunQueueWaitS, 2.5) ||
		a.Threads[1].ThreadID != 102 || !near(a.Threads[1].RunQueueWaitS, 0.5) || a.Threads[1].PreemptedSwitches != 9 ||
		!near(*a.Threads[1].LongestStallS, 0.1) {
		t.Errorf("threads: %+v", a.Threads)
	}
	if d := out.Processes[3]; d.StarvationS != 0 || !near(*d.CUDAP99S, 0.004) || len(d.Threads) != 0 || d.CUDAThreads.LongestStallS != nil {
		t.Errorf("latency-only process: %+v", d)
	}
}

func TestProcessHostPressurePagesKeepTheRankingAndTheWindow(t *testing.T) {
	env := plantedStore(t)
	plantProcessActivity(t, env)
	r, _ := NewRegistry(env)
	page1 := call[ProcessPressureOutput](t, r, "process_host_pressure", `{`+processWindow+`,"limit":2}`)
	if len(page1.Processes) != 2 || page1.Processes[0].PID != 200 || page1.Processes[1].PID != 300 || page1.NextPageToken == "" {
		t.Fatalf("page 1: %+v", page1)
	}
	// The token carries the window: a since/until that would find nothing is ignored.
	page2 := call[ProcessPressureOutput](t, r, "process_host_pressure",
		`{"since":"1h","until":"2020-01-01T00:00:00Z","limit":2,"page_token":"`+page1.NextPageToken+`"}`)
	if len(page2.Processes) != 2 || page2.Processes[0].PID != 100 || page2.Processes[0].Position != 3 ||
		page2.Processes[1].PID != 400 || page2.Processes[1].Position != 4 || page2.NextPageToken != "" ||
		page2.Since != "2026-03-01T09:00:00Z" {
		t.Fatalf("page 2: %+v", page2)
	}
	onNode := call[ProcessPressureOutput](t, r, "process_host_pressure", `{`+processWindow+`,"node":"gpu-1","rank":1}`)
	if len(onNode.Processes) != 1 || onNode.Processes[0].PID != 100 || !near(onNode.Processes[0].StarvationS, 3.0) {
		t.Fatalf("node gpu-1 rank 1: %+v", onNode)
	}
	if _, err := r.Call(context.Background(), "process_host_pressure", []byte(`{"page_token":"bm90IGEgdG9rZW4"}`)); err == nil {
		t.Fatal("a forged page token was accepted")
	}
}
