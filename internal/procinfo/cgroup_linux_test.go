package procinfo

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fathom-gpu/fathom/internal/cgrouptest"
	"github.com/fathom-gpu/fathom/internal/privtest"
)

// A process gone from /proc leaves only the cgroup id its identity record carries; the
// id finds the cgroup's path, and from it the pod and the container.
func TestCgroupPathByID(t *testing.T) {
	privtest.Require(t)
	root := cgrouptest.Root(t)
	const pod, ctr = "0f3c3a1e_9b1d_4c43_a6a2_5d0b5a6f7c21", "4b825dc642cb6eb9a060e54bf8d69288fbee4904aa5b2f0c9b7d3c1e2f4a6b8c"
	top := cgrouptest.Make(t, root, "fathom-cgroupid-test.slice")
	podDir := cgrouptest.Make(t, top, "kubepods-besteffort-pod"+pod+".slice")
	ctrDir := cgrouptest.Make(t, podDir, "cri-containerd-"+ctr+".scope")

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
	if p.PodUID != strings.ReplaceAll(pod, "_", "-") || p.ContainerID != ctr {
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
