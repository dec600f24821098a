package procinfo

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fathom-gpu/fathom/internal/testsupport/cgrouptest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// A process gone from /proc leaves only the cgroup id its identity record carries; the
// id finds the cgroup's path, and from it the pod and the container.
func TestCgroupPathByID(t *testing.T) {
	privtest.Require(t)
	root := cgrouptest.Root(t)
	ctrDir := cgrouptest.MakeContainer(t, root, "fathom-cgroupid-test.slice")

	path, err := CgroupPathByID(root, cgrouptest.ID(t, ctrDir))
	if err != nil {
		t.Fatal(err)
	}
	want := "/" + strings.TrimPrefix(ctrDir, root+"/")
	if path != want {
		t.Fatalf("cgroup path %q, want %q", path, want)
	}
	var p Process
	p.WithCgroup(path)
	if p.PodUID != cgrouptest.PodUID || p.ContainerID != cgrouptest.ContainerID {
		t.Errorf("pod %q container %q from %s", p.PodUID, p.ContainerID, path)
	}
	if path, err := CgroupPathByID(root, 1); err != nil || path != "/" {
		t.Errorf("the root cgroup: %q, %v", path, err)
	}
	// An id no cgroup has (the test cgroup's inode with a high bit set) is an error.
	if path, err := CgroupPathByID(root, cgrouptest.ID(t, ctrDir)|1<<62); err == nil {
		t.Errorf("a missing cgroup resolved to %q", path)
	}
	if _, err := CgroupPathByID(filepath.Join(root, "no-such-dir"), 1); err == nil {
		t.Errorf("a missing cgroup root resolved")
	}
}

// The configured /sys/fs/cgroup leads to the v2 hierarchy wherever the host mounts it:
// there itself, or at unified/ on a hybrid host.
func TestCgroupV2Mount(t *testing.T) {
	privtest.Require(t)
	if root := cgrouptest.Root(t); strings.HasPrefix(root, "/sys/fs/cgroup") {
		if got := CgroupV2Mount("/sys/fs/cgroup"); got != root {
			t.Errorf("CgroupV2Mount(/sys/fs/cgroup) = %s, the v2 hierarchy is at %s", got, root)
		}
	} else {
		t.Logf("the host mounts no v2 hierarchy under /sys/fs/cgroup; the test mounted its own at %s", root)
	}
	if dir := t.TempDir(); CgroupV2Mount(dir) != dir {
		t.Errorf("a directory with no cgroup mount should come back as it is")
	}
}
