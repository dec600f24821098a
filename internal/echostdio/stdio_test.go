package echostdio_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/fathom-gpu/fathom/internal/echoapi"
	"github.com/fathom-gpu/fathom/internal/echostdio"
	"github.com/fathom-gpu/fathom/internal/echotools"
	"github.com/fathom-gpu/fathom/internal/testsupport/echosockettest"
	"github.com/fathom-gpu/fathom/internal/testsupport/echostoretest"
)

var plantedAt = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	window = `"since":"2026-03-01T12:00:00Z","until":"2026-03-01T12:30:00Z"`
	// serveDBVariable makes the test binary `fathom mcp --db`: ServeStoreCopy on its own
	// stdin and stdout, which are the process's and cannot be handed in.
	serveDBVariable    = "ECHOSTDIO_TEST_SERVE_DB"
	serveRatesVariable = "ECHOSTDIO_TEST_SERVE_RATES"
)

func TestMain(m *testing.M) {
	if db := os.Getenv(serveDBVariable); db != "" {
		if err := echostdio.ServeStoreCopy(context.Background(), db, os.Getenv(serveRatesVariable), "0.4.2", os.Stderr,
			zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.Lock(os.Stderr), zapcore.InfoLevel))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func near(got, want float64) bool { return math.Abs(got-want) < 1e-9 }

func call(t *testing.T, s *mcp.ClientSession, tool, args string) *mcp.CallToolResult {
	t.Helper()
	var arguments map[string]any
	if err := json.Unmarshal([]byte(args), &arguments); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: arguments})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

func decode[T any](t *testing.T, res *mcp.CallToolResult) T {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %s", res.Content[0].(*mcp.TextContent).Text)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var out T
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return out
}

func errorText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if !res.IsError || len(res.Content) != 1 {
		t.Fatalf("want one error text, got %+v", res)
	}
	return res.Content[0].(*mcp.TextContent).Text
}

// checkPlantedAnswers asks what every transport must answer alike from the planted
// rows: gpu-5 the one straggler, 14.9 ms behind; every row counted; a DELETE refused
// and nothing deleted.
func checkPlantedAnswers(t *testing.T, s *mcp.ClientSession) {
	t.Helper()
	out := decode[echotools.OutlierOutput](t, call(t, s, "find_outlier_nodes", `{"signal":"nccl.allreduce.duration",`+window+`}`))
	if out.Groups != 8 || !near(out.Median, 10.1) || len(out.Outliers) != 1 || out.Outliers[0].Node != "gpu-5" || !near(out.Outliers[0].Lag, 14.9) {
		t.Errorf("find_outlier_nodes: %+v", out)
	}
	if text := errorText(t, call(t, s, "run_analysis", `{"sql":"DELETE FROM events"}`)); !strings.HasPrefix(text, "not_read_only: ") {
		t.Errorf("DELETE: %q", text)
	}
	count := decode[struct{ Rows [][]float64 }](t, call(t, s, "run_analysis", `{"sql":"SELECT count(*) FROM events"}`))
	if len(count.Rows) != 1 || count.Rows[0][0] != echostoretest.PlantedRows {
		t.Errorf("count after the DELETE: %v, want %d", count.Rows, echostoretest.PlantedRows)
	}
}

// bridge runs BridgeToSocket on pipes, as `fathom mcp --socket` runs it on its stdio,
// with an MCP client on the other ends. done has the bridge's return.
func bridge(t *testing.T, socket string) (session *mcp.ClientSession, done <-chan error) {
	t.Helper()
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	returned := make(chan error, 1)
	go func() {
		err := echostdio.BridgeToSocket(context.Background(), socket, stdinR, stdoutW)
		stdoutW.CloseWithError(io.EOF)
		returned <- err
	}()
	client := mcp.NewClient(&mcp.Implementation{Name: "echostdio-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := client.Connect(ctx, &mcp.IOTransport{Reader: stdoutR, Writer: stdinW}, nil)
	if err != nil {
		t.Fatalf("MCP through the bridge: %v", err)
	}
	return s, returned
}

func returnedWithin(t *testing.T, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("the bridge did not return %s", what)
		return nil
	}
}

// The bridge relays MCP both ways unchanged: the collector's tools answer the planted
// data, the collector audits each call as the socket's caller, and the bridge returns
// cleanly when the agent closes its stdin.
func TestBridgeRelaysToTheCollectorsSocket(t *testing.T) {
	srv := echosockettest.ServePlanted(t, filepath.Join(t.TempDir(), "echo.sock"), plantedAt)
	s, done := bridge(t, srv.Path)

	tools, err := s.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != 12 {
		t.Fatalf("tools/list through the bridge: %v, %d tools", err, len(tools.Tools))
	}
	checkPlantedAnswers(t, s)
	prompt, err := s.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "investigate", Arguments: map[string]string{"cluster": "c1"}})
	if err != nil || !strings.Contains(prompt.Messages[0].Content.(*mcp.TextContent).Text, "training on cluster c1 is slow, over the last 1h") {
		t.Errorf("investigate through the bridge: %v %+v", err, prompt)
	}

	if err := s.Close(); err != nil {
		t.Errorf("closing the session: %v", err)
	}
	if err := returnedWithin(t, done, "after its stdin closed"); err != nil {
		t.Errorf("the bridge after stdin ended: %v, want nil", err)
	}

	var calls []string
	for _, e := range srv.Audited() {
		if e.Transport == "mcp" {
			if e.Principal != "local" {
				t.Errorf("audited as %q, want the socket's caller", e.Principal)
			}
			calls = append(calls, fmt.Sprintf("%s %d %s", e.Tool, e.Status, e.Code))
		}
	}
	want := []string{"find_outlier_nodes 200 ", "run_analysis 400 not_read_only", "run_analysis 200 "}
	if !slices.Equal(calls, want) {
		t.Errorf("the collector audited %q, want %q", calls, want)
	}
}

