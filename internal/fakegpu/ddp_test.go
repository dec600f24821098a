package fakegpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func medianOf(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// quantileOf returns the q-quantile (0..1) of ds, nearest rank.
func quantileOf(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// minus returns a[i] - b[i] over steps [from, to).
func minus(a, b []time.Duration, from, to int) []time.Duration {
	out := make([]time.Duration, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, a[i]-b[i])
	}
	return out
}

func TestDDPEightRanksExactCounts(t *testing.T) {
	p := Build(t)
	const steps, bucket, ring = 200, 64 << 10, 4096
	o := DDPOptions{Ranks: 8, Steps: steps, BucketBytes: bucket, RingBytes: ring, KernelTime: 10 * time.Microsecond}
	ranks := RunDDP(t, p, o)
	pids := map[int]bool{}
	for i, r := range ranks {
		if r.Rank != i || r.LocalRank != i || r.WorldSize != 8 || r.Slow {
			t.Errorf("report %d: rank %d local %d world %d slow %v", i, r.Rank, r.LocalRank, r.WorldSize, r.Slow)
		}
		if r.UniqueID != ranks[0].UniqueID || len(r.UniqueID) != 256 {
			t.Errorf("rank %d unique id %.40s..., rank 0 has %.40s...", i, r.UniqueID, ranks[0].UniqueID)
		}
		pids[r.Pid] = true
		if r.VerifyErrors != 0 {
			t.Errorf("rank %d: %d wrong all-reduce/ring results", i, r.VerifyErrors)
		}
		want := map[string]int64{
			"cudaGetDeviceCount": 1, "cudaSetDevice": 1, "cudaStreamCreate": 1, "cudaStreamDestroy": 1,
			"cudaMalloc": 4, "cudaFree": 4, "cudaMemcpy": 2,
			"cudaLaunchKernel":      steps * (8 + 2), // default compute and optimizer kernels
			"cudaStreamSynchronize": steps * 2,
			"ncclCommInitRank":      1, "ncclCommCount": 1, "ncclCommUserRank": 1, "ncclCommDestroy": 1,
			"ncclAllReduce": steps, "ncclGroupStart": steps, "ncclGroupEnd": steps, "ncclSend": steps, "ncclRecv": steps,
			"ibv_get_device_list": 0, "ibv_open_device": 0, "ibv_free_device_list": 0, "ibv_alloc_pd": 0, "ibv_create_qp": 0,
			"cudaEventCreate": 0, "cudaEventRecord": 0, "cudaEventQuery": 0,
		}
		for api, n := range want {
			if r.Calls[api] != n {
				t.Errorf("rank %d: calls[%s] = %d, want %d", i, api, r.Calls[api], n)
			}
		}
		if len(r.Calls) != len(want) {
			t.Errorf("rank %d reports %d APIs, want %d", i, len(r.Calls), len(want))
		}
		if wantBytes := (DDPBytes{AllReduce: steps * bucket, Send: steps * ring, Recv: steps * ring}); r.Bytes != wantBytes {
			t.Errorf("rank %d: bytes %+v, want %+v", i, r.Bytes, wantBytes)
		}
		if len(r.AllReduceEntryNS) != steps || len(r.StepEndNS) != steps {
			t.Fatalf("rank %d: %d/%d step times", i, len(r.AllReduceEntryNS), len(r.StepEndNS))
		}
		for s := 0; s < steps; s++ {
			if !(r.StepStartNS[s] <= r.AllReduceEntryNS[s] && r.AllReduceEntryNS[s] <= r.AllReduceExitNS[s] &&
				r.AllReduceExitNS[s] <= r.StepEndNS[s] && (s == 0 || r.StepEndNS[s-1] <= r.StepStartNS[s])) {
				t.Fatalf("rank %d step %d: times out of order", i, s)
			}
		}
	}
	if len(pids) != 8 {
		t.Errorf("8 ranks ran in %d processes", len(pids))
	}
	// A collective completes for everybody only after the last rank entered it: no rank
	// ends its step (the sync after which it reads the results) before that. The calls
	// themselves return at once, so some rank leaves its all-reduce before the last one
	// enters in most steps.
	leftEarly := 0
	for s := 0; s < steps; s++ {
		var lastEntry, firstExit, firstEnd int64
		for i, r := range ranks {
			if i == 0 || r.AllReduceEntryNS[s] > lastEntry {
				lastEntry = r.AllReduceEntryNS[s]
			}
			if i == 0 || r.AllReduceExitNS[s] < firstExit {
				firstExit = r.AllReduceExitNS[s]
			}
			if i == 0 || r.StepEndNS[s] < firstEnd {
				firstEnd = r.StepEndNS[s]
			}
		}
		if firstEnd < lastEntry {
			t.Fatalf("step %d: a rank ended the step at %d before the last one entered the all-reduce at %d", s, firstEnd, lastEntry)
		}
		if firstExit < lastEntry {
			leftEarly++
		}
	}
	t.Logf("a rank left the all-reduce before the last one entered it in %d of %d steps", leftEarly, steps)
	if leftEarly == 0 {
		t.Error("no rank ever returned from ncclAllReduce before every rank had entered it: the all-reduce blocks")
	}
	if left, _ := filepath.Glob("/dev/shm/fakenccl-*"); len(left) != 0 {
		t.Errorf("shared memory left behind: %v", left)
	}
}

// With PyTorch's threads the same job makes the same collectives, from other threads:
// forward kernels and the loss sync on the main thread, backward kernels and each
// bucket's all-reduce on the autograd thread, event polls on a watchdog thread. The
// counts are exact, the sums right, and the slow rank's peers still wait for it in the
// main thread's sync.
func TestDDPPyTorchThreadsExactCounts(t *testing.T) {
	p := Build(t)
	const steps, buckets, from = 60, 3, 20
	delay := 20 * time.Millisecond
	o := DDPOptions{Ranks: 4, Steps: steps, Buckets: buckets, BucketBytes: 16 << 10, KernelTime: 10 * time.Microsecond,
		HostCompute: 2 * time.Millisecond, HostComputeSleeps: true, Threads: ThreadsPyTorch,
		Slow: &Slowness{Rank: 2, Delay: delay, FromStep: from}}
	ranks := RunDDP(t, p, o)
	for i, r := range ranks {
		if r.VerifyErrors != 0 {
			t.Errorf("rank %d: %d wrong all-reduce results", i, r.VerifyErrors)
		}
		if r.AutogradTid == 0 || r.WatchdogTid == 0 || r.AutogradTid == r.Tid || r.WatchdogTid == r.Tid || r.AutogradTid == r.WatchdogTid {
			t.Errorf("rank %d: main %d, autograd %d, watchdog %d: want three threads", i, r.Tid, r.AutogradTid, r.WatchdogTid)
		}
		want := map[string]int64{
			"cudaLaunchKernel": steps * (8 + 2), "cudaStreamSynchronize": steps, "ncclAllReduce": steps * buckets,
			"cudaEventCreate": 2, "cudaEventRecord": steps, "cudaMalloc": 2, "cudaFree": 2,
		}
		for api, n := range want {
			if r.Calls[api] != n {
				t.Errorf("rank %d: calls[%s] = %d, want %d", i, api, r.Calls[api], n)
			}
		}
		if r.Calls["cudaEventQuery"] == 0 {
			t.Errorf("rank %d: the watchdog never polled", i)
		}
		if r.Bytes.AllReduce != steps*buckets*(16<<10) {
			t.Errorf("rank %d: all-reduced %d bytes", i, r.Bytes.AllReduce)
		}
	}
	// The peers wait for the slow rank in their one sync a step (the loss), by about the
	// delay; the slow rank itself waits least.
	medianSync := func(r DDPRank) time.Duration {
		v := append([]int64(nil), r.StreamSyncNS[from:]...)
		slices.Sort(v)
		return time.Duration(v[len(v)/2])
	}
	for i, r := range ranks {
		if i == 2 {
			continue
		}
		if w := medianSync(r); w < delay/2 || w <= medianSync(ranks[2]) {
			t.Errorf("rank %d waited %v a step in its sync (the slow rank %v), want about %v", i, w, medianSync(ranks[2]), delay)
		}
	}
}

// One rank is slow from step `from`, in each way fakegpu-ddp makes a host slow: 25% more
// host compute per step, an off-CPU stall before each all-reduce (a data-loader wait), or
// CPU work on a CPU shared with busy threads. With the asynchronous fake, as with NCCL,
// every ncclAllReduce returns in microseconds and the slow rank's peers wait for it in
// their cudaStreamSynchronize, by about the delay, while the slow rank waits least. With
// the blocking fake the same wait shows inside ncclAllReduce instead, and not in the
// syncs. Either way the calls are exact and the sums right.
//
// Timing bounds are medians over the 30 slow steps, so a few steps stretched by the
// scheduler (2 cores shared by 4 ranks and whatever else runs) do not decide the result.
// The lower bound is half the delay: the slow rank's lateness is its whole delay when it
// gets a CPU of its own, and more when it shares one. The upper bound allows the CPU work
// to stretch by `stretch` on a shared CPU (contention pins it next to busy threads).
func TestDDPSlowRank(t *testing.T) {
	p := Build(t)
	const ranks, steps, from, slowRank = 4, 60, 30, 2
	cases := []struct {
		slowMode       string
		delay, perStep time.Duration
		stretch        time.Duration
	}{
		{"compute", 10 * time.Millisecond, 40 * time.Millisecond, 4},
		{"stall", 20 * time.Millisecond, 0, 2},
		{"contention", 20 * time.Millisecond, 0, 10},
	}
	for _, ncclMode := range []string{NCCLAsync, NCCLBlocking} {
		for _, c := range cases {
			t.Run(ncclMode+"/"+c.slowMode, func(t *testing.T) {
				o := DDPOptions{Ranks: ranks, Steps: steps, BucketBytes: 16 << 10, KernelTime: 20 * time.Microsecond,
					HostCompute: c.perStep, NCCLMode: ncclMode,
					Slow: &Slowness{Rank: slowRank, Delay: c.delay, FromStep: from, Mode: c.slowMode}}
				reports := RunDDP(t, p, o)
				var calls []time.Duration
				for _, r := range reports {
					if r.Slow != (r.Rank == slowRank) || r.NCCLMode != ncclMode || r.VerifyErrors != 0 {
						t.Errorf("rank %d: slow %v, mode %q, %d wrong results", r.Rank, r.Slow, r.NCCLMode, r.VerifyErrors)
					}
					if r.Calls["ncclAllReduce"] != steps || r.Calls["cudaStreamSynchronize"] != 2*steps || r.Calls["cudaLaunchKernel"] != steps*10 {
						t.Errorf("rank %d: calls %v", r.Rank, r.Calls)
					}
					calls = append(calls, r.AllReduceTimes()...)
				}
				slow := reports[slowRank]
				slowSync, slowAR := slow.StreamSyncTimes(), slow.AllReduceTimes()
				t.Logf("ncclAllReduce on all ranks: median %v, p90 %v, max %v", medianOf(calls), quantileOf(calls, 0.9), slices.Max(calls))
				for _, r := range reports {
					if r.Rank == slowRank {
						continue
					}
					sync, ar := r.StreamSyncTimes(), r.AllReduceTimes()
					// what rank r waits more than the slow rank, per step, before and after
					syncBefore, syncAfter := medianOf(minus(sync, slowSync, 1, from)), medianOf(minus(sync, slowSync, from+1, steps))
					arBefore, arAfter := medianOf(minus(ar, slowAR, 1, from)), medianOf(minus(ar, slowAR, from+1, steps))
					t.Logf("rank %d waits more than the slow rank: in syncs %v before, %v after; in all-reduces %v before, %v after",
						r.Rank, syncBefore, syncAfter, arBefore, arAfter)
					inCalls, inSyncs := arAfter, syncAfter
					if ncclMode == NCCLAsync {
						inCalls, inSyncs = syncAfter, arAfter
					}
					if inCalls < c.delay/2 || inCalls > c.stretch*c.delay {
						t.Errorf("rank %d waits %v more than the slow rank after it slowed down, want about %v", r.Rank, inCalls, c.delay)
					}
					if inSyncs > c.delay/3 {
						t.Errorf("rank %d waits %v more than the slow rank where the wait does not belong", r.Rank, inSyncs)
					}
					if d := max(syncBefore, arBefore, -syncBefore, -arBefore); d > c.delay/3 {
						t.Errorf("rank %d waits %v more or less than rank %d before it slowed down", r.Rank, d, slowRank)
					}
				}
				if ncclMode == NCCLAsync {
					// An enqueue is a launch's CPU time (4 us) and a 16 KiB copy; the rest
					// is a rank preempted on a shared CPU. Four ranks spinning on two cores
					// (the compute case, with other test packages beside it) put the p90 of
					// preempted calls past 1 ms now and then, so the bound is what waiting
					// for the slow rank would cost, not a guess at the scheduler: a call
					// that waited for peers would take its delay, past a third of it here.
					if m, p90 := medianOf(calls), quantileOf(calls, 0.9); m > 200*time.Microsecond || p90 > c.delay/3 {
						t.Errorf("ncclAllReduce takes %v (median), %v (p90): it waits for peers", m, p90)
					}
				}
			})
		}
	}
}

// A rank may run only FAKENCCL_QUEUE_DEPTH collectives ahead of a peer's host: with 6
// buckets a step and a queue of 4, the peers of a rank that stalls before its
// all-reduces wait inside their 5th ncclAllReduce of the step until the slow rank's
// host has enqueued its 5th (and freed the entry of its 1st); with 4 buckets they
// never wait in a call.
func TestDDPQueueFullBlocksTheEnqueue(t *testing.T) {
	p := Build(t)
	const ranks, steps, from, delay = 3, 30, 10, 20 * time.Millisecond
	for _, buckets := range []int{4, 6} {
		t.Run(strconv.Itoa(buckets)+" buckets", func(t *testing.T) {
			reports := RunDDP(t, p, DDPOptions{Ranks: ranks, Steps: steps, Buckets: buckets, BucketBytes: 4096, KernelTime: 20 * time.Microsecond,
				Env:  []string{"FAKENCCL_QUEUE_DEPTH=4"},
				Slow: &Slowness{Rank: 0, Delay: delay, FromStep: from, Mode: "stall"}})
			for _, r := range reports {
				if r.VerifyErrors != 0 || r.Calls["ncclAllReduce"] != int64(steps*buckets) {
					t.Fatalf("rank %d: %d wrong results, %d all-reduces", r.Rank, r.VerifyErrors, r.Calls["ncclAllReduce"])
				}
				if r.Rank == 0 {
					continue
				}
				inCalls := medianOf(r.AllReduceTimes()[from+1:])
				t.Logf("rank %d: %v per step in ncclAllReduce after rank 0 slowed down", r.Rank, inCalls)
				if full := buckets > 4; full && (inCalls < delay/2 || inCalls > 2*delay) {
					t.Errorf("rank %d waits %v per step in ncclAllReduce, want about %v (a full queue)", r.Rank, inCalls, delay)
				} else if !full && inCalls > delay/3 {
					t.Errorf("rank %d waits %v per step in ncclAllReduce with room in the queue", r.Rank, inCalls)
				}
			}
		})
	}
}

// A FAKENCCL_MODE that is neither async nor blocking fails communicator creation with
// a message naming it, instead of silently picking a mode.
func TestDDPBadNCCLModeIsAnError(t *testing.T) {
	p := Build(t)
	cmd := exec.Command(p.DDP, "--spawn", "2", "--steps", "1")
	cmd.Env = append(os.Environ(), "FAKENCCL_MODE=eager")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "FAKENCCL_MODE=eager: want async (the default) or blocking") ||
		!strings.Contains(string(out), "ncclCommInitRank failed") {
		t.Errorf("fakegpu-ddp with FAKENCCL_MODE=eager: %v\n%s", err, out)
	}
}

