//go:build linux

package demo_test

import (
	"bytes"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/collectortest"
	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/privtest"
)

// The README's run command in its short mode: the real binary's `fathom demo --short`
// with real BPF, four node collectors and a gateway. It must find the slow rank (its
// own node flags it, the gateway's record names it), explain it with a causal chain on
// that node, and the MCP answers it prints must name them; then every process it
// started is gone.
func TestTheDemoTellsTheWholeStory(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	bin := collectortest.Binary(t)
	otlp, api := collectortest.FreePort(t), collectortest.FreePort(t)
	var out bytes.Buffer
	cmd := exec.Command(bin, "demo", "--short", "--dir", t.TempDir(), "--fakegpu", paths.Out,
		"--otlp-port", strconv.Itoa(otlp), "--api-port", strconv.Itoa(api))
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("the demo ran %s:\n%s", time.Since(start).Round(time.Second), out.String())
	if err != nil {
		t.Fatalf("fathom demo --short: %v", err)
	}
	for _, want := range []string{
		"Ranks reporting to the gateway: 8 of 8",
		"Thresholds learned for cohort",
		"INCIDENT: rank 5 (node-2)",
		"node-2 flags its own rank 5 as the straggler",
		"The gateway's record names rank 5 on node-2",
		"node-2 explains why, as a causal chain: ",
		"find_outlier_nodes {signal: fathom.straggler.score, by: rank} -> rank 5 on node-2",
		"get_causal_chains -> ",
		"cpu_contention on node-2 rank 5",
		"batch-etl",
		"get_cost {signal: fathom.straggler.time_lost} -> rank 5 on node-2",
		`"url": "http://127.0.0.1:` + strconv.Itoa(api) + `/mcp"`,
		"Stopped every process the demo started.",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo did not say %q", want)
		}
	}
	// Nothing it started is left: no collector on its config, no rank, no hog.
	ps, _ := exec.Command("pgrep", "-f", "fakegpu-ddp|fakegpu-hog --name batch-etl").Output()
	if len(bytes.TrimSpace(ps)) > 0 {
		t.Errorf("processes left behind: %s", ps)
	}
}

// Ports in use get a clear message, not a collector's bind error in a log.
func TestTheDemoSaysWhichPortIsInUse(t *testing.T) {
	bin := collectortest.Binary(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	out, err := exec.Command(bin, "demo", "--short", "--synthetic", "--dir", t.TempDir(), "--otlp-port", port).CombinedOutput()
	if err == nil {
		t.Fatalf("the demo started with port %s taken:\n%s", port, out)
	}
	if want := "port " + port + " (the gateway's OTLP/gRPC port) is in use"; !strings.Contains(string(out), want) {
		t.Errorf("the demo said:\n%s\nwant %q", out, want)
	}
}
