//go:build linux

package probes

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// loadLibraryMaps loads the mmap watchers onto the shared ring and drop counters.
func (p *Probes) loadLibraryMaps(shared map[string]*ebpf.Map) error {
	spec, err := loadLibmap()
	if err != nil {
		return err
	}
	opts, err := p.state.pin("libmap", spec, shared)
	if err != nil {
		return err
	}
	if err := spec.LoadAndAssign(&p.libmap, opts); err != nil {
		return explainLoadError("library map watchers", err)
	}
	return nil
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
	p.links = append(p.links, enter, exit)
	p.probes += 2
	return nil
}
