package stragglerprocessor

import (
	"math"
	"time"

	"github.com/fathom-gpu/fathom/internal/pushback"
	"github.com/fathom-gpu/fathom/internal/series"
)

// Judging over windows as well as samples.
//
// Samples of 250 ms on a busy host are mostly noise: a rank whose host work was 20%
// longer, in a job of six ranks on two cores, scored 0.2 to 0.4 scaled MADs a sample
// on average and was never flagged, while over 8 s windows of the same samples it stood
// far out. So each sample is judged on its own, which finds a large slowdown fast, and
// the median of a rank's samples over each window of its recent past is judged against
// the line the cohort's medians over that window draw, which finds a small steady one.
//
// Why the median of the window: it is past the window's line only when at least half the
// window's samples are, so a stall shorter than half the shortest window (min_duration)
// moves no window, however long it makes its own sample. Why the floors shrink: the MAD
// floors bound a sample's noise, and the median of n samples has about 1/√n of it; the
// cohort's own spread of window medians takes over wherever the ranks really differ.

// windowMultiples are the windows, in multiples of min_duration: the shortest sets the
// minimum duration; the longest (8 × 1.5 s = 12 s) finds a steady 5% within about ten
// seconds.
var windowMultiples = []time.Duration{2, 4, 8}

// maxMinDuration keeps the longest window within what a series holds (maxHistory samples
// of the 250 ms the shipped configs sample at).
const maxMinDuration = 8 * time.Second

// maxHistory bounds the samples a series holds for its windows: the longest window of
// samples every 100 ms, with room.
const maxHistory = 512

// windowSample is what a window needs of a sample: when it ended, its value, and the
// seconds it covers (24 bytes, against a sample's hundred: a gateway holds 48 of them
// per rank and windowed signal at 250 ms samples).
type windowSample struct {
	at          int64 // unix nanos
	value, span float64
}

// crossing is since when a rank's median over one window has been past its line
// (crossed; zero when it is not), and since when its samples were, found as it crossed.
type crossing struct {
	crossed, since time.Time
}

// windows are the window lengths judged, shortest first; none when min_duration is 0.
func (c *Config) windows() []time.Duration {
	if c.MinDuration <= 0 {
		return nil
	}
	out := make([]time.Duration, len(windowMultiples))
	for i, m := range windowMultiples {
		out[i] = m * c.MinDuration
	}
	return out
}

// windowLine is a cohort's line for the medians of its ranks' samples over one window.
type windowLine struct {
	window            time.Duration
	median, threshold float64
}

// remember keeps sm for the windows, and lets go of samples older than the longest
// window (and, past maxHistory, the oldest, counted). A series of another process (a
// restarted rank) starts its windows anew.
func (s *signalSeries) remember(sm sample, pid int64, longest time.Duration, drops map[string]int64) {
	if pid != s.historyPID {
		s.history, s.historyPID, s.crossings = s.history[:0], pid, nil
		s.forgetEvidence()
	}
	if longest <= 0 {
		return
	}
	s.history = appendWithin(s.history, windowSample{at: sm.at.UnixNano(), value: sm.value, span: sm.span}, longest, drops)
}

// appendWithin appends ws to history and lets go of what ended longest or more before
// it, and, past maxHistory, of the oldest (counted as window_cap in drops).
func appendWithin(history []windowSample, ws windowSample, longest time.Duration, drops map[string]int64) []windowSample {
	history = append(history, ws)
	cut := 0
	for cut < len(history) && ws.at-history[cut].at >= int64(longest) {
		cut++
	}
	if over := len(history) - cut - maxHistory; over > 0 {
		cut += over
		drops["window_cap"] += int64(over)
	}
	if cut > 0 {
		history = append(history[:0], history[cut:]...)
	}
	return history
}

// windowMedian is the median of the samples in history that ended within w before its
// last, and false when they cover less than three quarters of it (a rank just started,
// or back from a gap) or are fewer than three. scratch is reused for the values.
func windowMedian(history []windowSample, w time.Duration, scratch *[]float64) (float64, bool) {
	if len(history) == 0 {
		return 0, false
	}
	end := history[len(history)-1].at
	values := (*scratch)[:0]
	var first windowSample
	for i := len(history) - 1; i >= 0 && end-history[i].at < int64(w); i-- {
		values = append(values, history[i].value)
		first = history[i]
	}
	*scratch = values
	covered := time.Duration(end-first.at) + time.Duration(first.span*float64(time.Second))
	if len(values) < 3 || covered < w*3/4 {
		return 0, false
	}
	return series.Median(values), true
}

