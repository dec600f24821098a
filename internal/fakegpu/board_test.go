package fakegpu

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// procsOn lists the pids the board shows on GPU n.
func procsOn(t *testing.T, board string, n int) []int {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(board, "gpu"+strconv.Itoa(n)+".procs"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			t.Fatalf("entry %q on GPU %d is not a pid", e.Name(), n)
		}
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids
}

// Four ranks on a board of four GPUs, each selecting the device of its local rank (as
// a PyTorch rank does with torch.cuda.set_device): each is listed on its own GPU while
// it runs, as NVML lists processes, and on none once it exits. GPU 2's SM clock is
// half its maximum, so rank 2's kernels take twice as long, and every rank's steps with
// them.
func TestABoardGPUHoldsItsRankAndPacesItsKernels(t *testing.T) {
	p := Build(t)
	board := t.TempDir()
	for n := range 4 {
		state := ""
		if n == 2 {
			state = "sm_clock=990\nclock_event_reasons=hw_thermal\n"
		}
		if err := os.WriteFile(filepath.Join(board, "gpu"+strconv.Itoa(n)), []byte(state), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const steps, kernels, kernel = 60, 10, time.Millisecond
	run := StartDDP(t, p, DDPOptions{Ranks: 4, Steps: steps, ComputeKernels: kernels, OptimizerKernels: 1, KernelTime: kernel,
		BucketBytes: 16 << 10, Gate: true, Env: []string{"FAKEGPU_BOARD=" + board, "FAKEGPU_DEVICES=4"}})
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	listed := false
	for deadline := time.Now().Add(10 * time.Second); !listed && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		listed = true
		for n, rank := range run.Ranks {
			if got := procsOn(t, board, n); !slices.Equal(got, []int{rank.Pid}) {
				listed = false
			}
		}
	}
	if !listed {
		for n := range 4 {
			t.Errorf("GPU %d lists %v, want rank %d's pid %d", n, procsOn(t, board, n), n, run.Ranks[n].Pid)
		}
	}
	reports, err := run.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for n := range 4 {
		if got := procsOn(t, board, n); len(got) != 0 {
			t.Errorf("GPU %d still lists %v after every rank exited", n, got)
		}
	}
	// Rank 2's compute kernels take 2 ms, not 1: 10 ms more device time per step. Every
	// rank's step waits for it, since the all-reduce completes on every device only
	// once rank 2's stream reaches it: the steps take about 20 ms of kernels, not 10.
	// From the hosts it does not show: each rank's sync ends when the all-reduce
	// completes, so every rank waits alike (the device signals name it instead).
	var syncs []time.Duration
	for _, r := range reports {
		var step []time.Duration
		for i := 5; i < len(r.StepEndNS); i++ {
			step = append(step, time.Duration(r.StepEndNS[i]-r.StepStartNS[i]))
		}
		m := medianOf(step)
		t.Logf("rank %d: median step %v, median sync %v", r.Rank, m, medianOf(r.StreamSyncTimes()[5:]))
		if m < 2*kernels*kernel || m > 3*kernels*kernel {
			t.Errorf("rank %d: median step %v, want about %v (paced by rank 2's throttled GPU)", r.Rank, m, 2*kernels*kernel)
		}
		syncs = append(syncs, medianOf(r.StreamSyncTimes()[5:]))
	}
	if spread := slices.Max(syncs) - slices.Min(syncs); spread > kernels*kernel/4 {
		t.Errorf("the ranks' median syncs differ by %v: a throttled GPU should not show in host timing", spread)
	}
}
