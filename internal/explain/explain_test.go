package explain

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// canned answers the tools as a gateway with one demo incident would: two chains, rank 5
// flagged by the gateway (and by its node, whose record is not repeated), rank 2 flagged
// and then resolved, a cost, and the slowest calls.
type canned map[string]string

func (c canned) Call(_ context.Context, tool string, args map[string]any) (json.RawMessage, error) {
	if args["since"] != "10m" {
		return nil, fmt.Errorf("%s asked for since %v", tool, args["since"])
	}
	answer, ok := c[tool]
	if !ok {
		return nil, fmt.Errorf("unknown tool %s", tool)
	}
	return json.RawMessage(answer), nil
}

var demo = canned{
	"get_causal_chains": `{"chains": [
		{"state": "resolved", "node": "node-2", "process": "fakegpu-ddp", "pid": 41, "thread": 42, "root_cause": "hidden_sync", "severity": "MEDIUM", "fix": "keep step values on the GPU",
		 "attributes": {"fathom.chain.cost": 0.08, "fathom.chain.evidence": "the host waited 80 ms in them"}},
		{"state": "open", "node": "node-1", "process": "fakegpu-ddp", "pid": 11, "thread": 12, "root_cause": "cpu_contention", "severity": "HIGH", "fix": "pin the GPU thread to its own cores",
		 "attributes": {"fathom.chain.cost": 0.3, "fathom.chain.evidence": "thread 12 waited 300 ms for a CPU (30% of the window); its CPU went to batch-etl (3 processes) 280 ms"}}],
		"by_root_cause": {}}`,
	"event_history": `{"events": [
		{"time": "2026-11-26T10:00:01Z", "node": "node-2", "rank": 5, "body": "rank 5 on node-2 is a straggler (node)", "attributes": {"fathom.straggler.state": "straggler", "fathom.straggler.source": "node"}},
		{"time": "2026-11-26T10:00:02Z", "node": "node-2", "rank": 5, "body": "rank 5 on node-2 is a straggler in nccl:1", "attributes": {"fathom.straggler.state": "straggler", "fathom.straggler.source": "gateway"}},
		{"time": "2026-11-26T10:00:03Z", "node": "node-1", "rank": 2, "body": "rank 2 on node-1 is a straggler in nccl:1", "attributes": {"fathom.straggler.state": "straggler", "fathom.straggler.source": "gateway"}},
		{"time": "2026-11-26T10:00:09Z", "node": "node-1", "rank": 2, "body": "rank 2 on node-1 is back", "attributes": {"fathom.straggler.state": "resolved", "fathom.straggler.source": "gateway"}},
		{"time": "2026-11-26T10:00:12Z", "node": "node-1", "rank": 2, "body": "rank 2 on node-1 stalled in nccl:1 for 1s", "attributes": {"fathom.straggler.state": "stall", "fathom.straggler.source": "gateway"}},
		{"time": "2026-11-26T10:00:14Z", "node": "node-3", "rank": 7, "body": "rank 7 on node-3 stalled in nccl:1 for 800ms", "attributes": {"fathom.straggler.state": "stall", "fathom.straggler.source": "gateway"}}]}`,
	"get_cost": `{"stragglers": [{"node": "node-2", "rank": 5, "steps": 23, "affected_ranks": 7, "gpu_hours": 0.0017, "usd": 0}]}`,
	"get_trace_stats": `{"stats": [
		{"api": "cudaStreamSynchronize", "node": "node-1", "calls": 1532, "p50": 0.6, "p99": 13.1, "unit": "ms"},
		{"api": "ncclAllReduce", "node": "node-2", "calls": 3000, "p50": 2000, "p99": 45000, "unit": "ns"}]}`,
}