// ibv_get_async_event hands over events injected through FAKEIBV_EVENT_FIFO.
func TestDDPVerbsAsyncEvent(t *testing.T) {
	p := Build(t)
	fifo, f := eventFIFO(t)
	if _, err := f.WriteString("10 1\n"); err != nil { // IBV_EVENT_PORT_ERR on port 1
		t.Fatal(err)
	}
	run := StartDDP(t, p, DDPOptions{Ranks: 1, Steps: 100, BucketBytes: 4096, IB: true, Gate: true,
		Env: []string{"FAKEIBV_EVENT_FIFO=" + fifo}})
	if len(run.Ranks) != 1 || run.Ranks[0].Pid == 0 {
		t.Fatalf("gate reported %v", run.Ranks)
	}
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	ranks, err := run.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r := ranks[0]
	if r.IBEvents != 1 || r.IBLastEvent != 10 {
		t.Errorf("rank saw %d verbs events, last %d; want 1 event of type 10", r.IBEvents, r.IBLastEvent)
	}
	for _, api := range []string{"ibv_get_device_list", "ibv_open_device", "ibv_free_device_list", "ibv_alloc_pd", "ibv_create_qp"} {
		if r.Calls[api] != 1 {
			t.Errorf("calls[%s] = %d, want 1", api, r.Calls[api])
		}
	}
	if r.Pid != run.Ranks[0].Pid || r.Tid != run.Ranks[0].Tid || r.Tid != r.Pid {
		t.Errorf("report pid %d tid %d, gate said %+v", r.Pid, r.Tid, run.Ranks[0])
	}
}

