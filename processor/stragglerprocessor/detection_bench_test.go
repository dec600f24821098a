//go:build linux && bench

package stragglerprocessor_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
)

// The straggler loop's detection report (`make bench`; needs root for BPF): a real
// job of 16 rank processes on 4 node collectors and one gateway, as in
// ranks_e2e_test.go, runs for the whole of each slowdown's trials. A trial is a healthy
// window, then rank 9's host work per step grows by the slowdown until rank 9's own
// node writes its straggler record, then back to normal until the node resolves it.
//
// Detection latency is from the moment the slowdown is turned on to the timestamp of
// the node's record (the moment its straggler processor decided). A false positive is
// any straggler record for another rank, or for rank 9 in a healthy window. Each rank's
// host work is 20 ms a step, sleeping (as if each rank had cores of its own); the
// slowdowns add 4, 2 and 1 ms (20%, 10%, 5%).
//
// FATHOM_BENCH_TRIALS (default 20) and FATHOM_BENCH_SLOWDOWNS (default 20,10,5, in
// percent) change the run, FATHOM_BENCH_PERSISTENCE ("{beyond: 2, of: 3}") the
// processors' persistence, FATHOM_BENCH_RANK_SIGNALS ("0s", default 250ms) the
// nodes' rank_signals.interval, and FATHOM_BENCH_THREADS ("pytorch", default single)
// the ranks' threading (fakegpu-ddp --threads, written to build/straggler-bench-pytorch.md); the table is printed and written to build/straggler-bench.md.
func TestStragglerDetectionReport(t *testing.T) {
	trials := 20
	if v, err := strconv.Atoi(os.Getenv("FATHOM_BENCH_TRIALS")); err == nil && v > 0 {
		trials = v
	}
	slowdowns := []int{20, 10, 5}
	if v := os.Getenv("FATHOM_BENCH_SLOWDOWNS"); v != "" {
		slowdowns = nil
		for _, f := range strings.Split(v, ",") {
			pct, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || pct <= 0 || pct%5 != 0 {
				t.Fatalf("FATHOM_BENCH_SLOWDOWNS: %q is not a multiple of 5 (percent of 20 ms, in whole ms)", f)
			}
			slowdowns = append(slowdowns, pct)
		}
	}
	const hostCompute, ranks, perNode, slow = 20 * time.Millisecond, 16, 4, 9
	var rows []string
	for _, pct := range slowdowns {
		t.Run(fmt.Sprintf("%d%%", pct), func(t *testing.T) {
			var settings []string
			if p := os.Getenv("FATHOM_BENCH_PERSISTENCE"); p != "" {
				settings = append(settings, "persistence: "+p)
			}
			row := matrixRow{dimension: "slowdown", value: fmt.Sprintf("%d%%", pct), pct: pct, opts: jobOptions{
				settings: settings, rankSignals: os.Getenv("FATHOM_BENCH_RANK_SIGNALS"), threads: os.Getenv("FATHOM_BENCH_THREADS"),
				ncclMode: fakegpu.NCCLAsync, slowMode: "compute", ranks: ranks, perNode: perNode, slowRank: slow, hostCompute: hostCompute,
				transport: func(node int) string { return []string{"grpc", "http"}[node%2] },
			}}
			res := runMatrixRow(t, row, trials, 10*time.Second, 30*time.Second)
			line := fmt.Sprintf("| %d%% (%v) | %d/%d | %s | %s | %s | %d in %d windows of 10 s | %.2f%% of a core for %d ranks |",
				pct, hostCompute*time.Duration(pct)/100, res.nodeFound, trials, quantile(res.nodeLatency, 0.5), quantile(res.nodeLatency, 0.95),
				quantile(res.nodeLatency, 1), res.falseFlags, trials, 100*res.gatewayCPUShare, ranks)
			t.Log(line)
			rows = append(rows, line)
		})
	}
	table := "| slowdown | detected | p50 | p95 | max | false positives | gateway CPU |\n|---|---|---|---|---|---|---|\n" + strings.Join(rows, "\n") + "\n"
	if p := os.Getenv("FATHOM_BENCH_PERSISTENCE"); p != "" {
		table = "persistence: " + p + "\n\n" + table
	}
	if r := os.Getenv("FATHOM_BENCH_RANK_SIGNALS"); r != "" {
		table = "rank_signals.interval: " + r + "\n\n" + table
	}
	if th := os.Getenv("FATHOM_BENCH_THREADS"); th != "" {
		table = "threads: " + th + "\n\n" + table
	}
	fmt.Print(table)
	name := "straggler-bench.md"
	if th := os.Getenv("FATHOM_BENCH_THREADS"); th != "" {
		name = "straggler-bench-" + th + ".md"
	}
	out := filepath.Join(collectortest.RepoRoot(t), "build", name)
	_ = os.MkdirAll(filepath.Dir(out), 0o755)
	if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
		t.Error(err)
	}
}

