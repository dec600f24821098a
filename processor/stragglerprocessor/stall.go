package stragglerprocessor

import (
	"time"
)

// A stall is a rank that fell past its cohort's line and came back before it was
// flagged: shorter than min_duration (or than persistence), so not a straggler, yet
// worth a record, since the stall happened and cost the rank's peers the time they
// waited. Its episode is a run of consecutive samples past the sample line (the line
// the samples rule judges by) while the rank is not flagged. When a sample comes back
// inside the line the episode ends, and if it was long enough (stallLong) and the
// rank was flagged on no signal meanwhile, it is written as one record with state
// "stall": at the end of its last sample, since as long before as it lasted, with the
// value, median, line and score of its worst sample.

// minStallSamples is the least run of samples that is a stall by its samples' spans.
// One sample past the line is what a healthy rank's noise makes now and then on a
// busy host (60 to 170 an hour per rank in the committed recordings' healthy time:
// docs/straggler.md, Stall records), and the persistence rule already calls it
// nothing. A single sample is a stall only by the time it measured (stallEpisode.extra).
const minStallSamples = 2

// stallEpisode is a run of samples past the line while the rank is not flagged, and
// its worst sample (by its excess over the median, on the worse side).
type stallEpisode struct {
	samples    int
	since, end time.Time
	// extra is, for a signal of time per second on which higher is worse (host lead,
	// CPU time, run queue), the time its samples spent past the cohort's median:
	// what a stall between a rank's sync and its collective adds to its host lead,
	// all in the one sample in which the collective is entered.
	extra     time.Duration
	worst     float64
	value     float64
	median    float64
	threshold float64
	score     float64
	gauge     bool
	detail    string
	// seconds: the signal is time spent per second (see sample), so the rank was
	// held up; on a count (errors, retransmits) it was a burst, not a stall of the rank.
	seconds bool
}

// lasted is how long the episode's stall lasted: its samples' span, or the time they
// measured past the median where that is longer.
func (ep stallEpisode) lasted() time.Duration {
	return max(ep.end.Sub(ep.since), ep.extra)
}

// long says whether the episode is a stall: at least least long, by at least
// minStallSamples samples' span or by the time it measured.
func (ep stallEpisode) long(least time.Duration) bool {
	return ep.samples >= minStallSamples && ep.end.Sub(ep.since) >= least || ep.samples > 0 && ep.extra >= least
}

// stallSpan is what a rank's last stall record covered.
type stallSpan struct {
	since, end time.Time
}

// followStall follows the series' stall episode with one judged sample: beyond says
// the sample is past the line, excess how far past the median on the worse side it
// lies, timeAhead that the signal is time per second and higher is worse (so excess
// times the sample's span is time the rank spent); median, threshold and score are
// the line it was judged by. It returns the episode this sample ended, when it was
// long enough to be a stall (least). A flagged series has no episode (its slowness is
// a straggler's), and before the warm-up nothing is followed.
func (s *signalSeries) followStall(sm sample, beyond bool, excess float64, timeAhead bool, median, threshold, score float64, warm bool, least time.Duration) (stallEpisode, bool) {
	if s.flagged || !warm {
		s.stall = stallEpisode{}
		return stallEpisode{}, false
	}
	if beyond {
		ep := &s.stall
		if ep.samples == 0 {
			ep.since = sm.at.Add(-time.Duration(sm.span * float64(time.Second)))
		}
		ep.samples++
		ep.end = sm.at
		if timeAhead && excess > 0 {
			ep.extra += time.Duration(excess * sm.span * float64(time.Second))
		}
		if ep.samples == 1 || excess > ep.worst {
			ep.worst, ep.value, ep.median, ep.threshold, ep.score = excess, sm.value, median, threshold, score
			ep.gauge, ep.detail, ep.seconds = sm.gauge, sm.detail, sm.seconds
		}
		return stallEpisode{}, false
	}
	ep := s.stall
	s.stall = stallEpisode{}
	return ep, ep.long(least)
}

// recordStall writes an ended stall episode of rank r as a stall event (ev carries the
// rank's cohort, node and signal), unless the rank is flagged on some signal (its
// stall is part of a straggler's record), the episode is the same stall another
// signal of the rank already recorded (a stall shows in device wait, host lead and CPU
// time at once), or the rank's last stall was recorded less than stallEvery before:
// those are dropped and counted as stall_rate, so that a rank records at most one
// stall per min_duration.
func (d *detector) recordStall(r *rankState, ep stallEpisode, ev event, out *evaluation) {
	for i := range r.series {
		if r.series[i].flagged {
			return
		}
	}
	if !r.lastStall.end.IsZero() && !ep.end.Add(-ep.lasted()).After(r.lastStall.end) {
		return // the same stall, seen on another signal
	}
	if !r.lastStall.end.IsZero() && ep.end.Sub(r.lastStall.end) < d.stallEvery() {
		d.drops["stall_rate"]++
		return
	}
	since := ep.end.Add(-ep.lasted())
	r.lastStall = stallSpan{since: since, end: ep.end}
	ev.state, ev.since, ev.at, ev.rule, ev.window = "stall", since, ep.end, "", 0
	ev.value, ev.median, ev.threshold, ev.score = ep.value, ep.median, ep.threshold, ep.score
	ev.gauge, ev.detail, ev.seconds = ep.gauge, ep.detail, ep.seconds
	out.events = append(out.events, ev)
}

// stallLeast is the least a stall lasts: 0.4 x min_duration (600 ms by default),
// between two quarter-second samples and three.
func (d *detector) stallLeast() time.Duration {
	return d.cfg.MinDuration * 2 / 5
}

// stallEvery is the least time between two stall records of one rank: min_duration,
// or a second when it is 0 (samples only).
func (d *detector) stallEvery() time.Duration {
	return max(d.cfg.MinDuration, time.Second)
}
