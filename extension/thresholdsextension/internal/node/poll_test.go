package node

import (
	"testing"
	"time"
)

// Each wait is drawn uniformly from interval·(1±jitter).
func TestJitteredSpreadsOverTheRange(t *testing.T) {
	for _, c := range []struct {
		jitter, u float64
		want      time.Duration
	}{
		{0.2, 0, 80 * time.Millisecond},
		{0.2, 0.5, 100 * time.Millisecond},
		{0.2, 0.75, 110 * time.Millisecond},
		{0.5, 0.25, 75 * time.Millisecond},
		{0, 0.9, 100 * time.Millisecond},
	} {
		if got := jittered(100*time.Millisecond, c.jitter, c.u); got != c.want {
			t.Errorf("jittered(100ms, %v, %v) = %v; want %v", c.jitter, c.u, got, c.want)
		}
	}
	if got := jittered(100*time.Millisecond, 0.2, 0.9999999); got >= 120*time.Millisecond {
		t.Errorf("the longest wait is %v; want under 120ms", got)
	}
}

// The node polls only the cohorts its straggler processor asked about, at most max_held
// lines of them; one the processor stopped asking about is forgotten after the TTL.
func TestWantedLinesAreBounded(t *testing.T) {
	w := newWantedLines(2, time.Minute)
	now := time.Now()
	a, b, c := line.Key(), launchLine.Key(), otherCohortLine.Key()
	w.ask(a, now)
	w.ask(b, now)
	w.ask(c, now)
	if got := w.keys(now); len(got) != 2 || (got[0] != a && got[1] != a) || (got[0] != b && got[1] != b) {
		t.Fatalf("wanted %v; want %v and %v", got, a, b)
	}
	w.ask(a, now.Add(time.Minute))
	w.ask(c, now.Add(time.Minute+time.Second))
	if got := w.keys(now.Add(time.Minute + time.Second)); len(got) != 2 || (got[0] != a && got[1] != a) || (got[0] != c && got[1] != c) {
		t.Fatalf("after b was not asked for a TTL: wanted %v; want %v and %v", got, a, c)
	}
}
