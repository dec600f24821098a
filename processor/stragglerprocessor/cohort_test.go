package stragglerprocessor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"
)

// Cohorts larger than this machine runs (it holds eight real ranks), made from the
// recorded jobs' rank samples and replayed through the gateway's and the nodes'
// detectors as the recordings themselves are (replay, replay_test.go).
//
// What a synthetic rank is made of. The recorded ranks of one job move together: on the
// PyTorch recording two ranks on different nodes had CPU-time samples correlated 0.99
// (their differences varied by 0.005 s/s where each varied by 0.036), because a
// synchronous job's ranks take their steps together. So a rank cannot be a recorded rank
// at another time: shifted by seven seconds the same pair correlated 0.33, and a cohort
// of time-shifted ranks would have the spread of the job's swings over time, several
// times the one the detector sees in a real job, hiding a slowdown no real cohort hides.
// Instead a synthetic rank's sample is
//
//	the job's level at that moment + a recorded rank's residual at another moment,
//
// where the level is the median of the recording's healthy ranks (the slow rank left
// out) at the sample's own recorded time, and a residual is a recorded rank's sample less
// the median of the recording's other healthy ranks at that time. So the cohort keeps the
// job's common swings and its response to the slow rank (its peers wait for it), as they
// were, and each rank's own deviation is a real one, drawn from its own time.
//
// Which residuals:
//   - One recording per cohort. The recordings' levels differ (CPU time 0.26 s/s in
//     base, 0.22 in pytorch, 0.06 to 0.15 in 8ranks), so a cohort mixing them would be
//     two populations, a split no job has. Trials take the recordings in turn.
//   - Within it, a synthetic node is a recorded node: its ranks keep their pairing
//     (two ranks of one node share its sampling: 0.96 against 0.68 across nodes on
//     base's CPU time), and the node keeps its recorded sampling times and spans,
//     shifted by a phase of its own within a sample. The slow rank's node is the
//     recorded slow rank with its recorded node-mate; every other node is one of the
//     recording's other nodes, so all its healthy ranks (four in base and pytorch, six
//     in 8ranks), never one rank copied.
//   - Each node reads its residuals from its own moment: healthy ones from the healthy
//     time before the slowdown, slow-phase ones from the slowdown itself (the slow
//     rank's excess, the peers' waiting), each at an offset of its own, rotated within
//     that span. Nodes drawn from one recorded node are at least a sample apart, so
//     no two ranks read the same recorded sample at once.
//   - The slowdown's onset is the recorded one, so the level carries the job's real
//     response to it; the sample that straddles it takes each side's residual by the
//     share of its span on that side, as a real sample does.
//
// What it does not keep: the residuals of nodes at different moments are independent,
// where a real job's ranks on one host share that host's swings beyond the job's; and a
// trial's level is its recording's, the same for every trial of a recording and
// slowdown (three per row), the draws varying the rest.

// cohortHealthyBefore is how long a trial runs healthy before the onset: 20 trials of
// a row give the ten healthy minutes. It must fit in the 50 s of residuals the
// recordings hold between a slowdown's resolve grace and the next onset.
const cohortHealthyBefore = 32 * time.Second

// residualSpanMargin keeps the residuals' spans clear of the samples that straddle a
// slowdown's onset or end, which are partly of each phase.
const residualSpanMargin = 500 * time.Millisecond

// rankTrack is one recorded rank's samples of one signal: each sample's end (unix
// nanos), span (nanos) and rate.
type rankTrack struct {
	ends, spans []int64
	rates       []float64
}

// near is the rate of the sample whose end is nearest t.
func (tr rankTrack) near(t int64) float64 {
	i := sort.Search(len(tr.ends), func(i int) bool { return tr.ends[i] >= t })
	switch {
	case i == len(tr.ends):
		i--
	case i > 0 && t-tr.ends[i-1] < tr.ends[i]-t:
		i--
	}
	return tr.rates[i]
}

// cohortSource is a recording taken apart into what synthetic cohorts are made of.
type cohortSource struct {
	rec     recording
	metrics []string              // the rank signals the recording holds
	tracks  map[int64][]rankTrack // rank → a track per metric
	healthy []int64               // ranks other than the slow one
	nodes   map[string][]int64    // node → its ranks, ascending
	// slowNode holds the slow rank; peerNodes are the others.
	slowNode  string
	peerNodes []string
	cohort    cohortKey
	scratch   []float64
}

