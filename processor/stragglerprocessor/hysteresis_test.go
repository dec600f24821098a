package stragglerprocessor

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/pushback"
	"github.com/fathom-gpu/fathom/internal/semconv"
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

// A paced signal's persistence is about time: where fewer of a rank's latest samples
// than `of` cover what it stands for (`of` evaluations, at least min_duration: 1.5 s in
// the shipped configs), the same share of their time must be past (1.25 s). Samples
// once a step of 0.8 s (CPU time a collective, 200 ms of host work a step on the busy
// host) flag a rank past its line in two, 1.6 s, not five of six, 4.8 s; spans of
// 0.65 s (three steps of 200 ms) in two, 1.3 s, where counting samples took three
// (1.95 s); quarter-second samples
// still take five of six; one sample past the line in two flags nobody; and a flagged
// rank of long samples is resolved once two are back. The default config (3 of 4, 1 s
// evaluations) stands for 4 s, and 1 s samples still take three of four. The signals
// sampled at the node's interval are not paced, and count samples.
func TestPersistenceCountsTheSamplesThatCoverMinDuration(t *testing.T) {
	shipped := shippedConfig()
	paced := slices.IndexFunc(shipped.Signals, func(s SignalConfig) bool { return s.Paced })
	if paced < 0 || shipped.Signals[paced].Metric != semconv.MetricRankCPUPerCollective || slices.ContainsFunc(shipped.Signals[paced+1:], func(s SignalConfig) bool { return s.Paced }) {
		t.Fatalf("paced signals: want CPU time a collective alone")
	}
	if covers := shipped.persistenceCovers(0); covers != 0 {
		t.Fatalf("%s: persistence covers %v, want 0 (counting samples)", shipped.Signals[0].Metric, covers)
	}
	p, minDuration := shipped.Persistence, shipped.persistenceCovers(paced)
	if minDuration != 1500*time.Millisecond {
		t.Fatalf("the shipped persistence stands for %v, want 1.5s", minDuration)
	}
	at := time.Unix(1_800_000_000, 0)
	run := func(span float64, past []bool) []string {
		var s signalSeries
		var states []string
		for i, b := range past {
			at = at.Add(time.Duration(span * float64(time.Second)))
			sm := sample{at: at, span: span}
			state := s.judge(sm, b, b, windowVerdict{}, evidenceVerdict{}, true, p, minDuration)
			if state != "" {
				states = append(states, fmt.Sprintf("%s at %d", state, i))
			}
		}
		return states
	}
	for _, c := range []struct {
		name string
		span float64
		past []bool
		want []string
	}{
		{"steps of 0.8 s, slow from the third", 0.8, []bool{false, false, true, true, true, false, false}, []string{"straggler at 3", "resolved at 6"}},
		{"spans of 0.65 s, slow from the third", 0.65, []bool{false, false, true, true, true, false, false}, []string{"straggler at 3", "resolved at 6"}},
		{"steps of 0.8 s, one sample past in two", 0.8, []bool{true, false, true, false, true, false}, nil},
		{"quarter-second samples", 0.25, []bool{false, true, true, true, true, true, false}, []string{"straggler at 5"}},
		{"quarter-second samples, four of six", 0.25, []bool{true, true, false, true, true, false, true, true, false}, nil},
		{"samples of 2 s, each a whole min_duration", 2, []bool{false, true, false}, []string{"straggler at 1", "resolved at 2"}},
	} {
		if got := run(c.span, c.past); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	def := createDefaultConfig()
	p, minDuration = def.Persistence, def.persistenceCovers(paced)
	if got := run(1, []bool{false, true, true, false, true}); !slices.Equal(got, []string{"straggler at 4"}) {
		t.Errorf("default config, 1 s samples: %v, want flagged at the third of four past (4)", got)
	}
}
