//go:build linux

package gpuebpfreceiver

import "golang.org/x/sys/unix"

// monotonicNow reads CLOCK_MONOTONIC, the clock bpf_ktime_get_ns uses.
func monotonicNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
