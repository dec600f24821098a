package procinfo

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// ThreadCPUTime is how long thread tid of process pid has run on a CPU, in nanoseconds,
// from procRoot/PID/task/TID/schedstat (its first field; the scheduler's own
// accounting, exact to the nanosecond, where /proc/PID/stat counts ticks).
func ThreadCPUTime(procRoot string, pid, tid uint32) (uint64, error) {
	path := filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "task", strconv.FormatUint(uint64(tid), 10), "schedstat")
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	field, _, _ := bytes.Cut(bytes.TrimSpace(raw), []byte{' '})
	ns, err := strconv.ParseUint(string(field), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a schedstat line: %w", path, raw, err)
	}
	return ns, nil
}