// windowMedian is the series' median over its last w, from the medians taken at its
// latest sample when there (the gateway takes each one for the line, then again to
// judge the rank).
func (s *signalSeries) windowMedian(w time.Duration, scratch *[]float64) (float64, bool) {
	if len(s.history) == 0 {
		return 0, false
	}
	last := s.history[len(s.history)-1].at
	if s.mediansAt != last {
		s.medians, s.mediansAt = s.medians[:0], last
	}
	for _, m := range s.medians {
		if m.window == w {
			return m.value, m.ok
		}
	}
	m, ok := windowMedian(s.history, w, scratch)
	s.medians = append(s.medians, windowValue{window: w, value: m, ok: ok})
	return m, ok
}

// windowValue is a median taken over one window.
type windowValue struct {
	window time.Duration
	value  float64
	ok     bool
}

// rememberSpread keeps the cohort's sample spread of this evaluation for signal sig,
// over the longest window as a series keeps its samples, and returns the spreads kept.
func (c *cohort) rememberSpread(sig int, spread float64, now time.Time, longest time.Duration, drops map[string]int64) []windowSample {
	c.spreads[sig] = appendWithin(c.spreads[sig], windowSample{at: now.UnixNano(), value: spread}, longest, drops)
	return c.spreads[sig]
}

// drawWindowLines draws the cohort's line over each window from the window medians of
// its fresh ranks (those in fresh). Its spread is at least what the median of the
// window's samples inherits from the samples' own spread (the median of the cohort's
// sample spreads over the window, floors included, from spreads): √(π/2) of it over
// √n, n = w / span, span being the ranks' median sample length. A few ranks' window
// medians can agree by chance far more closely than their noise allows, and their MAD
// alone then draws the line inside the noise (six ranks of the busy-host model flagged
// a healthy rank 3 times in 10,000 s so). The spread over the window, not the
// evaluation's: six ranks' samples of one evaluation have a spread that varied twenty
// times over from one evaluation to the next on a job of 640 ms steps (arrival lag
// matched once a second), and each line it drew above a slow rank's window median
// reset that window's crossing, so no window stayed past its line for a whole window.
// A window with fewer than quorum medians has no line.
func (d *detector) drawWindowLines(fresh []*signalSeries, sig int, spreads []windowSample, worse float64) []windowLine {
	if !d.cfg.windowed(sig) {
		return nil
	}
	windows := d.cfg.windows()
	spans := make([]float64, 0, len(fresh))
	for _, s := range fresh {
		spans = append(spans, s.latest.span)
	}
	span := series.Median(spans)
	var out []windowLine
	for _, w := range windows {
		var medians []float64
		for _, s := range fresh {
			if m, ok := s.windowMedian(w, &d.scratch); ok {
				medians = append(medians, m)
			}
		}
		if len(medians) < d.cfg.Quorum {
			continue
		}
		sampleSpread, ok := windowMedian(spreads, w, &d.scratch)
		if !ok && len(spreads) > 0 {
			sampleSpread = spreads[len(spreads)-1].value // the window not yet covered
		}
		inherited := sampleSpread
		if span > 0 {
			inherited = sampleSpread * medianEfficiency * math.Min(1, math.Sqrt(span/w.Seconds()))
		}
		median := series.Median(medians)
		spread := max(series.MADScale*series.MAD(medians, median), inherited)
		out = append(out, windowLine{window: w, median: median, threshold: median + worse*windowK(d.cfg.K, len(medians))*spread})
	}
	return out
}

// windowKRanks is the largest cohort whose window lines are drawn at k itself.
const windowKRanks = 8

// windowK is the window lines' k for a cohort of n ranks. Each healthy rank's window
// median may cross a line at k by chance; in a cohort of many ranks one of them will,
// however rarely each does. Replayed cohorts of 64 ranks made of recorded ranks flagged
// healthy ranks over their 3 and 6 s windows three times in ten healthy minutes (scores
// 3.1 to 3.4), and none of 3 to 32 did (cohort_test.go). So past windowKRanks the line
// moves out until the chance that some one of n healthy ranks crosses it is what it is
// for windowKRanks at k (normal tails): 3.2 at 16 ranks, 3.6 at 64, 4.8 at 16,384 for k = 3. The
// samples and the evidence are left at k: each needs a run of samples past it, not one
// crossing. A node judges against the line it was sent, whatever k drew it.
func windowK(k float64, n int) float64 {
	if n <= windowKRanks {
		return k
	}
	tail := 0.5 * math.Erfc(k/math.Sqrt2) * windowKRanks / float64(n)
	return max(k, math.Sqrt2*math.Erfcinv(2*tail))
}

