//go:build linux

package causalchainprocessor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
)

// The node of the scenario suite with every call recorded, so that each carries its
// Python stack.
const stackedNodeLayer = `
receivers:
  gpuebpf:
    logs:
      policy: all
      max_per_second: 5000
`

// The GIL scenario with every CUDA call recorded, end to end: a real node collector and
// gateway, asked over MCP as an agent would. get_stacks names the two lines of the
// dispatcher's loop (the launch and the sync, in main(), called from the module), and
// the lock_contention chain names the one most of the main thread's call time came
// from, with its share.
func TestGetStacksAndTheChainNameThePythonLine(t *testing.T) {
	s := startSuite(t, stackedNodeLayer)
	script := filepath.Join(fakegpu.RepoRoot(), "internal", "fakegpu", "python", "gil_dispatcher.py")
	line := fakegpu.MarkedLines(t, script)
	w := fakegpu.StartGIL(t, s.paths, fakegpu.GILWorkload{Workers: 4})
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	call := func(tool string, args map[string]any, out any) {
		t.Helper()
		res, err := s.session.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("%s over MCP: %v %v", tool, err, res)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatal(err)
		}
	}
	var lock *chain
	deadline := time.Now().Add(2*window + 20*time.Second)
	for lock == nil && time.Now().Before(deadline) {
		time.Sleep(time.Second)
		for _, c := range s.chainsOf(t, w.Pid) {
			if c.RootCause == "lock_contention" && c.State != "resolved" && c.Attributes["fathom.chain.stack"] != nil {
				lock = &c
				break
			}
		}
	}
	if lock == nil {
		t.Fatalf("no open lock_contention chain with a stack for pid %d: %+v", w.Pid, s.chainsOf(t, w.Pid))
	}
	w.Kill()

	var stacks struct {
		By     string `json:"by"`
		Stacks []struct {
			StackID, Function, File, Frames, API string
			Line                                 int64
			PID                                  int64
			Calls                                int64
			TotalSeconds                         float64 `json:"total_seconds"`
		} `json:"stacks"`
	}
	call("get_stacks", map[string]any{"pid": w.Pid, "since": "10m"}, &stacks)
	want := map[string]string{ // api -> the line's stack
		"cudaLaunchKernel":      fmt.Sprintf("main (%[1]s:%[2]d) < <module> (%[1]s:", script, line["launch"]),
		"cudaStreamSynchronize": fmt.Sprintf("main (%[1]s:%[2]d) < <module> (%[1]s:", script, line["sync"]),
	}
	seen := map[string]bool{}
	for _, st := range stacks.Stacks {
		t.Logf("get_stacks: %s %s:%d %d calls %.3f s: %s", st.API, st.Function, st.Line, st.Calls, st.TotalSeconds, st.Frames)
		prefix, ok := want[st.API]
		if !ok || st.Function != "main" || st.File != script || !strings.HasPrefix(st.Frames, prefix) || st.Calls == 0 {
			t.Errorf("get_stacks answered a stack the loop does not have: %+v", st)
			continue
		}
		seen[st.API] = true
	}
	if len(seen) != 2 {
		t.Errorf("get_stacks named %v, want both lines of the loop", seen)
	}
	a := lock.Attributes
	lineno, _ := a["code.lineno"].(float64)
	share, _ := a["fathom.chain.stack.share"].(float64)
	if a["code.function"] != "main" || a["code.filepath"] != script || (int(lineno) != line["launch"] && int(lineno) != line["sync"]) ||
		!strings.HasPrefix(a["fathom.chain.stack"].(string), "main ("+script+":") || share <= 0 || share > 1 {
		t.Errorf("the chain's stack: %v", a)
	}
	t.Logf("chain: %s line %s, %.0f%% of the call time: %v", a["code.function"], strconv.Itoa(int(lineno)), 100*share, a["fathom.chain.stack"])
}
