//go:build linux

package gpuebpfreceiver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/fathom-gpu/fathom/internal/discovery"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/procinfo"
	"github.com/fathom-gpu/fathom/internal/symbolize"
)

// execRescanQueue bounds the processes waiting for a post-exec scan of their mappings.
const execRescanQueue = 1024

// libraryMapQueue bounds the library mappings waiting to be attached on first use. A
// job start maps a few libraries per rank; a full queue leaves the rest to the scans.
const libraryMapQueue = 1024

// ebpfSource is the real thing: BPF programs in the kernel, libraries found in /proc.
type ebpfSource struct {
	cfg    *Config
	logger *zap.Logger
	probes *probes.Probes

	cgroupRoot string // the cgroup v2 mount (Discovery.CgroupRoot, or its unified/)
	cgroupIDs  map[uint64]bool
	rescan     chan uint32
	mapped     chan libraryMapping
	drops      counterSet
	held       *heldProcesses
	py         *pythonTracker // nil: stacks.python off
	wg         sync.WaitGroup
	cancel     context.CancelFunc
}

func newEBPFSource(cfg *Config, logger *zap.Logger) (eventSource, error) {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return nil, errors.New("gpuebpf: this kernel exposes no BTF (/sys/kernel/btf/vmlinux is missing); it needs CONFIG_DEBUG_INFO_BTF=y, or use mode: synthetic")
	}
	p, err := probes.Load(probes.Options{
		TraceAllCUDA:    cfg.Targets.All,
		RingBufferBytes: cfg.Limits.RingBufferBytes,
		PinDir:          cfg.KernelState.PinDir,
		KeepProbes:      cfg.KernelState.KeepProbes,
		HoldFirstLoad:   holdFirstLoad(cfg, logger),
		NoNativeStacks:  !cfg.Stacks.Native,
		SampleEvery:     uint32(cfg.Stacks.SampleEvery),
	})
	if errors.Is(err, probes.ErrPrivileges) {
		return nil, fmt.Errorf("gpuebpf: cannot load BPF programs without privileges: run the collector as root, or grant it with `setcap cap_bpf,cap_perfmon,cap_sys_ptrace,cap_dac_read_search,cap_kill+ep %s` (or securityContext.capabilities in Kubernetes); or use mode: synthetic", executable())
	}
	if err != nil {
		return nil, fmt.Errorf("gpuebpf: %w", err)
	}
	if p.Adopted() {
		logger.Info("adopted the kernel state a previous collector left: traced processes, NCCL communicators, calls in flight and (keep_probes) the probes carry on; counts go on from what the last collector handed over",
			zap.String("pin_dir", cfg.KernelState.PinDir))
	}
	s := &ebpfSource{cfg: cfg, logger: logger, probes: p, cgroupRoot: procinfo.CgroupV2Mount(cfg.Discovery.CgroupRoot),
		cgroupIDs: map[uint64]bool{}, rescan: make(chan uint32, execRescanQueue),
		mapped: make(chan libraryMapping, libraryMapQueue)}
	s.held = newHeldProcesses(cfg.Discovery.FirstLoadHold, p.Continue, &s.drops, logger)
	if cfg.Stacks.Python {
		s.py = newPythonTracker(cfg.Discovery.ProcRoot, p, logger, &s.drops)
	}
	if err := s.setUp(); err != nil {
		_ = p.Close()
		return nil, err
	}
	return s, nil
}

// holdFirstLoad says whether processes are held at a first load: only when the
// collector can continue them. The kernel's SIGSTOP needs no permission; the SIGCONT
// to another user's process needs CAP_KILL.
func holdFirstLoad(cfg *Config, logger *zap.Logger) bool {
	if !cfg.Discovery.AttachOnMap || cfg.Discovery.FirstLoadHold <= 0 {
		return false
	}
	if !haveCapability(unix.CAP_KILL) {
		logger.Warn("discovery.first_load_hold is off: the collector lacks CAP_KILL, so it could not continue another user's process it held; a process that calls CUDA or NCCL within milliseconds of loading a library file new to this node loses those calls (grant CAP_KILL, as the chart and the systemd unit do)")
		return false
	}
	return true
}

// haveCapability reads the collector's effective capability set.
func haveCapability(c int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(uint(c)%32)) != 0
}

func executable() string {
	if exe, err := os.Executable(); err == nil {
		return exe
	}
	return "fathom"
}

