package pystacks

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/fathom-gpu/fathom/internal/pyframes"
)

// Captured is one frame as the kernel read it: the code object and the frame's raw
// instruction field.
type Captured struct{ Code, Instr uint64 }

// Bounds: the processes whose memory is held open, and the code objects remembered
// per process (a training program runs a few thousand functions; past the bound the
// cache starts over).
const (
	MaxProcesses       = 256
	MaxCodesPerProcess = 8192
)

// ErrUntracked is returned for a process Track was not told about (or forgot).
var ErrUntracked = errors.New("pystacks: process not tracked")

// Resolver turns captured frames into files, functions and lines. Safe for concurrent
// use.
type Resolver struct {
	procRoot string
	mu       sync.Mutex
	procs    map[uint32]*tracked
}

type tracked struct {
	mem    *os.File
	reader pyframes.Reader
	codes  map[uint64]codeEntry
}

type codeEntry struct {
	code pyframes.Code
	err  error // a code object that could not be read stays unreadable
}

// NewResolver reads processes under procRoot (/proc, or the host's /proc in a pod).
func NewResolver(procRoot string) *Resolver {
	return &Resolver{procRoot: procRoot, procs: map[uint32]*tracked{}}
}

// Track opens the process's memory for resolving its frames.
func (r *Resolver) Track(p Process) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.procs[p.PID]; ok {
		return nil
	}
	if len(r.procs) >= MaxProcesses {
		return fmt.Errorf("pystacks: %d Python processes tracked already", MaxProcesses)
	}
	mem, err := os.Open(filepath.Join(r.procRoot, strconv.Itoa(int(p.PID)), "mem"))
	if err != nil {
		return fmt.Errorf("pystacks: %w", err)
	}
	r.procs[p.PID] = &tracked{mem: mem, reader: pyframes.Reader{Mem: mem, Layout: p.Layout, CodeType: p.CodeType}, codes: map[uint64]codeEntry{}}
	return nil
}

// Forget closes what Track opened.
func (r *Resolver) Forget(pid uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.procs[pid]; ok {
		t.mem.Close()
		delete(r.procs, pid)
	}
}

// Frames resolves captured frames, innermost first. A frame whose code object cannot
// be read (freed meanwhile, a bad pointer) comes back with its Code and no file; the
// error says how many.
func (r *Resolver) Frames(pid uint32, captured []Captured) ([]pyframes.Frame, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.procs[pid]
	if !ok {
		return nil, ErrUntracked
	}
	out := make([]pyframes.Frame, len(captured))
	bad := 0
	var firstErr error
	for i, c := range captured {
		e, ok := t.codes[c.Code]
		if !ok {
			if len(t.codes) >= MaxCodesPerProcess {
				clear(t.codes)
			}
			e.code, e.err = t.reader.Code(c.Code)
			t.codes[c.Code] = e
		}
		f := pyframes.Frame{Code: c.Code}
		err := e.err
		if err == nil {
			f, err = t.reader.Layout.FrameAt(c.Code, e.code, c.Instr)
		}
		if err != nil {
			bad++
			if firstErr == nil {
				firstErr = err
			}
		}
		out[i] = f
	}
	if bad > 0 {
		return out, fmt.Errorf("pystacks: %d of %d frames of pid %d unreadable: %w", bad, len(captured), pid, firstErr)
	}
	return out, nil
}
