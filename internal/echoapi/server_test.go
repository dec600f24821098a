package echoapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fathom-gpu/fathom/internal/echoapi"
	"github.com/fathom-gpu/fathom/internal/echostore"
	"github.com/fathom-gpu/fathom/internal/echotools"
	"github.com/fathom-gpu/fathom/internal/testsupport/echostoretest"
)

// plantedAt is when the planted rows begin; every tool call names its window, because
// the tools' default window ends now.
var plantedAt = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	window         = `"since":"2026-03-01T12:00:00Z","until":"2026-03-01T12:30:00Z"`
	outlierArgs    = `{"signal":"nccl.allreduce.duration","cluster":"c1",` + window + `}`
	version        = "0.4.2"
	readerSecret   = "reader-secret-0123456789"
	analystSecret  = "analyst-secret-0123456789"
	scriptSecret   = "script-secret-0123456789"
	countEventsSQL = `{"sql":"SELECT count(*) AS n FROM events"}`
)

// auditLines keeps each audit line the handler writes, decoded.
type auditLines struct {
	mu      sync.Mutex
	entries []echoapi.AuditEntry
}

func (a *auditLines) Write(line []byte) (int, error) {
	var e echoapi.AuditEntry
	if err := json.Unmarshal(line, &e); err != nil {
		return 0, fmt.Errorf("audit line %q: %w", line, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.entries = append(a.entries, e)
	return len(line), nil
}

func (a *auditLines) all() []echoapi.AuditEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.entries)
}

// api is the handler over a planted store, on a real HTTP server.
type api struct {
	url   string
	env   *echotools.Env
	store *echostore.Store
	reg   *echotools.Registry
	audit *auditLines
	// logs is what the handler logged.
	logs *observer.ObservedLogs
}

