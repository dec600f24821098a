//go:build linux

package gpuebpfreceiver

import (
	"context"
	"errors"
	"io/fs"

	"go.uber.org/zap"

	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/pyframes"
	"github.com/fathom-gpu/fathom/internal/pystacks"
	"github.com/fathom-gpu/fathom/internal/symbolize"
)

// pythonQueue bounds the processes waiting to be looked at for a Python runtime.
const pythonQueue = 1024

// pythonTracker finds the CPython processes among those traced and tells the kernel
// where their frames are, off the event path: reading a process's maps and its
// interpreter's symbols takes milliseconds the first time.
type pythonTracker struct {
	finder   *pystacks.Finder
	resolver *pystacks.Resolver
	probes   *probes.Probes
	logger   *zap.Logger
	drops    *counterSet
	queue    chan uint32
}

func newPythonTracker(procRoot string, p *probes.Probes, logger *zap.Logger, drops *counterSet) *pythonTracker {
	return &pythonTracker{finder: &pystacks.Finder{ProcRoot: procRoot}, resolver: pystacks.NewResolver(procRoot),
		probes: p, logger: logger, drops: drops, queue: make(chan uint32, pythonQueue)}
}

// track queues a newly seen process to be looked at; it never blocks.
func (t *pythonTracker) track(pid uint32) {
	select {
	case t.queue <- pid:
	default:
		t.drops.add("python_queue_full", 1)
	}
}

func (t *pythonTracker) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case pid := <-t.queue:
			t.look(pid)
		}
	}
}

func (t *pythonTracker) look(pid uint32) {
	p, err := t.finder.Find(pid)
	if errors.Is(err, pystacks.ErrNotPython) || errors.Is(err, pystacks.ErrGone) {
		return
	}
	if err == nil {
		if err = t.resolver.Track(p); errors.Is(err, fs.ErrNotExist) {
			return // exited meanwhile
		}
	}
	if err == nil {
		err = t.probes.SetPythonProcess(pid, p.Runtime, p.Layout)
	}
	if err != nil {
		// A Python process whose frames cannot be read keeps its records, without them.
		t.drops.add("python_stacks", 1)
		t.logger.Info("no Python frames for this process", zap.Uint32("pid", pid), zap.Error(err))
		return
	}
	t.logger.Debug("reading Python frames", zap.Uint32("pid", pid), zap.String("interpreter", p.File), zap.Int("minor", p.Minor))
}

// frames resolves a record's captured frames.
func (t *pythonTracker) frames(pid uint32, raw []probes.PyFrame) ([]pyframes.Frame, error) {
	captured := make([]pystacks.Captured, len(raw))
	for i, f := range raw {
		captured[i] = pystacks.Captured{Code: f.Code, Instr: f.Instr}
	}
	return t.resolver.Frames(pid, captured)
}

// forget drops an exited process.
func (t *pythonTracker) forget(pid uint32) {
	t.resolver.Forget(pid)
	t.probes.ForgetPythonProcess(pid)
}

// symbolizer names native frames (stacks.native).
type symbolizer struct{ s *symbolize.Symbolizer }

func (n symbolizer) frames(pid uint32, addrs []uint64) []symbolize.Frame {
	return n.s.Frames(pid, addrs)
}

func (n symbolizer) forget(pid uint32) { n.s.Forget(pid) }
