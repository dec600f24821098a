package stragglerprocessor

import (
	"time"
)

// A stall is a rank that fell past its cohort's line and came back before it was
// flagged: shorter than min_duration (or than persistence), so not a straggler, yet
// worth a record, since the stall happened and cost the rank's peers the time they
// waited. Its episode is a run of consecutive samples past the sample line (the line
// the samples rule judges by) while the rank is not flagged. When a sample comes back
// inside the line, the episode ends, and if it held at least minStallSamples samples
// and the rank was flagged on no signal meanwhile, it is written as one record with
// state "stall": since when its first sample's interval began, at its last sample's
// end, with the value, median, line and score of its worst sample.

// minStallSamples is the least episode recorded as a stall. One sample past the line
// is what a healthy rank's noise makes now and then on a real busy host (the
// committed recordings' healthy time: see docs/straggler.md, Stall records), and the
// persistence rule already calls it nothing; a stall that spans two samples is one
// the rank did not make up within a sample.
const minStallSamples = 2

// stallEpisode is a run of samples past the line while the rank is not flagged, and
// its worst sample (by its excess over the median, on the worse side).
type stallEpisode struct {
	samples    int
	since, end time.Time
	worst      float64
	value      float64
	median     float64
	threshold  float64
	score      float64
	gauge      bool
	detail     string
}

// stallSpan is what a rank's last stall record covered.
type stallSpan struct {
	since, end time.Time
}

// followStall follows the series' stall episode with one judged sample: beyond says
// the sample is past the line, excess how far past the median on the worse side it
// lies; median, threshold and score are the line it was judged by. It returns the
// episode that this sample ended, when it was long enough to be a stall. A flagged
// series has no episode (its slowness is a straggler's), and before the warm-up
// nothing is followed.
func (s *signalSeries) followStall(sm sample, beyond bool, excess, median, threshold, score float64, warm bool, least time.Duration) (stallEpisode, bool) {
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
		if ep.samples == 1 || excess > ep.worst {
			ep.worst, ep.value, ep.median, ep.threshold, ep.score = excess, sm.value, median, threshold, score
			ep.gauge, ep.detail = sm.gauge, sm.detail
		}
		return stallEpisode{}, false
	}
	ep := s.stall
	s.stall = stallEpisode{}
	return ep, ep.samples >= minStallSamples && ep.end.Sub(ep.since) >= least
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
	if !r.lastStall.end.IsZero() && !ep.since.After(r.lastStall.end) {
		return // the same stall, seen on another signal
	}
	if !r.lastStall.end.IsZero() && ep.end.Sub(r.lastStall.end) < d.stallEvery() {
		d.drops["stall_rate"]++
		return
	}
	r.lastStall = stallSpan{since: ep.since, end: ep.end}
	ev.state, ev.since, ev.at, ev.rule, ev.window = "stall", ep.since, ep.end, "", 0
	ev.value, ev.median, ev.threshold, ev.score = ep.value, ep.median, ep.threshold, ep.score
	ev.gauge, ev.detail = ep.gauge, ep.detail
	out.events = append(out.events, ev)
}

// stallLeast is the least span of a stall episode: 0.4 x min_duration (600 ms by
// default), between two quarter-second samples and three.
func (d *detector) stallLeast() time.Duration {
	return d.cfg.MinDuration * 2 / 5
}

// stallEvery is the least time between two stall records of one rank: min_duration,
// or a second when it is 0 (samples only).
func (d *detector) stallEvery() time.Duration {
	return max(d.cfg.MinDuration, time.Second)
}
