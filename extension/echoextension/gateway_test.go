package echoextension

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/fathom-gpu/fathom/internal/collectorconfig"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
)

const (
	agentToken    = "agent-token-0123456789abcdef"
	grafanaToken  = "grafana-token-0123456789abcdef"
	limitedToken  = "limited-token-0123456789abcdef"
	eventsPerNode = 2500
	nodes         = 8
	slowNode      = "node-5"
)

type gateway struct {
	proc  *collectortest.Process
	base  string
	otlp  string
	db    string
	audit string
}

// echoRateLimit makes room for every request a test makes in a second, which the
// shipped 20 a second would refuse. (The API is on plain HTTP because the tests'
// clients carry no CA; the listener's TLS is TestGatewayTLSAndSecondWriter's.)
const echoRateLimit = `
extensions:
  echo:
    server:
      rate_limit: {requests_per_second: 1000, burst: 1000}
`

// plainHTTPGateway is deploy/configs/gateway.yaml with plaintext OTLP (the tests send
// without certificates), the Echo API over plain HTTP on loopback, and echoRateLimit.
func plainHTTPGateway(t *testing.T) *collectortest.Role {
	t.Helper()
	return collectortest.Gateway(t, collectorconfig.GatewayPlaintext).Merge(t, collectorconfig.EchoOverPlainHTTP).Merge(t, echoRateLimit)
}

