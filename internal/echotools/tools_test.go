package echotools

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/echoschema"
	"github.com/fathom-gpu/fathom/internal/echostore"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/echostoretest"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// plantedStore is the tools over echostoretest's planted store (8 nodes of cluster c1,
// gpu-5 2.5x slower than its peers), priced at $4 per H100 hour on aws, half an hour
// after the rows began.
func plantedStore(t *testing.T) *Env {
	t.Helper()
	st := echostoretest.Planted(t, t0)
	ratesPath := filepath.Join(t.TempDir(), "rates.yaml")
	if err := os.WriteFile(ratesPath, []byte("rates:\n  - {provider: aws, gpu_model: H100, usd_per_gpu_hour: 4}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rates, err := LoadRates(ratesPath)
	if err != nil {
		t.Fatal(err)
	}
	return &Env{
		Store:     st,
		SQLLimits: echostore.QueryLimits{MaxRows: 100, MaxBytes: 1 << 20, Timeout: 2 * time.Second},
		SQLSlots:  make(chan struct{}, 1),
		Rates:     rates,
		Now:       func() time.Time { return t0.Add(30 * time.Minute) },
	}
}

// get_stacks ranks the planted stacks by time and by count, with each stack's calls,
// total, p50 and p99 computed over its own calls only.
func TestGetStacksRanksThePlantedStacks(t *testing.T) {
	r, err := NewRegistry(plantedStore(t))
	if err != nil {
		t.Fatal(err)
	}
	byTime := call[StacksOutput](t, r, "get_stacks", `{"node":"gpu-1"}`)
	if byTime.By != "time" || len(byTime.Stacks) != 2 {
		t.Fatalf("by time: %+v", byTime)
	}
	loop, forward := byTime.Stacks[0], byTime.Stacks[1]
	if loop.StackID != "a1b2c3d4e5f60002" || loop.Function != "main" || loop.File != "/job/train.py" || loop.Line != 59 ||
		loop.Calls != 40 || !near(loop.TotalSeconds, 4) || !near(loop.P50Seconds, 0.1) || !near(loop.P99Seconds, 0.1) ||
		loop.API != "cudaStreamSynchronize" || *loop.Rank != 1 || *loop.PID != 4242 || loop.Process != "python3.11" || loop.Frames != "main (/job/train.py:59)" {
		t.Errorf("first by time: %+v", loop)
	}
	// 1..60 ms: sum 1.83 s; p50 30.5 ms; p99 interpolated at 0.99 * 59 = 58.41 places
	// past the first: 59.41 ms.
	if forward.StackID != "a1b2c3d4e5f60001" || forward.Function != "Net.forward" || forward.Line != 33 || forward.Calls != 60 ||
		math.Abs(forward.TotalSeconds-1.83) > 1e-9 || math.Abs(forward.P50Seconds-0.0305) > 1e-9 || math.Abs(forward.P99Seconds-0.05941) > 1e-9 {
		t.Errorf("second by time: %+v", forward)
	}
	byCount := call[StacksOutput](t, r, "get_stacks", `{"node":"gpu-1","by":"count","limit":1}`)
	if byCount.By != "count" || len(byCount.Stacks) != 1 || byCount.Stacks[0].StackID != "a1b2c3d4e5f60001" {
		t.Errorf("by count, limit 1: %+v", byCount)
	}
	if none := call[StacksOutput](t, r, "get_stacks", `{"api":"cudaMemcpy"}`); len(none.Stacks) != 0 {
		t.Errorf("cudaMemcpy has no stacks: %+v", none)
	}
	if _, err := r.Call(context.Background(), "get_stacks", json.RawMessage(`{"by":"luck"}`)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("by luck: %v, want an invalid argument", err)
	}
}

func call[Out any](t *testing.T, r *Registry, name, args string) Out {
	t.Helper()
	res, err := r.Call(context.Background(), name, json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s(%s): %v", name, args, err)
	}
	return res.(Out)
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestFindOutlierNodesRanksThePlantedStraggler(t *testing.T) {
	r, err := NewRegistry(plantedStore(t))
	if err != nil {
		t.Fatal(err)
	}
	out := call[OutlierOutput](t, r, "find_outlier_nodes", `{"signal":"nccl.allreduce.duration","cluster":"c1"}`)
	if out.Groups != 8 || !near(out.Median, 10.1) || !near(out.MAD, 0.3) || len(out.Outliers) != 1 {
		t.Fatalf("got %+v", out)
	}
	o := out.Outliers[0]
	if o.Node != "gpu-5" || !near(o.Lag, 14.9) || o.Points != 100 || !near(o.Score, 14.9/(1.4826*0.3)) {
		t.Fatalf("outlier %+v", o)
	}
	byRank := call[OutlierOutput](t, r, "find_outlier_nodes", `{"signal":"nccl.allreduce.duration","by":"rank","k":1}`)
	if len(byRank.Outliers) != 2 || *byRank.Outliers[0].Rank != 5 || *byRank.Outliers[1].Rank != 2 {
		t.Fatalf("by rank with k=1: %+v", byRank.Outliers)
	}
}

func TestGetCostPricesLagTimesRanksTimesRate(t *testing.T) {
	r, _ := NewRegistry(plantedStore(t))
	out := call[CostOutput](t, r, "get_cost", `{"signal":"nccl.allreduce.duration"}`)
	// 14.9 ms lag x 100 steps x 8 ranks = 11.92 GPU-seconds; at $4/GPU-hour.
	wantHours := 0.0149 * 100 * 8 / 3600
	if len(out.Stragglers) != 1 || !near(out.TotalHours, wantHours) || !near(out.TotalUSD, wantHours*4) ||
		len(out.ByGroup) != 1 || out.ByGroup[0].Provider != "aws" || out.ByGroup[0].GPUModel != "H100" || out.Stragglers[0].AffectedRanks != 8 {
		t.Fatalf("got %+v", out)
	}
}

// With fathom.straggler.time_lost, get_cost prices what the straggler processor wrote:
// per rank, the GPU time its peers waited while it was flagged, at the rate of the
// hardware its node's rank signals name. Rank 5 was flagged for 8 intervals at 1.407
// GPU-seconds each among 8 ranks; rank 2 for 2 at 0.5, on hardware with no rate.
func TestGetCostPricesTheStragglerProcessorsTimeLost(t *testing.T) {
	env := plantedStore(t)
	var rows []echoschema.Row
	lost := func(node string, rank int32, n int, v float64) {
		for i := range n {
			r := echoschema.NewRow()
			r.Time = t0.Add(time.Duration(i) * time.Second)
			r.Kind, r.Name, r.Unit, r.Value = echoschema.KindSum, semconv.MetricStragglerTimeLost, "s", v
			r.Cluster, r.Node, r.Rank, r.WorldSize = "c1", node, rank, 8
			r.Attributes = `{"fathom.straggler.signal":"fathom.rank.device_wait.time","fathom.cohort":"nccl:1"}`
			rows = append(rows, r)
		}
		r := echoschema.NewRow()
		r.Time = t0
		r.Kind, r.Name, r.Unit, r.Value = echoschema.KindSum, semconv.MetricRankDeviceWait, "s", 1
		r.Cluster, r.Node, r.Rank = "c1", node, rank
		r.Attributes = map[string]string{"gpu-5": `{"cloud.provider":"aws","fathom.gpu.model":"H100"}`, "gpu-2": `{"cloud.provider":"gcp","fathom.gpu.model":"A100"}`}[node]
		rows = append(rows, r)
	}
	lost("gpu-5", 5, 8, 1.407)
	lost("gpu-2", 2, 2, 0.5)
	if err := env.Store.Append(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	r, _ := NewRegistry(env)
	out := call[CostOutput](t, r, "get_cost", `{"signal":"fathom.straggler.time_lost"}`)
	if len(out.Stragglers) != 2 || !near(out.TotalHours, (8*1.407+2*0.5)/3600) || !near(out.TotalUSD, 8*1.407/3600*4) {
		t.Fatalf("got %+v", out)
	}
	s5, s2 := out.Stragglers[0], out.Stragglers[1]
	if s5.Node != "gpu-5" || s5.Rank == nil || *s5.Rank != 5 || s5.Steps != 8 || s5.AffectedRanks != 7 || !near(s5.LagSeconds, 0.201) ||
		s5.Provider != "aws" || s5.GPUModel != "H100" || s5.USDPerGPUHour != 4 || !near(s5.GPUHours, 8*1.407/3600) {
		t.Errorf("rank 5: %+v", s5)
	}
	if s2.Node != "gpu-2" || *s2.Rank != 2 || s2.Steps != 2 || s2.Provider != "gcp" || s2.USD != 0 {
		t.Errorf("rank 2: %+v", s2)
	}
	if len(out.Notes) != 1 || !strings.Contains(out.Notes[0], `no rate for provider "gcp" GPU "A100" (node gpu-2)`) {
		t.Errorf("notes %q", out.Notes)
	}
	if len(out.ByGroup) != 2 || out.ByGroup[0].Provider != "aws" || out.ByGroup[0].Stragglers != 1 {
		t.Errorf("groups %+v", out.ByGroup)
	}
	none := call[CostOutput](t, r, "get_cost", `{"signal":"fathom.straggler.time_lost","cluster":"other"}`)
	if len(none.Stragglers) != 0 || none.TotalHours != 0 || len(none.Notes) != 1 {
		t.Errorf("another cluster: %+v", none)
	}
}

func TestTraceStatsEventHistoryChainsSummary(t *testing.T) {
	r, _ := NewRegistry(plantedStore(t))
	ts := call[TraceStatsOutput](t, r, "get_trace_stats", `{"api":"cudaMemcpy"}`)
	// From the rollup's log buckets: within 2.2% (one bucket) of the exact 50.5, 95.05
	// and 99.01.
	within := func(got, want float64) bool { return math.Abs(got-want)/want < 0.022 }
	if len(ts.Stats) != 1 || ts.Stats[0].Calls != 100 || !within(ts.Stats[0].P50, 50.5) || !within(ts.Stats[0].P95, 95.05) || !within(ts.Stats[0].P99, 99.01) {
		t.Fatalf("trace stats %+v", ts)
	}

	page1 := call[EventHistoryOutput](t, r, "event_history", `{"node":"gpu-5","name":"nccl.*","limit":60}`)
	if len(page1.Events) != 60 || page1.NextPageToken == "" || page1.Events[0].Value == nil || *page1.Events[0].Value != 25 {
		t.Fatalf("page 1: %d events, token %q", len(page1.Events), page1.NextPageToken)
	}
	page2 := call[EventHistoryOutput](t, r, "event_history", `{"node":"gpu-5","name":"nccl.*","limit":60,"page_token":"`+page1.NextPageToken+`"}`)
	if len(page2.Events) != 40 || page2.NextPageToken != "" || page2.Events[0].Time >= page1.Events[59].Time {
		t.Fatalf("page 2: %d events, token %q", len(page2.Events), page2.NextPageToken)
	}

	chains := call[CausalChainsOutput](t, r, "get_causal_chains", `{"cluster":"c1"}`)
	if len(chains.Chains) != 3 || chains.ByRootCause["run_queue_wait"] != 2 || chains.Chains[0].RootCause != "run_queue_wait" ||
		chains.Chains[0].Fix != "pin the data loader" || chains.Chains[0].Attributes["extra"] != float64(1) {
		t.Fatalf("chains %+v", chains)
	}

	sum := call[ClusterSummaryOutput](t, r, "cluster_summary", `{}`)
	c := sum.Clusters[0]
	if len(sum.Clusters) != 1 || c.Nodes != 8 || c.Ranks != 8 || c.Rows != 1004 || c.CausalChains != 3 || c.Errors != 3 ||
		c.TopSignals[0] != (SignalCount{"nccl.allreduce.duration", 800}) {
		t.Fatalf("summary %+v", sum)
	}
}

func TestBadArgumentsAreValidationErrors(t *testing.T) {
	r, _ := NewRegistry(plantedStore(t))
	for name, args := range map[string]string{
		"find_outlier_nodes": `{"signal":"x","by":"rack"}`,
		"event_history":      `{"limit":5000}`,
		"get_trace_stats":    `{"since":"yesterday"}`,
		"cluster_summary":    `{"since":"2026-03-02T00:00:00Z","until":"2026-03-01T00:00:00Z"}`,
		"get_causal_chains":  `{"unknown_field":1}`,
		"run_analysis":       `{}`,
		"get_cost":           `[1,2]`,
	} {
		if _, err := r.Call(context.Background(), name, json.RawMessage(args)); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s(%s): got %v, want ErrInvalidArgument", name, args, err)
		}
	}
	if _, err := r.Call(context.Background(), "drop_everything", nil); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("unknown tool: %v", err)
	}
}

func TestRunAnalysisConcurrencyCap(t *testing.T) {
	env := plantedStore(t)
	r, _ := NewRegistry(env)
	res := call[echostore.QueryResult](t, r, "run_analysis", `{"sql":"SELECT count(*) FROM events"}`)
	if res.Rows[0][0] != int64(1004) {
		t.Fatalf("count: %v", res.Rows)
	}
	env.SQLSlots <- struct{}{} // the only slot is taken
	if _, err := r.Call(context.Background(), "run_analysis", json.RawMessage(`{"sql":"SELECT 1"}`)); !errors.Is(err, ErrBusy) {
		t.Fatalf("with no free slot: %v, want ErrBusy", err)
	}
}

// A chain written three times (open, update, resolved) is one chain, answered by its
// latest record; by default only chains still open come back.
func TestCausalChainsAnswerEachChainsLatestRecord(t *testing.T) {
	env := plantedStore(t)
	var rows []echoschema.Row
	chain := func(at time.Duration, id, state, severity, cause string) {
		r := echoschema.NewRow()
		r.Time = t0.Add(20*time.Minute + at)
		r.Kind, r.Name, r.Cluster, r.Node, r.Rank = echoschema.KindLog, echoschema.EventCausalChain, "c2", "gpu-3", 3
		r.Attributes = `{"fathom.chain.id":"` + id + `","fathom.chain.state":"` + state + `","fathom.chain.severity":"` + severity +
			`","fathom.chain.root_cause":"` + cause + `","fathom.chain.fix":"pin it","fathom.chain.cost":0.4}`
		rows = append(rows, r)
	}
	chain(0, "a1", "open", "MEDIUM", "cpu_contention")
	chain(2*time.Second, "a1", "update", "HIGH", "cpu_contention")
	chain(4*time.Second, "b2", "open", "LOW", "io_stall")
	chain(9*time.Second, "b2", "resolved", "LOW", "io_stall")
	if err := env.Store.Append(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	r, _ := NewRegistry(env)
	since := t0.Add(19 * time.Minute).Format(time.RFC3339)
	open := call[CausalChainsOutput](t, r, "get_causal_chains", `{"cluster":"c2","since":"`+since+`"}`)
	if len(open.Chains) != 1 || open.Chains[0].ID != "a1" || open.Chains[0].State != "update" || open.Chains[0].Severity != "HIGH" ||
		open.Chains[0].Attributes["fathom.chain.cost"] != 0.4 || open.ByRootCause["cpu_contention"] != 1 {
		t.Fatalf("open chains: %+v", open)
	}
	all := call[CausalChainsOutput](t, r, "get_causal_chains", `{"cluster":"c2","since":"`+since+`","include_resolved":true}`)
	if len(all.Chains) != 2 || all.Chains[0].ID != "b2" || all.Chains[0].State != "resolved" || all.Chains[1].ID != "a1" {
		t.Fatalf("all chains: %+v", all)
	}
}