// When the collector goes away mid-session, the next call is answered with an error
// that names the socket, rather than left waiting, and the bridge returns an error.
func TestBridgeAnswersACallTheCollectorCannotTake(t *testing.T) {
	srv := echosockettest.ServePlanted(t, filepath.Join(t.TempDir(), "echo.sock"), plantedAt)
	s, done := bridge(t, srv.Path)
	defer s.Close()
	if res := call(t, s, "run_analysis", `{"sql":"SELECT 1"}`); res.IsError {
		t.Fatalf("before the collector stopped: %+v", res)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "run_analysis", Arguments: map[string]any{"sql": "SELECT 1"}})
	if err == nil || !strings.Contains(err.Error(), "the Echo socket "+srv.Path+": ") {
		t.Errorf("a call after the collector stopped: %v, want an error naming the socket", err)
	}
	if err := returnedWithin(t, done, "after the collector went away"); err == nil {
		t.Error("the bridge returned nil after the collector went away")
	}
}

// Without a socket at the path the bridge refuses at once and says what to check, and
// writes nothing to stdout.
func TestBridgeRefusesAPathWithoutASocket(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "echo.sock")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.sock")
	for path, want := range map[string]string{
		missing: "the Echo socket: stat " + missing + ": no such file or directory (is the standalone collector running, with echo's server.unix_socket.path set to it?)",
		plain:   plain + " is not a socket",
	} {
		var stdout bytes.Buffer
		err := echostdio.BridgeToSocket(context.Background(), path, strings.NewReader(""), &stdout)
		if err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
		if stdout.Len() != 0 {
			t.Errorf("%s: wrote %q to stdout", path, stdout.String())
		}
	}
}

// A line on stdin that is not JSON ends the relay with the parser's reason, as it ends
// `fathom mcp --db` (the SDK's stdio server), instead of leaving the agent waiting; the
// collector is asked nothing and stdout gets nothing.
func TestBridgeEndsOnALineThatIsNotJSON(t *testing.T) {
	srv := echosockettest.ServePlanted(t, filepath.Join(t.TempDir(), "echo.sock"), plantedAt)
	stdin := "garbage\n" + `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"cluster_summary","arguments":{}}}` + "\n"
	var stdout bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- echostdio.BridgeToSocket(context.Background(), srv.Path, strings.NewReader(stdin), &stdout)
	}()
	err := returnedWithin(t, done, "on a line that is not JSON")
	if err == nil || !strings.Contains(err.Error(), "invalid character 'g' looking for beginning of value") {
		t.Errorf("the bridge on garbage: %v", err)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout got %q", stdout.String())
	}
	if audited := srv.Audited(); len(audited) != 0 {
		t.Errorf("the collector was asked %+v", audited)
	}
}

// lockedBuffer is the child's stderr, written by exec's copier while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func fileDigest(t *testing.T, path string) [sha256.Size]byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(raw)
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	list, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		names = append(names, e.Name())
	}
	return names
}

