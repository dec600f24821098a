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

	"github.com/fathom-gpu/fathom/internal/discovery"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/procinfo"
)

// execRescanQueue bounds the processes waiting for a post-exec scan of their mappings.
const execRescanQueue = 1024

// ebpfSource is the real thing: BPF programs in the kernel, libraries found in /proc.
type ebpfSource struct {
	cfg    *Config
	logger *zap.Logger
	probes *probes.Probes

	cgroupRoot string // the cgroup v2 mount (Discovery.CgroupRoot, or its unified/)
	cgroupIDs  map[uint64]bool
	rescan     chan uint32
	drops      counterSet
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
	})
	if errors.Is(err, probes.ErrPrivileges) {
		return nil, fmt.Errorf("gpuebpf: cannot load BPF programs without privileges: run the collector as root, or grant it with `setcap cap_bpf,cap_perfmon,cap_sys_resource,cap_sys_ptrace,cap_dac_read_search+ep %s` (or securityContext.capabilities in Kubernetes); or use mode: synthetic", executable())
	}
	if err != nil {
		return nil, fmt.Errorf("gpuebpf: %w", err)
	}
	s := &ebpfSource{cfg: cfg, logger: logger, probes: p, cgroupRoot: procinfo.CgroupV2Mount(cfg.Discovery.CgroupRoot),
		cgroupIDs: map[uint64]bool{}, rescan: make(chan uint32, execRescanQueue)}
	if err := s.setUp(); err != nil {
		_ = p.Close()
		return nil, err
	}
	return s, nil
}

func executable() string {
	if exe, err := os.Executable(); err == nil {
		return exe
	}
	return "fathom"
}

func (s *ebpfSource) setUp() error {
	if err := s.probes.AttachHost(); err != nil {
		return fmt.Errorf("gpuebpf: attach host tracepoints: %w", err)
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
func (s *ebpfSource) adopt(mappings []discovery.Mapping) {
	for _, m := range mappings {
		att, isNew, err := s.probes.AttachLibrary(m.HostPath, m.Library)
		if err != nil {
			s.drops.add("attach_failed", 1)
			s.logger.Warn("cannot probe library", zap.String("path", m.HostPath), zap.Error(err))
			continue
		}
		if isNew {
			s.logger.Info("probing library", zap.String("path", m.Path), zap.Uint32("first_pid", m.PID),
				zap.Int("functions", len(att.APIs)), zap.Strings("missing", att.Missing))
		}
		if s.wanted(m.PID) {
			_ = s.probes.TracePID(m.PID)
		}
	}
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

func (s *ebpfSource) start(ctx context.Context, h probes.Handler) error {
	ctx, s.cancel = context.WithCancel(ctx)
	s.wg.Add(2)
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

func (s *ebpfSource) stop() error {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
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

func (s *ebpfSource) callStats(dst []probes.ProcessCallStats) ([]probes.ProcessCallStats, error) {
	return s.probes.ReadCallStats(dst)
}

func (s *ebpfSource) releaseCallStats(st *probes.ProcessCallStats) error {
	return s.probes.ReleaseCallStats(st)
}

func (s *ebpfSource) forgetPages(pid uint32) error { return s.probes.ForgetPageAllocs(pid) }

func (s *ebpfSource) setNotableThreshold(api uint32, ns uint64) error {
	return s.probes.SetNotableThreshold(api, ns)
}
