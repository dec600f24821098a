//go:build linux

package probes

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// loadLibraryMaps loads the mmap watchers onto the shared ring and drop counters.
func (p *Probes) loadLibraryMaps(opts Options, shared map[string]*ebpf.Map) error {
	spec, err := loadLibmap()
	if err != nil {
		return err
	}
	if err := spec.Variables["hold_first_load"].Set(opts.HoldFirstLoad); err != nil {
		return fmt.Errorf("configure hold_first_load: %w", err)
	}
	if err := spec.Variables["trace_all"].Set(opts.TraceAllCUDA); err != nil {
		return fmt.Errorf("configure trace_all: %w", err)
	}
	loadOpts, err := p.state.pin("libmap", spec, shared)
	if err != nil {
		return err
	}
	if err := spec.LoadAndAssign(&p.libmap, loadOpts); err != nil {
		return explainLoadError("library map watchers", err)
	}
	// A previous collector's attachments went with it: no file is probed yet.
	return clearMap(p.libmap.ProbedFiles)
}

func clearMap(m *ebpf.Map) error {
	var key, next []byte
	key = make([]byte, m.KeySize())
	next = make([]byte, m.KeySize())
	for m.NextKey(nil, next) == nil {
		copy(key, next)
		if err := m.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("empty %s: %w", m.String(), err)
		}
	}
	return nil
}

// markProbed tells the mmap watcher that the file's probes are attached: a process
// mapping it is not held. dev is in stat(2)'s encoding.
func (p *Probes) markProbed(id fileID) error {
	key := libmapFileKey{Ino: id.ino, Dev: uint32(unix.Major(id.dev)<<20 | unix.Minor(id.dev))}
	return p.libmap.ProbedFiles.Put(&key, uint8(1))
}

// Continue resumes a process the mmap watcher stopped as it mapped a library file no
// probe was on yet (LibraryMapped.Held), once that file's probes are attached or the
// hold's limit is up. A process that is gone is no error.
func (p *Probes) Continue(pid uint32) error {
	if p.libmap.HeldPids != nil {
		_ = p.libmap.HeldPids.Delete(&pid)
	}
	if err := unix.Kill(int(pid), unix.SIGCONT); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("continue pid %d: %w", pid, err)
	}
	return nil
}

// Held lists the processes the mmap watcher stopped that no collector has continued
// yet: at start, those a previous collector left held when it died.
func (p *Probes) Held() ([]uint32, error) {
	if p.libmap.HeldPids == nil {
		return nil, nil // not loaded
	}
	var (
		pid  uint32
		at   uint64
		pids []uint32
	)
	it := p.libmap.HeldPids.Iterate()
	for it.Next(&pid, &at) {
		pids = append(pids, pid)
	}
	return pids, it.Err()
}

// AttachLibraryMaps attaches the mmap tracepoints that report a process mapping a
// probed library's code (LibraryMapped records), so discovery can attach to a library
// within milliseconds of its mapping instead of at its next scan. Syscall tracepoints
// are found through tracefs: without it this fails, and discovery keeps to its scans.
func (p *Probes) AttachLibraryMaps() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	enter, err := link.Tracepoint("syscalls", "sys_enter_mmap", p.libmap.OnSysEnterMmap, nil)
	if err != nil {
		return fmt.Errorf("attach syscalls/sys_enter_mmap: %w", err)
	}
	exit, err := link.Tracepoint("syscalls", "sys_exit_mmap", p.libmap.OnSysExitMmap, nil)
	if err != nil {
		_ = enter.Close()
		return fmt.Errorf("attach syscalls/sys_exit_mmap: %w", err)
	}
	p.mapLinks = []link.Link{enter, exit}
	p.probes += 2
	return nil
}

// StopHolding detaches the mmap watchers, so that no process is stopped from here on,
// and continues every process still held: a collector stopping must leave none behind,
// including one whose record it never read.
func (p *Probes) StopHolding() error {
	p.mu.Lock()
	closeAll(p.mapLinks)
	if len(p.mapLinks) > 0 {
		p.probes -= len(p.mapLinks)
	}
	p.mapLinks = nil
	p.mu.Unlock()
	pids, err := p.Held()
	for _, pid := range pids {
		err = errors.Join(err, p.Continue(pid))
	}
	return err
}
