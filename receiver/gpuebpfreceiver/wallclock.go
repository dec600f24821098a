package gpuebpfreceiver

import (
	"time"

	"github.com/fathom-gpu/fathom/internal/wallclock"
)

// wallNow is the node's wall clock (with the test seam's shift, see internal/wallclock).
func wallNow() time.Time { return wallclock.Now() }
