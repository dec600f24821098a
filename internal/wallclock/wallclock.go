// Package wallclock is a node collector's wall clock, with a test seam that shifts it.
//
// Tests and the demo run several node collectors on one machine, and a cluster's nodes
// are never exactly in step: the straggler loop must not take a node whose clock is off
// for a node whose rank is slow. FATHOM_TEST_CLOCK_OFFSET ("50ms", "-2s") shifts every
// time the collector stamps with this clock, as if its host's clock were that far off:
// the receiver's record and point times, and the times the thresholds extension trades
// with the gateway to measure the offset. It is a test seam, not a setting: unset in
// production.
package wallclock

import (
	"os"
	"time"
)

// OffsetEnv names the test seam.
const OffsetEnv = "FATHOM_TEST_CLOCK_OFFSET"

// Offset is the seam's shift, 0 unless set.
var Offset = func() time.Duration {
	d, err := time.ParseDuration(os.Getenv(OffsetEnv))
	if err != nil {
		return 0
	}
	return d
}()

// Now is the node's wall clock: time.Now, plus the test offset if one is set.
func Now() time.Time { return time.Now().Add(Offset) }
