//go:build linux

package gpuebpfreceiver

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

type continued struct {
	mu   sync.Mutex
	pids []uint32
}

func (c *continued) cont(pid uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pids = append(c.pids, pid)
	return nil
}

func (c *continued) list() []uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]uint32(nil), c.pids...)
}

// Each held process is continued exactly once, by whichever comes first: the attach
// loop being done with it, the limit, the collector stopping.
func TestAHeldProcessIsContinuedOnce(t *testing.T) {
	var c continued
	var drops counterSet
	h := newHeldProcesses(time.Hour, c.cont, &drops, zap.NewNop())
	h.hold(1)
	h.hold(1) // a second new file before the first was dealt with
	h.hold(2)
	h.done(1)
	h.done(1)
	h.done(3) // never held
	if got := c.list(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("continued %v after done(1), want [1]", got)
	}
	h.releaseAll()
	h.done(2)
	if got := c.list(); len(got) != 2 || got[1] != 2 {
		t.Fatalf("continued %v after releaseAll, want [1 2]", got)
	}
	// Stopping: a process the kernel holds from here on is continued at once.
	h.hold(4)
	if got := c.list(); len(got) != 3 || got[2] != 4 {
		t.Fatalf("continued %v after a hold past releaseAll, want [1 2 4]", got)
	}
	if n := drops.snapshot()["first_load_hold_overflow"]; n != 1 {
		t.Errorf("first_load_hold_overflow %d, want 1", n)
	}
}

// A hold whose attach is not done in time is continued at the limit and counted.
func TestAHoldPastItsLimitIsContinuedAndCounted(t *testing.T) {
	var c continued
	var drops counterSet
	h := newHeldProcesses(5*time.Millisecond, c.cont, &drops, zap.NewNop())
	h.hold(7)
	deadline := time.Now().Add(10 * time.Second)
	for len(c.list()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	h.done(7) // the attach loop, late
	if got := c.list(); len(got) != 1 || got[0] != 7 {
		t.Fatalf("continued %v, want [7] once", got)
	}
	if n := drops.snapshot()["first_load_hold_expired"]; n != 1 {
		t.Errorf("first_load_hold_expired %d, want 1", n)
	}
}
