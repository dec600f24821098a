package demo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/echotools"
	"github.com/fathom-gpu/fathom/internal/testsupport/traceenginetest"
	"github.com/fathom-gpu/fathom/internal/timeline"
)

// checkTimeline runs `fathom timeline` on the store the demo left (real BPF-traced
// calls of eight ranks on four nodes) and reads the trace back with the Chrome DevTools
// trace engine: four node processes, each rank's CUDA thread a named track holding
// exactly as many slices as the store has call records of that thread, rank 5's
// straggler flags on its rank track, a chain on node-2, and one flow per collective
// that two or more ranks recorded, each through slices of that one collective.
func checkTimeline(t *testing.T, bin, dir string, until time.Time) {
	t.Helper()
	db := filepath.Join(dir, "echo.duckdb")
	until = until.UTC().Truncate(time.Second)
	since := until.Add(-30 * time.Minute)
	tracePath := filepath.Join(dir, "trace.json")
	out, err := exec.Command(bin, "timeline", "--db", db, "--since", since.Format(time.RFC3339), "--until", until.Format(time.RFC3339),
		"-o", tracePath).CombinedOutput()
	t.Logf("fathom timeline --db:\n%s", out)
	if err != nil {
		t.Fatalf("fathom timeline: %v", err)
	}
	raw, err := os.ReadFile(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	var trace timeline.Trace
	if err := json.Unmarshal(raw, &trace); err != nil {
		t.Fatal(err)
	}
	if m := trace.Metadata; m.LeftOutTotal != 0 || m.Nodes != 4 || m.Kept.CUDACalls == 0 || m.Kept.Collectives == 0 || m.Kept.Chains == 0 || m.Kept.StragglerFlags == 0 {
		t.Errorf("trace metadata %+v: want 4 nodes, calls, collectives, chains and flags, nothing left out", m)
	}

	// What the store holds, asked of the same tools' SQL.
	lt, err := echotools.OpenLocal(context.Background(), db, "")
	if err != nil {
		t.Fatal(err)
	}
	defer lt.Close()
	window := fmt.Sprintf("ts >= '%s'::TIMESTAMP AND ts < '%s'::TIMESTAMP", since.Format("2006-01-02 15:04:05"), until.Format("2006-01-02 15:04:05"))
	sqlRows := func(q string) [][]any {
		res, err := lt.Call(context.Background(), "run_analysis", map[string]any{"sql": q})
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		var answer struct {
			Rows      [][]any `json:"rows"`
			Truncated bool    `json:"truncated"`
		}
		if err := json.Unmarshal(res, &answer); err != nil || answer.Truncated {
			t.Fatalf("%s: %s", q, res)
		}
		return answer.Rows
	}
	calls := sqlRows(`SELECT node, thread_id, count(*) FROM events WHERE kind = 'log'
		AND name IN ('cuda.api.call', 'nccl.collective', 'nccl.call') AND ` + window + ` GROUP BY ALL ORDER BY ALL`)
	groups := sqlRows(`SELECT count(*) FROM (SELECT comm_id, json_extract_string(attributes, '$."nccl.seq"') AS seq FROM events
		WHERE kind = 'log' AND name = 'nccl.collective' AND seq IS NOT NULL AND ` + window + ` GROUP BY ALL HAVING count(*) > 1)`)

	parsed := traceenginetest.Parse(t, tracePath)
	var procs []string
	for _, p := range parsed.Processes {
		procs = append(procs, p.Name)
	}
	if strings.Join(procs, ",") != "node-0,node-1,node-2,node-3" {
		t.Errorf("the engine's processes: %q", procs)
	}
	// A thread's slices may spread over its track's overlap lanes; together they are its records.
	slicesOf := func(node string, tid int64) int {
		n := 0
		for _, p := range parsed.Processes {
			for _, th := range p.Threads {
				if p.Name == node && (strings.HasSuffix(th.Name, fmt.Sprintf(" · thread %d", tid)) || strings.Contains(th.Name, fmt.Sprintf(" · thread %d (overlap", tid))) {
					n += th.Slices
				}
			}
		}
		return n
	}
	threads := 0
	for _, row := range calls {
		node, _ := row[0].(string)
		tid, _ := row[1].(float64)
		n, _ := row[2].(float64)
		threads++
		if got := slicesOf(node, int64(tid)); got != int(n) {
			t.Errorf("%s thread %d: the engine has %d slices, the store %d call records", node, int64(tid), got, int(n))
		}
	}
	if threads < 8 {
		t.Errorf("call records on %d threads, want at least the 8 ranks' threads: %v", threads, calls)
	}
	th := parsed.Threads()
	// The rank's track holds its straggler flags, and may hold stall records too: a
	// CPU-starved rank can stall past its cohort's line for a moment before the
	// slowdown lasts long enough to be a straggler.
	flags, straggler := th["node-2 / rank 5"], false
	for _, name := range flags.SliceNames {
		straggler = straggler || strings.HasPrefix(name, "straggler: ")
		if !strings.HasPrefix(name, "straggler: ") && !strings.HasPrefix(name, "stall: ") {
			t.Errorf("rank 5's track holds %q, want only straggler flags and stalls", name)
		}
	}
	if !straggler {
		t.Errorf("rank 5's track: %+v, want its straggler flags", flags)
	}
	chainsOnNode2 := 0
	for name, thread := range th {
		if strings.HasPrefix(name, "node-2 / ") {
			chainsOnNode2 += thread.Instants
		}
	}
	if chainsOnNode2 == 0 {
		t.Errorf("no causal chain instant on node-2")
	}
	wantFlows, _ := groups[0][0].(float64)
	if len(parsed.Flows) != int(wantFlows) || wantFlows == 0 {
		t.Errorf("the engine tied %d flows, the store has %v collectives recorded by two or more ranks", len(parsed.Flows), wantFlows)
	}
	for _, f := range parsed.Flows {
		for _, e := range f[1:] {
			if e.Name != f[0].Name || !strings.Contains(e.Name, " #") {
				t.Errorf("a flow ties %q and %q", f[0].Name, e.Name)
				break
			}
		}
	}
}
