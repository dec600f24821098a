//go:build linux

package probes_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// lockWaitReport is what fakegpu-lockwait measured itself.
type lockWaitReport struct {
	Pid, Tid      int
	LockWaits     int   `json:"lock_waits"`
	LockWaitNs    int64 `json:"lock_wait_ns"`
	Uncontended   int   `json:"uncontended"`
	Sleeps        int   `json:"sleeps"`
	SleepNs       int64 `json:"sleep_ns"`
	TokenizerTids []int `json:"tokenizer_tids"`
}

// runLockWait runs fakegpu-lockwait to its end and returns its report.
func runLockWait(t *testing.T, paths fakegpu.Paths, args ...string) (started chan int, result func() lockWaitReport) {
	t.Helper()
	cmd := exec.Command(paths.LockWait, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", paths.LockWait, err)
	}
	started = make(chan int, 1)
	started <- cmd.Process.Pid
	return started, func() lockWaitReport {
		t.Helper()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%s %v: %v\nstderr:\n%s", paths.LockWait, args, err, stderr.String())
		}
		var r lockWaitReport
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			t.Fatalf("%s report %q: %v", paths.LockWait, stdout.String(), err)
		}
		return r
	}
}

// voluntaryWaits keeps one thread's voluntary waits by who woke it and what it blocked
// in, as the receiver names them.
type voluntaryWaits struct {
	discard
	mu  sync.Mutex
	tid uint32
	pid uint32
	// by "kind/name/blocked on"
	count     map[string]int
	blocked   map[string]time.Duration // switch-out to wakeup
	wakerTids map[string]map[uint32]bool
	foreign   []string // a task waker of another process
}

func newVoluntaryWaits(pid int) *voluntaryWaits {
	return &voluntaryWaits{tid: uint32(pid), pid: uint32(pid), count: map[string]int{},
		blocked: map[string]time.Duration{}, wakerTids: map[string]map[uint32]bool{}}
}

func (r *voluntaryWaits) Sched(ev *probes.SchedSwitchIn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Hdr.Tid != r.tid || ev.Preempted != 0 {
		return
	}
	var key string
	switch probes.SchedWaker(ev.WakerKind) {
	case probes.WakerTask:
		key = "task/" + ev.WakerName()
		if ev.WakerPid != r.pid {
			r.foreign = append(r.foreign, fmt.Sprintf("%s (pid %d)", ev.WakerName(), ev.WakerPid))
		}
	case probes.WakerInterrupt:
		key = "interrupt/"
	default:
		key = "none/"
	}
	key += "/" + probes.BlockedOnSyscall(ev.SyscallNr).String()
	r.count[key]++
	r.blocked[key] += time.Duration(ev.OffCpuNs - ev.RunqNs)
	if r.wakerTids[key] == nil {
		r.wakerTids[key] = map[uint32]bool{}
	}
	if ev.WakerTid != 0 {
		r.wakerTids[key][ev.WakerTid] = true
	}
}

// The kernel's view of a wait ends at the wakeup, the program's when its call returns:
// its own time holds the wakeup's run-queue wait and the call's way in and out too.
// Over 200 waits of 1 ms or more, that is a few percent at most on an idle machine; on
// one running builds beside the tests, the run-queue share grows, so the floor is 80%.
const waitTimeFloor = 0.8

// A dispatcher that calls CUDA and then waits, turn after turn, for a mutex one of its
// own four tokenizer threads holds: each such wait names the tokenizer whose unlock
// woke it (its comm, its process: the dispatcher's own), every tokenizer among them,
// and futex as what it blocked in; the waits and their time are what the program
// measured. Then it sleeps: each sleep is ended by the timer's interrupt, in
// clock_nanosleep.
func TestVoluntaryWaitsNameTheirWakerAndWhatTheyWaitedOn(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	p := loadAndAttach(t, paths, traceAllCUDA)
	const waits, sleeps = 200, 100
	started, result := runLockWait(t, paths, "--tokenizers", "4", "--waits", strconv.Itoa(waits),
		"--hold-us", "1000", "--sleeps", strconv.Itoa(sleeps), "--sleep-us", "2000")
	rec := newVoluntaryWaits(<-started)
	stop := runReader(t, p, rec)
	report := result()
	stop()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	t.Logf("program: %d lock waits, %.1f ms (%d uncontended); %d sleeps, %.1f ms; kernel: %v, blocked %v",
		report.LockWaits, float64(report.LockWaitNs)/1e6, report.Uncontended, report.Sleeps, float64(report.SleepNs)/1e6, rec.count, rec.blocked)
	// On a host busy beside the test, the dispatcher is often preempted between seeing
	// the lock taken and asking for it, and finds it free: 139 of 200 turns were still
	// waits under two busy loops on two cores. Half is enough to test the naming.
	if report.LockWaits < waits/2 {
		t.Fatalf("the program found the lock held in %d of %d turns, want at least half", report.LockWaits, waits)
	}
	if len(rec.foreign) > 0 {
		t.Errorf("%d waits woken by another process's task, e.g. %s", len(rec.foreign), rec.foreign[0])
	}

	lock := "task/tokenizer/lock"
	// Each turn the program counts is one futex wait in the kernel: only the one
	// tokenizer that holds the lock is awake, so the dispatcher gets it on its first
	// wakeup.
	checkWaitCount(t, lock, rec.count[lock], report.LockWaits)
	checkWaitTime(t, lock, rec.blocked[lock], report.LockWaitNs)
	tids := slices.Sorted(func(yield func(uint32) bool) {
		for tid := range rec.wakerTids[lock] {
			if !yield(tid) {
				return
			}
		}
	})
	want := make([]uint32, 0, len(report.TokenizerTids))
	for _, tid := range report.TokenizerTids {
		want = append(want, uint32(tid))
	}
	slices.Sort(want)
	if !slices.Equal(tids, want) {
		t.Errorf("%s: woken by threads %v, the tokenizers are %v", lock, tids, want)
	}

	sleep := "interrupt//sleep"
	checkWaitCount(t, sleep, rec.count[sleep], report.Sleeps)
	checkWaitTime(t, sleep, rec.blocked[sleep], report.SleepNs)
}

// The kernel sees every wait the program counts, but for about one in ten thousand
// under load (4 of some 35,000 over 100 runs beside two busy loops): a switch-in with no
// event, while no ring buffer drop and no recursion miss was counted. Which kernel
// path skips it is not known yet; what this test names (who woke each wait, in which
// call) is exact for every wait seen, and none may be seen that the program did not
// make.
const waitCountSlack = 0.01

func checkWaitCount(t *testing.T, key string, kernel, program int) {
	t.Helper()
	if kernel > program || float64(kernel) < (1-waitCountSlack)*float64(program) {
		t.Errorf("%s: %d waits, the program measured %d: want between %.0f%% and 100%% of them", key, kernel, program, 100*(1-waitCountSlack))
	}
}

func checkWaitTime(t *testing.T, key string, kernel time.Duration, programNs int64) {
	t.Helper()
	program := time.Duration(programNs)
	if kernel > program || kernel.Seconds() < waitTimeFloor*program.Seconds() {
		t.Errorf("%s: blocked %v, the program measured %v: want between %.0f%% and 100%% of it", key, kernel, program, 100*waitTimeFloor)
	}
}
