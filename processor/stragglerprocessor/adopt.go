package stragglerprocessor

import (
	"slices"
	"time"

	"github.com/fathom-gpu/fathom/internal/pushback"
)

// adoptVerdict sets a node's rank's state on signal sig to its gateway's verdict t,
// pushed back with the line (a cohort's) or instead of one (a pair's): flagged, with
// what the gateway says flagged it, once t holds it flagged; resolved once t no longer
// does. Between two answers the rank keeps the state of the last. A node whose gateway
// sends verdicts says them rather than judging its ranks by the line itself: it has
// its own ranks' samples an export sooner than their peers', and a burst of load that
// slows the whole host (a compile beside the job) put its ranks past a line drawn from
// before it, so nodes flagged ranks their gateway, seeing every rank of the burst at
// once, held healthy (docs/straggler.md, Push-back).
func (d *detector) adoptVerdict(c *cohort, rank int64, sig int, t pushback.Threshold, now time.Time, out *evaluation) {
	r := c.ranks[rank]
	s := &r.series[sig]
	i := slices.IndexFunc(t.Flagged, func(f pushback.Flag) bool { return f.Rank == rank })
	if (i >= 0) == s.flagged {
		return
	}
	ev := event{cohort: c.key, job: r.job, node: r.node, rank: rank, signal: sig, value: s.latest.value,
		median: t.Median, threshold: t.Line, at: now, gauge: s.latest.gauge, detail: s.latest.detail}
	if i < 0 {
		s.flagged = false
		if t.Pair {
			// The record says the partner's value its flag expected: the gateway
			// sends no line for a rank it holds healthy.
			if j := slices.IndexFunc(c.adopted, func(a adoptedFlag) bool { return a.rank == rank && a.signal == sig }); j >= 0 {
				ev.median, ev.threshold = c.adopted[j].median, c.adopted[j].line
				c.adopted = slices.Delete(c.adopted, j, j+1)
			}
		} else {
			ev.score = d.scoreAgainst(ev.value, t.Median, t.Line)
		}
		ev.state, ev.since, ev.rule = "resolved", s.since, s.rule
		out.events = append(out.events, ev)
		return
	}
	f := t.Flagged[i]
	s.flagged, s.since = true, time.UnixMilli(f.Since)
	if t.Pair {
		s.window, s.rule = 0, rulePair
		ev.value, ev.median, ev.threshold, ev.score = f.Value, f.Expected, f.Line, f.Score
		c.adopted = append(slices.DeleteFunc(c.adopted, func(a adoptedFlag) bool { return a.rank == rank && a.signal == sig }),
			adoptedFlag{rank: rank, signal: sig, median: f.Expected, line: f.Line})
	} else {
		s.window, s.rule = time.Duration(f.Window*float64(time.Second)), f.Rule
		ev.score = d.scoreAgainst(ev.value, t.Median, t.Line)
		// A window's flag is written with the rank's median over that window and the
		// window's line, as the gateway wrote it, where the node has both.
		if j := slices.IndexFunc(t.Windows, func(w pushback.WindowLine) bool { return w.Seconds == f.Window }); s.window > 0 && j >= 0 {
			if m, ok := s.windowMedian(s.window, &d.scratch); ok {
				w := t.Windows[j]
				ev.value, ev.median, ev.threshold, ev.window = m, w.Median, w.Line, s.window
				ev.score = d.scoreAgainst(m, w.Median, w.Line)
			}
		}
	}
	ev.state, ev.since, ev.rule = "straggler", s.since, s.rule
	out.events = append(out.events, ev)
}

// scoreAgainst is value's score against a line drawn k spreads from its median on the
// worse side: the number of spreads it lies past the median, towards the line.
func (d *detector) scoreAgainst(value, median, line float64) float64 {
	if line == median {
		return 0
	}
	return d.cfg.K * (value - median) / (line - median)
}