func (s *ebpfSource) setUp() error {
	// A previous collector that died while holding a process left it stopped.
	if pids, err := s.probes.Held(); err == nil {
		for _, pid := range pids {
			s.logger.Info("continuing a process a previous collector held for its first library load", zap.Uint32("pid", pid))
			if err := s.probes.Continue(pid); err != nil {
				s.logger.Error("cannot continue a held process: it stays stopped until sent SIGCONT", zap.Uint32("pid", pid), zap.Error(err))
			}
		}
	}
	if err := s.probes.AttachHost(); err != nil {
		return fmt.Errorf("gpuebpf: attach host tracepoints: %w", err)
	}
	if s.cfg.Discovery.AttachOnMap {
		// Before the first scan: a library mapped between the scan and this attach
		// would otherwise wait for the next scan.
		if err := s.probes.AttachLibraryMaps(); err != nil {
			s.cfg.Discovery.AttachOnMap = false
			s.logger.Warn("libraries are attached at scans only, not on first use: mount tracefs at /sys/kernel/tracing to attach within milliseconds", zap.Error(err))
		}
	}
	for _, pid := range s.cfg.Targets.PIDs {
		if err := s.probes.TracePID(uint32(pid)); err != nil {
			return fmt.Errorf("gpuebpf: trace pid %d: %w", pid, err)
		}
	}
	for _, cg := range s.cfg.Targets.Cgroups {
		path := cg
		if !filepath.IsAbs(path) || !pathUnder(path, s.cgroupRoot) {
			path = filepath.Join(s.cgroupRoot, cg)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			return fmt.Errorf("gpuebpf: targets.cgroups: %s: %w", cg, err)
		}
		s.cgroupIDs[st.Ino] = true
		if err := s.probes.TraceCgroup(st.Ino); err != nil {
			return fmt.Errorf("gpuebpf: trace cgroup %s: %w", cg, err)
		}
	}
	for _, lib := range s.cfg.Targets.Libraries {
		kind, ok := discovery.MatchLibrary(lib)
		if !ok {
			return fmt.Errorf("gpuebpf: targets.libraries: %s is not a library Fathom probes (libcudart*, libcuda*, libnccl*, libibverbs*)", lib)
		}
		if _, _, err := s.probes.AttachLibrary(lib, kind); err != nil {
			return fmt.Errorf("gpuebpf: targets.libraries: %w", err)
		}
	}
	mappings, err := discovery.Scan(s.cfg.Discovery.ProcRoot)
	if err != nil {
		return fmt.Errorf("gpuebpf: scan %s: %w", s.cfg.Discovery.ProcRoot, err)
	}
	s.adopt(mappings)
	return nil
}

func pathUnder(path, root string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !filepath.IsAbs(rel) && (len(rel) < 3 || rel[:3] != "../")
}

// adopt attaches to newly seen library files and traces the processes that map them.
// It reports whether it attached a library file for the first time.
func (s *ebpfSource) adopt(mappings []discovery.Mapping) (attachedNew bool) {
	for _, m := range mappings {
		att, isNew, err := s.probes.AttachLibrary(m.HostPath, m.Library)
		if err != nil {
			s.drops.add("attach_failed", 1)
			s.logger.Warn("cannot probe library", zap.String("path", m.HostPath), zap.Error(err))
			continue
		}
		if isNew {
			attachedNew = true
			s.logger.Info("probing library", zap.String("path", m.Path), zap.Uint32("first_pid", m.PID),
				zap.Int("functions", len(att.APIs)), zap.Strings("missing", att.Missing))
		}
		if s.wanted(m.PID) {
			_ = s.probes.TracePID(m.PID)
		}
	}
	return attachedNew
}

// wanted says whether a discovered process is to be traced under the targets config.
func (s *ebpfSource) wanted(pid uint32) bool {
	if s.cfg.Targets.All || slices.Contains(s.cfg.Targets.PIDs, int(pid)) {
		return true
	}
	if len(s.cgroupIDs) == 0 {
		return false
	}
	info, err := procinfo.Read(s.cfg.Discovery.ProcRoot, pid)
	if err != nil || info.CgroupPath == "" {
		return false
	}
	return inCgroupSubtree(s.cgroupRoot, info.CgroupPath, s.cgroupIDs)
}