func newCohortSource(t testing.TB, rec recording) *cohortSource {
	t.Helper()
	src := &cohortSource{rec: rec, tracks: map[int64][]rankTrack{}, nodes: map[string][]int64{}}
	type seriesKey struct {
		metric string
		rank   int64
	}
	metricIndex := map[string]int{}
	last := map[seriesKey]point{}
	for _, rp := range rec.points {
		if rp.p.cohort.cohort == "" {
			// A rank's first point before its node saw the communicator: another cohort.
			continue
		}
		src.cohort = rp.p.cohort
		if _, ok := metricIndex[rp.metric]; !ok {
			metricIndex[rp.metric] = len(src.metrics)
			src.metrics = append(src.metrics, rp.metric)
		}
		if !slices.Contains(src.nodes[rp.p.node], rp.p.rank) {
			src.nodes[rp.p.node] = append(src.nodes[rp.p.node], rp.p.rank)
		}
		key := seriesKey{rp.metric, rp.p.rank}
		prev, ok := last[key]
		last[key] = rp.p
		// A repeated point (same time) or a restarted series adds no sample.
		if !ok || prev.start != rp.p.start || rp.p.ts <= prev.ts || rp.p.value < prev.value {
			continue
		}
		m := metricIndex[rp.metric]
		for len(src.tracks[rp.p.rank]) <= m {
			src.tracks[rp.p.rank] = append(src.tracks[rp.p.rank], rankTrack{})
		}
		tr := &src.tracks[rp.p.rank][m]
		tr.ends = append(tr.ends, rp.p.ts)
		tr.spans = append(tr.spans, rp.p.ts-prev.ts)
		tr.rates = append(tr.rates, (rp.p.value-prev.value)/(float64(rp.p.ts-prev.ts)/1e9))
	}
	for node, ranks := range src.nodes {
		slices.Sort(ranks)
		if slices.Contains(ranks, rec.slowRank) {
			src.slowNode = node
		} else {
			src.peerNodes = append(src.peerNodes, node)
		}
	}
	slices.Sort(src.peerNodes)
	for rank, tracks := range src.tracks {
		if len(tracks) != len(src.metrics) {
			t.Fatalf("%s: rank %d has %d of the %d signals", rec.shape, rank, len(tracks), len(src.metrics))
		}
		if rank != rec.slowRank {
			src.healthy = append(src.healthy, rank)
		}
	}
	slices.Sort(src.healthy)
	if src.slowNode == "" || len(src.peerNodes) == 0 || len(src.nodes[src.slowNode]) != 2 {
		t.Fatalf("%s: want the slow rank %d on a node of two and other nodes, have %v", rec.shape, rec.slowRank, src.nodes)
	}
	return src
}

// medianExcept is the median rate of the healthy ranks other than except (-1: none) in
// metric m, each at its sample nearest t.
func (src *cohortSource) medianExcept(m int, t int64, except int64) float64 {
	src.scratch = src.scratch[:0]
	for _, r := range src.healthy {
		if r != except {
			src.scratch = append(src.scratch, src.tracks[r][m].near(t))
		}
	}
	slices.Sort(src.scratch)
	n := len(src.scratch)
	if n%2 == 1 {
		return src.scratch[n/2]
	}
	return (src.scratch[n/2-1] + src.scratch[n/2]) / 2
}

// level is the job's level of metric m at t: its healthy ranks' median.
func (src *cohortSource) level(m int, t int64) float64 { return src.medianExcept(m, t, -1) }

// residual is rank's own deviation in metric m at t: its sample less the median of the
// other healthy ranks, so that a rank is not measured against a median it moved itself.
func (src *cohortSource) residual(rank int64, m int, t int64) float64 {
	return src.tracks[rank][m].near(t) - src.medianExcept(m, t, rank)
}

// span is a stretch of recorded time, [from, to), residuals are read from.
type span struct{ from, to int64 }

// at is where a synthetic node at offset reads the span at time t: rotated, so that an
// offset anywhere in the span reads it whole.
func (s span) at(t, offset int64) int64 {
	n := s.to - s.from
	return s.from + ((t-s.from+offset)%n+n)%n
}

// offsetPicker hands out offsets into a span, whole samples apart for each recorded
// node: nodes drawn from one recorded node never read the same sample at once.
type offsetPicker struct {
	rng   *rand.Rand
	slots int
	taken map[string][]int
}