func startGateway(t *testing.T) *gateway {
	t.Helper()
	dir := t.TempDir()
	tokenDir := filepath.Join(dir, "tokens")
	must(t, os.MkdirAll(tokenDir, 0o700))
	must(t, os.WriteFile(filepath.Join(tokenDir, "agent"), []byte(agentToken+"\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(tokenDir, "grafana"), []byte(grafanaToken), 0o600))
	rates := filepath.Join(dir, "rates.yaml")
	must(t, os.WriteFile(rates, []byte("rates:\n  - {provider: gcp, gpu_model: H100, usd_per_gpu_hour: 3.5}\n"), 0o600))
	// What the test holds the store to, over the shipped gateway: tokens read from
	// files (one ending in a newline) and one with a rate limit of its own in place of
	// the shipped ones, GPU rates for get_cost, and SQL bounds small enough to reach.
	gw := plainHTTPGateway(t).Merge(t, fmt.Sprintf(`
extensions:
  echo:
    rates_file: %q
    sql: {timeout: 2s, max_bytes: 1048576}
    server:
      tokens:
        - {name: agent, file: %q, scopes: [tools, sql]}
        - {name: grafana, file: %q, scopes: [tools]}
        # A burst of 20 and next to no refill: exactly 80 of 100 rapid requests are 429,
        # however slow the machine.
        - {name: limited, env: LIMITED_TOKEN, scopes: [tools], rate_limit: {requests_per_second: 0.0001, burst: 20}}
`, rates, filepath.Join(tokenDir, "agent"), filepath.Join(tokenDir, "grafana")))
	g := &gateway{db: filepath.Join(dir, "echo.duckdb"), audit: filepath.Join(dir, "audit.jsonl")}
	otlp := gw.Listen["FATHOM_GATEWAY_OTLP_HTTP"]
	g.base, g.otlp = "http://"+gw.Listen["FATHOM_ECHO_ENDPOINT"], "http://"+otlp+"/v1/logs"
	g.proc = gw.Start(t, "FATHOM_ECHO_DB="+g.db, "FATHOM_ECHO_AUDIT_LOG="+g.audit, "LIMITED_TOKEN="+limitedToken)
	g.proc.WaitHTTP(t, g.base+"/api/versions", 30*time.Second)
	g.proc.WaitListening(t, otlp, 30*time.Second)
	return g
}

// alive fails the test at once if the gateway process has ended or stopped answering:
// what ran last is the case that took it down.
func (g *gateway) alive(t *testing.T, after string) {
	t.Helper()
	if err := syscall.Kill(g.proc.Pid(), 0); err != nil {
		t.Fatalf("gateway process gone after %q: %v\n%s", after, err, g.proc.Output())
	}
	resp, err := http.Get(g.base + "/api/v1/health")
	if err != nil {
		t.Fatalf("gateway not answering after %q: %v\n%s", after, err, g.proc.Output())
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("gateway health after %q: %d", after, resp.StatusCode)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// nodeEvents is one OTLP request of a simulated node's NCCL all-reduce events: the
// body is the duration in ms; node-5 takes three times as long as its peers.
func nodeEvents(node, rank, from, n int) []byte {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	res := rl.Resource().Attributes()
	res.PutStr("fathom.cluster.name", "sim")
	res.PutStr("host.name", fmt.Sprintf("node-%d", node))
	res.PutStr("fathom.job.name", "llama")
	res.PutInt("fathom.world_size", nodes)
	res.PutInt("process.pid", int64(1000+node))
	res.PutStr("process.executable.name", "train.py")
	res.PutStr("cloud.provider", "gcp")
	res.PutStr("fathom.gpu.model", "H100")
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	now := time.Now()
	for i := from; i < from+n; i++ {
		lr := lrs.AppendEmpty()
		lr.SetTimestamp(pcommon.NewTimestampFromTime(now.Add(-time.Duration(i) * time.Millisecond)))
		lr.SetEventName("nccl.allreduce.duration")
		lr.SetSeverityNumber(plog.SeverityNumberInfo)
		d := 10 + float64(i%10)*0.1
		if node == 5 {
			d *= 3
		}
		lr.Body().SetDouble(d)
		lr.Attributes().PutInt("fathom.rank", int64(rank))
		lr.Attributes().PutStr("nccl.op", "allreduce")
		lr.Attributes().PutInt("step", int64(i))
	}
	body, err := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	if err != nil {
		panic(err)
	}
	return body
}

func (g *gateway) push(t *testing.T) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	for n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for from := 0; from < eventsPerNode; from += 500 {
				resp, err := http.Post(g.otlp, "application/x-protobuf", bytes.NewReader(nodeEvents(n, n, from, 500)))
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs <- fmt.Errorf("node-%d: OTLP answered %d", n, resp.StatusCode)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// call does one API request and decodes the JSON answer.
func (g *gateway) call(t *testing.T, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, g.base+path, strings.NewReader(body))
	must(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func (g *gateway) mcpSession(t *testing.T, token string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "fathom-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: g.base + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}, nil)
	must(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func mcpCall(t *testing.T, s *mcp.ClientSession, tool, args string) *mcp.CallToolResult {
	t.Helper()
	var a map[string]any
	must(t, json.Unmarshal([]byte(args), &a))
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: a})
	if err != nil {
		t.Fatalf("MCP %s: %v", tool, err)
	}
	return res
}

func structured(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %v", res.Content[0].(*mcp.TextContent).Text)
	}
	raw, err := json.Marshal(res.StructuredContent)
	must(t, err)
	var out map[string]any
	must(t, json.Unmarshal(raw, &out))
	return out
}

func TestGatewayStoresServesAndGuards(t *testing.T) {
	g := startGateway(t)
	g.push(t)

	// Every event is in the store, with the right columns.
	status, res := g.call(t, "POST", "/api/v1/sql", agentToken, `{"sql":"SELECT node, count(*), count(DISTINCT rank), min(rank), any_value(world_size), any_value(pid), any_value(process), any_value(cluster), any_value(job), any_value(api), count(value), count(DISTINCT json_extract(attributes, '$.step')) FROM events GROUP BY node ORDER BY node"}`)
	if status != 200 {
		t.Fatalf("sql: %d %v", status, res)
	}
	rows := res["rows"].([]any)
	if len(rows) != nodes {
		t.Fatalf("%d nodes in the store, want %d: %v", len(rows), nodes, rows)
	}
	for i, r := range rows {
		got := fmt.Sprint(r)
		want := fmt.Sprintf("[node-%d %d 1 %d %d %d train.py sim llama allreduce %d %d]", i, eventsPerNode, i, nodes, 1000+i, eventsPerNode, eventsPerNode)
		if got != want {
			t.Errorf("node-%d row: got %s, want %s", i, got, want)
		}
	}

	agent := g.mcpSession(t, agentToken)
	outliers := structured(t, mcpCall(t, agent, "find_outlier_nodes", `{"signal":"nccl.allreduce.duration"}`))
	first := outliers["outliers"].([]any)[0].(map[string]any)
	if first["node"] != slowNode || len(outliers["outliers"].([]any)) != 1 {
		t.Fatalf("find_outlier_nodes: %v", outliers)
	}

	// Every tool answers identically over MCP and over HTTP.
	sameArgs := map[string]string{
		"event_history":         `{"node":"node-3","limit":5}`,
		"find_outlier_nodes":    `{"signal":"nccl.allreduce.duration","by":"rank"}`,
		"cluster_summary":       `{"cluster":"sim","since":"2000-01-01T00:00:00Z","until":"2100-01-01T00:00:00Z"}`,
		"get_causal_chains":     `{}`,
		"get_trace_stats":       `{"api":"allreduce"}`,
		"get_stacks":            `{}`,
		"get_cost":              `{"signal":"nccl.allreduce.duration"}`,
		"process_host_pressure": `{"since":"2000-01-01T00:00:00Z","until":"2100-01-01T00:00:00Z"}`,
		"cuda_graph_activity":   `{"since":"2026-01-01T00:00:00Z","until":"2026-01-02T00:00:00Z","bucket":"1h"}`,
		"node_readiness":        `{"since":"2000-01-01T00:00:00Z","until":"2100-01-01T00:00:00Z"}`,
		"get_timeline":          `{"since":"2000-01-01T00:00:00Z","until":"2100-01-01T00:00:00Z"}`,
		"run_analysis":          `{"sql":"SELECT node, round(avg(value), 6) AS v FROM events GROUP BY node ORDER BY node"}`,
	}
	for tool, args := range sameArgs {
		viaMCP := structured(t, mcpCall(t, agent, tool, args))
		status, viaHTTP := g.call(t, "POST", "/api/v1/tools/"+tool, agentToken, args)
		if status != 200 || !reflect.DeepEqual(viaMCP, viaHTTP) {
			t.Errorf("%s differs:\nMCP:  %v\nHTTP: %d %v", tool, viaMCP, status, viaHTTP)
		}
	}
	if cost := structured(t, mcpCall(t, agent, "get_cost", `{"signal":"nccl.allreduce.duration"}`)); cost["total_usd"].(float64) <= 0 {
		t.Errorf("get_cost priced nothing: %v", cost)
	}

	// Bad arguments: a validation error, not a 500, on both transports.
	status, res = g.call(t, "POST", "/api/v1/tools/find_outlier_nodes", agentToken, `{"signal":"x","k":-1}`)
	if status != 400 || res["error"].(map[string]any)["code"] != "invalid_argument" {
		t.Errorf("bad k over HTTP: %d %v", status, res)
	}
	if r := mcpCall(t, agent, "event_history", `{"since":"last tuesday"}`); !r.IsError || !strings.HasPrefix(r.Content[0].(*mcp.TextContent).Text, "invalid_argument:") {
		t.Errorf("bad since over MCP: %+v", r)
	}

	// No token 401, wrong scope 403, unknown token 401, over the rate 429.
	if status, _ = g.call(t, "GET", "/api/v1/tools/list", "", ""); status != 401 {
		t.Errorf("no token: %d", status)
	}
	if status, _ = g.call(t, "GET", "/api/v1/tools/list", "not-a-token-at-all-really", ""); status != 401 {
		t.Errorf("unknown token: %d", status)
	}
	if status, _ = g.call(t, "POST", "/api/v1/sql", grafanaToken, `{"sql":"SELECT 1"}`); status != 403 {
		t.Errorf("sql with a tools-only token: %d", status)
	}
	if status, _ = g.call(t, "POST", "/api/v1/tools/run_analysis", grafanaToken, `{"sql":"SELECT 1"}`); status != 403 {
		t.Errorf("run_analysis with a tools-only token: %d", status)
	}
	grafana := g.mcpSession(t, grafanaToken)
	if r := mcpCall(t, grafana, "run_analysis", `{"sql":"SELECT 1"}`); !r.IsError || !strings.HasPrefix(r.Content[0].(*mcp.TextContent).Text, "forbidden:") {
		t.Errorf("run_analysis over MCP with a tools-only token: %+v", r)
	}
	got429 := 0
	for range 100 {
		if status, _ = g.call(t, "GET", "/api/v1/tools/list", limitedToken, ""); status == 429 {
			got429++
		}
	}
	if got429 != 80 {
		t.Errorf("100 requests against a burst of 20: %d answered 429, want 80", got429)
	}

	// The hostile suite over HTTP: each is refused with its class, and nothing changes.
	for sql, code := range map[string]string{
		"SELECT * FROM read_csv('/etc/passwd')":                             "not_read_only",
		"SELECT * FROM '/etc/hostname'":                                     "not_read_only",
		"COPY events TO '/tmp/fathom-stolen.csv'":                           "not_read_only",
		"EXPORT DATABASE '/tmp/fathom-stolen'":                              "not_read_only",
		"ATTACH '/tmp/fathom-other.duckdb' AS o":                            "not_read_only",
		"INSTALL httpfs":                                                    "not_read_only",
		"LOAD httpfs":                                                       "not_read_only",
		"SET enable_external_access = true":                                 "not_read_only",
		"RESET lock_configuration":                                          "not_read_only",
		"PRAGMA enable_profiling":                                           "not_read_only",
		"SELECT 1; DELETE FROM events":                                      "not_read_only",
		"DELETE FROM events; SELECT 1":                                      "not_read_only",
		"WITH d AS (DELETE FROM events RETURNING *) SELECT count(*) FROM d": "query_failed",
		"DROP TABLE events":                                                 "not_read_only",
		"CREATE TEMP TABLE t AS SELECT 1":                                   "not_read_only",
		"CREATE MACRO m(a) AS a + 1":                                        "not_read_only",
		"CHECKPOINT":                                                        "not_read_only",
		"SELECT repeat('x', 100000) FROM range(100)":                        "result_too_large",
		"SELECT count(*) FROM range(100000) a, range(100000) b WHERE a.range * b.range = -1": "query_timeout",
	} {
		body, _ := json.Marshal(map[string]string{"sql": sql})
		status, res := g.call(t, "POST", "/api/v1/sql", agentToken, string(body))
		if status == 200 || res["error"].(map[string]any)["code"] != code {
			t.Errorf("hostile %q: %d %v, want code %s", sql, status, res, code)
		}
	}
	// SELECTs whose table functions change the instance, reveal its files, or (logging
	// to a file) aborted the gateway: refused over both transports, and after each one
	// the same gateway process still answers.
	logFile := filepath.Join(filepath.Dir(g.db), "duckdb.log")
	for _, sql := range []string{
		"SELECT * FROM enable_logging(storage := 'file', storage_path := '" + logFile + "')",
		"SELECT * FROM enable_logging()",
		"SELECT (SELECT count(*) FROM enable_profiling()) AS n",
		"SELECT * FROM checkpoint()",
		"SELECT * FROM truncate_duckdb_logs()",
		"SELECT path FROM duckdb_databases()",
		"SELECT * FROM duckdb_settings()",
		"SELECT current_setting('threads')",
		"SELECT write_log('x')",
	} {
		body, _ := json.Marshal(map[string]string{"sql": sql})
		status, res := g.call(t, "POST", "/api/v1/sql", agentToken, string(body))
		if status != 400 || res["error"].(map[string]any)["code"] != "not_read_only" {
			t.Errorf("over HTTP %q: %d %v, want 400 not_read_only", sql, status, res)
		}
		g.alive(t, sql)
		args, _ := json.Marshal(map[string]string{"sql": sql})
		if r := mcpCall(t, agent, "run_analysis", string(args)); !r.IsError || !strings.HasPrefix(r.Content[0].(*mcp.TextContent).Text, "not_read_only:") {
			t.Errorf("over MCP %q: %+v", sql, r)
		}
		g.alive(t, sql)
	}
	if _, err := os.Stat(logFile); err == nil {
		t.Errorf("hostile SQL wrote %s", logFile)
	}
	status, res = g.call(t, "POST", "/api/v1/sql", agentToken, `{"sql":"SELECT count(*) FROM events"}`)
	if status != 200 || fmt.Sprint(res["rows"]) != fmt.Sprintf("[[%d]]", nodes*eventsPerNode) {
		t.Errorf("after the hostile suite: %d %v", status, res)
	}
	for _, p := range []string{"/tmp/fathom-stolen.csv", "/tmp/fathom-stolen", "/tmp/fathom-other.duckdb"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("hostile SQL wrote %s", p)
		}
	}

	// Public endpoints.
	if status, res = g.call(t, "GET", "/api/versions", "", ""); status != 200 || res["fathom"] != "0.1" {
		t.Errorf("versions: %d %v", status, res)
	}
	if status, res = g.call(t, "GET", "/api/v1/health", "", ""); status != 200 || res["version"] != nil {
		t.Errorf("health without a token: %d %v", status, res)
	}
	if status, res = g.call(t, "GET", "/api/v1/health", agentToken, ""); status != 200 || res["version"] != "0.1.0" {
		t.Errorf("health with a token: %d %v", status, res)
	}
	status, res = g.call(t, "GET", "/api/v1/openapi.json", grafanaToken, "")
	if status != 200 || len(res["paths"].(map[string]any)) != 5+len(sameArgs) { // versions, health, openapi.json, tools/list, sql + one per tool
		t.Errorf("openapi: %d, %d paths", status, len(res["paths"].(map[string]any)))
	}
	status, res = g.call(t, "GET", "/api/v1/tools/list", grafanaToken, "")
	mcpList, err := agent.ListTools(context.Background(), nil)
	must(t, err)
	if status != 200 || len(res["tools"].([]any)) != len(mcpList.Tools) || len(mcpList.Tools) != len(sameArgs) {
		t.Errorf("tools/list: %d; HTTP %d tools, MCP %d", status, len(res["tools"].([]any)), len(mcpList.Tools))
	}

	// The audit log has the refusals, the 429s and the MCP tool calls.
	counts := auditCounts(t, g.audit)
	for key, atLeast := range map[string]int{
		"http 401 -": 2, "http 403 grafana": 2, "http 429 limited": got429, "mcp 403 grafana run_analysis": 1,
		"mcp 200 agent find_outlier_nodes": 2, "http 400 agent find_outlier_nodes": 1, "mcp 400 agent event_history": 1,
	} {
		if counts[key] < atLeast {
			t.Errorf("audit log: %d lines %q, want at least %d (all: %v)", counts[key], key, atLeast, counts)
		}
	}
	if counts["http 429 limited"] != got429 {
		t.Errorf("audit log has %d 429 lines, the client saw %d", counts["http 429 limited"], got429)
	}

	// Offline: the same tools over stdio on a copy of the file.
	if code := g.proc.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("gateway exit %d", code)
	}
	cmd := exec.Command(collectortest.Binary(t), "mcp", "--db", g.db)
	client := mcp.NewClient(&mcp.Implementation{Name: "fathom-test", Version: "1"}, nil)
	offline, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	must(t, err)
	defer offline.Close()
	summary := structured(t, mcpCall(t, offline, "cluster_summary", `{"since":"24h"}`))
	c := summary["clusters"].([]any)[0].(map[string]any)
	if c["cluster"] != "sim" || c["nodes"] != float64(nodes) || c["rows"] != float64(nodes*eventsPerNode) {
		t.Errorf("offline cluster_summary: %v", summary)
	}
	off := structured(t, mcpCall(t, offline, "find_outlier_nodes", `{"signal":"nccl.allreduce.duration","since":"24h"}`))
	if off["outliers"].([]any)[0].(map[string]any)["node"] != slowNode {
		t.Errorf("offline find_outlier_nodes: %v", off)
	}
	prompt, err := offline.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "investigate", Arguments: map[string]string{"cluster": "sim"}})
	must(t, err)
	if !strings.Contains(prompt.Messages[0].Content.(*mcp.TextContent).Text, "cluster sim") {
		t.Errorf("investigate prompt: %+v", prompt.Messages[0].Content)
	}
	schema, err := offline.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "echo://schema"})
	must(t, err)
	if !strings.Contains(schema.Contents[0].Text, "CREATE TABLE events") {
		t.Errorf("schema resource: %q", schema.Contents[0].Text)
	}
}

func auditCounts(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	counts := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e struct {
			Transport, Principal, Tool string
			Status                     int
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		key := fmt.Sprintf("%s %d %s", e.Transport, e.Status, e.Principal)
		if e.Tool != "" {
			key += " " + e.Tool
		}
		counts[key]++
		if e.Tool != "" {
			counts[fmt.Sprintf("%s %d %s", e.Transport, e.Status, e.Principal)]++
		}
	}
	return counts
}
