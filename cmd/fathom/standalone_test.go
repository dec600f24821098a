package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/fathom-gpu/fathom/internal/collectorconfig"
	"github.com/fathom-gpu/fathom/internal/echosocket"
	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// standaloneOverlay, layered over deploy/configs/standalone.yaml, shortens the chain
// window and the straggler's silence for a test of a minute, as the demo's configs do.
const standaloneOverlay = `
processors:
  causalchain:
    window: 5s
    resolve_after: 10s
  straggler:
    silent_after: 10s
`

// offLoopbackNamespaceWrapper runs the collector in a network namespace of its own
// with only loopback, brought up (a new namespace's lo is down, and nothing, not even
// 127.0.0.1, binds there until it is up). unshare(1) execs, and so does the shell:
// the collector keeps the pid the test started.
var offLoopbackNamespaceWrapper = []string{"unshare", "--net", "--", "sh", "-c", `ip link set lo up && exec "$0" "$@"`}

// The one-host story, offline: deploy/configs/standalone.yaml in a network namespace
// with only loopback traces a 3-rank fake DDP job with real BPF; one rank is slowed by
// 20% and its dispatcher thread put under CPU contention from batch-etl processes.
// Asked over MCP on the Echo socket, and again through `fathom mcp --socket` on stdio,
// the collector's own store answers the cpu_contention chain on the slow rank naming
// batch-etl, the native stacks of its CUDA calls, and the local ranks compared: the
// slow rank flagged, nobody else. Nothing of the collector's listens off loopback, the
// namespace has no other interface, and the config has no network endpoint.
func TestStandaloneTellsTheStoryWithNothingLeavingTheHost(t *testing.T) {
	privtest.RequireBPFFS(t)
	standalone := collectortest.NewRole(t, collectorconfig.Standalone).Merge(t, standaloneOverlay)
	config := standalone.Write(t)
	assertNoNetworkEndpoint(t, config)
	paths := fakegpu.Build(t)

	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	if err := os.Mkdir(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(runDir, "echo.sock")

	const ranks, slowRank = 3, 2
	slowFile := filepath.Join(dir, "slow")
	job := fakegpu.StartDDP(t, paths, fakegpu.DDPOptions{
		Ranks: ranks, Steps: 100_000, BucketBytes: 16 << 10, HostCompute: 20 * time.Millisecond, HostComputeSleeps: true,
		Gate: true, Env: []string{"FATHOM_JOB=standalone-job"},
		Slow: &fakegpu.Slowness{Rank: slowRank, Delay: 4 * time.Millisecond, WhileFile: slowFile},
	})

	// Under the namespace wrapper; the standalone config has no health check to wait
	// on, so the socket is.
	collector := standalone.StartUnder(t, offLoopbackNamespaceWrapper, "FATHOM_ECHO_SOCKET="+socket, "FATHOM_COLLECTION_INTERVAL=1s",
		"FATHOM_NODE_NAME=standalone-host", "FATHOM_CLUSTER=offline")
	collectortest.WaitFor(t, "the Echo socket", 60*time.Second, func() bool {
		st, err := os.Lstat(socket)
		return err == nil && st.Mode().Type() == os.ModeSocket
	})
	if st, _ := os.Lstat(socket); st.Mode().Perm() != 0o600 {
		t.Errorf("the socket's mode is %v, want the config's default 0600", st.Mode().Perm())
	}
	session := socketSession(t, socket)
	time.Sleep(3 * time.Second) // the receiver attaches after the extensions start
	if err := job.Release(); err != nil {
		t.Fatal(err)
	}
	waitForRows(t, session, "all three ranks", 60*time.Second,
		`SELECT count(DISTINCT rank) FROM events WHERE name = 'fathom.rank.device_wait.time'`, ranks)
	time.Sleep(10 * time.Second) // the lines settle on a healthy job first

	// The incident, as the demo plants it: 20% more host work on the slow rank, and its
	// dispatcher thread pinned to one CPU with three batch-etl hogs at nice -10.
	if err := os.WriteFile(slowFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	cpu := all.Count() - 1
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(job.Ranks[slowRank].Tid, &one); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		hog := fakegpu.StartHog(t, paths, "batch-etl", cpu)
		fakegpu.Renice(t, hog.Pid, -10)
	}
	incident := time.Now()
	t.Logf("incident: rank %d (pid %d, dispatcher %d) slowed and sharing CPU %d with 3 batch-etl", slowRank, job.Ranks[slowRank].Pid, job.Ranks[slowRank].Tid, cpu)

	// The planted chain, over the socket.
	var found chainAnswer
	collectortest.WaitFor(t, "the cpu_contention chain on the slow rank", 90*time.Second, func() bool {
		var ok bool
		found, ok = slowRankChain(t, session, slowRank)
		return ok
	})
	t.Logf("chain after %.1f s: %s %s on %s rank %d: %v; fix: %s", time.Since(incident).Seconds(), found.Severity, found.RootCause,
		found.Node, *found.Rank, found.Attributes["fathom.chain.evidence"], found.Fix)
	if found.Node != "standalone-host" || !strings.Contains(fmt.Sprint(found.Attributes["fathom.chain.evidence"]), "batch-etl") {
		t.Errorf("the chain does not name this host and batch-etl: %+v", found)
	}

	// The local ranks compared with each other: the slow one flagged by this collector's
	// own straggler processor, in its gateway role.
	flaggedQuery := `SELECT DISTINCT rank FROM events WHERE name = 'fathom.straggler'
		AND json_extract_string(attributes, '$."fathom.straggler.state"') = 'straggler' ORDER BY rank`
	collectortest.WaitFor(t, "the slow rank flagged", 60*time.Second, func() bool {
		return len(runSQL(t, session, flaggedQuery)) > 0
	})
	time.Sleep(5 * time.Second) // room for a false flag to show
	flagged := runSQL(t, session, flaggedQuery)
	if len(flagged) != 1 || fmt.Sprint(flagged[0][0]) != strconv.Itoa(slowRank) {
		t.Errorf("ranks flagged as stragglers: %v, want only rank %d", flagged, slowRank)
	}
	sources := runSQL(t, session, `SELECT DISTINCT json_extract_string(attributes, '$."fathom.straggler.source"') FROM events WHERE name = 'fathom.straggler'`)
	t.Logf("flagged %v, sources %v", flagged, sources)

	// Stacks: the native stacks of the slow rank's recorded CUDA calls.
	var stacks struct {
		Stacks []struct {
			API    string `json:"api"`
			Frames string `json:"frames"`
			Calls  int64  `json:"calls"`
		} `json:"stacks"`
	}
	callTool(t, session, "get_stacks", map[string]any{"pid": job.Ranks[slowRank].Pid, "since": "10m"}, &stacks)
	if len(stacks.Stacks) == 0 || stacks.Stacks[0].Frames == "" || stacks.Stacks[0].Calls == 0 {
		t.Errorf("get_stacks for the slow rank: %+v", stacks)
	} else {
		t.Logf("get_stacks: %d stacks, first %s %d calls: %s", len(stacks.Stacks), stacks.Stacks[0].API, stacks.Stacks[0].Calls, stacks.Stacks[0].Frames)
	}

	// The same store through `fathom mcp --socket`, as an agent that starts its MCP
	// servers as commands would reach it.
	stdio := mcp.NewClient(&mcp.Implementation{Name: "fathom-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bridged, err := stdio.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(collectortest.Binary(t), "mcp", "--socket", socket)}, nil)
	if err != nil {
		t.Fatalf("fathom mcp --socket: %v", err)
	}
	if c, ok := slowRankChain(t, bridged, slowRank); !ok {
		t.Errorf("fathom mcp --socket did not answer the chain on rank %d", slowRank)
	} else {
		t.Logf("through fathom mcp --socket: %s %s rank %d", c.Severity, c.RootCause, *c.Rank)
	}
	if again := runSQL(t, bridged, flaggedQuery); fmt.Sprint(again) != fmt.Sprint(flagged) {
		t.Errorf("fathom mcp --socket answered flagged ranks %v, the socket %v", again, flagged)
	}
	bridged.Close()

	assertOnlyLoopback(t, collector.Pid())
	if code := collector.Terminate(t, 30*time.Second); code != 0 {
		t.Errorf("the collector exited %d after SIGTERM", code)
	}
	if _, err := os.Lstat(socket); !os.IsNotExist(err) {
		t.Errorf("the socket outlived the collector: %v", err)
	}
}

type chainAnswer struct {
	Node       string         `json:"node"`
	Rank       *int64         `json:"rank"`
	RootCause  string         `json:"root_cause"`
	Severity   string         `json:"severity"`
	Fix        string         `json:"fix"`
	Attributes map[string]any `json:"attributes"`
}

// slowRankChain is the cpu_contention chain get_causal_chains answers on rank.
func slowRankChain(t *testing.T, s *mcp.ClientSession, rank int) (chainAnswer, bool) {
	t.Helper()
	var chains struct {
		Chains []chainAnswer `json:"chains"`
	}
	callTool(t, s, "get_causal_chains", map[string]any{"since": "10m"}, &chains)
	for _, c := range chains.Chains {
		if c.Rank != nil && int(*c.Rank) == rank && c.RootCause == "cpu_contention" {
			return c, true
		}
	}
	return chainAnswer{}, false
}

func socketSession(t *testing.T, socket string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "fathom-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: echosocket.MCPEndpoint,
		HTTPClient: echosocket.HTTPClient(socket)}, nil)
	if err != nil {
		t.Fatalf("MCP over the Echo socket: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func callTool(t *testing.T, s *mcp.ClientSession, tool string, args map[string]any, out any) {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s over MCP: %v", tool, err)
	}
	if res.IsError {
		t.Fatalf("%s: %v", tool, res.Content[0].(*mcp.TextContent).Text)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
}

// runSQL asks run_analysis: a socket's caller holds the sql scope.
func runSQL(t *testing.T, s *mcp.ClientSession, query string) [][]any {
	t.Helper()
	var out struct {
		Rows [][]any `json:"rows"`
	}
	callTool(t, s, "run_analysis", map[string]any{"sql": query}, &out)
	return out.Rows
}

// waitForRows waits until query's first value is at least want.
func waitForRows(t *testing.T, s *mcp.ClientSession, what string, timeout time.Duration, query string, want int) {
	t.Helper()
	collectortest.WaitFor(t, what, timeout, func() bool {
		rows := runSQL(t, s, query)
		if len(rows) == 0 || len(rows[0]) == 0 {
			return false
		}
		n, _ := strconv.ParseFloat(fmt.Sprint(rows[0][0]), 64)
		return n >= float64(want)
	})
}

// assertNoNetworkEndpoint reads the config as YAML: no exporter but duckdb, no otlp
// receiver, no `endpoint` key anywhere (the echo server on its unix_socket), and the
// collector's own metrics on localhost.
func assertNoNetworkEndpoint(t *testing.T, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	for id := range cfg["exporters"].(map[string]any) {
		if typ, _, _ := strings.Cut(id, "/"); typ != "duckdb" {
			t.Errorf("exporter %s in %s: the standalone config may write only into its own store", id, path)
		}
	}
	for id := range cfg["receivers"].(map[string]any) {
		if typ, _, _ := strings.Cut(id, "/"); typ != "gpuebpf" {
			t.Errorf("receiver %s in %s: the standalone config has no network receiver", id, path)
		}
	}
	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, child := range x {
				if k == "endpoint" {
					t.Errorf("%s.endpoint = %v in %s: a network endpoint", where, child, path)
				}
				if k == "host" && child != "localhost" {
					t.Errorf("%s.host = %v in %s: not loopback", where, child, path)
				}
				walk(where+"."+k, child)
			}
		case []any:
			for i, child := range x {
				walk(fmt.Sprintf("%s[%d]", where, i), child)
			}
		}
	}
	walk("", cfg)
	sock := cfg["extensions"].(map[string]any)["echo"].(map[string]any)["server"].(map[string]any)["unix_socket"]
	if sock == nil {
		t.Errorf("%s: the echo server has no unix_socket", path)
	}
}

