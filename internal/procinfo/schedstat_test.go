package procinfo

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The calling thread's CPU time grows by what it spins, and a malformed or missing file
// is an error, not a zero.
func TestThreadCPUTimeReadsTheSchedulersAccount(t *testing.T) {
	runtime.LockOSThread() // the spin must stay on the thread read
	defer runtime.UnlockOSThread()
	pid, tid := uint32(os.Getpid()), uint32(unix.Gettid())
	before, err := ThreadCPUTime("/proc", pid, tid)
	if err != nil {
		t.Fatal(err)
	}
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	until := time.Duration(ts.Nano()) + 20*time.Millisecond
	for time.Duration(ts.Nano()) < until {
		_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	}
	after, err := ThreadCPUTime("/proc", pid, tid)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Duration(after - before); d < 20*time.Millisecond || d > time.Second {
		t.Errorf("the thread spun 20 ms of CPU; schedstat grew %v", d)
	}

	root := t.TempDir()
	dir := filepath.Join(root, "7", "task", "8")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "schedstat"), []byte("garbage 1 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ThreadCPUTime(root, 7, 8); err == nil {
		t.Error("a malformed schedstat read without an error")
	}
	if _, err := ThreadCPUTime(root, 7, 9); err == nil {
		t.Error("a missing thread read without an error")
	}
}
