//go:build linux

package gpuebpfreceiver

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// heldProcesses are the processes the mmap watcher stopped as they mapped a library
// file no probe was on yet. Each is continued once, by whichever comes first: the
// attach loop, done with its mapping; the hold's limit; the collector stopping.
type heldProcesses struct {
	limit    time.Duration
	cont     func(pid uint32) error
	drops    *counterSet
	logger   *zap.Logger
	mu       sync.Mutex
	byPID    map[uint32]*time.Timer
	released bool // stopping: nothing more is held
}

// maxHeld bounds the holds being timed at once; past it a process is continued at once.
const maxHeld = 4096

func newHeldProcesses(limit time.Duration, cont func(uint32) error, drops *counterSet, logger *zap.Logger) *heldProcesses {
	return &heldProcesses{limit: limit, cont: cont, drops: drops, logger: logger, byPID: map[uint32]*time.Timer{}}
}

// hold starts the limit's clock for a process the kernel has just stopped.
func (h *heldProcesses) hold(pid uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.byPID[pid]; ok {
		return // stopped again (a second new file) before the first was continued
	}
	if h.released || len(h.byPID) >= maxHeld {
		h.drops.add("first_load_hold_overflow", 1)
		h.continueNow(pid)
		return
	}
	h.byPID[pid] = time.AfterFunc(h.limit, func() {
		if h.take(pid) {
			// The attach was not done in time: what the process calls from here until
			// it is, is not seen.
			h.drops.add("first_load_hold_expired", 1)
			h.continueNow(pid)
		}
	})
}

// take removes a process from the held set; false when another path continued it.
func (h *heldProcesses) take(pid uint32) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.byPID[pid]
	if ok {
		t.Stop()
		delete(h.byPID, pid)
	}
	return ok
}

// done continues a held process: its mapping has been dealt with.
func (h *heldProcesses) done(pid uint32) {
	if h.take(pid) {
		h.continueNow(pid)
	}
}

func (h *heldProcesses) continueNow(pid uint32) {
	if err := h.cont(pid); err != nil {
		h.logger.Error("cannot continue a process held for its first library load: it stays stopped until sent SIGCONT", zap.Uint32("pid", pid), zap.Error(err))
	}
}

// releaseAll continues every held process, and holds nothing more: the collector stops.
func (h *heldProcesses) releaseAll() {
	h.mu.Lock()
	pids := make([]uint32, 0, len(h.byPID))
	for pid, t := range h.byPID {
		t.Stop()
		pids = append(pids, pid)
	}
	clear(h.byPID)
	h.released = true
	h.mu.Unlock()
	for _, pid := range pids {
		h.continueNow(pid)
	}
}