// assertOnlyLoopback reads the collector's network namespace from its /proc: lo is
// its only interface, and every TCP and UDP socket in it (the collector's own) is bound
// to loopback.
func assertOnlyLoopback(t *testing.T, pid int) {
	t.Helper()
	dev, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/dev", pid))
	if err != nil {
		t.Fatal(err)
	}
	var ifaces []string
	for _, line := range strings.Split(string(dev), "\n")[2:] {
		if name, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			ifaces = append(ifaces, name)
		}
	}
	if len(ifaces) != 1 || ifaces[0] != "lo" {
		t.Errorf("the collector's network namespace has interfaces %v, want only lo", ifaces)
	}
	sockets := 0
	for _, proto := range []string{"tcp", "tcp6", "udp", "udp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, proto))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 {
				continue
			}
			sockets++
			ip := procNetIP(t, fields[1])
			if !ip.IsLoopback() {
				t.Errorf("%s socket bound to %s (state %s): off loopback", proto, ip, fields[3])
			}
		}
		f.Close()
	}
	t.Logf("the collector's namespace: interfaces %v, %d TCP/UDP sockets, all on loopback", ifaces, sockets)
}

// procNetIP decodes the address of /proc/net/tcp's "ADDR:PORT": 32-bit words in the
// host's (little-endian) order.
func procNetIP(t *testing.T, field string) net.IP {
	t.Helper()
	hexAddr, _, _ := strings.Cut(field, ":")
	ip := make(net.IP, len(hexAddr)/2)
	for w := 0; w < len(ip); w += 4 {
		word, err := strconv.ParseUint(hexAddr[2*w:2*w+8], 16, 32)
		if err != nil {
			t.Fatalf("bad /proc/net address %q", field)
		}
		ip[w], ip[w+1], ip[w+2], ip[w+3] = byte(word), byte(word>>8), byte(word>>16), byte(word>>24)
	}
	return ip
}
