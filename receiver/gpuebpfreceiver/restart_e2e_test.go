//go:build linux

package gpuebpfreceiver_test

import (
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// The node collector is restarted (SIGTERM, then a new process on the same config, as
// a DaemonSet rolling update does) in the middle of a 4-rank job, while rank 0 is held
// before its last all-reduce and ranks 1-3 wait inside theirs. The new collector
// adopts the pinned kernel state: the ranks' all-reduces after the restart are on the
// communicator the job set up before it, and the two collectors' counts add up exactly
// to the job's: 10 all-reduces each before, 1 after. The job runs the blocking fake NCCL
// so that ranks 1-3 hold an all-reduce open across the restart, the case this test is
// about; with NCCL's asynchronous all-reduce (the fake's default) their last all-reduce
// would return before the restart and they would wait in cudaStreamSynchronize.
func TestRestartMidJobKeepsTheCommunicatorAndTheCounts(t *testing.T) {
	privtest.RequireBPFFS(t)
	paths := fakegpu.Build(t)
	const ranks, steps, hold = 4, 11, 8 * time.Second
	config := nodeConfig(fmt.Sprintf("collection_interval: 300ms\nlogs:\n  policy: none\nkernel_state:\n  pin_dir: %s", collectortest.PinDir(t)), false)

	run := fakegpu.StartDDP(t, paths, fakegpu.DDPOptions{
		Ranks: ranks, Steps: steps, KernelTime: 10 * time.Microsecond, Gate: true, NCCLMode: fakegpu.NCCLBlocking,
		Slow: &fakegpu.Slowness{Rank: 0, Delay: hold, FromStep: steps - 1, Mode: "stall"},
	})
	firstSink, first := startNodeCollector(t, config)
	if strings.Contains(first.Output(), "adopted the kernel state") {
		t.Fatalf("the first collector adopted state from an empty pin directory:\n%s", first.Output())
	}
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	// The series carry the communicator; before the job's report it is known only as
	// whatever the first collector exported: the same for every rank.
	allReduces := func(v processView) (int64, string) {
		for key, p := range v.series {
			if strings.HasPrefix(key, semconv.MetricNCCLCalls+"{") && strings.Contains(key, semconv.NCCLOp+"=all_reduce") {
				return p.value, key
			}
		}
		return 0, ""
	}
	before := map[int]string{}
	for _, r := range run.Ranks {
		v := waitFor(t, firstSink, r.Pid, "the all-reduces before the hold", func(v processView) bool {
			n, _ := allReduces(v)
			return n == steps-1
		})
		_, before[r.Pid] = allReduces(v)
	}

	stoppedAt := time.Now()
	if code := first.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("first collector exit code %d", code)
	}
	secondSink, second := startNodeCollector(t, config)
	restart := time.Since(stoppedAt)
	t.Logf("restarted in %s", restart.Round(time.Millisecond))
	if restart > hold/2 {
		t.Fatalf("the restart took %s, too close to rank 0's hold of %s for the test to mean anything", restart, hold)
	}
	if !strings.Contains(second.Output(), "adopted the kernel state") {
		t.Errorf("the second collector did not say it adopted the kernel state:\n%s", second.Output())
	}

	reports, err := run.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := hex.DecodeString(reports[0].UniqueID)
	h := fnv.New64a()
	h.Write(raw)
	comm := fmt.Sprintf("%016x", h.Sum64())
	for _, r := range reports {
		series := seriesKey(semconv.MetricNCCLCalls, attrs(semconv.NCCLCommID, comm, semconv.NCCLOp, "all_reduce",
			semconv.NCCLRank, strconv.Itoa(r.Rank), semconv.NCCLNRanks, strconv.Itoa(ranks)))
		if before[r.Pid] != series {
			t.Errorf("rank %d before the restart: %s, want %s", r.Rank, before[r.Pid], series)
		}
		v := waitFor(t, secondSink, r.Pid, "the last all-reduce", func(v processView) bool { return v.series[series].value == 1 })
		if n, key := allReduces(v); n != 1 || key != series {
			t.Errorf("rank %d after the restart: %d all-reduces on %s, want 1 on %s", r.Rank, n, key, series)
		}
		if r.Calls["ncclAllReduce"] != steps {
			t.Errorf("rank %d made %d all-reduces, want %d", r.Rank, r.Calls["ncclAllReduce"], steps)
		}
	}
	if code := second.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("second collector exit code %d", code)
	}
}

