//go:build bench

package stragglerprocessor

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStragglerCohortMatrix is the cohort-size dimension of the detection matrix: cohorts
// of 3 to 64 ranks made from the recorded jobs (cohort_test.go says how, and why that
// keeps their noise), each slowed by 20, 10 and 5% in 20 seeded trials that take the
// recordings in turn, replayed through the gateway's detector and the nodes'. A row: how
// many trials flagged the slow rank before its 40 s slowdown ended, the median and 95th
// percentile from the onset to the first flag of it, its node's or the gateway's, as the
// real job's rows time it (a trial that did not counts as slower than any), the same of
// its node's and of the gateway's flags, and false flags (anyone else flagged, or the
// slow rank while healthy) in the trials' healthy time before the onsets. FATHOM_BENCH_TRIALS,
// FATHOM_BENCH_SLOWDOWNS and FATHOM_COHORT_SIZES change it; the table goes to
// FATHOM_COHORT_REPORT (build/straggler-cohorts.md). Replayed time: the same table on
// any machine.
func TestStragglerCohortMatrix(t *testing.T) {
	trials, sizes, pcts := 20, []int{3, 4, 8, 16, 32, 64}, []int{20, 10, 5}
	if v, err := strconv.Atoi(os.Getenv("FATHOM_BENCH_TRIALS")); err == nil && v > 0 {
		trials = v
	}
	if v := os.Getenv("FATHOM_BENCH_SLOWDOWNS"); v != "" {
		pcts = atoiList(t, v)
	}
	if v := os.Getenv("FATHOM_COHORT_SIZES"); v != "" {
		sizes = atoiList(t, v)
	}
	report := os.Getenv("FATHOM_COHORT_REPORT")
	if report == "" {
		report = filepath.Join("..", "..", "build", "straggler-cohorts.md")
	}
	srcs := cohortSources(t)
	var b strings.Builder
	fmt.Fprintf(&b, "| ranks | slowdown | found | p50 first flag | p95 | node p50, p95 | gateway p50, p95 | false flags: nodes, gateway (healthy time) | goal |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|\n")
	began := time.Now()
	for _, size := range sizes {
		for _, pct := range pcts {
			var firstLat, nodeLat, gatewayLat []time.Duration
			missedBy := map[string]int{}
			nodeFalse, gatewayFalse := 0, 0
			var healthy time.Duration
			for trial := range trials {
				tr := runCohortTrial(t, srcs, size, pct, trial)
				nl, gl := tr.nodes.latencies[pct], tr.gateway.latencies[pct]
				if nl < 0 {
					nl = time.Duration(math.MaxInt64)
				}
				if gl < 0 {
					gl = time.Duration(math.MaxInt64)
				}
				first := min(nl, gl)
				if first == time.Duration(math.MaxInt64) {
					missedBy[tr.shape]++
				}
				firstLat, nodeLat, gatewayLat = append(firstLat, first), append(nodeLat, nl), append(gatewayLat, gl)
				nodeFalse += tr.nodes.falseFlags
				gatewayFalse += tr.gateway.falseFlags
				healthy += tr.gateway.healthy
				for _, l := range tr.nodes.log {
					if strings.HasPrefix(l, "false flag") {
						t.Logf("%d ranks from %s, %d%%, trial %d, nodes: %s", size, tr.shape, pct, trial, l)
					}
				}
			}
			slices.Sort(firstLat)
			slices.Sort(nodeLat)
			slices.Sort(gatewayLat)
			found := trials
			var misses []string
			for shape, n := range missedBy {
				found -= n
				misses = append(misses, fmt.Sprintf("%s missed %d", shape, n))
			}
			slices.Sort(misses)
			foundCell := fmt.Sprintf("%d of %d", found, trials)
			if len(misses) > 0 {
				foundCell += " (" + strings.Join(misses, ", ") + ")"
			}
			p50, p95 := nearestRank(firstLat, 0.5), nearestRank(firstLat, 0.95)
			row := fmt.Sprintf("| %d | %d%% | %s | %s | %s | %s, %s | %s, %s | %d, %d (%.1f min) | %s |",
				size, pct, foundCell, showLatency(p50), showLatency(p95),
				showLatency(nearestRank(nodeLat, 0.5)), showLatency(nearestRank(nodeLat, 0.95)),
				showLatency(nearestRank(gatewayLat, 0.5)), showLatency(nearestRank(gatewayLat, 0.95)),
				nodeFalse, gatewayFalse, healthy.Minutes(), cohortGoal(pct, found, trials, p50, p95, nodeFalse+gatewayFalse))
			t.Log(row)
			fmt.Fprintln(&b, row)
		}
	}
	t.Logf("%v for the matrix", time.Since(began).Round(time.Second))
	if err := os.MkdirAll(filepath.Dir(report), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(report, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("written to %s:\n%s", report, b.String())
}

func atoiList(t *testing.T, s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		out = append(out, v)
	}
	return out
}

// nearestRank is the q quantile of sorted by the nearest-rank rule: of 20 trials, the
// 10th for the median and the 19th for p95.
func nearestRank(sorted []time.Duration, q float64) time.Duration {
	return sorted[int(math.Ceil(q*float64(len(sorted))))-1]
}

func showLatency(d time.Duration) string {
	if d == time.Duration(math.MaxInt64) {
		return "not found"
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// cohortGoal says whether a row meets the goal for its slowdown: 20%, p50 ≤ 2 s
// and p95 ≤ 4 s; 10%, p50 ≤ 4 s; 5%, every trial found with p50 ≤ 10 s; and no false
// flag in any row.
func cohortGoal(pct, found, trials int, p50, p95 time.Duration, falseFlags int) string {
	var missed []string
	switch pct {
	case 20:
		if p50 > 2*time.Second {
			missed = append(missed, "p50 > 2 s")
		}
		if p95 > 4*time.Second {
			missed = append(missed, "p95 > 4 s")
		}
	case 10:
		if p50 > 4*time.Second {
			missed = append(missed, "p50 > 4 s")
		}
	case 5:
		if found < trials {
			missed = append(missed, fmt.Sprintf("found %d of %d", found, trials))
		}
		if p50 > 10*time.Second {
			missed = append(missed, "p50 > 10 s")
		}
	}
	if falseFlags > 0 {
		missed = append(missed, "false flags")
	}
	if len(missed) == 0 {
		return "met"
	}
	return "missed: " + strings.Join(missed, ", ")
}
