//go:build linux

// Package cgrouptest makes real cgroup v2 groups for tests that filter or attribute by
// cgroup, and moves processes into them. It needs root.
package cgrouptest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
		// A killed process leaves its cgroup a moment after it is reaped: removed at
		// once, the cgroup was "busy" in CI, and stayed to fail the next run's Make.
		var err error
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if err = os.Remove(dir); err == nil || !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
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

// The pod and container of the cgroup MakeContainer creates, as the receiver should
// parse them from its path.
const (
	PodUID      = "0f3c3a1e-9b1d-4c43-a6a2-5d0b5a6f7c21"
	ContainerID = "4b825dc642cb6eb9a060e54bf8d69288fbee4904aa5b2f0c9b7d3c1e2f4a6b8c"
)

// MakeContainer creates, under a new cgroup name in parent, the cgroups of a
// Kubernetes container as the systemd driver lays them out (a pod slice, then the
// container's scope), and returns the container's cgroup.
func MakeContainer(t testing.TB, parent, name string) string {
	t.Helper()
	pod := Make(t, Make(t, parent, name), "kubepods-besteffort-pod"+strings.ReplaceAll(PodUID, "-", "_")+".slice")
	return Make(t, pod, "cri-containerd-"+ContainerID+".scope")
}