// inCgroupSubtree says whether the cgroup at cgroupPath (relative to the cgroup v2 mount
// at cgroupRoot), or any cgroup above it, has an id in ids: a named cgroup stands for its
// subtree, as the kernel's filter walks the caller's ancestors. It compares the ids
// (inodes) of each directory up to the root rather than path prefixes, because ids are
// what the kernel compares and what setUp recorded, whichever spelling or mount the
// config named a cgroup by.
func inCgroupSubtree(cgroupRoot, cgroupPath string, ids map[uint64]bool) bool {
	for dir := filepath.Clean("/" + cgroupPath); ; dir = filepath.Dir(dir) {
		// A level that cannot be read (a cgroup removed meanwhile) says nothing
		// about the levels above it.
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join(cgroupRoot, dir), &st) == nil && ids[st.Ino] {
			return true
		}
		if dir == "/" {
			return false
		}
	}
}

// execWatcher passes events on, and queues processes that exec for a scan: a new
// CUDA process shows up as an exec, and its libraries are mapped shortly after.
type execWatcher struct {
	probes.Handler
	s *ebpfSource
}

func (w execWatcher) Process(kind probes.EventKind, ev *probes.ProcessEvent) {
	if kind == probes.KindExec {
		select {
		case w.s.rescan <- ev.Hdr.Pid:
		default:
			w.s.drops.add("rescan_queue_full", 1)
		}
	}
	w.Handler.Process(kind, ev)
}

// libraryMapping is a probed library a process has just mapped (attach on first use).
type libraryMapping struct {
	pid      uint32
	dev, ino uint64
	mappedAt uint64 // CLOCK_MONOTONIC ns of the mmap's return
	held     bool   // the kernel stopped the process until this mapping is dealt with
}

// RDMAQueuePair passes a queue pair on to the aggregator, which binds ranks to the NICs
// they send over (an optional handler method is not promoted through the embedding).
func (w execWatcher) RDMAQueuePair(ev *probes.RDMAQueuePair) {
	if qh, ok := w.Handler.(probes.QueuePairHandler); ok {
		qh.RDMAQueuePair(ev)
	}
}

// CUDACallPy passes a Python process's call record on with its frames (an optional
// handler method is not promoted through the embedding).
func (w execWatcher) CUDACallPy(ev *probes.CUDACallPy) {
	if ph, ok := w.Handler.(probes.PythonCallHandler); ok {
		ph.CUDACallPy(ev)
		return
	}
	w.Handler.CUDACall(&ev.Call)
}

// NCCLCallPy does the same for a Python process's NCCL call.
func (w execWatcher) NCCLCallPy(ev *probes.NCCLCallPy) {
	if ph, ok := w.Handler.(probes.PythonCallHandler); ok {
		ph.NCCLCallPy(ev)
		return
	}
	w.Handler.NCCLCall(&ev.Call)
}

// LibraryMapped queues the mapping for the attach loop; the reader must not wait for
// an attach, which reads the library's symbols and makes a uprobe per function.
func (w execWatcher) LibraryMapped(ev *probes.LibraryMapped) {
	held := ev.Held == 1
	if held {
		w.s.held.hold(ev.Hdr.Pid)
	}
	select {
	case w.s.mapped <- libraryMapping{pid: ev.Hdr.Pid, dev: ev.DeviceNumber(), ino: ev.Ino, mappedAt: ev.Hdr.TsNs, held: held}:
	default:
		w.s.drops.add("attach_queue_full", 1)
		if held {
			w.s.held.done(ev.Hdr.Pid)
		}
	}
}

// attachOnMapLoop attaches the libraries processes map, as they map them. The record
// comes from the mmap's return, so the mapping is already in /proc/PID/maps.
func (s *ebpfSource) attachOnMapLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-s.mapped:
			s.attachMapping(m)
			if m.held {
				s.held.done(m.pid)
			}
		}
	}
}

// attachMapping attaches what a process has just mapped, if it is new.
func (s *ebpfSource) attachMapping(m libraryMapping) {
	// Every rank of a job maps the same files: once a file is probed, only the
	// process's place in the traced set is left to decide.
	if s.probes.IsAttached(m.dev, m.ino) {
		if !s.cfg.Targets.All && s.wanted(m.pid) {
			_ = s.probes.TracePID(m.pid)
		}
		return
	}
	mappings, err := discovery.ScanPID(s.cfg.Discovery.ProcRoot, m.pid)
	if err != nil {
		return // the process is gone already
	}
	if s.adopt(mappings) {
		// What the process may have called unseen (or, held, how long it was
		// stopped): operators and the benchmark read the gap here.
		s.logger.Info("attached on first use", zap.Uint32("pid", m.pid), zap.Bool("held", m.held),
			zap.Duration("since_mmap", time.Duration(monotonicNow()-int64(m.mappedAt))))
	}
}