// Ranks that share one event FIFO each take whole lines. All of them wait in read()
// when an event is written, and all wake: reading byte by byte, "10 1" could reach one
// rank as "1", a QP_FATAL, and another as "0 1", a CQ_ERR.
func TestDDPRanksSharingAnEventFIFOTakeWholeEvents(t *testing.T) {
	p := Build(t)
	fifo, f := eventFIFO(t)
	const ranks, events = 4, 10
	// About three seconds of steps: the events go in during the first half second.
	run := StartDDP(t, p, DDPOptions{Ranks: ranks, Steps: 150, BucketBytes: 4096, KernelTime: 2 * time.Millisecond, IB: true, Gate: true,
		Env: []string{"FAKEIBV_EVENT_FIFO=" + fifo}})
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	waitForFIFOReaders(t, run.Ranks, fifo)
	for i := 0; i < events; i++ {
		time.Sleep(30 * time.Millisecond)                  // every rank back in read()
		if _, err := f.WriteString("10 1\n"); err != nil { // IBV_EVENT_PORT_ERR on port 1
			t.Fatal(err)
		}
	}
	reports, err := run.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, r := range reports {
		total += r.IBEvents
		if r.IBEvents > 0 && r.IBLastEvent != 10 {
			t.Errorf("rank %d: %d events, the last of type %d; every event was type 10", r.Rank, r.IBEvents, r.IBLastEvent)
		}
	}
	if total != events {
		t.Errorf("the ranks saw %d events between them, want %d", total, events)
	}
}

