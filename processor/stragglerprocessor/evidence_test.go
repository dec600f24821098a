package stragglerprocessor

import (
	"testing"
	"time"
)

// A slowdown whose samples straddle the sample line (k = 3 spreads: scores of 3.5 and
// 2.5 in turn, as 30% more host work scored in CPU time on the busy host) builds its
// evidence at the full rate: each run past the line counts its first sample, so the
// rank is flagged after min_duration of samples (six quarter-second samples), where a
// rule that counted no sample past the line flagged it after twelve. A stall, a run
// past the line however deep, adds its first sample's share only, and a pair's rule
// counts none of it.
func TestEvidenceCountsTheFirstSampleOfARunPastTheLine(t *testing.T) {
	const span = 0.25
	rule := newEvidenceRule(0.5, 3, 1500*time.Millisecond) // drift 0.5, height 3, 0.5 a sample at most
	start := time.Unix(1_800_000_000, 0)
	flaggedAfter := func(r evidenceRule, scores func(i int) float64) int {
		var s signalSeries
		for i := range 40 {
			if v := s.accumulate(scores(i), span, start.Add(time.Duration(i)*250*time.Millisecond), r, &scoreNoise{}); v.beyond {
				return i + 1
			}
		}
		return 0
	}
	straddling := func(i int) float64 { return []float64{3.5, 2.5}[i%2] }
	if n := flaggedAfter(rule, straddling); n != 6 {
		t.Errorf("scores straddling the line reached the height after %d samples, want 6 (min_duration)", n)
	}
	pair := rule
	pair.pastAddsNothing = true
	if n := flaggedAfter(pair, straddling); n != 12 {
		t.Errorf("a pair's rule reached the height after %d samples of scores straddling the line, want 12 (the six under it only)", n)
	}

	var s signalSeries
	var v evidenceVerdict
	for i := range 8 { // a 2 s stall, 20 spreads deep
		v = s.accumulate(20, span, start.Add(time.Duration(i)*250*time.Millisecond), rule, &scoreNoise{})
	}
	if v.beyond || s.evidence != 0.5 {
		t.Errorf("a 2 s stall left evidence %v (flagged %v), want its first sample's 0.5", s.evidence, v.beyond)
	}
}
