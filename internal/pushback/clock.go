package pushback

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The clock exchange rides on the same answers as the thresholds: the node stamps each
// export with the time it sent it, the gateway answers with that stamp and the times it
// received the request and wrote its answer, and the node, reading the answer, has the
// four times of NTP's on-wire exchange. Its clock's offset from the gateway's is then
// known to within half the round trip, whatever the workload does. The straggler loop
// needs it to compare the times ranks on different nodes enter the same collective.
const (
	ClockHTTPHeader  = "Fathom-Clock"
	ClockMetadataKey = "fathom-clock"
	clockVersion     = "c1."
)

// FormatClockRequest is the node's stamp: its send time t1.
func FormatClockRequest(t1 time.Time) string {
	return clockVersion + strconv.FormatInt(t1.UnixNano(), 10)
}

// ParseClockRequest reads a node's stamp; ok is false for anything else.
func ParseClockRequest(s string) (t1 int64, ok bool) {
	rest, found := strings.CutPrefix(s, clockVersion)
	if !found || len(rest) > 20 {
		return 0, false
	}
	t1, err := strconv.ParseInt(rest, 10, 64)
	return t1, err == nil && t1 > 0
}

// FormatClockAnswer is the gateway's answer: the node's t1, and its own receive and
// send times t2 and t3.
func FormatClockAnswer(t1 int64, t2, t3 time.Time) string {
	return fmt.Sprintf("%s%d,%d,%d", clockVersion, t1, t2.UnixNano(), t3.UnixNano())
}

// ParseClockAnswer reads the gateway's answer.
func ParseClockAnswer(s string) (t1, t2, t3 int64, ok bool) {
	rest, found := strings.CutPrefix(s, clockVersion)
	if !found || len(rest) > 64 {
		return 0, 0, 0, false
	}
	parts := strings.Split(rest, ",")
	if len(parts) != 3 {
		return 0, 0, 0, false
	}
	var v [3]int64
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n <= 0 {
			return 0, 0, 0, false
		}
		v[i] = n
	}
	if v[2] < v[1] {
		return 0, 0, 0, false
	}
	return v[0], v[1], v[2], true
}

// ClockEstimator keeps a node's clock offset from the gateway. Each exchange gives an
// offset whose error is at most half its round trip; of the exchanges in the last
// clockWindow, the estimate is the one with the shortest round trip (NTP's clock
// filter), so one delayed answer does not move it.
type ClockEstimator struct {
	mu      sync.Mutex
	samples [clockSamples]clockSample
	next    int
}

const (
	clockSamples = 16
	clockWindow  = 2 * time.Minute
)

type clockSample struct {
	offset, rtt time.Duration
	at          time.Time
}

// Add takes one exchange: t1 the node sent, t2 the gateway received, t3 the gateway
// answered, t4 the node read the answer (t1 and t4 on the node's clock, t2 and t3 on the
// gateway's). at is when, on the node's monotonic time. An exchange whose times do not
// fit together (an answer to another request, a clock stepped mid-way) is refused.
func (c *ClockEstimator) Add(t1, t2, t3, t4 int64, at time.Time) bool {
	rtt := (t4 - t1) - (t3 - t2)
	if t4 < t1 || t3 < t2 || rtt < 0 {
		return false
	}
	// The node's clock minus the gateway's.
	offset := ((t1 - t2) + (t4 - t3)) / 2
	c.mu.Lock()
	defer c.mu.Unlock()
	c.samples[c.next%clockSamples] = clockSample{offset: time.Duration(offset), rtt: time.Duration(rtt), at: at}
	c.next++
	return true
}

// Offset returns the node's clock minus the gateway's and its uncertainty (half the
// round trip of the exchange it comes from), and false when no exchange is recent.
func (c *ClockEstimator) Offset(now time.Time) (offset, uncertainty time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	best := -1
	for i := range min(c.next, clockSamples) {
		s := c.samples[i]
		if now.Sub(s.at) > clockWindow {
			continue
		}
		if best < 0 || s.rtt < c.samples[best].rtt {
			best = i
		}
	}
	if best < 0 {
		return 0, 0, false
	}
	return c.samples[best].offset, c.samples[best].rtt / 2, true
}

// Clock is what the node's thresholds extension offers beside the lines: its clock's
// offset from the gateway's, as the last exchanges measured it.
type Clock interface {
	ClockOffset(now time.Time) (offset, uncertainty time.Duration, ok bool)
}