// waitForFIFOReaders waits until every rank holds the FIFO open, and gives their event
// threads a moment to reach read().
func waitForFIFOReaders(t *testing.T, ranks []RankProcess, fifo string) {
	t.Helper()
	holds := func(pid int) bool {
		fds, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "fd", "*"))
		for _, fd := range fds {
			if target, err := os.Readlink(fd); err == nil && target == fifo {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		open := 0
		for _, r := range ranks {
			if holds(r.Pid) {
				open++
			}
		}
		if open == len(ranks) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d ranks opened %s", open, len(ranks), fifo)
		}
	}
	time.Sleep(50 * time.Millisecond)
}

// eventFIFO makes a FIFO for FAKEIBV_EVENT_FIFO and holds it open read-write, so that
// opening it never blocks and it buffers events until a rank reads them.
func eventFIFO(t *testing.T) (string, *os.File) {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), "events")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return fifo, f
}

// Replicas without NCCL (--no-nccl) never call it, and no replica waits for another: one
// slowed by 2 ms of host work per step takes that much longer per step, while its peers'
// steps and their syncs stay as they were.
func TestDDPReplicasWithoutNCCLWaitForNobody(t *testing.T) {
	p := Build(t)
	const steps, delay = 100, 2 * time.Millisecond
	reports := RunDDP(t, p, DDPOptions{Ranks: 4, Steps: steps, NoNCCL: true, HostCompute: time.Millisecond, HostComputeSleeps: true,
		Slow: &Slowness{Rank: 1, Delay: delay, Mode: "compute"}})
	var healthy []time.Duration
	stepOf := map[int]time.Duration{}
	for _, r := range reports {
		for _, api := range []string{"ncclCommInitRank", "ncclAllReduce", "ncclSend", "ncclGroupEnd", "ncclCommDestroy"} {
			if r.Calls[api] != 0 {
				t.Errorf("rank %d called %s %d times", r.Rank, api, r.Calls[api])
			}
		}
		if r.Calls["cudaLaunchKernel"] != steps*10 || r.Calls["cudaStreamSynchronize"] != 2*steps || r.VerifyErrors != 0 {
			t.Errorf("rank %d: calls %v, %d wrong results", r.Rank, r.Calls, r.VerifyErrors)
		}
		var per []time.Duration
		for s := range steps {
			per = append(per, time.Duration(r.StepEndNS[s]-r.StepStartNS[s]))
		}
		stepOf[r.Rank] = medianOf(per)
		if r.Rank != 1 {
			healthy = append(healthy, stepOf[r.Rank])
			if sync := medianOf(r.StreamSyncTimes()); sync > time.Millisecond {
				t.Errorf("rank %d waits %v per step in its syncs: a replica should wait only for its own kernels", r.Rank, sync)
			}
		}
	}
	if d := stepOf[1] - medianOf(healthy); d < delay*3/4 || d > delay*2 {
		t.Errorf("the slow replica's step is %v longer than its peers' (%v), want about %v", d, medianOf(healthy), delay)
	}
	t.Logf("median step: slow replica %v, its peers %v", stepOf[1], medianOf(healthy))
}

