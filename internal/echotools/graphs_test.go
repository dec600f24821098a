package echotools

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/semconv"
)

// graphWindow is [t1+1h, t1+1h10m), apart from the process-activity window.
const graphWindow = `"since":"2026-03-01T10:00:00Z","until":"2026-03-01T10:10:00Z"`

// plantGraphActivity writes three processes' CUDA graph calls around graphWindow:
//
//	gpu-3 pid 500 (cumulative, vLLM-like, started in the window): 4 captures and
//	  instantiations in the same export as its first 10 launches, then 1000 more launches: no re-captures. It
//	  reports cuda.graph.launches and cudaGraphLaunch calls alike, counted once.
//	gpu-3 pid 600 (cumulative, replaying before the window): 400 launches, 3
//	  captures begun, 2 ended, 3 instantiations, all re-captures.
//	gpu-4 pid 700 (delta, no cuda.graph.launches): 2 instantiations before its first
//	  launch, 1 after; 110 launches (an instantiation before the window is not counted).
func plantGraphActivity(t *testing.T, env *Env) {
	t.Helper()
	calls := func(a *activity, at time.Duration, api string, v float64) {
		r := a.point(at+time.Hour, semconv.MetricCUDAAPICalls, "{call}", "sum", `,"cuda.library":"libcudart"`)
		r.API, r.Value = api, v
	}
	launches := func(a *activity, at time.Duration, v float64) {
		a.point(at+time.Hour, semconv.MetricCUDAGraphLaunches, "{launch}", "sum", "").Value = v
	}
	warm := &activity{node: "gpu-3", pid: 500, process: "vllm", rank: 3, temporal: "cumulative", start: time.Hour + 30*time.Second}
	for _, api := range []string{"cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaGraphInstantiate"} {
		calls(warm, m1, api, 4)
		calls(warm, m5, api, 4)
	}
	launches(warm, m1, 10)
	calls(warm, m1, "cudaGraphLaunch", 10)
	launches(warm, m5, 1010)
	calls(warm, m5, "cudaGraphLaunch", 1010)

	m6, m7 := 6*time.Minute, 7*time.Minute
	replaying := &activity{node: "gpu-3", pid: 600, process: "python", rank: 4, temporal: "cumulative", start: -time.Hour}
	launches(replaying, before, 500)
	launches(replaying, m1, 700)
	launches(replaying, m6, 900)
	calls(replaying, before, "cudaGraphInstantiate", 2)
	calls(replaying, m1, "cudaGraphInstantiate", 2)
	calls(replaying, m6, "cudaGraphInstantiate", 5)
	calls(replaying, before, "cudaStreamBeginCapture", 2)
	calls(replaying, m6, "cudaStreamBeginCapture", 5)
	calls(replaying, before, "cudaStreamEndCapture", 2)
	calls(replaying, m6, "cudaStreamEndCapture", 4)

	delta := &activity{node: "gpu-4", pid: 700, process: "python", rank: 5, temporal: "delta"}
	calls(delta, before, "cudaGraphInstantiate", 9)
	for _, api := range []string{"cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaGraphInstantiate"} {
		calls(delta, m1, api, 2)
		calls(delta, m7, api, 1)
	}
	calls(delta, m2, "cuGraphLaunch", 50)
	calls(delta, m7, "cudaGraphLaunch", 60)

	rows := append(append(warm.rows, replaying.rows...), delta.rows...)
	if err := env.Store.Append(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
}

func TestCUDAGraphActivityCountsRecapturesPerProcessAndBucket(t *testing.T) {
	env := plantedStore(t)
	plantGraphActivity(t, env)
	r, _ := NewRegistry(env)
	out := call[GraphActivityOutput](t, r, "cuda_graph_activity", `{`+graphWindow+`,"bucket":"5m"}`)
	if len(out.Processes) != 3 || out.Total != 3 || out.BucketS != 300 {
		t.Fatalf("got %d processes of %d, bucket %gs", len(out.Processes), out.Total, out.BucketS)
	}
	share := func(p GraphProcess) float64 {
		if p.RecaptureShare == nil {
			return -1
		}
		return *p.RecaptureShare
	}
	replaying, delta, warm := out.Processes[0], out.Processes[1], out.Processes[2]
	if replaying.PID != 600 || replaying.GraphCounts != (GraphCounts{400, 3, 2, 3, 3}) || share(replaying) != 1 ||
		replaying.LaunchSource != "cuda.graph.launches" || *replaying.Rank != 4 ||
		len(replaying.Buckets) != 2 ||
		replaying.Buckets[0] != (GraphBucket{"2026-03-01T10:00:00Z", GraphCounts{200, 0, 0, 0, 0}}) ||
		replaying.Buckets[1] != (GraphBucket{"2026-03-01T10:05:00Z", GraphCounts{200, 3, 2, 3, 3}}) {
		t.Errorf("replaying before the window: %+v", replaying)
	}
	if delta.PID != 700 || delta.GraphCounts != (GraphCounts{110, 3, 3, 3, 1}) || !near(share(delta), 1.0/3) ||
		delta.LaunchSource != "cuda.api.calls" || len(delta.Buckets) != 2 ||
		delta.Buckets[0].GraphCounts != (GraphCounts{50, 2, 2, 2, 0}) || delta.Buckets[1].GraphCounts != (GraphCounts{60, 1, 1, 1, 1}) {
		t.Errorf("delta process: %+v", delta)
	}
	if warm.PID != 500 || warm.GraphCounts != (GraphCounts{1010, 4, 4, 4, 0}) || share(warm) != 0 || warm.Process != "vllm" ||
		len(warm.Buckets) != 2 || warm.Buckets[1].GraphCounts != (GraphCounts{1000, 0, 0, 0, 0}) {
		t.Errorf("warm-up only: %+v", warm)
	}

	// The default bucket splits the window in 12; limit cuts the list, total does not.
	top := call[GraphActivityOutput](t, r, "cuda_graph_activity", `{`+graphWindow+`,"node":"gpu-3","limit":1}`)
	if top.BucketS != 50 || top.Total != 2 || len(top.Processes) != 1 || top.Processes[0].PID != 600 ||
		len(top.Processes[0].Buckets) != 2 || top.Processes[0].Buckets[1].Start != "2026-03-01T10:05:50Z" {
		t.Errorf("gpu-3, limit 1: %+v", top)
	}
	if _, err := r.Call(context.Background(), "cuda_graph_activity", []byte(`{`+graphWindow+`,"bucket":"1s"}`)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("600 buckets: %v, want ErrInvalidArgument", err)
	}
}