func (o *offsetPicker) pick(node string) int64 {
	if o.taken[node] == nil {
		o.taken[node] = o.rng.Perm(o.slots)
	}
	if len(o.taken[node]) == 0 {
		// More draws of one node than the span has samples: start over.
		o.taken[node] = o.rng.Perm(o.slots)
	}
	slot := o.taken[node][0]
	o.taken[node] = o.taken[node][1:]
	return int64(slot) * int64(250*time.Millisecond)
}

// syntheticCohort draws a cohort of size ranks from src, one of them (the returned
// recording's slowRank) slowed by pct from the recorded onset of src's slowdown of pct
// to its end, after cohortHealthyBefore of healthy running.
func syntheticCohort(t testing.TB, src *cohortSource, size, pct int, rng *rand.Rand) recording {
	t.Helper()
	if size < 3 {
		t.Fatalf("a cohort of %d: the detector judges three or more", size)
	}
	si := slices.IndexFunc(src.rec.slowdowns, func(s recordedSlowdown) bool { return s.pct == pct })
	if si < 0 {
		t.Fatalf("%s has no %d%% slowdown", src.rec.shape, pct)
	}
	slow := src.rec.slowdowns[si]
	healthyFrom := src.rec.points[0].p.ts + int64(resolveGrace)
	if si > 0 {
		healthyFrom = src.rec.slowdowns[si-1].off.Add(resolveGrace).UnixNano()
	}
	onset, end := slow.on.UnixNano(), slow.off.UnixNano()
	healthySpan := span{healthyFrom, onset - int64(residualSpanMargin)}
	slowSpan := span{onset + int64(residualSpanMargin), end - int64(residualSpanMargin)}
	start := onset - int64(cohortHealthyBefore)
	if start < healthyFrom {
		t.Fatalf("%s: %v of healthy running before the %d%% onset, want %v", src.rec.shape, time.Duration(onset-healthyFrom), pct, cohortHealthyBefore)
	}
	healthyOffsets := offsetPicker{rng: rng, slots: int((healthySpan.to - healthySpan.from) / int64(250*time.Millisecond)), taken: map[string][]int{}}
	slowOffsets := offsetPicker{rng: rng, slots: int((slowSpan.to - slowSpan.from) / int64(250*time.Millisecond)), taken: map[string][]int{}}

	// Rank ids shuffled: the slow rank is anywhere in the cohort.
	ids := rng.Perm(size)
	out := recording{shape: src.rec.shape, what: fmt.Sprintf("%d ranks from %s", size, src.rec.shape)}
	out.slowdowns = []recordedSlowdown{{pct: pct, on: slow.on, off: slow.off}}
	cohort := cohortKey{cluster: src.cohort.cluster, cohort: fmt.Sprintf("%s/%d", src.cohort.cohort, size)}
	for node, made := 0, 0; made < size; node++ {
		recorded := src.slowNode
		if node > 0 {
			recorded = src.peerNodes[rng.IntN(len(src.peerNodes))]
		}
		ranks := src.nodes[recorded]
		if node == 0 && ranks[0] != src.rec.slowRank {
			ranks = []int64{ranks[1], ranks[0]}
		}
		if size-made < len(ranks) {
			// The last node is short of a rank: which one it keeps is drawn.
			ranks = []int64{ranks[rng.IntN(len(ranks))]}
		}
		healthyOffset, slowOffset := healthyOffsets.pick(recorded), slowOffsets.pick(recorded)
		phase := rng.Int64N(int64(250 * time.Millisecond))
		name := fmt.Sprintf("node-%d", node)
		// The node's sampling: its recorded sample ends and spans, shifted by its phase.
		schedule := src.tracks[ranks[0]][0]
		for i, rank := range ranks {
			id := int64(ids[made+i])
			if node == 0 && i == 0 {
				out.slowRank = id
			}
			for m := range src.metrics {
				total, seriesStart := 0.0, int64(0)
				for k, recEnd := range schedule.ends {
					ts, spanNs := recEnd+phase, schedule.spans[k]
					if ts-spanNs < start || ts > end {
						continue
					}
					if seriesStart == 0 {
						seriesStart = ts - spanNs
					}
					// The share of the sample after the onset, which reads the slowdown's
					// residuals.
					slowShare := math.Min(1, math.Max(0, float64(ts-max(ts-spanNs, onset))/float64(spanNs)))
					var dev float64
					if slowShare < 1 {
						dev += (1 - slowShare) * src.residual(rank, m, healthySpan.at(ts, healthyOffset))
					}
					if slowShare > 0 {
						dev += slowShare * src.residual(rank, m, slowSpan.at(ts, slowOffset))
					}
					// A rate cannot fall below zero (a counter never falls; the detector
					// would read a restart): a signal near zero (base's host lead, 1 ms/s)
					// is cut at zero.
					rate := max(0, src.level(m, ts)+dev)
					total += rate * float64(spanNs) / 1e9
					out.points = append(out.points, recordedPoint{metric: src.metrics[m], p: point{
						cohort: cohort, job: "synthetic", node: name, rank: id, pid: 1000 + id,
						cumulative: true, seconds: true, value: total, start: seriesStart, ts: ts,
					}})
				}
			}
		}
		made += len(ranks)
	}
	slices.SortStableFunc(out.points, func(a, b recordedPoint) int { return int(a.p.ts - b.p.ts) })
	return out
}