// medianEfficiency is √(π/2): the spread of the median of n samples over that of their
// mean, σ/√n.
var medianEfficiency = math.Sqrt(math.Pi / 2)

// windowVerdict is what a rank's windows say at one sample.
//
// A window's median that is past its line counts once it has stayed past for a whole
// window: neighbouring windows share most of their samples, so one excursion of a
// healthy rank's noise, or a stall with the noise around it, would otherwise be seen by
// every window that holds it, while a slow rank stays past for as long as it is slow.
// Measured on the detector's own model of a busy host (16 ranks, 250 ms samples ±15%,
// one rank in sixteen stalled for up to a second about every 3 s; TestTuneWindows in
// its day): staying past for half a window flagged healthy ranks 33 times in 10,000 s
// (4 times without the 3 s window); a whole window, never.
type windowVerdict struct {
	// beyond: some window's median is past its line; held: past its resolve line.
	beyond, held bool
	// The window that is furthest past its line, when beyond: its median of the rank's
	// samples, its line, the rank's score against it, and since when the rank's
	// samples in it were past the line.
	window                   time.Duration
	value, median, threshold float64
	score                    float64
	since                    time.Time
}

// judgeWindows judges the series' windows, ending at its latest sample, against lines,
// worse being +1 when higher is worse and -1 when lower is; resolveWithin places each
// resolve line. It is called once an evaluation: a window counts only after a whole
// window past its line, so the samples between two evaluations add nothing a judgement
// at the last of them misses.
func (s *signalSeries) judgeWindows(lines []windowLine, worse, k, resolveWithin float64, scratch *[]float64) (v windowVerdict) {
	defer func() { s.windowsHeld = v.held }()
	if len(s.history) == 0 {
		return v
	}
	if len(s.crossings) != len(lines) {
		// Lines come and go with a quorum of covered windows, and a node's with its
		// answers: a window whose line was missing starts its crossing anew.
		s.crossings = make([]crossing, len(lines))
	}
	now := time.Unix(0, s.history[len(s.history)-1].at)
	for i, l := range lines {
		m, ok := s.windowMedian(l.window, scratch)
		spread := worse * (l.threshold - l.median) / k
		c := &s.crossings[i]
		if !ok || !(spread > 0) {
			*c = crossing{}
			continue
		}
		score := worse * (m - l.median) / spread
		if score > k*resolveWithin {
			v.held = true
		}
		if score <= k {
			*c = crossing{}
			continue
		}
		if c.crossed.IsZero() {
			// Since the first sample past the line in the window that crossed it.
			*c = crossing{crossed: now, since: firstPast(s.history, l.window, func(x float64) bool { return worse*(x-l.threshold) > 0 })}
			continue
		}
		if now.Sub(c.crossed) >= l.window && (!v.beyond || score > v.score) {
			v.beyond, v.window, v.value, v.median, v.threshold, v.score, v.since = true, l.window, m, l.median, l.threshold, score, c.since
		}
	}
	return v
}

// firstPast is when the earliest sample past the line in the window ending at the
// last sample began.
func firstPast(history []windowSample, w time.Duration, past func(float64) bool) time.Time {
	end := history[len(history)-1].at
	var since int64
	for i := len(history) - 1; i >= 0 && end-history[i].at < int64(w); i-- {
		if past(history[i].value) {
			since = history[i].at - int64(history[i].span*float64(time.Second))
		}
	}
	return time.Unix(0, since)
}

// pushedWindows are the window lines a node received with a threshold.
func pushedWindows(t pushback.Threshold) []windowLine {
	out := make([]windowLine, 0, len(t.Windows))
	for _, w := range t.Windows {
		out = append(out, windowLine{window: time.Duration(w.Seconds * float64(time.Second)), median: w.Median, threshold: w.Line})
	}
	return out
}

// toPushback writes a cohort's window lines for the push-back.
func toPushback(lines []windowLine) []pushback.WindowLine {
	if len(lines) == 0 {
		return nil
	}
	out := make([]pushback.WindowLine, 0, len(lines))
	for _, l := range lines {
		out = append(out, pushback.WindowLine{Seconds: l.window.Seconds(), Median: l.median, Line: l.threshold})
	}
	return out
}
