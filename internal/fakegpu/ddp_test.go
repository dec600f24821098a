package fakegpu

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func meanOf(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
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
			"ibv_get_device_list": 0, "ibv_open_device": 0, "ibv_free_device_list": 0,
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
	// A collective ends for everybody only after the last rank entered it.
	for s := 0; s < steps; s++ {
		var lastEntry, firstExit int64
		for i, r := range ranks {
			if i == 0 || r.AllReduceEntryNS[s] > lastEntry {
				lastEntry = r.AllReduceEntryNS[s]
			}
			if i == 0 || r.AllReduceExitNS[s] < firstExit {
				firstExit = r.AllReduceExitNS[s]
			}
		}
		if firstExit < lastEntry {
			t.Fatalf("step %d: a rank left the all-reduce at %d before the last one entered at %d", s, firstExit, lastEntry)
		}
	}
	if left, _ := filepath.Glob("/dev/shm/fakenccl-*"); len(left) != 0 {
		t.Errorf("shared memory left behind: %v", left)
	}
}

// A slow rank makes its peers wait inside ncclAllReduce for about the delay it adds.
func TestDDPSlowRankMakesPeersWait(t *testing.T) {
	p := Build(t)
	const steps, from = 40, 20
	for _, mode := range []string{"compute", "barrier", "contention"} {
		t.Run(mode, func(t *testing.T) {
			delay := 20 * time.Millisecond
			o := DDPOptions{Ranks: 4, Steps: steps, BucketBytes: 16 << 10, KernelTime: 20 * time.Microsecond,
				Slow: &Slowness{Rank: 2, Delay: delay, FromStep: from, Mode: mode}}
			ranks := RunDDP(t, p, o)
			slow := ranks[2]
			if !slow.Slow {
				t.Fatal("rank 2 does not report itself slow")
			}
			slowAfter := meanOf(slow.AllReduceTimes()[from:])
			for _, r := range ranks {
				if r.Rank == 2 {
					continue
				}
				times := r.AllReduceTimes()
				before, after := meanOf(times[:from]), meanOf(times[from:])
				t.Logf("rank %d: all-reduce %v before, %v after (slow rank: %v)", r.Rank, before, after, slowAfter)
				// contention stretches the delay (CPU work shared with busy threads)
				upper := 3 * delay
				if mode == "contention" {
					upper = 10 * delay
				}
				if grew := after - before; grew < delay*7/10 || grew > upper {
					t.Errorf("rank %d: all-reduce grew by %v, want about %v", r.Rank, grew, delay)
				}
				if after < slowAfter+delay*7/10 {
					t.Errorf("rank %d waits %v, only %v more than the slow rank", r.Rank, after, after-slowAfter)
				}
			}
		})
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
	for _, api := range []string{"ibv_get_device_list", "ibv_open_device", "ibv_free_device_list"} {
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