// plantedRegistry is the tools' registry over a planted store, one SQL slot under limits.
func plantedRegistry(t *testing.T, limits echostore.QueryLimits) (*echostore.Store, *echotools.Env, *echotools.Registry) {
	t.Helper()
	st := echostoretest.Planted(t, plantedAt)
	env, err := echotools.NewEnv(st, limits, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := echotools.NewRegistry(env)
	if err != nil {
		t.Fatal(err)
	}
	return st, env, reg
}

// startAPI serves three tokens: reader (tools), analyst (tools and sql) and script
// (tools, two requests and then one per 100 s), one SQL slot under limits.
func startAPI(t *testing.T, limits echostore.QueryLimits) *api {
	t.Helper()
	st, env, reg := plantedRegistry(t, limits)
	auth, err := echoapi.NewAuthenticator([]echoapi.TokenSpec{
		{Name: "reader", Secret: readerSecret, Scopes: []string{echotools.ScopeTools}},
		{Name: "analyst", Secret: analystSecret, Scopes: []string{echotools.ScopeTools, echotools.ScopeSQL}},
		{Name: "script", Secret: scriptSecret, Scopes: []string{echotools.ScopeTools}, RatePerSecond: 0.01, Burst: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	logCore, logs := observer.New(zapcore.DebugLevel)
	a := &api{env: env, store: st, reg: reg, audit: &auditLines{}, logs: logs}
	srv := httptest.NewServer(echoapi.NewHandler(echoapi.Options{
		Registry: reg, Auth: auth, Audit: echoapi.NewAuditLog(a.audit, nil, nil),
		RatePerSecond: 1000, Burst: 1000, Version: version, SchemaVersion: echostore.SchemaVersion,
		Logger: zap.New(logCore),
	}))
	t.Cleanup(srv.Close)
	a.url = srv.URL
	return a
}

var testLimits = echostore.QueryLimits{MaxRows: 10_000, MaxBytes: 64 << 10, Timeout: 500 * time.Millisecond}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) errorBody(t *testing.T) echoapi.ErrorBody {
	t.Helper()
	var e echoapi.ErrorBody
	if err := json.Unmarshal(a.body, &e); err != nil {
		t.Fatalf("status %d, not an error body: %s", a.status, a.body)
	}
	return e
}

func (a *api) do(t *testing.T, method, path, secret, body string) answer {
	t.Helper()
	return a.doContext(t, context.Background(), method, path, secret, body)
}

func (a *api) doContext(t *testing.T, ctx context.Context, method, path, secret, body string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, a.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: raw}
}

// eventCount asks the store through the API how many rows it holds.
func (a *api) eventCount(t *testing.T) int64 {
	t.Helper()
	got := a.do(t, "POST", "/api/v1/sql", analystSecret, countEventsSQL)
	var res echostore.QueryResult
	if err := json.Unmarshal(got.body, &res); err != nil || got.status != http.StatusOK || len(res.Rows) != 1 {
		t.Fatalf("count: %d %s", got.status, got.body)
	}
	return int64(res.Rows[0][0].(float64))
}

func near(got, want float64) bool { return math.Abs(got-want) < 1e-9 }

// The tools over HTTP answer the planted data: gpu-5 is the one straggler, 14.9 ms
// behind a median of 10.1 with a MAD of 0.3; the SQL route counts every planted row and
// answers exactly what run_analysis does.
func TestToolsOverHTTPAnswerThePlantedData(t *testing.T) {
	a := startAPI(t, testLimits)

	got := a.do(t, "POST", "/api/v1/tools/find_outlier_nodes", readerSecret, outlierArgs)
	var out echotools.OutlierOutput
	if err := json.Unmarshal(got.body, &out); err != nil || got.status != http.StatusOK {
		t.Fatalf("find_outlier_nodes: %d %s", got.status, got.body)
	}
	if out.Groups != 8 || !near(out.Median, 10.1) || !near(out.MAD, 0.3) || len(out.Outliers) != 1 ||
		out.Outliers[0].Node != "gpu-5" || !near(out.Outliers[0].Lag, 14.9) || out.Outliers[0].Points != 100 {
		t.Errorf("find_outlier_nodes: %+v", out)
	}
	if ct := got.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}

	if n := a.eventCount(t); n != echostoretest.PlantedRows {
		t.Errorf("SELECT count(*): %d, want %d", n, echostoretest.PlantedRows)
	}
	viaTool := a.do(t, "POST", "/api/v1/tools/run_analysis", analystSecret, countEventsSQL)
	viaSQL := a.do(t, "POST", "/api/v1/sql", analystSecret, countEventsSQL)
	if viaTool.status != http.StatusOK || string(viaTool.body) != string(viaSQL.body) {
		t.Errorf("run_analysis answered %d %s, /api/v1/sql %s", viaTool.status, viaTool.body, viaSQL.body)
	}

	// An empty body is the empty argument object, as over MCP: the last hour, which
	// holds none of the planted rows.
	empty := a.do(t, "POST", "/api/v1/tools/cluster_summary", readerSecret, "")
	if empty.status != http.StatusOK || !strings.HasSuffix(string(empty.body), `"clusters":[]}`+"\n") {
		t.Errorf("empty body: %d %s", empty.status, empty.body)
	}

	list := a.do(t, "GET", "/api/v1/tools/list", readerSecret, "")
	var tools struct {
		Tools []struct {
			Name        string `json:"name"`
			Annotations struct {
				ReadOnlyHint bool `json:"readOnlyHint"`
			} `json:"annotations"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(list.body, &tools); err != nil || list.status != http.StatusOK {
		t.Fatalf("tools/list: %d %s", list.status, list.body)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if !tool.Annotations.ReadOnlyHint {
			t.Errorf("%s is not annotated read-only", tool.Name)
		}
	}
	var registered []string
	for _, tool := range a.reg.List() {
		registered = append(registered, tool.Name)
	}
	if !slices.Equal(names, registered) {
		t.Errorf("tools/list %v, registry %v", names, registered)
	}
}

// versions needs no token and tells only major.minor; health tells the version and
// schema only to a caller with a valid token, and refuses a wrong one.
func TestVersionsAndHealthTellOnlyWhatTheCallerMaySee(t *testing.T) {
	a := startAPI(t, testLimits)
	for _, c := range []struct {
		path, secret string
		status       int
		body         string
	}{
		{"/api/versions", "", 200, `{"fathom":"0.4","versions":["v1"]}`},
		{"/api/v1/health", "", 200, `{"status":"ok"}`},
		{"/api/v1/health", readerSecret, 200, fmt.Sprintf(`{"schema_version":%d,"status":"ok","version":"0.4.2"}`, echostore.SchemaVersion)},
	} {
		got := a.do(t, "GET", c.path, c.secret, "")
		if got.status != c.status || strings.TrimSpace(string(got.body)) != c.body {
			t.Errorf("GET %s (token %q): %d %s, want %d %s", c.path, c.secret, got.status, got.body, c.status, c.body)
		}
	}
	if got := a.do(t, "GET", "/api/v1/health", "not-a-configured-token", ""); got.status != http.StatusUnauthorized || got.errorBody(t).Error.Code != "unauthenticated" {
		t.Errorf("health with a wrong token: %d %s", got.status, got.body)
	}
}

// refusal is a request the API must refuse, and how.
type refusal struct {
	name, method, path, secret, body string
	status                           int
	code, message                    string
}

// Every refusal has its status, its stable code and a message that says what was
// wrong; 429 and 503 say when to retry; an internal error keeps its details; the store
// is unchanged afterwards; each refusal is audited with its code and the caller; and
// each status a documented route gave is in the OpenAPI document for that route.
func TestRefusalsAreClassifiedAuditedAndLoseNothing(t *testing.T) {
	a := startAPI(t, testLimits)
	sql := func(q string) string { b, _ := json.Marshal(map[string]string{"sql": q}); return string(b) }
	cases := []refusal{
		{"no token", "GET", "/api/v1/tools/list", "", "", 401, "unauthenticated", "missing or unknown bearer token"},
		{"unknown token", "GET", "/api/v1/tools/list", "reader-secret-0123456780", "", 401, "unauthenticated", "missing or unknown bearer token"},
		{"no token on openapi", "GET", "/api/v1/openapi.json", "", "", 401, "unauthenticated", "missing or unknown bearer token"},
		{"tools token on /sql", "POST", "/api/v1/sql", readerSecret, countEventsSQL, 403, "forbidden", `token "reader" lacks scope "sql"`},
		{"tools token on run_analysis", "POST", "/api/v1/tools/run_analysis", readerSecret, countEventsSQL, 403, "forbidden", `token "reader" lacks scope "sql"`},
		{"body not JSON", "POST", "/api/v1/tools/find_outlier_nodes", readerSecret, `{"signal":`, 400, "invalid_argument", "arguments are not JSON"},
		{"unknown argument", "POST", "/api/v1/tools/find_outlier_nodes", readerSecret, `{"signal":"x","rack":1}`, 400, "invalid_argument", "rack"},
		{"since after until", "POST", "/api/v1/tools/cluster_summary", readerSecret, `{"since":"2026-03-02T00:00:00Z","until":"2026-03-01T00:00:00Z"}`, 400, "invalid_argument", "must be before until"},
		{"unknown tool", "POST", "/api/v1/tools/drop_events", analystSecret, `{}`, 404, "unknown_tool", `"drop_events"`},
		{"body over 1 MiB", "POST", "/api/v1/sql", analystSecret, sql("SELECT '" + strings.Repeat("x", 1<<20) + "'"), 400, "bad_request", "request body too large"},
		{"DELETE", "POST", "/api/v1/sql", analystSecret, sql("DELETE FROM events"), 400, "not_read_only", ""},
		{"DROP after a SELECT", "POST", "/api/v1/sql", analystSecret, sql("SELECT 1; DROP TABLE events"), 400, "not_read_only", ""},
		{"file read", "POST", "/api/v1/sql", analystSecret, sql("SELECT * FROM read_csv('/etc/passwd')"), 400, "not_read_only", "read_csv"},
		{"instance-wide logging", "POST", "/api/v1/tools/run_analysis", analystSecret, sql("SELECT * FROM enable_logging()"), 400, "not_read_only", "enable_logging"},
		{"no such column", "POST", "/api/v1/sql", analystSecret, sql("SELECT no_such_column FROM events"), 400, "query_failed", "no_such_column"},
		{"64 KiB result cap", "POST", "/api/v1/sql", analystSecret, sql("SELECT * FROM events"), 422, "result_too_large", ""},
		{"0.5 s timeout", "POST", "/api/v1/sql", analystSecret, sql("SELECT count(*) FROM range(100000) a, range(100000) b WHERE a.range * b.range = -1"), 504, "query_timeout", ""},
	}
	for _, c := range cases {
		got := a.do(t, c.method, c.path, c.secret, c.body)
		e := got.errorBody(t)
		if got.status != c.status || e.Error.Code != c.code || !strings.Contains(e.Error.Message, c.message) {
			t.Errorf("%s: %d %s: %q, want %d %s mentioning %q", c.name, got.status, e.Error.Code, e.Error.Message, c.status, c.code, c.message)
		}
	}

	// The only SQL slot is taken: the next query is told to come back.
	a.env.SQLSlots <- struct{}{}
	busy := a.do(t, "POST", "/api/v1/sql", analystSecret, countEventsSQL)
	if busy.status != http.StatusServiceUnavailable || busy.errorBody(t).Error.Code != "busy" || busy.header.Get("Retry-After") != "1" {
		t.Errorf("with no free slot: %d %v %s", busy.status, busy.header, busy.body)
	}
	<-a.env.SQLSlots
	cases = append(cases, refusal{name: "busy", method: "POST", path: "/api/v1/sql", secret: analystSecret, status: 503, code: "busy"})

	if n := a.eventCount(t); n != echostoretest.PlantedRows {
		t.Errorf("after the refusals the store holds %d rows, want %d", n, echostoretest.PlantedRows)
	}
	tables := a.do(t, "POST", "/api/v1/sql", analystSecret, sql("SELECT count(*) FROM information_schema.tables WHERE table_name = 'events'"))
	if !strings.Contains(string(tables.body), `"rows":[[1]]`) {
		t.Errorf("the events table after the refusals: %s", tables.body)
	}

	principals := map[string]string{"": "-", readerSecret: "reader", analystSecret: "analyst", "reader-secret-0123456780": "-"}
	audited := a.audit.all()
	for _, c := range cases {
		found := slices.ContainsFunc(audited, func(e echoapi.AuditEntry) bool {
			return e.Transport == "http" && e.Method == c.method && e.Path == c.path && e.Status == c.status && e.Code == c.code && e.Principal == principals[c.secret]
		})
		if !found {
			t.Errorf("%s: no audit line %s %s %d %s by %s in %+v", c.name, c.method, c.path, c.status, c.code, principals[c.secret], audited)
		}
	}

	doc := openAPIDocument(t, a)
	for _, c := range cases {
		if c.code == "unknown_tool" {
			continue // a name the registry lacks has no operation to document it
		}
		responses := doc.Paths[c.path][strings.ToLower(c.method)].Responses
		if _, ok := responses[fmt.Sprint(c.status)]; !ok {
			t.Errorf("%s: %s %s answered %d, which its OpenAPI operation does not list (%v)", c.name, c.method, c.path, c.status, slices.Sorted(maps.Keys(responses)))
		}
	}
}

// A token's rate limit is its own: the third request in its burst of two is told to
// retry later, while another token is still served. The refusal is audited.
func TestRateLimitIsPerToken(t *testing.T) {
	a := startAPI(t, testLimits)
	for i := range 2 {
		if got := a.do(t, "GET", "/api/v1/tools/list", scriptSecret, ""); got.status != http.StatusOK {
			t.Fatalf("request %d within the burst: %d %s", i+1, got.status, got.body)
		}
	}
	got := a.do(t, "GET", "/api/v1/tools/list", scriptSecret, "")
	e := got.errorBody(t)
	if got.status != http.StatusTooManyRequests || e.Error.Code != "rate_limited" || got.header.Get("Retry-After") != "1" ||
		e.Error.Message != "rate limit exceeded: script may make 0.01 requests per second (burst 2)" {
		t.Errorf("third request: %d %v %+v", got.status, got.header, e)
	}
	if other := a.do(t, "GET", "/api/v1/tools/list", readerSecret, ""); other.status != http.StatusOK {
		t.Errorf("another token after script's limit: %d %s", other.status, other.body)
	}
	if !slices.ContainsFunc(a.audit.all(), func(e echoapi.AuditEntry) bool {
		return e.Principal == "script" && e.Status == http.StatusTooManyRequests && e.Code == "rate_limited"
	}) {
		t.Errorf("the 429 is not audited: %+v", a.audit.all())
	}
}

type openAPI struct {
	OpenAPI string `json:"openapi"`
	Paths   map[string]map[string]struct {
		Scope     string         `json:"x-scope"`
		Responses map[string]any `json:"responses"`
	} `json:"paths"`
	Components struct {
		Schemas struct {
			Error struct {
				Properties struct {
					Error struct {
						Properties struct {
							Code struct {
								Enum []string `json:"enum"`
							} `json:"code"`
						} `json:"properties"`
					} `json:"error"`
				} `json:"properties"`
			} `json:"Error"`
		} `json:"schemas"`
	} `json:"components"`
}

func openAPIDocument(t *testing.T, a *api) openAPI {
	t.Helper()
	got := a.do(t, "GET", "/api/v1/openapi.json", readerSecret, "")
	var doc openAPI
	if err := json.Unmarshal(got.body, &doc); err != nil || got.status != http.StatusOK {
		t.Fatalf("openapi.json: %d %s", got.status, got.body)
	}
	return doc
}

// The document has one operation per registered tool, each naming the scope the
// handler enforces, and the error codes are exactly those the API can answer.
func TestOpenAPIDescribesTheRegistry(t *testing.T) {
	a := startAPI(t, testLimits)
	doc := openAPIDocument(t, a)
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q", doc.OpenAPI)
	}
	want := []string{"/api/v1/health", "/api/v1/openapi.json", "/api/v1/sql", "/api/v1/tools/list", "/api/versions"}
	for _, tool := range a.reg.List() {
		want = append(want, "/api/v1/tools/"+tool.Name)
		if scope := doc.Paths["/api/v1/tools/"+tool.Name]["post"].Scope; scope != tool.Scope {
			t.Errorf("%s: x-scope %q, the handler enforces %q", tool.Name, scope, tool.Scope)
		}
	}
	slices.Sort(want)
	if got := slices.Sorted(maps.Keys(doc.Paths)); !slices.Equal(got, want) {
		t.Errorf("paths %v, want %v", got, want)
	}
	if doc.Paths["/api/v1/tools/run_analysis"]["post"].Scope != echotools.ScopeSQL || doc.Paths["/api/v1/sql"]["post"].Scope != echotools.ScopeSQL {
		t.Errorf("run_analysis and /api/v1/sql must need the sql scope")
	}
	codes := []string{"bad_request", "busy", "forbidden", "internal", "invalid_argument", "not_read_only", "query_failed",
		"query_timeout", "rate_limited", "result_too_large", "store_closed", "unauthenticated", "unknown_tool"}
	if got := doc.Components.Schemas.Error.Properties.Error.Properties.Code.Enum; !slices.Equal(got, codes) {
		t.Errorf("error codes %v, want %v", got, codes)
	}
}

// A store that fails underneath a tool is an internal error: a 500 that says so and
// nothing of the store's own message, over HTTP and MCP alike, audited like any answer;
// the store's message is in the log, once per call, with the call's transport, tool
// and caller.
func TestInternalErrorsKeepTheirDetailsInTheLog(t *testing.T) {
	a := startAPI(t, testLimits)
	s := mcpSession(t, a.url, readerSecret)
	// find_outlier_nodes reads the rollup; DuckDB names the table it cannot find.
	if _, err := a.store.DB().Exec(`DROP TABLE signal_rollup`); err != nil {
		t.Fatal(err)
	}
	const detail = "Table with name signal_rollup does not exist"
	res := callTool(t, s, "find_outlier_nodes", outlierArgs)
	if text := resultText(t, res); !res.IsError || text != "internal: internal error" {
		t.Errorf("a failing store over MCP: %v %q", res.IsError, text)
	}
	got := a.do(t, "POST", "/api/v1/tools/find_outlier_nodes", readerSecret, outlierArgs)
	if e := got.errorBody(t); got.status != http.StatusInternalServerError || e.Error.Code != "internal" || e.Error.Message != "internal error" {
		t.Errorf("a failing store over HTTP: %d %s", got.status, got.body)
	}
	if strings.Contains(string(got.body), "signal_rollup") {
		t.Errorf("the HTTP answer names the store's internals: %s", got.body)
	}
	internal := 0
	for _, e := range a.audit.all() {
		if e.Tool == "find_outlier_nodes" && e.Status == http.StatusInternalServerError && e.Code == "internal" {
			internal++
		}
	}
	if internal != 2 {
		t.Errorf("%d audited internal errors, want the MCP call and the HTTP request: %+v", internal, a.audit.all())
	}

	logged := a.logs.All()
	if len(logged) != 2 {
		t.Fatalf("%d log entries, want one per internal error: %+v", len(logged), logged)
	}
	for i, want := range []map[string]any{
		{"transport": "mcp", "tool": "find_outlier_nodes", "principal": "reader"},
		{"transport": "http", "tool": "find_outlier_nodes", "principal": "reader", "path": "/api/v1/tools/find_outlier_nodes"},
	} {
		e := logged[i]
		fields := e.ContextMap()
		errText, _ := fields["error"].(string)
		delete(fields, "error")
		if e.Level != zapcore.ErrorLevel || e.Message != "Echo API internal error" || !maps.Equal(fields, want) ||
			!strings.HasPrefix(errText, "find_outlier_nodes: ") || !strings.Contains(errText, detail) {
			t.Errorf("log entry %d: %s %q %v error %q; want an error entry with %v and the store's %q", i, e.Level, e.Message, fields, errText, want, detail)
		}
	}
}

// Calls racing the store's Close, over HTTP and MCP, are answered: with the planted
// data while the store is open, and with 503 store_closed (Retry-After) or the MCP
// error "store_closed: ..." once it closes, never an internal error. After Close every
// call is store_closed, audited so, and nothing is logged as internal.
func TestCallsRacingCloseAreAnsweredStoreClosed(t *testing.T) {
	a := startAPI(t, testLimits)
	s := mcpSession(t, a.url, readerSecret)
	type outcome struct {
		transport, what string
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		wg       sync.WaitGroup
	)
	record := func(transport, what string) {
		mu.Lock()
		defer mu.Unlock()
		outcomes = append(outcomes, outcome{transport, what})
	}
	for range 4 {
		wg.Go(func() {
			for {
				what := callOverHTTP(a.url+"/api/v1/tools/find_outlier_nodes", readerSecret, outlierArgs)
				record("http", what)
				if what != "answered" {
					return
				}
			}
		})
		wg.Go(func() {
			for {
				res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "find_outlier_nodes", Arguments: json.RawMessage(outlierArgs)})
				what := fmt.Sprintf("%+v %v", res, err)
				if err == nil && len(res.Content) == 1 {
					text := res.Content[0].(*mcp.TextContent).Text
					switch {
					case !res.IsError && strings.Contains(text, `"node":"gpu-5"`):
						what = "answered"
					case res.IsError && strings.HasPrefix(text, "store_closed: echo store is closed"):
						what = "closed"
					default:
						what = text
					}
				}
				record("mcp", what)
				if what != "answered" {
					return
				}
			}
		})
	}
	// Let every caller be answered at least once before the store goes.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(outcomes)
		mu.Unlock()
		if n >= 16 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := a.store.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	closed := map[string]int{}
	for _, o := range outcomes {
		switch o.what {
		case "answered":
		case "closed":
			closed[o.transport]++
		default:
			t.Errorf("a call over %s racing Close: %s", o.transport, o.what)
		}
	}
	if closed["http"] != 4 || closed["mcp"] != 4 {
		t.Errorf("callers told store_closed: %v, want 4 over each transport", closed)
	}

	got := a.do(t, "POST", "/api/v1/sql", analystSecret, countEventsSQL)
	if e := got.errorBody(t); got.status != http.StatusServiceUnavailable || e.Error.Code != "store_closed" || e.Error.Message != "echo store is closed" {
		t.Errorf("SQL after Close: %d %s", got.status, got.body)
	}
	audited := a.audit.all()
	if !slices.ContainsFunc(audited, func(e echoapi.AuditEntry) bool {
		return e.Path == "/api/v1/sql" && e.Status == http.StatusServiceUnavailable && e.Code == "store_closed" && e.Principal == "analyst"
	}) {
		t.Errorf("no audit line for the refused SQL: %+v", audited)
	}
	if logged := a.logs.FilterMessage("Echo API internal error").All(); len(logged) != 0 {
		t.Errorf("a closed store was logged as an internal error: %+v", logged)
	}
}

// callOverHTTP calls find_outlier_nodes from a goroutine of its own, where a test may
// not stop: "answered" with the planted straggler, "closed" for 503 store_closed with
// Retry-After, else what came back.
func callOverHTTP(url, secret, body string) string {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	var e echoapi.ErrorBody
	switch {
	case resp.StatusCode == http.StatusOK && strings.Contains(string(raw), `"node":"gpu-5"`):
		return "answered"
	case resp.StatusCode == http.StatusServiceUnavailable && json.Unmarshal(raw, &e) == nil && e.Error.Code == "store_closed" && resp.Header.Get("Retry-After") == "1":
		return "closed"
	}
	return fmt.Sprintf("%d %s", resp.StatusCode, raw)
}

// A client that hangs up during a long query frees its SQL slot: with one slot, the
// next query is answered at once instead of "busy" until the first would have ended.
// The hung-up request is audited too.
func TestAHungUpClientFreesItsSQLSlot(t *testing.T) {
	a := startAPI(t, echostore.QueryLimits{MaxRows: 10_000, MaxBytes: 1 << 20, Timeout: time.Minute})
	ctx, hangUp := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", a.url+"/api/v1/sql",
			strings.NewReader(`{"sql":"SELECT count(*) FROM range(100000) a, range(100000) b WHERE a.range * b.range = -1"}`))
		req.Header.Set("Authorization", "Bearer "+analystSecret)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("the long query answered %d", resp.StatusCode)
		}
		done <- err
	}()
	// The query holds the slot once the server has taken it.
	deadline := time.Now().Add(10 * time.Second)
	for len(a.env.SQLSlots) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if len(a.env.SQLSlots) == 0 {
		t.Fatal("the long query never took the SQL slot")
	}
	hangUp()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the hung-up client: %v", err)
	}
	var answered bool
	for time.Now().Before(deadline) {
		got := a.do(t, "POST", "/api/v1/sql", analystSecret, countEventsSQL)
		if got.status == http.StatusOK {
			answered = strings.Contains(string(got.body), fmt.Sprintf(`"rows":[[%d]]`, echostoretest.PlantedRows))
			break
		}
		if got.errorBody(t).Error.Code != "busy" {
			t.Fatalf("after the hang-up: %d %s", got.status, got.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !answered {
		t.Fatal("the SQL slot was still held 10 s after its client hung up")
	}
	sqlLines := 0
	for _, e := range a.audit.all() {
		if e.Path == "/api/v1/sql" && e.Principal == "analyst" && e.Status != http.StatusServiceUnavailable {
			sqlLines++
		}
	}
	if sqlLines != 2 {
		t.Errorf("audited %d SQL requests that were not busy, want the hung-up one and the count: %+v", sqlLines, a.audit.all())
	}
}

type bearer struct {
	secret string
	next   http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.secret)
	return b.next.RoundTrip(r)
}

func connectMCP(url, secret string) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "echoapi-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{secret, http.DefaultTransport}}}, nil)
}

func mcpSession(t *testing.T, url, secret string) *mcp.ClientSession {
	t.Helper()
	s, err := connectMCP(url, secret)
	if err != nil {
		t.Fatalf("MCP with token %q: %v", secret, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func callTool(t *testing.T, s *mcp.ClientSession, tool, args string) *mcp.CallToolResult {
	t.Helper()
	var arguments map[string]any
	if err := json.Unmarshal([]byte(args), &arguments); err != nil {
		t.Fatal(err)
	}
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: arguments})
	if err != nil {
		t.Fatalf("MCP %s: %v", tool, err)
	}
	return res
}

func resultText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("%d content items", len(res.Content))
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content %T", res.Content[0])
	}
	return text.Text
}

// MCP at /mcp: the same tools and the same bytes as HTTP; the tool's scope is checked
// per call from the token on that request; errors come back as isError results with
// "code: message"; the prompt and schema resource are served; no token, no session.
// Each tool call is audited under the token's name.
func TestMCPOverHTTPServesTheSameToolsUnderTheSameScopes(t *testing.T) {
	a := startAPI(t, testLimits)
	reader := mcpSession(t, a.url, readerSecret)
	ctx := context.Background()

	listed, err := reader.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range listed.Tools {
		names = append(names, tool.Name)
	}
	var registered []string
	for _, tool := range a.reg.List() {
		registered = append(registered, tool.Name)
	}
	// MCP lists by name, the registry in its own order.
	slices.Sort(registered)
	if !slices.Equal(names, registered) {
		t.Errorf("MCP tools/list %v, registry %v", names, registered)
	}

	res := callTool(t, reader, "find_outlier_nodes", outlierArgs)
	overHTTP := a.do(t, "POST", "/api/v1/tools/find_outlier_nodes", readerSecret, outlierArgs)
	if text := resultText(t, res); res.IsError || text+"\n" != string(overHTTP.body) {
		t.Errorf("MCP answered %q, HTTP %q", text, overHTTP.body)
	}
	structured, _ := json.Marshal(res.StructuredContent)
	var out echotools.OutlierOutput
	if err := json.Unmarshal(structured, &out); err != nil || len(out.Outliers) != 1 || out.Outliers[0].Node != "gpu-5" || !near(out.Outliers[0].Lag, 14.9) {
		t.Errorf("structuredContent %s", structured)
	}

	for _, c := range []struct{ tool, args, text string }{
		{"run_analysis", countEventsSQL, `forbidden: token lacks the scope this needs: token "reader" lacks scope "sql"`},
		{"find_outlier_nodes", `{"signal":"x","by":"rack"}`, "invalid_argument: "},
	} {
		res := callTool(t, reader, c.tool, c.args)
		if text := resultText(t, res); !res.IsError || !strings.HasPrefix(text, c.text) {
			t.Errorf("%s(%s) as reader: isError %v, %q, want it to start %q", c.tool, c.args, res.IsError, text, c.text)
		}
	}
	if _, err := reader.CallTool(ctx, &mcp.CallToolParams{Name: "drop_events"}); err == nil || !strings.Contains(err.Error(), "drop_events") {
		t.Errorf("an unknown tool over MCP: %v", err)
	}

	analyst := mcpSession(t, a.url, analystSecret)
	if text := resultText(t, callTool(t, analyst, "run_analysis", countEventsSQL)); text != fmt.Sprintf(`{"columns":["n"],"rows":[[%d]],"row_count":1,"truncated":false}`, echostoretest.PlantedRows) {
		t.Errorf("run_analysis as analyst: %s", text)
	}
	hostile := callTool(t, analyst, "run_analysis", `{"sql":"DELETE FROM events"}`)
	if text := resultText(t, hostile); !hostile.IsError || !strings.HasPrefix(text, "not_read_only: ") {
		t.Errorf("DELETE over MCP: %v %q", hostile.IsError, text)
	}
	if n := a.eventCount(t); n != echostoretest.PlantedRows {
		t.Errorf("after the DELETE the store holds %d rows", n)
	}

	prompt, err := reader.GetPrompt(ctx, &mcp.GetPromptParams{Name: "investigate", Arguments: map[string]string{"cluster": "c1", "window": "30m"}})
	if err != nil || len(prompt.Messages) != 1 {
		t.Fatalf("investigate: %v %+v", err, prompt)
	}
	if text := prompt.Messages[0].Content.(*mcp.TextContent).Text; !strings.HasPrefix(text, "You are investigating why training on cluster c1 is slow, over the last 30m.") {
		t.Errorf("investigate prompt: %q", text)
	}
	schema, err := reader.ReadResource(ctx, &mcp.ReadResourceParams{URI: echoapi.SchemaURI})
	if err != nil || len(schema.Contents) != 1 || !strings.HasPrefix(schema.Contents[0].Text, echostore.SchemaDDL()) {
		t.Errorf("echo://schema: %v %+v", err, schema)
	}

	if s, err := connectMCP(a.url, ""); err == nil {
		s.Close()
		t.Error("an MCP session without a token was accepted")
	}

	audited := a.audit.all()
	for _, want := range []echoapi.AuditEntry{
		{Transport: "mcp", Principal: "reader", Tool: "find_outlier_nodes", Status: 200},
		{Transport: "mcp", Principal: "reader", Tool: "run_analysis", Status: 403, Code: "forbidden"},
		{Transport: "mcp", Principal: "reader", Tool: "find_outlier_nodes", Status: 400, Code: "invalid_argument"},
		{Transport: "mcp", Principal: "analyst", Tool: "run_analysis", Status: 400, Code: "not_read_only"},
		{Transport: "http", Principal: "-", Method: "POST", Path: "/mcp", Status: 401, Code: "unauthenticated"},
	} {
		if !slices.ContainsFunc(audited, func(e echoapi.AuditEntry) bool {
			return e.Transport == want.Transport && e.Principal == want.Principal && e.Tool == want.Tool && e.Status == want.Status &&
				e.Code == want.Code && e.Method == want.Method && e.Path == want.Path
		}) {
			t.Errorf("no audit line %+v in %+v", want, audited)
		}
	}
}

// failingWriter is an audit log on a full disk.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// An audit line that cannot be written is counted and never fails the request it
// describes; every entry is observed either way.
func TestAnUnwritableAuditLogCountsItsDropsAndServes(t *testing.T) {
	_, _, reg := plantedRegistry(t, testLimits)
	auth, err := echoapi.NewAuthenticator([]echoapi.TokenSpec{{Name: "reader", Secret: readerSecret, Scopes: []string{echotools.ScopeTools}}})
	if err != nil {
		t.Fatal(err)
	}
	var dropped, observed atomic.Int64
	srv := httptest.NewServer(echoapi.NewHandler(echoapi.Options{
		Registry: reg, Auth: auth, RatePerSecond: 1000, Burst: 1000, Version: version,
		Audit: echoapi.NewAuditLog(failingWriter{}, func() { dropped.Add(1) }, func(echoapi.AuditEntry) { observed.Add(1) }),
	}))
	defer srv.Close()
	a := &api{url: srv.URL}
	if got := a.do(t, "POST", "/api/v1/tools/find_outlier_nodes", readerSecret, outlierArgs); got.status != http.StatusOK || !strings.Contains(string(got.body), `"node":"gpu-5"`) {
		t.Errorf("with the audit log failing: %d %s", got.status, got.body)
	}
	if got := a.do(t, "GET", "/api/v1/tools/list", "", ""); got.status != http.StatusUnauthorized {
		t.Errorf("a refusal with the audit log failing: %d", got.status)
	}
	if dropped.Load() != 2 || observed.Load() != 2 {
		t.Errorf("dropped %d, observed %d, want 2 and 2", dropped.Load(), observed.Load())
	}
}

// Serve on a Unix socket with a LocalCaller: no token is asked for, the caller holds
// the sql scope, the audit log names the caller by the kernel's credentials (this very
// process), and the caller's rate limit is the server's.
func TestServeNamesASocketCallerByItsCredentials(t *testing.T) {
	_, _, reg := plantedRegistry(t, testLimits)
	auth, err := echoapi.NewAuthenticator(nil)
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	audit := &auditLines{}
	srv := echoapi.Serve(l, echoapi.NewHandler(echoapi.Options{
		Registry: reg, Auth: auth, Audit: echoapi.NewAuditLog(audit, nil, nil),
		RatePerSecond: 0.01, Burst: 2, Version: version, LocalCaller: "local",
	}), func(err error) { t.Errorf("serve: %v", err) })
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	post := func() (int, string) {
		resp, err := client.Post("http://echo/api/v1/sql", "application/json", strings.NewReader(countEventsSQL))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	status, body := post()
	if status != http.StatusOK || !strings.Contains(body, fmt.Sprintf(`"rows":[[%d]]`, echostoretest.PlantedRows)) {
		t.Errorf("SQL over the socket without a token: %d %s", status, body)
	}
	post()
	if status, body := post(); status != http.StatusTooManyRequests || !strings.Contains(body, "local may make 0.01 requests per second (burst 2)") {
		t.Errorf("third request over a burst of 2: %d %s", status, body)
	}
	audited := audit.all()
	remote := "unix" // only Linux's SO_PEERCRED is read
	if runtime.GOOS == "linux" {
		remote = fmt.Sprintf("unix uid=%d pid=%d", os.Getuid(), os.Getpid())
	}
	if len(audited) != 3 || audited[0].Principal != "local" || audited[0].Remote != remote || audited[0].Status != 200 || audited[2].Code != "rate_limited" {
		t.Errorf("audit %+v, want 3 lines by local from %q", audited, remote)
	}
}

// Serve reports a listener that fails, rather than stopping silently.
func TestServeReportsAFailedListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	stopped := make(chan error, 1)
	srv := echoapi.Serve(l, http.NotFoundHandler(), func(err error) { stopped <- err })
	defer srv.Close()
	select {
	case err := <-stopped:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("onError heard %v, want the closed listener", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a closed listener was not reported")
	}
}
