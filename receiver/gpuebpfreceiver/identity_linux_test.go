package gpuebpfreceiver

import (
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/cgrouptest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// A process that left /proc before the receiver read it is known only by the identity
// record the kernel copied at its first call: comm and environment for its rank, and
// the header's cgroup id for its cgroup, pod and container.
func TestAProcessGoneFromProcKeepsItsPodAndRank(t *testing.T) {
	privtest.Require(t)
	root := cgrouptest.Root(t)
	ctrDir := cgrouptest.MakeContainer(t, root, "fathom-identity-test.slice")

	cfg := createDefaultConfig()
	cfg.Discovery.ProcRoot = t.TempDir() // the process is gone: nothing to read there
	cfg.Discovery.CgroupRoot = root
	a := newAggregator(cfg, &wallClock{}, nil, false)
	const pid = 4_000_001
	var ev probes.ProcessIdentity
	ev.Hdr.Pid, ev.Hdr.Tid, ev.Hdr.CgroupId = pid, pid, cgrouptest.ID(t, ctrDir)
	for i, c := range "python3" {
		ev.Comm[i] = int8(c)
	}
	env := "HOME=/root\x00RANK=6\x00LOCAL_RANK=2\x00WORLD_SIZE=16\x00"
	for i := 0; i < len(env); i++ {
		ev.Env[i] = int8(env[i])
	}
	ev.EnvLen = uint32(len(env))
	a.Identity(&ev)

	md := a.emit(time.Now(), 0, hostTotals{}, &hostTotals{}, hostIdentity("", false))
	var found bool
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		attrs := md.ResourceMetrics().At(i).Resource().Attributes()
		if p, ok := attrs.Get(semconv.ProcessPID); !ok || p.Int() != pid {
			continue
		}
		found = true
		want := map[string]string{
			semconv.CgroupPath:            "/" + strings.TrimPrefix(ctrDir, root+"/"),
			semconv.K8sPodUID:             cgrouptest.PodUID,
			semconv.ContainerID:           cgrouptest.ContainerID,
			semconv.ProcessExecutableName: "python3",
			semconv.Rank:                  "6",
			semconv.LocalRank:             "2",
			semconv.WorldSize:             "16",
		}
		for k, v := range want {
			if got, ok := attrs.Get(k); !ok || got.AsString() != v {
				t.Errorf("%s = %q (present %v), want %q", k, got.AsString(), ok, v)
			}
		}
	}
	if !found {
		t.Fatalf("no resource for pid %d", pid)
	}
	if n := a.drops.snapshot()["cgroup_unresolved"]; n != 0 {
		t.Errorf("%d cgroup_unresolved drops", n)
	}
}