// `fathom mcp --db`, as an agent starts it: the tools answer the planted data from a
// private copy, priced from the rates file, with the sql scope a local caller holds;
// the original file and its directory are exactly as they were; each tool call is an
// audit line on stderr; the copy lives in TMPDIR while serving and is gone once the
// agent closes stdin and the process exits by itself.
func TestServeStoreCopyServesAPrivateCopyOverStdio(t *testing.T) {
	original := echostoretest.PlantedFile(t, plantedAt)
	storeDir := filepath.Dir(original)
	before, beforeNames := fileDigest(t, original), dirNames(t, storeDir)
	rates := filepath.Join(t.TempDir(), "rates.yaml")
	if err := os.WriteFile(rates, []byte("rates:\n  - {provider: aws, gpu_model: H100, usd_per_gpu_hour: 4}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveDBVariable+"="+original, serveRatesVariable+"="+rates, "TMPDIR="+tmp)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "echostdio-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("fathom mcp --db: %v (stderr %s)", err, stderr)
	}

	checkPlantedAnswers(t, s)
	cost := decode[echotools.CostOutput](t, call(t, s, "get_cost", `{"signal":"nccl.allreduce.duration",`+window+`}`))
	// gpu-5's 14.9 ms lag x 100 steps x 8 ranks, at the rates file's $4 an H100 hour.
	hours := 0.0149 * 100 * 8 / 3600
	if len(cost.Stragglers) != 1 || !near(cost.TotalHours, hours) || !near(cost.TotalUSD, 4*hours) {
		t.Errorf("get_cost: %+v", cost)
	}
	if names := dirNames(t, tmp); len(names) != 1 || !strings.HasPrefix(names[0], "fathom-tools-") {
		t.Errorf("TMPDIR while serving holds %v, want the one copy", names)
	}

	if err := s.Close(); err != nil {
		t.Errorf("the server did not exit cleanly on the end of stdin: %v (stderr %s)", err, stderr)
	}
	if names := dirNames(t, tmp); len(names) != 0 {
		t.Errorf("the copy outlived the server: %v", names)
	}
	if fileDigest(t, original) != before || !slices.Equal(dirNames(t, storeDir), beforeNames) {
		t.Errorf("the original changed: %v, was %v", dirNames(t, storeDir), beforeNames)
	}

	var calls []string
	lines := bufio.NewScanner(strings.NewReader(stderr.String()))
	for lines.Scan() {
		var e echoapi.AuditEntry
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			t.Errorf("stderr line is not an audit entry: %q", lines.Text())
			continue
		}
		if e.Transport != "mcp" || e.Principal != "local" {
			t.Errorf("audit entry %+v, want transport mcp by local", e)
		}
		calls = append(calls, fmt.Sprintf("%s %d %s", e.Tool, e.Status, e.Code))
	}
	want := []string{"find_outlier_nodes 200 ", "run_analysis 400 not_read_only", "run_analysis 200 ", "get_cost 200 "}
	if !slices.Equal(calls, want) {
		t.Errorf("audited %q, want %q", calls, want)
	}
}

// A store that cannot be served is refused before anything is served, with the
// reason and the path the user gave (never the private copy's), and leaves no copy
// behind and the file as it was.
func TestServeStoreCopyRefusesWhatItCannotServe(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.duckdb")
	notAStore := filepath.Join(dir, "notes.duckdb")
	if err := os.WriteFile(notAStore, []byte("not a DuckDB file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	planted := echostoretest.PlantedFile(t, plantedAt)
	badRates := filepath.Join(dir, "rates.yaml")
	if err := os.WriteFile(badRates, []byte("rates: [oops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, db, rates, want string }{
		{"missing file", missing, "", "store file: stat " + missing + ": no such file or directory"},
		// The user's path, not the private copy's, which is gone by the time they read it.
		{"not a store", notAStore, "", "open echo store " + notAStore + ": database/sql/driver: could not connect to database: IO Error: The file \"" +
			notAStore + "\" exists, but it is not a valid DuckDB database file!"},
		{"bad rates file", planted, badRates, "rates file " + badRates + ": yaml: line 1: "},
		{"missing rates file", planted, filepath.Join(dir, "none.yaml"), "rates file: open " + filepath.Join(dir, "none.yaml") + ": no such file or directory"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := echostdio.ServeStoreCopy(ctx, c.db, c.rates, "0.4.2", io.Discard, zaptest.NewLogger(t))
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), tmp) {
			t.Errorf("%s: %v, want an error mentioning %q and not TMPDIR %s", c.name, err, c.want, tmp)
		}
		if names := dirNames(t, tmp); len(names) != 0 {
			t.Errorf("%s: left %v in TMPDIR", c.name, names)
		}
	}
	if raw, err := os.ReadFile(notAStore); err != nil || string(raw) != "not a DuckDB file\n" {
		t.Errorf("the refused file now holds %q (%v)", raw, err)
	}
}