// procStatus is a field of /proc/pid/status ("Threads", "Cpus_allowed_list").
func procStatus(t *testing.T, pid int, field string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return ""
}

// CPU contention lasts as long as its slowdown: while the --slow-while-file exists the
// slow rank runs pinned to one CPU beside its busy threads, and once it is gone the
// threads end and the rank may run anywhere again. (They ran to the job's end, which
// kept the benchmark's slow rank slow through the healthy minutes after its first
// trial, and it was flagged there.)
func TestContentionEndsWithTheSlowdown(t *testing.T) {
	p := Build(t)
	slowFile := filepath.Join(t.TempDir(), "slow")
	run := StartDDP(t, p, DDPOptions{Ranks: 2, Steps: 100000, BucketBytes: 4 << 10, KernelTime: 20 * time.Microsecond,
		HostCompute: time.Millisecond, Gate: true,
		Slow: &Slowness{Rank: 1, Delay: time.Millisecond, Mode: "contention", Threads: 2, WhileFile: slowFile}})
	pid := run.Ranks[1].Pid
	threads, cpus := procStatus(t, pid, "Threads"), procStatus(t, pid, "Cpus_allowed_list")
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("rank 1 (pid %d): %s: threads %s, CPUs %s", pid, what, procStatus(t, pid, "Threads"), procStatus(t, pid, "Cpus_allowed_list"))
			}
		}
	}
	base, _ := strconv.Atoi(threads)
	for round := range 2 {
		if err := os.WriteFile(slowFile, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		waitFor("slowed: want 2 busy threads and one CPU", func() bool {
			n, _ := strconv.Atoi(procStatus(t, pid, "Threads"))
			c := procStatus(t, pid, "Cpus_allowed_list")
			return n == base+2 && !strings.ContainsAny(c, ",-")
		})
		if err := os.Remove(slowFile); err != nil {
			t.Fatal(err)
		}
		waitFor("healthy again: want its threads and CPUs of before", func() bool {
			return procStatus(t, pid, "Threads") == threads && procStatus(t, pid, "Cpus_allowed_list") == cpus
		})
		t.Logf("round %d: slowed and back: %s threads, CPUs %s", round, threads, cpus)
	}
}

