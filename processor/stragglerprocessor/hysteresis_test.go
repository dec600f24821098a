package stragglerprocessor

import (
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/pushback"
)

// slowPhases is a rank that stays slow while its lead over the line varies: 4 scaled
// MADs worse than the median, then 2.5 (under the line of 3, still far from its peers),
// then 4 again, then healthy. Seen on a real job: a rank whose arrival lag hovered
// around the line was flagged, resolved and flagged again within a minute while it
// was slow the whole time.
var slowPhases = []struct {
	score     float64
	intervals int
}{{0, 10}, {4, 6}, {2.5, 10}, {4, 6}, {0, 8}}

// A flagged rank that is still slow, but now under the line, stays flagged: it counts
// as back only within resolve_within (half) of the way from the median to the line.
// Once it really is back it is resolved, once. Judged on samples alone, without the
// hysteresis (resolve_within 1, the old behaviour), the same rank is resolved and
// flagged again; its windows (min_duration) hold it too, and keep it flagged until
// half of the longest window (12 s) is healthy.
func TestASlowRankNearTheLineDoesNotFlap(t *testing.T) {
	for _, c := range []struct {
		resolveWithin float64
		minDuration   time.Duration
		want          string
	}{
		{0.5, 0, "straggler rank 3 at interval 13 (since interval 11); resolved rank 3 at interval 35 (since interval 11); "},
		{1, 0, "straggler rank 3 at interval 13 (since interval 11); resolved rank 3 at interval 19 (since interval 11); " +
			"straggler rank 3 at interval 29 (since interval 27); resolved rank 3 at interval 35 (since interval 27); "},
		{1, 1500 * time.Millisecond, "straggler rank 3 at interval 13 (since interval 11); resolved rank 3 at interval 39 (since interval 11); "},
		{0.5, 1500 * time.Millisecond, "straggler rank 3 at interval 13 (since interval 11); resolved rank 3 at interval 39 (since interval 11); "},
	} {
		cfg := createDefaultConfig()
		cfg.ResolveWithin, cfg.MinDuration = c.resolveWithin, c.minDuration
		cl := newCluster(t, cfg, true)
		// Four peers at 0.30 s/s of device wait: the median, with MAD 0 floored at 5%
		// of it, so a scaled MAD is 1.4826 * 0.015 s/s.
		const median, scaledMAD = 0.30, 1.4826 * 0.015
		for _, p := range slowPhases {
			for range p.intervals {
				cl.step(map[int64]float64{0: median, 1: median, 2: median, 3: median - p.score*scaledMAD, 4: median})
			}
		}
		if got := cl.describeEvents(); got != c.want {
			t.Errorf("resolve_within %v, min_duration %v: %s\nwant %s", c.resolveWithin, c.minDuration, got, c.want)
		}
	}
}

// A node judges the same way against the lines pushed back to it: the resolve line
// is resolve_within of the way from the pushed median to the pushed line. These lines
// carry no windows; with resolve_within 1 the rank once flapped here (flagged, resolved
// and flagged again: four records), and now its evidence holds it (evidence.go).
func TestANodeKeepsASlowRankNearTheLineFlagged(t *testing.T) {
	for _, c := range []struct {
		resolveWithin float64
		want          int // events
	}{{0.5, 2}, {1, 2}} {
		cfg := createDefaultConfig()
		cfg.Mode = ModeNode
		cfg.ResolveWithin = c.resolveWithin
		d := newDetector(cfg)
		key := cohortKey{cluster: "c1", cohort: "comm-1"}
		t0 := time.Unix(1_800_000_000, 0)
		lineKey := pushback.Key{Cluster: "c1", Cohort: "comm-1", Signal: cfg.Signals[0].Metric}
		const median, scaledMAD = 0.30, 1.4826 * 0.015
		lines := heldLines{}
		var total float64
		var events []event
		i := 0
		for _, p := range slowPhases {
			for range p.intervals {
				i++
				at := t0.Add(time.Duration(i) * time.Second)
				lines[lineKey] = pushback.Threshold{Cluster: "c1", Cohort: "comm-1", Signal: lineKey.Signal, Median: median,
					Line: median - 3*scaledMAD, Worse: "lower", At: at.UnixMilli()}
				total += median - p.score*scaledMAD
				d.observe(point{cohort: key, node: "node-1", rank: 3, pid: 1, cumulative: true, value: total, start: t0.UnixNano(), ts: at.UnixNano()}, at)
				events = append(events, d.evaluateAgainst(lines, at.Add(100*time.Millisecond)).events...)
			}
		}
		var states []string
		for _, e := range events {
			states = append(states, e.state)
		}
		if len(states) != c.want || states[0] != "straggler" || states[len(states)-1] != "resolved" {
			t.Fatalf("resolve_within %v: events %v, want %d, straggler first and resolved last", c.resolveWithin, states, c.want)
		}
		if at := events[1].at.Sub(t0); c.want == 2 && at < 33*time.Second {
			t.Errorf("resolved %v into the run, while it was still slow (healthy from 33 s)", at)
		}
	}
}
