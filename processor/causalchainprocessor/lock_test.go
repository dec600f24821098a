package causalchainprocessor

import (
	"strings"
	"testing"
	"time"
)

// The shape of a process-wide mutex (a framework lock, the GIL, the caching
// allocator's lock): the dispatcher must take the lock before each step's launches,
// four tokenizer threads take it too and hold it 400 µs at a time. The dispatcher is
// off its CPU voluntarily, waiting for the lock, about 0.7 s of every second, and
// preempted a little (0.08 s/s, by the same tokenizer threads). That is
// lock_contention naming the holders, with the lock's fix, never cpu_contention (whose
// fix, pinning, does nothing for a lock).
func TestALockHeldByTheProcesssOwnThreadsIsLockContention(t *testing.T) {
	for _, delta := range []bool{false, true} {
		cfg := testConfig()
		l := newLoop(t, cfg)
		s := newSim(4121, 3, time.Now().Add(-41*time.Second).Truncate(time.Second))
		s.delta = delta
		for i := range 40 {
			s.healthy(dispatcher)
			if i >= 10 {
				s.blocked(dispatcher, "tokenizer", true, "lock", 1750, 400*time.Microsecond, 4)
				s.preempted(dispatcher, "tokenizer", false, 40, 2*time.Millisecond, 1)
			}
			l.feed(s.export(time.Second))
		}
		var lock []rec
		for _, r := range l.chainRecords() {
			switch r.cause {
			case CauseLockContention:
				lock = append(lock, r)
			case CauseCPUContention:
				t.Errorf("delta %v: cpu_contention on a thread that waits for its own process's lock: %s", delta, r.body)
			}
		}
		if len(lock) == 0 {
			t.Fatalf("delta %v: no lock_contention chain; records %+v", delta, l.chainRecords())
		}
		last := lock[len(lock)-1]
		for _, want := range []string{"thread 4125 blocked", "on a lock held in its own process", "woken by the holders tokenizer (4 threads)", "(100%)"} {
			if !strings.Contains(last.evidence, want) {
				t.Errorf("delta %v: evidence %q lacks %q", delta, last.evidence, want)
			}
		}
		if !strings.Contains(last.fix, "critical section") || strings.Contains(last.fix, "pin") {
			t.Errorf("delta %v: fix %q", delta, last.fix)
		}
		if last.severity != "HIGH" {
			t.Errorf("delta %v: severity %s for a thread blocked 70%% of the time", delta, last.severity)
		}
		t.Log(last.body)
	}
}

// Waits that are not a lock of the process's own open no lock_contention chain: a
// hand-off to the one thread that produces the work (the main thread waiting for the
// autograd thread), wakeups from interrupts (a sleep's timer, a device), and a lock
// released by another process.
func TestWaitsThatAreNotContentionOpenNoLockChain(t *testing.T) {
	for name, add := range map[string]trouble{
		"hand-off to one thread": func(s *sim, _ int) {
			s.blocked(dispatcher, "pt_autograd_0", true, "lock", 500, time.Millisecond, 1)
		},
		"timer": func(s *sim, _ int) { s.blocked(dispatcher, "interrupt", false, "sleep", 500, time.Millisecond, 0) },
		"device": func(s *sim, _ int) {
			s.blocked(dispatcher, "interrupt", false, "device", 500, time.Millisecond, 0)
		},
		"another process": func(s *sim, _ int) {
			s.blocked(dispatcher, "python3", false, "lock", 500, time.Millisecond, 7)
		},
	} {
		l, _ := run(t, testConfig(), 30, 10, 30, add)
		for _, r := range l.chainRecords() {
			if r.cause == CauseLockContention {
				t.Errorf("%s: %s", name, r.body)
			}
		}
	}
}

// On two cores the holders spin while they hold the lock, so the waiting thread also
// loses its CPU to them, more than it waits for the lock itself (measured in the
// scenario suite: 244 ms blocked, 453 ms waiting for a CPU that went to tokenizer).
// Its CPU went to the lock's own holders: lock_contention, still not cpu_contention.
// The same lock with the CPU taken by another process (batch-etl) is both: each fix
// helps.
func TestCPULostToTheLocksOwnHoldersIsStillTheLock(t *testing.T) {
	for _, c := range []struct {
		hog     string
		wantCPU bool
	}{{"tokenizer", false}, {"batch-etl", true}} {
		l, _ := run(t, testConfig(), 30, 10, 30, func(s *sim, _ int) {
			s.blocked(dispatcher, "tokenizer", true, "lock", 300, 400*time.Microsecond, 4)
			s.preempted(dispatcher, c.hog, false, 150, 2*time.Millisecond, 1)
		})
		causes := map[string]bool{}
		for _, r := range l.chainRecords() {
			causes[r.cause] = true
		}
		if !causes[CauseLockContention] || causes[CauseCPUContention] != c.wantCPU {
			t.Errorf("CPU taken by %s: chains %v, want lock_contention, and cpu_contention %v", c.hog, causes, c.wantCPU)
		}
	}
}

// A cpu_contention chain opened before the lock showed as the process's own (in its
// first seconds one tokenizer thread alone had woken the dispatcher, a hand-off) is
// resolved in the first evaluation that finds lock_contention and no CPU contention of
// its own, not resolve_after later: CI's scenario suite once read the stale chain as the
// costliest of the lock scenario.
func TestTheLockSupersedesAnEarlierCPUChain(t *testing.T) {
	l, _ := run(t, testConfig(), 30, 10, 30, func(s *sim, i int) {
		holders := 1
		if i >= 13 {
			holders = 4
		}
		s.blocked(dispatcher, "tokenizer", true, "lock", 300, 400*time.Microsecond, holders)
		s.preempted(dispatcher, "tokenizer", false, 150, 2*time.Millisecond, 1)
	})
	var cpuOpen, cpuResolved, lockOpen time.Time
	for _, r := range l.chainRecords() {
		switch {
		case r.cause == CauseCPUContention && r.state == StateOpen:
			cpuOpen = r.at
		case r.cause == CauseCPUContention && r.state == StateResolved:
			cpuResolved = r.at
		case r.cause == CauseLockContention && r.state == StateOpen:
			lockOpen = r.at
		}
	}
	if cpuOpen.IsZero() || lockOpen.IsZero() || !cpuResolved.Equal(lockOpen) {
		t.Errorf("cpu_contention opened %v and resolved %v, lock_contention opened %v: want the CPU chain resolved as the lock's opens", cpuOpen, cpuResolved, lockOpen)
	}
}
