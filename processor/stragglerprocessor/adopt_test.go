package stragglerprocessor

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/pushback"
)

// adoptRun feeds eight ranks sampled every 250 ms to the gateway's detector: 20 s
// healthy, then 20 s with rank 5 (node-2) and rank 7 (node-3) waiting 40% less, then 20
// s healthy. After each gateway evaluation, node-2's export of its ranks 4 and 5 is
// answered by the gateway role's real answer, and node-2's detector evaluates against
// it. node-2 sees its rank 4 slow for the first 10 s of the slowdown where the gateway
// sees it healthy: a node whose view of its own ranks runs ahead of its gateway's, as
// it does through a burst of load on its host. withVerdicts false strips the verdicts
// from the answers, as an older gateway sends them.
func adoptRun(t *testing.T, withVerdicts bool) (gw, node []event) {
	c := quarterSecondCluster(t)
	c.seconds = true
	ncfg := createDefaultConfig()
	ncfg.Mode, ncfg.Persistence = ModeNode, PersistenceConfig{Beyond: 5, Of: 6}
	nd := newDetector(ncfg)
	role := &gatewayRole{det: c.det}
	lines := heldLines{}
	nodeTotals := map[int64]float64{}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 1; i <= 240; i++ {
		rates := jittered(rng, 8, 0.30, 0.05)
		seen := map[int64]float64{4: rates[4], 5: rates[5]}
		if i > 80 && i <= 160 {
			rates[5], rates[7] = 0.18, 0.18
			seen[5] = 0.18
		}
		if i > 80 && i <= 120 {
			seen[4] = 0.15
		}
		end := c.report(rates)
		c.events = append(c.events, c.det.evaluate(end).events...)

		var points []point
		var sent []sentCohort
		for _, rank := range []int64{4, 5} {
			nodeTotals[rank] += seen[rank] * c.every.Seconds()
			p := point{cohort: c.key, node: "node-2", rank: rank, pid: 1000 + rank, cumulative: true, value: nodeTotals[rank],
				start: c.start.UnixNano(), ts: end.UnixNano(), seconds: true}
			points, sent = append(points, p), append(sent, sentCohort{cohort: c.key.cohort})
			nd.observe(p, end)
		}
		_, resp := pushback.NewContext(context.Background())
		role.answer(resp, points, sent)
		for _, th := range resp.Thresholds() {
			if !withVerdicts {
				th.Verdicts, th.Flagged = false, nil
			}
			lines[th.Key()] = th
		}
		node = append(node, nd.evaluateAgainst(lines, end).events...)
	}
	return c.events, node
}

// A node whose gateway sends its verdicts says them: every straggler and resolved
// record of its ranks is its gateway's (rank, rule, since), at the same evaluation, and
// it flags nobody the gateway holds healthy, however its own view of a rank differs.
// The verdict it is sent covers only its own ranks: rank 7, on another node, flagged by
// the gateway, is not in node-2's records. Without verdicts (an older gateway) the node
// judges by the line and flags rank 4 on its own: the node-only flag this removes.
func TestANodeSaysItsGatewaysVerdictOnItsRanks(t *testing.T) {
	gw, node := adoptRun(t, true)
	type verdict struct {
		rank        int64
		state, rule string
		since       int64
		window      time.Duration
		at          time.Time
	}
	of := func(evs []event, ranks ...int64) []verdict {
		var out []verdict
		for _, e := range evs {
			if (e.state == "straggler" || e.state == "resolved") && slices.Contains(ranks, e.rank) {
				out = append(out, verdict{e.rank, e.state, e.rule, e.since.UnixMilli(), e.window, e.at})
			}
		}
		return out
	}
	want := of(gw, 4, 5)
	if len(want) != 2 || want[0].rank != 5 || want[0].state != "straggler" || want[1].state != "resolved" {
		t.Fatalf("the gateway's records of node-2's ranks: %+v, want rank 5 flagged and resolved", want)
	}
	if len(of(gw, 7)) != 2 {
		t.Fatalf("the gateway's records of rank 7: %+v, want it flagged and resolved", of(gw, 7))
	}
	if got := of(node, 0, 1, 2, 3, 4, 5, 6, 7); !slices.Equal(got, want) {
		t.Errorf("node-2 said %+v, want its gateway's %+v", got, want)
	}
	for _, e := range node {
		if e.state == "straggler" && e.rank == 5 && (e.value > 0.2 || e.median < 0.28 || e.threshold >= e.median || e.score <= ncfgK) {
			t.Errorf("node-2's record of rank 5 says value %v, median %v, line %v, score %v: want its own sample past the line", e.value, e.median, e.threshold, e.score)
		}
	}

	_, alone := adoptRun(t, false)
	if got := of(alone, 4); len(got) == 0 {
		t.Errorf("judging by the line, node-2 never flagged rank 4, which only it saw slow: the run does not show what verdicts remove")
	}
}

// ncfgK is the default config's k, which a record's score is in units of.
var ncfgK = createDefaultConfig().K

// The gateway answers a node's export with its verdict on that node's ranks of each
// cohort and signal in it, all of them and no other node's, and nothing for a cohort
// it has no line for.
func TestTheGatewaysVerdictCoversTheSendersRanks(t *testing.T) {
	c := quarterSecondCluster(t)
	c.seconds = true
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 1; i <= 120; i++ {
		rates := jittered(rng, 8, 0.30, 0.05)
		if i > 80 {
			rates[2], rates[5], rates[7] = 0.15, 0.15, 0.15
		}
		c.step(rates)
	}
	role := &gatewayRole{det: c.det}
	_, resp := pushback.NewContext(context.Background())
	// node-1 exports only its rank 2 this time; its rank 3 is healthy.
	role.answer(resp, []point{{cohort: c.key, node: "node-1", rank: 2}, {cohort: cohortKey{cluster: "c1", cohort: "comm-9"}, node: "node-1", rank: 2}},
		[]sentCohort{{cohort: "comm-1"}, {cohort: "comm-9"}})
	ts := resp.Thresholds()
	if len(ts) != 1 || !ts[0].Verdicts || ts[0].Cohort != "comm-1" {
		t.Fatalf("answered %+v, want comm-1's line with a verdict", ts)
	}
	// A rank forgotten after the evaluation (forget_after) is left out, not read.
	delete(c.det.cohorts[c.key].ranks, 3)
	c.det.cohorts[c.key].lines[0].flagged = append(c.det.cohorts[c.key].lines[0].flagged, 3)
	_, resp = pushback.NewContext(context.Background())
	role.answer(resp, []point{{cohort: c.key, node: "node-1", rank: 2}}, []sentCohort{{cohort: "comm-1"}})
	ts = resp.Thresholds()
	if f := ts[0].Flagged; len(f) != 1 || f[0].Rank != 2 || f[0].Rule != ruleSamples || f[0].Since != c.start.Add(81*c.every).UnixMilli() {
		t.Errorf("node-1's verdict: %+v, want rank 2 flagged by its samples since its 81st sample, the first slow one, ended", f)
	}
}
