//go:build linux

package gpuebpfreceiver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fathom-gpu/fathom/internal/privtest"
)

// A named cgroup stands for its subtree in discovery too, as in the kernel: a process
// two levels below it is wanted; one in a sibling whose name merely starts the same is not.
func TestWantedFollowsCgroupSubtree(t *testing.T) {
	privtest.Require(t)
	root := cgroup2Root(t)
	top := makeTestCgroup(t, root, "fathom-wanted-test")
	named := makeTestCgroup(t, top, "slice")
	container := makeTestCgroup(t, makeTestCgroup(t, named, "pod"), "ctr")
	sibling := makeTestCgroup(t, top, "slice-other")

	inSubtree, outside := startSleep(t), startSleep(t)
	moveToTestCgroup(t, container, inSubtree)
	moveToTestCgroup(t, sibling, outside)

	var st syscall.Stat_t
	if err := syscall.Stat(named, &st); err != nil {
		t.Fatal(err)
	}
	cfg := createDefaultConfig()
	cfg.Targets.All = false
	cfg.Discovery.CgroupRoot = root
	s := &ebpfSource{cfg: cfg, cgroupIDs: map[uint64]bool{st.Ino: true}}

	if !s.wanted(uint32(inSubtree)) {
		t.Errorf("process in %s is not wanted, though %s is named", container, named)
	}
	if s.wanted(uint32(outside)) {
		t.Errorf("process in %s is wanted, though only %s is named", sibling, named)
	}
}

// cgroup2Root is the host's cgroup v2 mount under /sys/fs/cgroup (unified, or hybrid's
// unified/), else a mount of the test's own: there is one v2 hierarchy, so /proc's
// cgroup paths are relative to either.
func cgroup2Root(t *testing.T) string {
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

// makeTestCgroup creates a child cgroup, removed at cleanup after the processes started
// later are gone (cleanups run last-registered first).
func makeTestCgroup(t *testing.T, parent, name string) string {
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

func startSleep(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}

func moveToTestCgroup(t *testing.T, cgroup string, pid int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(cgroup, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatal(err)
	}
}