func (s *ebpfSource) start(ctx context.Context, h probes.Handler) error {
	ctx, s.cancel = context.WithCancel(ctx)
	if s.py != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.py.run(ctx)
		}()
	}
	s.wg.Add(3)
	go func() {
		defer s.wg.Done()
		s.attachOnMapLoop(ctx)
	}()
	go func() {
		defer s.wg.Done()
		err := s.probes.Run(ctx, execWatcher{Handler: h, s: s}, func(error) { s.drops.add("decode", 1) })
		if err != nil {
			s.logger.Error("event reader stopped", zap.Error(err))
		}
	}()
	go func() {
		defer s.wg.Done()
		s.discoveryLoop(ctx)
	}()
	return nil
}

// execRescanDelays are when a process is scanned again after its exec: a binary linked
// against libcudart maps it at once, Python maps it when `import torch` runs, often
// seconds later on a cold page cache. Later loads wait for the periodic rescan.
var execRescanDelays = []time.Duration{200 * time.Millisecond, 2 * time.Second, 10 * time.Second}

// discoveryLoop rescans every process periodically, and exec'd processes at
// execRescanDelays after their exec.
func (s *ebpfSource) discoveryLoop(ctx context.Context) {
	full := time.NewTicker(s.cfg.Discovery.RescanInterval)
	defer full.Stop()
	type pending struct {
		pid uint32
		at  time.Time
	}
	var queue []pending
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case pid := <-s.rescan:
			if len(queue) >= len(execRescanDelays)*execRescanQueue {
				s.drops.add("rescan_queue_full", 1)
				continue
			}
			now := time.Now()
			for _, d := range execRescanDelays {
				queue = append(queue, pending{pid, now.Add(d)})
			}
		case now := <-tick.C:
			keep := queue[:0]
			for _, p := range queue {
				if now.Before(p.at) {
					keep = append(keep, p)
					continue
				}
				if m, err := discovery.ScanPID(s.cfg.Discovery.ProcRoot, p.pid); err == nil {
					s.adopt(m)
				}
			}
			queue = keep
		case <-full.C:
			if m, err := discovery.Scan(s.cfg.Discovery.ProcRoot); err == nil {
				s.adopt(m)
			}
		}
	}
}

func (s *ebpfSource) quiesce() {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	s.held.releaseAll()
}

func (s *ebpfSource) stop() error {
	s.quiesce()
	return s.probes.Close()
}

func (s *ebpfSource) hostTotals() (probes.HostAggregates, map[string]uint64, bool) {
	agg, err := s.probes.ReadHostAggregates()
	drops, derr := s.probes.Drops()
	if err != nil || derr != nil {
		drops = map[string]uint64{}
	}
	for k, v := range s.drops.snapshot() {
		drops[k] += v
	}
	return agg, drops, err == nil
}

func (s *ebpfSource) probeCount() int { return s.probes.ProbeCount() }

func (s *ebpfSource) handOff(last []probes.ProcessCallStats) error { return s.probes.HandOff(last) }

func (s *ebpfSource) callStats(dst []probes.ProcessCallStats) ([]probes.ProcessCallStats, error) {
	return s.probes.ReadCallStats(dst)
}

func (s *ebpfSource) releaseCallStats(st *probes.ProcessCallStats) error {
	return s.probes.ReleaseCallStats(st)
}

func (s *ebpfSource) forgetPages(pid uint32) error { return s.probes.ForgetPageAllocs(pid) }

func (s *ebpfSource) selectedDevices() map[uint32]int32 {
	devices, err := s.probes.SelectedDevices()
	if err != nil {
		s.logger.Debug("cannot read the devices processes selected", zap.Error(err))
	}
	return devices
}

func (s *ebpfSource) setNotableThreshold(api uint32, ns uint64) error {
	return s.probes.SetNotableThreshold(api, ns)
}

// python is what reads the Python frames of CPython processes' records; nil when
// stacks.python is off.
func (s *ebpfSource) python() pythonFrames {
	if s.py == nil {
		return nil
	}
	return s.py
}

// native is what names records' native frames; nil when stacks.native is off.
func (s *ebpfSource) native() nativeFrames {
	if !s.cfg.Stacks.Native {
		return nil
	}
	return symbolizer{symbolize.New(s.cfg.Discovery.ProcRoot)}
}