// cohortTrial is what the gateway and the nodes made of one synthetic cohort.
type cohortTrial struct {
	shape          string
	gateway, nodes replayResult
	slowRank       int
}

// cohortSources reads the committed recordings, in a fixed order, but for those of two
// ranks: a cohort is drawn from a recording's healthy ranks and the slow rank's
// node-mate, and the recorded pair (one rank a node) has neither.
func cohortSources(t testing.TB) []*cohortSource {
	t.Helper()
	paths, err := filepath.Glob("testdata/recordings/*.csv.gz")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no recording in testdata/recordings (%v)", err)
	}
	slices.Sort(paths)
	var srcs []*cohortSource
	for _, p := range paths {
		if rec := readRecording(t, p); len(ranksOf(rec)) > 2 {
			srcs = append(srcs, newCohortSource(t, rec))
		}
	}
	return srcs
}

// runCohortTrial draws trial number trial of a cohort of size ranks slowed by pct
// (seeded by all three, the recording taken in turn) and replays it through the
// gateway's detector and through the nodes'.
func runCohortTrial(t testing.TB, srcs []*cohortSource, size, pct, trial int) cohortTrial {
	t.Helper()
	src := srcs[trial%len(srcs)]
	rng := rand.New(rand.NewPCG(uint64(size), uint64(pct)<<32|uint64(trial)))
	rec := syntheticCohort(t, src, size, pct, rng)
	return cohortTrial{
		shape:    src.rec.shape,
		gateway:  replay(rec, shippedConfig(), nil, false),
		nodes:    replay(rec, shippedConfig(), nil, true),
		slowRank: int(rec.slowRank),
	}
}

// A reduced run of the cohort matrix (the full one: TestStragglerCohortMatrix, bench
// tag): cohorts of 3, 16 and 64 ranks made from each recording, slowed by 20% and 10%.
// Fails when the slow rank is not flagged before its slowdown ends (40 s), by the
// gateway or by its node, or when anyone else is flagged, or the slow rank while
// healthy; not on how fast.
func TestSyntheticCohortsFindTheSlowRankAndFlagNobodyElse(t *testing.T) {
	srcs := cohortSources(t)
	for _, size := range []int{3, 16, 64} {
		for _, pct := range []int{20, 10} {
			for trial := range len(srcs) {
				tr := runCohortTrial(t, srcs, size, pct, trial)
				for _, by := range []struct {
					name string
					res  replayResult
				}{{"gateway", tr.gateway}, {"nodes", tr.nodes}} {
					l := by.res.latencies[pct]
					t.Logf("%d ranks from %s, %d%%, %s: onset to flag %v; %d false flags in %v healthy", size, tr.shape, pct, by.name, l, by.res.falseFlags, by.res.healthy)
					if l < 0 {
						t.Errorf("%d ranks from %s, %d%%: the %s did not flag slow rank %d within its slowdown", size, tr.shape, pct, by.name, tr.slowRank)
					}
					if by.res.falseFlags != 0 {
						t.Errorf("%d ranks from %s, %d%%: the %s made %d false flags: %v", size, tr.shape, pct, by.name, by.res.falseFlags, by.res.log)
					}
				}
			}
		}
	}
}
