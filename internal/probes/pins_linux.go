//go:build linux

package probes

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// kernelState keeps the programs' maps pinned in bpffs, so that the next collector on
// the node (a DaemonSet rolling update, a crash) adopts what the kernel knows: the
// traced set, NCCL communicators and their sequence numbers, per-process call
// statistics, the calls in flight, the host aggregates. With KeepProbes the library
// probes' links are pinned too (links/<library>-<dev>-<inode>/<n>): they stay attached
// and counting while no collector runs, and the next collector adopts them instead of
// attaching its own. The host tracepoints and the mmap watcher are never pinned.
//
// The state of one build and one set of load options lives in a directory of its
// own, named by a hash of both: a map is only ever shared by programs that agree on
// its layout and meaning. Directories of other builds are removed at load.
type kernelState struct {
	dir     string // <PinDir>/<hash>
	adopted bool   // dir held state when this collector started
}

// objectBytes are the embedded BPF objects, in a fixed order.
var objectBytes = [][]byte{_CudaBytes, _HostBytes, _NcclBytes, _RdmaBytes, _LibmapBytes}

func openKernelState(opts Options) (*kernelState, error) {
	h := sha256.New()
	for _, b := range objectBytes {
		h.Write(b)
	}
	// The options baked into the programs (constants, map sizes) belong to the state.
	// Pinned links run the programs of the collector that attached them, with its
	// constants: those must be this collector's too.
	fmt.Fprintf(h, "trace_all=%v ring=%d slots=%d baseline=%v per_probe_links=%v sample_every=%d native_stacks=%v",
		opts.TraceAllCUDA, opts.RingBufferBytes, opts.ProcSlots, opts.Baseline, opts.PerProbeLinks, opts.SampleEvery, !opts.NoNativeStacks)
	version := hex.EncodeToString(h.Sum(nil))[:16]
	if err := checkBPFFS(opts.PinDir); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(opts.PinDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read pin directory: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() && e.Name() != version {
			// Another build's state: its maps go once the last program using them does.
			if err := os.RemoveAll(filepath.Join(opts.PinDir, e.Name())); err != nil {
				return nil, fmt.Errorf("remove another build's kernel state: %w", err)
			}
		}
	}
	s := &kernelState{dir: filepath.Join(opts.PinDir, version)}
	if _, err := os.Stat(s.dir); err == nil {
		s.adopted = true
	}
	return s, nil
}

// checkBPFFS makes dir on a bpf file system: pins live nowhere else.
func checkBPFFS(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create pin directory %s: %w", dir, err)
	}
	ok, err := onBPFFS(dir)
	if err != nil {
		return fmt.Errorf("pin directory %s: %w", dir, err)
	}
	if !ok {
		return fmt.Errorf("pin directory %s is not on a bpf file system: mount one (mount -t bpf bpf /sys/fs/bpf) or choose a directory under it", dir)
	}
	return nil
}

// pin marks every map of spec that is not shared from another object to be pinned by
// name in this object's directory, and returns the collection options that do it.
// The loader then opens a pinned map of the same name instead of making a new one.
func (s *kernelState) pin(object string, spec *ebpf.CollectionSpec, shared map[string]*ebpf.Map) (*ebpf.CollectionOptions, error) {
	replacements := present(spec, shared)
	opts := &ebpf.CollectionOptions{MapReplacements: replacements}
	if s == nil {
		return opts, nil
	}
	dir := filepath.Join(s.dir, object)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pin directory: %w", err)
	}
	for name, m := range spec.Maps {
		// .rodata, .bss: the programs' own constants, not state.
		if _, isShared := replacements[name]; isShared || strings.HasPrefix(name, ".") {
			continue
		}
		m.Pinning = ebpf.PinByName
	}
	opts.Maps.PinPath = dir
	return opts, nil
}

func onBPFFS(dir string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, err
	}
	return st.Type == unix.BPF_FS_MAGIC, nil
}

// adoptedTotals are the kernel's totals when this collector adopted them. The readers
// subtract them, so that the counts a collector reports are what it saw, from its own
// start: the previous collector reported everything before (it reads the kernel's last
// counts as it stops), and a cumulative series that restarts with the new collector's
// start time is what OTLP consumers expect of a restart.
type adoptedTotals struct {
	// mu: the telemetry callback reads host totals beside the export loop.
	mu    sync.Mutex
	calls map[uint32]*[APICount]CallStats // by slot
	host  HostAggregates
	drops map[string]uint64
}

// snapshotAdopted reads the totals while nothing is attached yet, so nothing moves.
func (p *Probes) snapshotAdopted() error {
	stats, err := p.ReadCallStats(nil)
	if err != nil {
		return err
	}
	base := &adoptedTotals{calls: map[uint32]*[APICount]CallStats{}}
	owners := map[uint32]uint32{}
	for i := range stats {
		base.calls[stats[i].slot] = &stats[i].ByAPI
		owners[stats[i].slot] = stats[i].PID
	}
	// What the previous collector handed over is where it stopped counting: from
	// there, not from now, so that the calls made meanwhile are counted.
	if err := p.takeHandoff(base, owners); err != nil {
		return err
	}
	if base.host, err = p.ReadHostAggregates(); err != nil {
		return err
	}
	if base.drops, err = p.Drops(); err != nil {
		return err
	}
	p.adoptedBase = base
	return nil
}

// add is subtract's inverse: the kernel's count, from what a reader was given.
func (s *CallStats) add(b *CallStats) {
	for k := range s.Calls {
		s.Calls[k] += b.Calls[k]
		s.Bytes[k] += b.Bytes[k]
	}
	s.Errors += b.Errors
	s.DurationNs += b.DurationNs
	for i := range s.Buckets {
		s.Buckets[i] += b.Buckets[i]
	}
}

func (s *CallStats) subtract(b *CallStats) {
	for k := range s.Calls {
		s.Calls[k] -= b.Calls[k]
		s.Bytes[k] -= b.Bytes[k]
	}
	s.Errors -= b.Errors
	s.DurationNs -= b.DurationNs
	for i := range s.Buckets {
		s.Buckets[i] -= b.Buckets[i] // 32-bit and wrapping, as the readers take them
	}
}

func (a *HostAggregates) subtract(b *HostAggregates) {
	for i := range a.RunQueueOther {
		a.RunQueueOther[i] -= b.RunQueueOther[i]
		a.BlockRead[i] -= b.BlockRead[i]
		a.BlockWrite[i] -= b.BlockWrite[i]
	}
	a.PagesOther -= b.PagesOther
	a.RetransmitsIPv4 -= b.RetransmitsIPv4
	a.RetransmitsIPv6 -= b.RetransmitsIPv6
	a.BlockBytesRead -= b.BlockBytesRead
	a.BlockBytesWrite -= b.BlockBytesWrite
	for pid, n := range a.PagesByPID {
		if base, ok := b.PagesByPID[pid]; ok && base <= n {
			a.PagesByPID[pid] = n - base
		}
	}
}
