package echotools

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/echoschema"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/traceenginetest"
	"github.com/fathom-gpu/fathom/internal/timeline"
)

var tl0 = time.Date(2026, 3, 1, 6, 0, 0, 0, time.UTC)

const timelineWindow = `"since":"2026-03-01T06:00:00Z","until":"2026-03-01T06:10:00Z"`

// plantTimeline writes, hours before plantedStore's rows, what get_timeline draws: two
// nodes of two ranks, 14 CUDA call records on five threads, a communicator setup, the
// all_reduce of sequences 10 and 11 on all four ranks and 12 on rank 0 alone, rank 3
// flagged on two signals whose flags overlap (and a node's own record, not drawn), two
// causal chains (one written twice), and a thread's off-CPU time over two intervals.
func plantTimeline(t *testing.T, env *Env) {
	t.Helper()
	type thread struct {
		node          string
		rank          int32
		pid, tid      int64
		syncs, starts int // CUDA calls recorded
	}
	threads := []thread{
		{"node-a", 0, 100, 100, 3, 0}, {"node-a", 0, 100, 101, 0, 2}, {"node-a", 1, 200, 200, 3, 0},
		{"node-b", 2, 300, 300, 3, 0}, {"node-b", 3, 400, 400, 3, 0},
	}
	var rows []echoschema.Row
	record := func(at time.Duration, th thread, name string, attrs map[string]any, body string) echoschema.Row {
		r := echoschema.NewRow()
		r.Time, r.Kind, r.Name = tl0.Add(at), echoschema.KindLog, name
		r.Cluster, r.Node, r.Rank, r.PID, r.Process, r.ThreadID = "c1", th.node, th.rank, th.pid, "train", th.tid
		raw, _ := json.Marshal(attrs)
		r.Attributes, r.Body = string(raw), body
		return r
	}
	for i, th := range threads {
		for j := range th.syncs {
			r := record(time.Duration(i)*time.Minute+time.Duration(j)*time.Second, th, semconv.EventCUDACall,
				map[string]any{semconv.DurationSeconds: float64(j+1) / 1000, semconv.NotableReason: "outlier"}, "cudaStreamSynchronize took long")
			r.API = "cudaStreamSynchronize"
			rows = append(rows, r)
		}
		for j := range th.starts {
			r := record(time.Duration(i)*time.Minute+time.Duration(j)*time.Second, th, semconv.EventCUDACall,
				map[string]any{semconv.DurationSeconds: 0.0005, semconv.NotableReason: "sample"}, "")
			r.API = "cudaLaunchKernel"
			rows = append(rows, r)
		}
		if th.tid == th.pid { // each rank's main thread calls NCCL
			for _, seq := range []int64{10, 11, 12} {
				if seq == 12 && th.rank != 0 {
					continue
				}
				// Rank r enters each collective r ms after rank 0.
				at := 5*time.Minute + time.Duration(seq)*time.Second + time.Duration(th.rank)*time.Millisecond
				r := record(at, th, semconv.EventNCCLCollective, map[string]any{semconv.NCCLSeq: seq, semconv.DurationSeconds: 0.004, semconv.NotableReason: "sampled"}, "")
				r.API, r.CommID = "all_reduce", "c0ffee"
				rows = append(rows, r)
			}
		}
	}
	setup := record(4*time.Minute, threads[0], semconv.EventNCCLCall, map[string]any{semconv.DurationSeconds: 0.2, semconv.NotableReason: "communicator"}, "")
	setup.API, setup.CommID = "comm_init_rank", "c0ffee"
	rows = append(rows, setup)

	flag := func(at time.Duration, rank int32, signal, state, source string, since time.Time, body string) echoschema.Row {
		r := record(at, thread{node: "node-b", rank: rank, pid: echoschema.Absent, tid: echoschema.Absent}, semconv.EventStraggler, map[string]any{
			semconv.StragglerSignal: signal, semconv.StragglerState: state, semconv.StragglerSource: source,
			semconv.StragglerSince: since.Format(time.RFC3339Nano)}, body)
		r.Process = ""
		return r
	}
	rows = append(rows,
		flag(2*time.Minute, 3, "fathom.rank.arrival_lag", "straggler", "gateway", tl0.Add(110*time.Second), "rank 3 is a straggler in lag"),
		flag(3*time.Minute, 3, "fathom.rank.device_wait.time", "straggler", "gateway", tl0.Add(3*time.Minute), "rank 3 is a straggler in wait"),
		flag(4*time.Minute, 3, "fathom.rank.arrival_lag", "straggler", "gateway", tl0.Add(110*time.Second), "still"),
		flag(5*time.Minute, 3, "fathom.rank.arrival_lag", "resolved", "gateway", time.Time{}, "rank 3 is back"),
		flag(2*time.Minute, 2, "fathom.rank.arrival_lag", "straggler", "node", tl0.Add(110*time.Second), "node's own judgement"),
	)
	chain := func(at time.Duration, th thread, id, evidence string) echoschema.Row {
		return record(at, th, echoschema.EventCausalChain, map[string]any{
			semconv.ChainID: id, semconv.ChainRootCause: "cpu_contention", semconv.ChainSeverity: "MEDIUM", semconv.ChainState: "open",
			semconv.ChainFix: "pin the thread", semconv.ChainEvidence: evidence, semconv.ChainSymptom: "cudaStreamSynchronize p99 up",
		}, "")
	}
	rankOnly := thread{node: "node-b", rank: 3, pid: echoschema.Absent, tid: echoschema.Absent}
	rows = append(rows,
		chain(3*time.Minute, threads[0], "ch1", "waited 100 ms"),
		chain(4*time.Minute, threads[0], "ch1", "waited 250 ms"),
		chain(6*time.Minute, rankOnly, "ch2", "rank 3 waited"),
	)
	// Off-CPU of thread 100 as delta histograms: 0.5 s then 1 s preempted over two
	// 10 s intervals, 2 s voluntary in the first.
	for _, p := range []struct {
		from   time.Duration
		reason string
		sum    float64
	}{{0, "preempted", 0.5}, {10 * time.Second, "preempted", 1}, {0, "voluntary", 2}} {
		r := echoschema.NewRow()
		r.Start, r.Time = tl0.Add(p.from), tl0.Add(p.from+10*time.Second)
		r.Kind, r.Name, r.Unit = echoschema.KindHistogram, semconv.MetricThreadOffCPU, "s"
		r.Cluster, r.Node, r.Rank, r.PID, r.Process, r.ThreadID = "c1", "node-a", 0, 100, "train", 100
		r.Count, r.Sum, r.Value = 3, p.sum, p.sum/3
		raw, _ := json.Marshal(map[string]any{semconv.MetricTemporality: "delta", semconv.ThreadRole: "cuda", semconv.OffCPUReason: p.reason})
		r.Attributes = string(raw)
		rows = append(rows, r)
	}
	if err := env.Store.Append(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
}

func callTimeline(t *testing.T, r *Registry, args string) timeline.Trace {
	t.Helper()
	res, err := r.Call(context.Background(), "get_timeline", json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	return res.(timeline.Trace)
}

// TestTimelineDrawsWhatTheStoreHolds: every record of the window is on the track of its
// node, rank and thread, and the Chrome DevTools trace engine reads the trace back with
// the same tracks, the same number of slices on each thread as the store has records,
// the chains as instants, and one flow per collective two or more ranks recorded.
func TestTimelineDrawsWhatTheStoreHolds(t *testing.T) {
	env := plantedStore(t)
	plantTimeline(t, env)
	r, err := NewRegistry(env)
	if err != nil {
		t.Fatal(err)
	}
	trace := callTimeline(t, r, `{`+timelineWindow+`}`)
	m := trace.Metadata
	wantKept := timeline.Counts{CUDACalls: 14, NCCLCalls: 1, Collectives: 9, CollectiveFlows: 8, StragglerFlags: 2, Chains: 2, OffCPUSamples: 2}
	if m.Kept != wantKept || m.LeftOutTotal != 0 || m.Nodes != 2 || m.Tracks != 7 || m.MaxEvents != timeline.DefaultMaxEvents {
		t.Fatalf("metadata %+v, want kept %+v, nothing left out, 2 nodes, 7 tracks", m, wantKept)
	}
	// The node's own straggler record is not drawn: the gateway's speak for the cohort.
	var names []string
	var flags []string
	var counters []string
	for _, e := range trace.TraceEvents {
		switch {
		case e.Ph == "M" && e.Name == "thread_name":
			names = append(names, e.Args["name"].(string))
		case e.Cat == "straggler":
			flags = append(flags, e.Name+" "+time.UnixMicro(int64(e.TS)).UTC().Format("15:04:05")+"+"+time.Duration(*e.Dur*1e3).String())
		case e.Ph == "C":
			counters = append(counters, fmtCounter(e))
		}
	}
	wantNames := []string{
		"rank 0 · train[100] · thread 100", "rank 0 · train[100] · thread 101", "rank 1 · train[200] · thread 200",
		"rank 3", "rank 3 (overlap 2)", "rank 2 · train[300] · thread 300", "rank 3 · train[400] · thread 400",
	}
	if !reflect.DeepEqual(names, wantNames) {
		t.Errorf("tracks %q\nwant %q", names, wantNames)
	}
	// arrival_lag from its since (06:01:50) to the resolving record (06:05); device
	// wait from 06:03 to the window's end, overlapping it.
	wantFlags := []string{"straggler: fathom.rank.arrival_lag 06:01:50+3m10s", "straggler: fathom.rank.device_wait.time 06:03:00+7m0s"}
	if !reflect.DeepEqual(flags, wantFlags) {
		t.Errorf("flags %q, want %q", flags, wantFlags)
	}
	wantCounters := []string{"06:00:00 preempted=0.05 voluntary=0.2", "06:00:10 preempted=0.1 voluntary=0", "06:00:20 preempted=0 voluntary=0"}
	if !reflect.DeepEqual(counters, wantCounters) {
		t.Errorf("off-CPU counters %q, want %q", counters, wantCounters)
	}

	path := filepath.Join(t.TempDir(), "trace.json")
	raw, err := json.Marshal(trace)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	parsed := traceenginetest.Parse(t, path)
	if !parsed.Generic || parsed.Events != len(trace.TraceEvents) {
		t.Errorf("engine read %d events (generic %v), the trace has %d", parsed.Events, parsed.Generic, len(trace.TraceEvents))
	}
	var procs []string
	for _, p := range parsed.Processes {
		procs = append(procs, p.Name)
	}
	if !reflect.DeepEqual(procs, []string{"node-a", "node-b"}) {
		t.Errorf("engine's processes %q", procs)
	}
	// Each thread's slices are its call records in the store, counted by SQL.
	perThread := map[string]int{}
	rows, err := env.Store.DB().Query(`SELECT node, thread_id, count(*) FROM events
		WHERE kind = 'log' AND name IN ('cuda.api.call', 'nccl.collective', 'nccl.call') AND ts >= ? AND ts < ? GROUP BY ALL`,
		tl0, tl0.Add(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var node string
		var tid int64
		var n int
		if err := rows.Scan(&node, &tid, &n); err != nil {
			t.Fatal(err)
		}
		perThread[node+" / "+threadTrackName(node, tid)] = n
	}
	rows.Close()
	got := parsed.Threads()
	for track, n := range perThread {
		if got[track].Slices != n {
			t.Errorf("%s: the engine has %d slices, the store %d call records", track, got[track].Slices, n)
		}
	}
	wantShape := map[string][3]int{ // slices, instants, distinct names
		"node-a / rank 0 · train[100] · thread 100": {7, 1, 5}, "node-a / rank 0 · train[100] · thread 101": {2, 0, 1},
		"node-a / rank 1 · train[200] · thread 200": {5, 0, 3}, "node-b / rank 3": {1, 1, 1}, "node-b / rank 3 (overlap 2)": {1, 0, 1},
		"node-b / rank 2 · train[300] · thread 300": {5, 0, 3}, "node-b / rank 3 · train[400] · thread 400": {5, 0, 3},
	}
	if len(got) != len(wantShape) {
		t.Errorf("engine's threads %v", got)
	}
	for track, want := range wantShape {
		th := got[track]
		if have := [3]int{th.Slices, th.Instants, len(th.SliceNames)}; have != want {
			t.Errorf("%s: slices, instants, names %v %q, want %v", track, have, th.SliceNames, want)
		}
	}
	if names := got["node-a / rank 0 · train[100] · thread 100"].SliceNames; !reflect.DeepEqual(names,
		[]string{"all_reduce #10", "all_reduce #11", "all_reduce #12", "comm_init_rank", "cudaStreamSynchronize"}) {
		t.Errorf("thread 100's slices %q", names)
	}
	// Sequences 10 and 11 tie the four ranks; 12, on rank 0 alone, ties nothing.
	var flows []string
	for _, f := range parsed.Flows {
		var members []string
		for _, e := range f {
			members = append(members, e.Name)
		}
		flows = append(flows, fmtList(members))
	}
	sort.Strings(flows)
	if want := []string{"all_reduce #10 x4", "all_reduce #11 x4"}; !reflect.DeepEqual(flows, want) {
		t.Errorf("engine's flows %q, want %q", flows, want)
	}
}

// TestTimelineSaysWhatItLeftOut: under max_events the chains and flags are kept, the
// collectives go whole, and the CUDA calls kept are the longest; what is left out is
// counted by kind.
func TestTimelineSaysWhatItLeftOut(t *testing.T) {
	env := plantedStore(t)
	plantTimeline(t, env)
	r, err := NewRegistry(env)
	if err != nil {
		t.Fatal(err)
	}
	// 2 chains + 2 flags + 3 off-CPU samples (2 and the closing one) = 7; 8 more take
	// sequence 10 (4 slices, 4 flow events); 11 does not fit in 3, 12 (1 slice) does;
	// 2 more leave 1 for the setup call, 1 for the longest CUDA call.
	trace := callTimeline(t, r, `{`+timelineWindow+`,"max_events":18}`)
	m := trace.Metadata
	wantKept := timeline.Counts{CUDACalls: 1, NCCLCalls: 1, Collectives: 5, CollectiveFlows: 4, StragglerFlags: 2, Chains: 2, OffCPUSamples: 2}
	wantLeft := timeline.Counts{CUDACalls: 13, Collectives: 4, CollectiveFlows: 4}
	if m.Kept != wantKept || m.LeftOut != wantLeft || m.LeftOutTotal != 21 || m.MaxEvents != 18 {
		t.Errorf("kept %+v left out %+v (%d), want %+v and %+v (21)", m.Kept, m.LeftOut, m.LeftOutTotal, wantKept, wantLeft)
	}
	var longest []float64
	for _, e := range trace.TraceEvents {
		if e.Cat == "cuda" {
			longest = append(longest, e.Args["seconds"].(float64))
		}
	}
	if !reflect.DeepEqual(longest, []float64{0.003}) {
		t.Errorf("CUDA calls kept %v, want the longest (0.003 s)", longest)
	}
	if _, err := r.Call(context.Background(), "get_timeline", json.RawMessage(`{"max_events":50001}`)); err == nil {
		t.Error("max_events 50001 accepted")
	}
}

func threadTrackName(node string, tid int64) string {
	return map[int64]string{100: "rank 0 · train[100] · thread 100", 101: "rank 0 · train[100] · thread 101", 200: "rank 1 · train[200] · thread 200",
		300: "rank 2 · train[300] · thread 300", 400: "rank 3 · train[400] · thread 400"}[tid]
}

func fmtCounter(e timeline.Event) string {
	return time.UnixMicro(int64(e.TS)).UTC().Format("15:04:05") + " preempted=" + fmtFloat(e.Args["preempted"]) + " voluntary=" + fmtFloat(e.Args["voluntary"])
}

func fmtFloat(v any) string { b, _ := json.Marshal(v); return string(b) }

func fmtList(members []string) string {
	for _, m := range members[1:] {
		if m != members[0] {
			return "mixed " + members[0]
		}
	}
	return members[0] + " x" + fmtFloat(len(members))
}

// TestTimelineDrawsAStallAsItsOwnSlice: the gateway's stall record is a slice on its
// rank's track from the stall's since to the record's time, named and counted as a
// stall, not a flag; a node's own stall record and one that ended before the window
// are not drawn.
func TestTimelineDrawsAStallAsItsOwnSlice(t *testing.T) {
	env := plantedStore(t)
	stall := func(at time.Duration, source string, since time.Time) echoschema.Row {
		r := echoschema.NewRow()
		r.Time, r.Kind, r.Name = tl0.Add(at), echoschema.KindLog, semconv.EventStraggler
		r.Cluster, r.Node, r.Rank, r.PID, r.ThreadID = "c1", "node-b", 2, echoschema.Absent, echoschema.Absent
		raw, _ := json.Marshal(map[string]any{semconv.StragglerSignal: "fathom.rank.host_lead.time", semconv.StragglerState: "stall",
			semconv.StragglerSource: source, semconv.StragglerSince: since.Format(time.RFC3339Nano)})
		r.Attributes, r.Body = string(raw), "rank 2 stalled"
		return r
	}
	if err := env.Store.Append(context.Background(), []echoschema.Row{
		stall(2*time.Minute, "gateway", tl0.Add(2*time.Minute-1200*time.Millisecond)),
		stall(2*time.Minute, "node", tl0.Add(2*time.Minute-1200*time.Millisecond)),
		stall(-time.Minute, "gateway", tl0.Add(-time.Minute-time.Second)),
	}); err != nil {
		t.Fatal(err)
	}
	r, err := NewRegistry(env)
	if err != nil {
		t.Fatal(err)
	}
	trace := callTimeline(t, r, `{`+timelineWindow+`}`)
	if want := (timeline.Counts{Stalls: 1}); trace.Metadata.Kept != want {
		t.Fatalf("kept %+v, want one stall and nothing else", trace.Metadata.Kept)
	}
	var stalls []string
	for _, e := range trace.TraceEvents {
		if e.Cat == "stall" {
			stalls = append(stalls, e.Name+" "+time.UnixMicro(int64(e.TS)).UTC().Format("15:04:05.000")+"+"+time.Duration(*e.Dur*1e3).String())
		}
		if e.Cat == "straggler" {
			t.Errorf("a stall drawn as a straggler flag: %+v", e)
		}
	}
	if want := []string{"stall: fathom.rank.host_lead.time 06:01:58.800+1.2s"}; !reflect.DeepEqual(stalls, want) {
		t.Errorf("stalls %q, want %q", stalls, want)
	}
}