// A node collector restarted while two processes keep launching loses no call: the
// probes stay attached, pinned, while no collector runs (kernel_state.keep_probes), the
// stopping collector hands over what it last exported, and the next one counts each
// process from there. Restarted twice (the second handoff is made by a collector that
// itself adopted a base), the three collectors' counts add up to exactly the launches
// the processes made, though about a second of them fell between each two collectors.
func TestACollectorRestartLosesNoCall(t *testing.T) {
	privtest.RequireBPFFS(t)
	paths := fakegpu.Build(t)
	const steps, perStep = 500, 20
	config := nodeConfig(fmt.Sprintf("collection_interval: 300ms\nlogs:\n  policy: none\nkernel_state:\n  pin_dir: %s", collectortest.PinDir(t)), false)
	sink, col := startNodeCollector(t, config)
	sinks := []*collectortest.Sink{sink}

	var workloads []*fakegpu.Workload
	for range 2 {
		workloads = append(workloads, fakegpu.Start(t, paths, fakegpu.Options{Steps: steps, StepGap: 20 * time.Millisecond, Launches: steps * perStep, Gate: true}))
	}
	for _, w := range workloads {
		if err := w.Release(); err != nil {
			t.Fatal(err)
		}
	}
	launches := seriesKey(semconv.MetricCUDAAPICalls, attrs("cuda.api.name", "cudaLaunchKernel", "cuda.library", "libcudart"))
	for restart := range 2 {
		for _, w := range workloads {
			waitFor(t, sink, w.Pid, "launches seen by this collector", func(v processView) bool { return v.series[launches].value > 0 })
		}
		if code := col.Terminate(t, 30*time.Second); code != 0 {
			t.Fatalf("collector %d exit code %d", restart+1, code)
		}
		time.Sleep(time.Second) // the processes launch on, with no collector
		sink, col = startNodeCollector(t, config)
		sinks = append(sinks, sink)
		if !strings.Contains(col.Output(), "adopted the kernel state") {
			t.Errorf("collector %d did not say it adopted the kernel state:\n%s", restart+2, col.Output())
		}
	}
	for _, w := range workloads {
		report, err := w.Wait(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		made := report.Calls["cudaLaunchKernel"]
		if made != steps*perStep {
			t.Fatalf("pid %d made %d launches, want %d", report.Pid, made, steps*perStep)
		}
		var counted []point
		var before int64
		for _, s := range sinks[:len(sinks)-1] {
			p := waitFor(t, s, report.Pid, "a stopped collector's last export", func(processView) bool { return true }).series[launches]
			counted, before = append(counted, p), before+p.value
		}
		last := waitFor(t, sink, report.Pid, "every launch, across the three collectors", func(v processView) bool {
			return before+v.series[launches].value == made
		}).series[launches]
		counted = append(counted, last)
		t.Logf("pid %d: %d launches, counted %d + %d + %d", report.Pid, made, counted[0].value, counted[1].value, counted[2].value)
		for i := range counted {
			if counted[i].value == 0 || (i > 0 && counted[i].start <= counted[i-1].start) {
				t.Errorf("pid %d: collector %d counted %d (start %v): want each a share, each a series of its own", report.Pid, i+1, counted[i].value, counted[i].start)
			}
		}
	}
	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("last collector exit code %d", code)
	}
}
