//go:build linux

// Package cgrouptest makes real cgroup v2 groups for tests that filter or attribute by
// cgroup, and moves processes into them. It needs root.
package cgrouptest

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Root is the host's cgroup v2 mount (/sys/fs/cgroup, or a hybrid host's
// /sys/fs/cgroup/unified), else a mount of the test's own. There is one v2 hierarchy,
// so paths under either are the ones /proc/PID/cgroup shows and ids are the ones BPF
// reports.
func Root(t testing.TB) string {
	t.Helper()
	for _, dir := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var fs unix.Statfs_t
		if unix.Statfs(dir, &fs) == nil && fs.Type == unix.CGROUP2_SUPER_MAGIC {
			return dir
		}
	}
	root := t.TempDir()
	if err := syscall.Mount("none", root, "cgroup2", 0, ""); err != nil {
		t.Fatalf("mount cgroup2: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(root, syscall.MNT_DETACH) })
	return root
}

// Make creates cgroup name under parent. It is removed at cleanup, after the processes
// the test starts later are gone (cleanups run last-registered first).
func Make(t testing.TB, parent, name string) string {
	t.Helper()
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove test cgroup: %v", err)
		}
	})
	return dir
}

// Move puts process pid into cgroup.
func Move(t testing.TB, cgroup string, pid int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(cgroup, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ID is the cgroup's id as bpf_get_current_cgroup_id reports it: its inode.
func ID(t testing.TB, cgroup string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(cgroup, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}