// The slow rank says when each slowdown began (SlowdownBegan: its first slowed step)
// and ended (SlowdownEnded: its last slowed step): after its file appeared or went, by
// the next step's start (steps of 100 ms of host work here), and anew for each
// slowdown; nothing before the first. A benchmark times its flags from the one and
// judges how late a verdict on the slowdown may come from the other.
func TestTheSlowRankSaysWhenItsSlowdownBeganAndEnded(t *testing.T) {
	p := Build(t)
	slowFile := filepath.Join(t.TempDir(), "slow")
	run := StartDDP(t, p, DDPOptions{Ranks: 2, Steps: 100000, BucketBytes: 4 << 10, KernelTime: 20 * time.Microsecond,
		HostCompute: 100 * time.Millisecond, Gate: true,
		Slow: &Slowness{Rank: 1, Delay: 20 * time.Millisecond, Mode: "compute", WhileFile: slowFile}})
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if began, ok := SlowdownBegan(slowFile); ok {
		t.Fatalf("a slowdown began at %v before any was asked for", began)
	}
	// wait returns the mark read, once it is later than after.
	wait := func(round int, what string, read func(string) (time.Time, bool), after time.Time) time.Time {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if m, ok := read(slowFile); ok && m.After(after) {
				return m
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the slow rank never said its slowdown %s", round, what)
			}
		}
	}
	// within checks that a mark came after its file's change, by the next step's start:
	// a step is 100 ms of host work, with room for a busy host.
	within := func(round int, what string, mark, change time.Time) {
		if mark.Before(change.Add(-time.Millisecond)) || mark.Sub(change) > 2*time.Second {
			t.Fatalf("round %d: %s %v after its file changed", round, what, mark.Sub(change))
		}
		t.Logf("round %d: %s %v after its file changed", round, what, mark.Sub(change).Round(time.Millisecond))
	}
	var last time.Time
	for round := range 2 {
		if err := os.WriteFile(slowFile, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		asked := time.Now()
		began := wait(round, "began", SlowdownBegan, last)
		within(round, "began", began, asked)
		if ended, ok := SlowdownEnded(slowFile); ok && ended.After(began) {
			t.Fatalf("round %d: the slowdown ended at %v while it lasted", round, ended)
		}
		time.Sleep(300 * time.Millisecond)
		if err := os.Remove(slowFile); err != nil {
			t.Fatal(err)
		}
		gone := time.Now()
		ended := wait(round, "ended", SlowdownEnded, began)
		within(round, "ended", ended, gone)
		last = ended
		time.Sleep(500 * time.Millisecond)
	}
}
