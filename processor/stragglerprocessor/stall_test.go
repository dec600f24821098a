package stragglerprocessor

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/pushback"
)

// flagsOnly leaves out the stall records (stall.go): a stall is recorded, not flagged.
func flagsOnly(evs []event) []event {
	var out []event
	for _, e := range evs {
		if e.state != "stall" {
			out = append(out, e)
		}
	}
	return out
}

func stallsOnly(evs []event) []event {
	var out []event
	for _, e := range evs {
		if e.state == "stall" {
			out = append(out, e)
		}
	}
	return out
}

// stallRun feeds eight ranks sampled every 250 ms (±5%) for 20 s, then rank 5 at the
// rates of rank5 (one a sample; 0 leaves it healthy), then 15 s healthy, to the
// gateway's detector (as the shipped configs judge: 5 of 6) and to node-2's, which
// holds ranks 4 and 5 and judges them by the gateway's line of the same evaluation. It
// returns both detectors' events and the time the cluster started.
func stallRun(t *testing.T, rank5 []float64) (gw, node []event, start time.Time, gwDet, nodeDet *detector) {
	c := quarterSecondCluster(t)
	c.seconds = true
	ncfg := createDefaultConfig()
	ncfg.Mode, ncfg.Persistence = ModeNode, PersistenceConfig{Beyond: 5, Of: 6}
	nd := newDetector(ncfg)
	lines := heldLines{}
	key := pushback.Key{Cluster: "c1", Cohort: "comm-1", Signal: ncfg.Signals[0].Metric}
	rng := rand.New(rand.NewPCG(11, 12))
	n := 80 + len(rank5) + 60
	for i := 1; i <= n; i++ {
		rates := jittered(rng, 8, 0.30, 0.05)
		if j := i - 81; j >= 0 && j < len(rank5) && rank5[j] > 0 {
			rates[5] = rank5[j]
		}
		end := c.report(rates)
		c.events = append(c.events, c.det.evaluate(end).events...)
		l, ok := c.det.line(c.key, 0)
		if !ok {
			continue
		}
		lines[key] = pushback.Threshold{Cluster: "c1", Cohort: "comm-1", Signal: key.Signal, Median: l.median, Line: l.threshold,
			Worse: WorseLower, At: l.at.UnixMilli(), Windows: toPushback(l.windows), Noise: l.noise}
		for _, rank := range []int64{4, 5} {
			nd.observe(point{cohort: c.key, node: "node-2", rank: rank, pid: 1000 + rank, cumulative: true, value: c.totals[rank],
				start: c.start.UnixNano(), ts: end.UnixNano(), seconds: true}, end)
		}
		node = append(node, nd.evaluateAgainst(lines, end).events...)
	}
	return c.events, node, c.start, c.det, nd
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// A healthy cohort in which rank 5 stalls for a second (four quarter-second samples,
// shorter than min_duration's 1.5 s and persistence's five) flags nobody, and records
// one stall on rank 5, on the gateway and on its node alike: since when its first
// stalled sample began (20 s), at the end of its last (21 s), with its worst sample.
func TestAOneSecondStallIsRecordedAsAStallNotAStraggler(t *testing.T) {
	gw, node, start, _, _ := stallRun(t, repeat(0.02, 4))
	for name, evs := range map[string][]event{"gateway": gw, "node": node} {
		if flags := flagsOnly(evs); len(flags) != 0 {
			t.Errorf("%s: flags %+v, want none", name, flags)
		}
		stalls := stallsOnly(evs)
		if len(stalls) != 1 {
			t.Fatalf("%s: stall records %+v, want one", name, stalls)
		}
		s := stalls[0]
		if s.rank != 5 || s.node != "node-2" || s.since.Sub(start) != 20*time.Second || s.at.Sub(start) != 21*time.Second {
			t.Errorf("%s: stall of rank %d on %s from %v to %v, want rank 5 on node-2 from 20s to 21s", name, s.rank, s.node, s.since.Sub(start), s.at.Sub(start))
		}
		if s.value > 0.021 || s.median < 0.28 || s.median > 0.32 || s.threshold <= s.value || s.threshold >= s.median || s.score < 3 {
			t.Errorf("%s: stall %+v: want its worst sample 0.02 against a median of about 0.30, past the line", name, s)
		}
		body := describe(s, createDefaultConfig().Signals[0])
		if !strings.Contains(body, "rank 5 on node-2 stalled in comm-1 for 1s") || strings.Contains(body, "is a straggler") {
			t.Errorf("%s: body %q", name, body)
		}
	}
}

// A rank slowed for good is a straggler, and its episode past the line is not also a
// stall: not when it is flagged, nor when it is resolved.
func TestAPersistentSlowdownIsAStragglerNotAStall(t *testing.T) {
	gw, node, _, _, _ := stallRun(t, repeat(0.05, 40))
	for name, evs := range map[string][]event{"gateway": gw, "node": node} {
		if stalls := stallsOnly(evs); len(stalls) != 0 {
			t.Errorf("%s: stall records %+v, want none", name, stalls)
		}
		flags := flagsOnly(evs)
		if len(flags) != 2 || flags[0].state != "straggler" || flags[0].rank != 5 || flags[1].state != "resolved" {
			t.Errorf("%s: %+v, want rank 5 flagged and resolved", name, flags)
		}
	}
}

// One sample past the line, or two (half a second, under the least stall's 0.6 s), is
// noise as far as the records go: no stall, no flag.
func TestANoisySampleIsNoStall(t *testing.T) {
	for _, run := range [][]float64{{0.02}, {0.02, 0.02}} {
		gw, node, _, _, _ := stallRun(t, run)
		for name, evs := range map[string][]event{"gateway": gw, "node": node} {
			if len(evs) != 0 {
				t.Errorf("%d samples stalled, %s: %+v, want no record", len(run), name, evs)
			}
		}
	}
}

// A rank that stalls again and again, each time too briefly to be flagged, records at
// most one stall per min_duration (here 0, so a second); the rest are dropped and
// counted as stall_rate. With min_duration 0 (samples only) the least stall is two
// samples: rank 5 stalls two samples in every three, its episodes ending 0.75 s apart.
func TestStallRecordsAreBoundedPerRank(t *testing.T) {
	c := quarterSecondCluster(t)
	c.det.cfg.MinDuration = 0
	c.det = newDetector(c.det.cfg)
	rng := rand.New(rand.NewPCG(13, 14))
	for i := 1; i <= 80+36+8; i++ {
		rates := jittered(rng, 8, 0.30, 0.05)
		if j := i - 81; j >= 0 && j < 36 && j%3 != 2 {
			rates[5] = 0.02
		}
		c.step(rates)
	}
	if flags := flagsOnly(c.events); len(flags) != 0 {
		t.Fatalf("flags %s, want none", c.describeEvents())
	}
	stalls := stallsOnly(c.events)
	dropped := c.det.drops["stall_rate"]
	if len(stalls) != 6 || dropped != 6 {
		t.Fatalf("%d stall records, %d dropped, want 6 and 6 of 12 episodes: %s", len(stalls), dropped, c.describeEvents())
	}
	for i := 1; i < len(stalls); i++ {
		if gap := stalls[i].at.Sub(stalls[i-1].at); gap < time.Second {
			t.Errorf("stall records %v apart, want a second at least", gap)
		}
	}
}

// A stall between a rank's sync and its collective shows in its host lead all at
// once, in the one sample in which it enters the collective: 1 s of lead in a quarter
// second. That one sample measured a second past its cohort, so it is a stall of about
// that second (since = its end less the time it measured), on the gateway and on the
// rank's node; a sample past the line that measured less (0.1 s) is not.
func TestAStallThatLandsInOneSampleIsRecordedByTheTimeItMeasured(t *testing.T) {
	for _, lead := range []float64{1.0, 0.1} {
		cfg := createDefaultConfig()
		cfg.Persistence = PersistenceConfig{Beyond: 5, Of: 6}
		cfg.Signals = []SignalConfig{{Metric: "fathom.rank.host_lead.time", Worse: WorseHigher, MADFloor: 0.01}}
		ncfg := *cfg
		ncfg.Mode = ModeNode
		gw, nd := newDetector(cfg), newDetector(&ncfg)
		key := cohortKey{cluster: "c1", cohort: "comm-1"}
		lines := heldLines{}
		pk := pushback.Key{Cluster: "c1", Cohort: "comm-1", Signal: cfg.Signals[0].Metric}
		start := time.Unix(1_800_000_000, 0)
		totals := map[int64]float64{}
		rng := rand.New(rand.NewPCG(15, 16))
		var gwEvents, nodeEvents []event
		for i := 1; i <= 160; i++ {
			end := start.Add(time.Duration(i) * 250 * time.Millisecond)
			for rank := range int64(8) {
				totals[rank] += 0.25 * 0.02 * (1 + 0.05*(2*rng.Float64()-1))
				if rank == 5 && i == 81 {
					totals[rank] += lead
				}
				p := point{cohort: key, node: fmt.Sprintf("node-%d", rank/2), rank: rank, pid: 1000 + rank, cumulative: true, seconds: true,
					value: totals[rank], start: start.UnixNano(), ts: end.UnixNano()}
				gw.observe(p, end)
				if rank/2 == 2 {
					nd.observe(p, end)
				}
			}
			gwEvents = append(gwEvents, gw.evaluate(end).events...)
			if l, ok := gw.line(key, 0); ok {
				lines[pk] = pushback.Threshold{Cluster: "c1", Cohort: "comm-1", Signal: pk.Signal, Median: l.median, Line: l.threshold,
					Worse: WorseHigher, At: l.at.UnixMilli(), Windows: toPushback(l.windows), Noise: l.noise}
				nodeEvents = append(nodeEvents, nd.evaluateAgainst(lines, end).events...)
			}
		}
		for name, evs := range map[string][]event{"gateway": gwEvents, "node": nodeEvents} {
			if flags := flagsOnly(evs); len(flags) != 0 {
				t.Errorf("lead %v, %s: flags %+v, want none", lead, name, flags)
			}
			stalls := stallsOnly(evs)
			if lead < 0.6 {
				if len(stalls) != 0 {
					t.Errorf("lead %v, %s: stalls %+v, want none", lead, name, stalls)
				}
				continue
			}
			if len(stalls) != 1 || stalls[0].rank != 5 {
				t.Fatalf("lead %v, %s: stalls %+v, want one of rank 5", lead, name, stalls)
			}
			s := stalls[0]
			if at, lasted := s.at.Sub(start), s.at.Sub(s.since); at != 20250*time.Millisecond || lasted < 950*time.Millisecond || lasted > 1050*time.Millisecond {
				t.Errorf("lead %v, %s: stall at %v lasting %v, want at 20.25s lasting about 1s", lead, name, at, lasted)
			}
		}
	}
}

// A stall record on a count (link errors, retransmits) says the rank was past its
// cohort's line and came back, not that it stalled: a burst of errors held nobody up
// (CI saw a failing link's rank "stalled" for 2 s before it was flagged).
func TestAStallRecordOnACountSaysWhatCrossed(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	ev := event{cohort: cohortKey{cluster: "c1", cohort: "comm-1"}, node: "node-2", rank: 5, state: "stall",
		value: 14, median: 0, threshold: 3, score: 9, since: start, at: start.Add(2 * time.Second)}
	signal := SignalConfig{Metric: "fathom.rank.rdma.errors", Worse: WorseHigher}
	body := describe(ev, signal)
	if !strings.Contains(body, "rank 5 on node-2 was past its cohort's line in comm-1 for 2s and came back, shorter than a straggler") || strings.Contains(body, "stalled") {
		t.Errorf("count: %q", body)
	}
	ev.seconds = true
	if body := describe(ev, signal); !strings.Contains(body, "rank 5 on node-2 stalled in comm-1 for 2s") {
		t.Errorf("time: %q", body)
	}
}
