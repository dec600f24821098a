//go:build linux

package gpuebpfreceiver

import (
	"os/exec"
	"testing"

	"github.com/fathom-gpu/fathom/internal/testsupport/cgrouptest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// A named cgroup stands for its subtree in discovery too, as in the kernel: a process
// two levels below it is wanted; one in a sibling whose name merely starts the same is not.
func TestWantedFollowsCgroupSubtree(t *testing.T) {
	privtest.Require(t)
	root := cgrouptest.Root(t)
	top := cgrouptest.Make(t, root, "fathom-wanted-test")
	named := cgrouptest.Make(t, top, "slice")
	container := cgrouptest.Make(t, cgrouptest.Make(t, named, "pod"), "ctr")
	sibling := cgrouptest.Make(t, top, "slice-other")

	inSubtree, outside := startSleep(t), startSleep(t)
	cgrouptest.Move(t, container, inSubtree)
	cgrouptest.Move(t, sibling, outside)

	cfg := createDefaultConfig()
	cfg.Targets.All = false
	s := &ebpfSource{cfg: cfg, cgroupRoot: root, cgroupIDs: map[uint64]bool{cgrouptest.ID(t, named): true}}

	if !s.wanted(uint32(inSubtree)) {
		t.Errorf("process in %s is not wanted, though %s is named", container, named)
	}
	if s.wanted(uint32(outside)) {
		t.Errorf("process in %s is wanted, though only %s is named", sibling, named)
	}
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
