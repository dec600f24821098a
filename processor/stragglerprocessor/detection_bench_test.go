//go:build linux && bench

package stragglerprocessor_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/collectortest"
	"github.com/fathom-gpu/fathom/internal/fakegpu"
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
			j := startJob(t, jobOptions{settings: settings, rankSignals: os.Getenv("FATHOM_BENCH_RANK_SIGNALS"), threads: os.Getenv("FATHOM_BENCH_THREADS"),
				ncclMode: fakegpu.NCCLAsync, slowMode: "compute", ranks: ranks, perNode: perNode, slowRank: slow,
				hostCompute: hostCompute, slowBy: hostCompute * time.Duration(pct) / 100,
				transport: func(node int) string { return []string{"grpc", "http"}[node%2] },
			})
			cpuBefore := processCPU(t, j.gateway.Pid())
			runStart := time.Now()
			var latencies []time.Duration
			falsePositives, missed, healthy := 0, 0, 0
			seen := 0 // records already accounted for
			account := func(slowSince time.Time) {
				recs := j.timedRecords()
				for _, r := range recs[seen:] {
					if r.State != "straggler" {
						continue
					}
					if r.Rank != slow || slowSince.IsZero() || r.At.Before(slowSince) {
						falsePositives++
						t.Logf("false positive: %+v", r)
					}
				}
				seen = len(recs)
			}
			time.Sleep(10 * time.Second) // warm-up of the gateway's cohort
			for trial := range trials {
				time.Sleep(10 * time.Second) // a healthy window
				healthy++
				account(time.Time{})
				on := j.slowDown()
				flagged := j.waitTimedRecord(30*time.Second, func(r timedRecord) bool {
					return r.Rank == slow && r.State == "straggler" && r.Source == "node" && !r.At.Before(on)
				})
				if flagged == nil {
					missed++
					t.Logf("trial %d: rank %d not flagged within 30 s", trial, slow)
				} else {
					latencies = append(latencies, flagged.At.Sub(on))
					t.Logf("trial %d: flagged %v after the slowdown", trial, flagged.At.Sub(on).Round(10*time.Millisecond))
				}
				account(on)
				j.speedUp()
				if j.waitTimedRecord(30*time.Second, func(r timedRecord) bool {
					return r.Rank == slow && r.State == "resolved" && r.Source == "node" && !r.At.Before(on)
				}) == nil {
					t.Logf("trial %d: rank %d not resolved within 30 s of the slowdown's end", trial, slow)
				}
				account(on)
			}
			cpu := processCPU(t, j.gateway.Pid()) - cpuBefore
			wall := time.Since(runStart)
			slices.Sort(latencies)
			row := fmt.Sprintf("| %d%% (%v) | %d/%d | %s | %s | %s | %d in %d windows of 10 s | %.2f%% of a core for %d ranks |",
				pct, hostCompute*time.Duration(pct)/100, len(latencies), trials, quantile(latencies, 0.5), quantile(latencies, 0.95),
				quantile(latencies, 1), falsePositives, healthy, 100*cpu.Seconds()/wall.Seconds(), ranks)
			t.Log(row)
			rows = append(rows, row)
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

type timedRecord struct {
	record
	At time.Time
}

// timedRecords reads every fathom.straggler record in the gateway's store, oldest first,
// with its timestamp.
func (l *loop) timedRecords() []timedRecord {
	q := `SELECT coalesce(node, ''), coalesce(rank, -1),
		json_extract_string(attributes, '$."fathom.straggler.state"'), json_extract_string(attributes, '$."fathom.straggler.source"'),
		epoch_ms(ts) FROM events WHERE name = 'fathom.straggler' ORDER BY ts`
	rows := l.sqlRows(q)
	var out []timedRecord
	for _, row := range rows {
		out = append(out, timedRecord{
			record: record{Node: row[0].(string), Rank: int(row[1].(float64)), State: row[2].(string), Source: row[3].(string)},
			At:     time.UnixMilli(int64(row[4].(float64))),
		})
	}
	return out
}

// waitTimedRecord polls the store until a record matches, or returns nil after timeout.
func (l *loop) waitTimedRecord(timeout time.Duration, match func(timedRecord) bool) *timedRecord {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, r := range l.timedRecords() {
			if match(r) {
				return &r
			}
		}
	}
	return nil
}

func quantile(sorted []time.Duration, q float64) string {
	if len(sorted) == 0 {
		return "-"
	}
	i := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[i].Round(10 * time.Millisecond).String()
}

// processCPU is the CPU time (user + system) pid has used, from /proc/PID/stat.
func processCPU(t testing.TB, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clockTicks
}
