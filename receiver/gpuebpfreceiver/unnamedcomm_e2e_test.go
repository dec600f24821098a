//go:build linux

package gpuebpfreceiver_test

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// recoveredAllReduces returns pid's all-reduce call series on recovered communicators:
// series key to total.
func recoveredAllReduces(v processView) map[string]int64 {
	out := map[string]int64{}
	for k, p := range v.series {
		if strings.HasPrefix(k, semconv.MetricNCCLCalls+"{") && strings.Contains(k, semconv.NCCLCommRecovered+"=true") &&
			strings.Contains(k, semconv.NCCLOp+"=all_reduce") {
			out[k] = p.value
		}
	}
	return out
}

// A job already running when its node's collector starts (a DaemonSet rollout, a first
// install on a busy cluster): its four ranks made their communicator, and asked NCCL
// their rank and size, before the collector ran, so no setup call names it. Every
// all-reduce they make once the collector is on is counted, on one communicator every
// rank names alike, with each rank's rank and the job's size, and the processes' cohort
// is that communicator. The calls come from PyTorch's threads (the autograd thread
// issues the all-reduces).
func TestAJobStartedBeforeItsCollectorGetsOneCommunicator(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	const ranks, steps = 4, 150
	lib := privateLibs(t, paths.Cudart, paths.Cuda, paths.NCCL, paths.IBVerbs)
	run := fakegpu.StartDDP(t, paths, fakegpu.DDPOptions{Ranks: ranks, Steps: steps, Buckets: 3, KernelTime: 10 * time.Microsecond,
		HostCompute: 20 * time.Millisecond, HostComputeSleeps: true, Threads: fakegpu.ThreadsPyTorch,
		Gate: true, GateAfterInit: true, Env: []string{"LD_LIBRARY_PATH=" + lib}})
	sink, col := startCollectorWith(t, "discovery:\n  rescan_interval: 1h")
	waitProbing(t, col, filepath.Join(lib, filepath.Base(paths.NCCL)))
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	reports, err := run.Wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	comm := ""
	for _, r := range reports {
		want := r.Calls["ncclAllReduce"]
		if want != 3*steps {
			t.Fatalf("rank %d made %d all-reduces, want %d", r.Rank, want, 3*steps)
		}
		v := waitFor(t, sink, r.Pid, "every all-reduce on a recovered communicator", func(v processView) bool {
			var sum int64
			for _, n := range recoveredAllReduces(v) {
				sum += n
			}
			return sum == want
		})
		got := recoveredAllReduces(v)
		t.Logf("rank %d (pid %d): %v of %d all-reduces", r.Rank, r.Pid, got, want)
		if len(got) != 1 {
			t.Errorf("rank %d: all-reduces on %d recovered series, want one", r.Rank, len(got))
			continue
		}
		for k := range got {
			id := k[strings.Index(k, semconv.NCCLCommID+"=")+len(semconv.NCCLCommID)+1:]
			id = id[:16]
			if comm == "" {
				comm = id
			}
			want := seriesKey(semconv.MetricNCCLCalls, attrs(semconv.NCCLCommID, comm, semconv.NCCLCommRecovered, "true",
				semconv.NCCLOp, "all_reduce", semconv.NCCLRank, strconv.Itoa(r.Rank), semconv.NCCLNRanks, strconv.Itoa(ranks)))
			if k != want {
				t.Errorf("rank %d: series %s, want %s", r.Rank, k, want)
			}
		}
		if c, _ := v.resource.Get(semconv.Cohort); c.Str() != "nccl-recovered:"+comm {
			t.Errorf("rank %d: cohort %q, want nccl-recovered:%s", r.Rank, c.Str(), comm)
		}
		for k := range v.series {
			if strings.HasPrefix(k, semconv.MetricNCCLCalls+"{") && strings.Contains(k, "all_reduce") && !strings.Contains(k, semconv.NCCLCommRecovered) {
				t.Errorf("rank %d: all-reduces counted without the recovered communicator: %s", r.Rank, k)
			}
		}
	}
	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}
