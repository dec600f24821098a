package gpuebpfreceiver

import (
	"os"
	"time"
)

// clockOffsetEnv shifts every time this receiver stamps by a duration ("50ms", "-2s").
// It is a test seam, not a setting: tests and the demo run several node collectors on
// one machine, and a cluster's nodes are never exactly in step; the straggler loop must
// not take a node whose clock is off for a node whose rank is slow. Unset in production.
const clockOffsetEnv = "FATHOM_TEST_CLOCK_OFFSET"

var clockOffset = func() time.Duration {
	d, err := time.ParseDuration(os.Getenv(clockOffsetEnv))
	if err != nil {
		return 0
	}
	return d
}()

// wallNow is the node's wall clock: time.Now, plus the test offset if one is set.
func wallNow() time.Time { return time.Now().Add(clockOffset) }