const matrixTableHead = "| dimension | value | found (first flag) | p50 onset to flag | p95 | node found | p50 | p95 | gateway found | p50 | p95 | false flags | gateway CPU |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"

// TestStragglerDetectionMatrix runs the detection matrix (matrix_test.go): every row,
// FATHOM_BENCH_TRIALS trials (default 20) with healthy windows of
// FATHOM_BENCH_HEALTHY (default 30s, so 10 healthy minutes a row), or only the rows
// whose names contain one of FATHOM_BENCH_ROWS (comma-separated, e.g. "base,step=").
// FATHOM_BENCH_BURSTS=1 runs the rows beside compileBursts. The table is printed and
// written to build/straggler-matrix.md.
func TestStragglerDetectionMatrix(t *testing.T) {
	if os.Getenv("FATHOM_BENCH_BURSTS") == "1" {
		defer compileBursts(t)()
	}
	trials := 20
	if v, err := strconv.Atoi(os.Getenv("FATHOM_BENCH_TRIALS")); err == nil && v > 0 {
		trials = v
	}
	healthy := 30 * time.Second
	if v, err := time.ParseDuration(os.Getenv("FATHOM_BENCH_HEALTHY")); err == nil && v > 0 {
		healthy = v
	}
	var only []string
	if v := os.Getenv("FATHOM_BENCH_ROWS"); v != "" {
		only = strings.Split(v, ",")
	}
	var lines []string
	for _, row := range matrixRows() {
		if len(only) > 0 && !slices.ContainsFunc(only, func(o string) bool { return strings.Contains(row.name(), strings.TrimSpace(o)) }) {
			continue
		}
		t.Run(row.name(), func(t *testing.T) {
			res := runMatrixRow(t, row, trials, healthy, time.Minute)
			line := res.tableRow(row)
			t.Log(line)
			lines = append(lines, line)
		})
	}
	table := matrixTableHead + strings.Join(lines, "\n") + "\n"
	fmt.Print(table)
	out := filepath.Join(collectortest.RepoRoot(t), "build", "straggler-matrix.md")
	_ = os.MkdirAll(filepath.Dir(out), 0o755)
	if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
		t.Error(err)
	}
}

// compileBursts loads the host as a concurrent test run does, until stop is called: a
// compile from scratch (go build -a into an empty cache: many short processes on every
// core) for 8 s, then 12 s quiet. Two busy loops did not disturb the loop's nodes (no
// false flag, docs/straggler.md); beside this, the PyTorch row's nodes flagged healthy
// ranks 12 times in one run of three healthy minutes, their gateway nobody, and in the
// next run nobody flagged anyone: where the bursts fall against the trials matters.
func compileBursts(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cache := t.TempDir()
			burst, end := context.WithTimeout(ctx, 8*time.Second)
			cmd := exec.CommandContext(burst, "go", "build", "-a", "-o", os.DevNull, "github.com/fathom-gpu/fathom/internal/series")
			cmd.Env = append(os.Environ(), "GOCACHE="+cache, "GOFLAGS=")
			_ = cmd.Run() // cut off by the timeout: the load is the point, not the build
			end()
			_ = os.RemoveAll(cache)
			select {
			case <-ctx.Done():
			case <-time.After(12 * time.Second):
			}
		}
	}()
	return func() { cancel(); <-done }
}