// The report of the demo's incident: the HIGH chain first with its evidence and fix, the
// resolved one marked; rank 5 flagged (once, by the gateway's record) and rank 2 flagged
// and back (its stall after that, and rank 7's, are stalls, not flags); what rank 5 cost; the slowest calls in readable units; no colour off a
// terminal.
func TestTheReportSaysWhatTheToolsFound(t *testing.T) {
	var out bytes.Buffer
	if err := Write(context.Background(), &out, demo, Options{Since: "10m"}); err != nil {
		t.Fatal(err)
	}
	want := `Fathom: the last 10m

Causal chains: 2 in the window, 1 still open; costliest first
  HIGH cpu_contention on node-1: fakegpu-ddp (pid 11, thread 12)
    thread 12 waited 300 ms for a CPU (30% of the window); its CPU went to batch-etl (3 processes) 280 ms
    fix: pin the GPU thread to its own cores
  MEDIUM hidden_sync on node-2: fakegpu-ddp (pid 41, thread 42) (resolved)
    the host waited 80 ms in them
    fix: keep step values on the GPU

Stragglers: 2 flagged in the window, 1 still flagged
  rank 5 on node-2 is a straggler in nccl:1
  rank 2 on node-1 is a straggler in nccl:1 (back since 2026-11-26T10:00:09Z)
  and 2 stalls on 2 ranks, each shorter than a straggler (fathom.straggler.state stall)
  cost: rank 5 on node-2 kept 7 peers waiting 6.1 GPU-seconds over 23 flagged intervals

Slowest calls (p99)
  cudaStreamSynchronize on node-1: p99 13.1ms, p50 600µs, 1532 calls
  ncclAllReduce on node-2: p99 45µs, p50 2µs, 3000 calls
`
	if out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
}

// A report never runs past its lines: each section keeps its heading and says how many
// entries it left out. Colour is written only when asked for.
func TestTheReportKeepsToItsLines(t *testing.T) {
	many := canned{}
	for k, v := range demo {
		many[k] = v
	}
	var chains []string
	for i := range 40 {
		chains = append(chains, fmt.Sprintf(`{"node": "node-%d", "process": "p", "root_cause": "io_stall", "severity": "HIGH", "fix": "f", "attributes": {"fathom.chain.cost": %d, "fathom.chain.evidence": "e"}}`, i, i))
	}
	many["get_causal_chains"] = `{"chains": [` + strings.Join(chains, ",") + `]}`
	for _, lines := range []int{50, 20} {
		var out bytes.Buffer
		if err := Write(context.Background(), &out, many, Options{Since: "10m", MaxLines: lines, Color: true}); err != nil {
			t.Fatal(err)
		}
		got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(got) > lines || !strings.Contains(out.String(), "more (get_causal_chains") || !strings.Contains(out.String(), "Slowest calls") ||
			!strings.Contains(out.String(), "\x1b[31mHIGH\x1b[0m io_stall on node-39") {
			t.Errorf("%d lines asked, %d written:\n%s", lines, len(got), out.String())
		}
	}
}

// The gateway caller posts each tool's arguments with the bearer token and reads the
// answer; a refusal is an error that says what the gateway said.
func TestTheGatewayIsAskedWithItsToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sekrit-token-0123456789" {
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		var args map[string]any
		_ = json.NewDecoder(r.Body).Decode(&args)
		_, _ = w.Write(demo.answer(strings.TrimPrefix(r.URL.Path, "/api/v1/tools/"), args))
	}))
	defer srv.Close()
	var out bytes.Buffer
	if err := Write(context.Background(), &out, Gateway{URL: srv.URL + "/", Token: "sekrit-token-0123456789"}, Options{Since: "10m"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "HIGH cpu_contention on node-1") {
		t.Errorf("report over HTTP:\n%s", out.String())
	}
	err := Write(context.Background(), &out, Gateway{URL: srv.URL, Token: "wrong"}, Options{Since: "10m"})
	if err == nil || !strings.Contains(err.Error(), "401 Unauthorized") {
		t.Errorf("a refused token: %v", err)
	}
}

func (c canned) answer(tool string, args map[string]any) []byte {
	raw, err := c.Call(context.Background(), tool, args)
	if err != nil {
		return []byte(`{}`)
	}
	return raw
}
