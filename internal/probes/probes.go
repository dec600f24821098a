//go:build linux

package probes

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Options configure the programs before they are loaded.
type Options struct {
	// TraceAllCUDA traces every process that calls a probed CUDA function. When false,
	// only processes added with TracePID or living in a cgroup added with TraceCgroup.
	TraceAllCUDA bool
	// RingBufferBytes sizes the event ring (a power of two, multiple of the page size).
	RingBufferBytes uint32
	// Baseline attaches programs that do nothing in place of the real ones, on the same
	// attach points: what a probe costs by merely existing, for overhead benchmarks.
	Baseline bool
	// ProcSlots limits how many processes get call statistics in the kernel (1 to
	// ProcSlots; 0 means all): the calls of further processes go out as records.
	ProcSlots uint32
	// PerProbeLinks attaches one perf-event link per uprobe even where the kernel has
	// uprobe_multi links: the only way on kernels before 6.6, kept testable here.
	PerProbeLinks bool
	// HoldFirstLoad stops a traced process that maps a probed library file no probe is
	// attached to yet (SIGSTOP, from the mmap's return) until userspace has attached and
	// continues it (Continue): its first calls, NCCL's communicator setup among them,
	// are seen even when it makes them within a millisecond of loading the library.
	HoldFirstLoad bool
	// NoNativeStacks leaves CUDA and NCCL call records without the calling thread's native
	// user stack (CUDACall.Native).
	NoNativeStacks bool
	// SampleEvery makes one call in this many of each thread a record (Sampled),
	// notable or not; 0 makes none.
	SampleEvery uint32
	// PinDir, when set, keeps the kernel's state pinned in this bpffs directory, and
	// adopts the state a previous collector of the same build left there (Adopted).
	PinDir string
	// KeepProbes (with PinDir) pins the library probes' links beside the maps, so that
	// they stay attached and counting while no collector runs (a restart, a rolling
	// update of the same build), and hands the next collector the counts this one
	// last read: a restart loses no call. Off, Close detaches them.
	KeepProbes bool
}

// Probes is the loaded BPF programs and their links. One Probes serves a whole host.
type Probes struct {
	cuda cudaObjects
	host hostObjects
	// hostBaseline holds empty programs for the host tracepoints, loaded for Baseline.
	hostBaseline hostbaselineObjects
	nccl         ncclObjects
	rdma         rdmaObjects
	libmap       libmapObjects

	mu        sync.Mutex
	links     []link.Link
	mapLinks  []link.Link // the mmap watchers (AttachLibraryMaps)
	attached  map[fileID]LibraryAttachment
	hostLinks int
	// probes counts attached probes (a uprobe_multi link holds many).
	probes int
	// multi: uprobes attach as uprobe_multi links (Linux 6.6+): one link and one
	// system call per program and library instead of one per function, and one RCU
	// grace period to detach them instead of one per probe (~85 ms each here).
	multi       bool
	reader      *ringbuf.Reader
	callStats   *ebpf.Memory // call_stats_table, mapped
	procSlots   *ebpf.Memory // proc_slots, mapped
	pollTimeout time.Duration
	baseline    bool
	state       *kernelState // nil: nothing pinned
	keepProbes  bool
	// adoptedBase holds the adopted kernel totals, which the readers subtract.
	adoptedBase *adoptedTotals
}

// LibraryAttachment says what was attached to one library file.
type LibraryAttachment struct {
	Path    string
	Library Library
	APIs    []string // symbols probed (entry and return)
	Missing []string // probed symbols this library does not define
}

type fileID struct{ dev, ino uint64 }

// ErrPrivileges is returned when the kernel refuses to load BPF for lack of rights.
var ErrPrivileges = errors.New("loading BPF programs needs root, or CAP_BPF + CAP_PERFMON (and, before Linux 5.11, CAP_SYS_RESOURCE or a memlock limit that fits the maps); under a container runtime a seccomp profile that allows bpf(): `fathom check` tells which")

// Load loads both program families with shared maps. Nothing is attached yet.
func Load(opts Options) (*Probes, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		// Unprivileged processes fail here first, before any BPF syscall.
		if errors.Is(err, syscall.EPERM) {
			return nil, fmt.Errorf("raise RLIMIT_MEMLOCK: %w", ErrPrivileges)
		}
		return nil, fmt.Errorf("raise RLIMIT_MEMLOCK: %w", err)
	}
	cudaSpec, err := loadCuda()
	if err != nil {
		return nil, err
	}
	if opts.RingBufferBytes != 0 {
		cudaSpec.Maps["events"].MaxEntries = opts.RingBufferBytes
	}
	if err := cudaSpec.Variables["trace_all_cuda"].Set(opts.TraceAllCUDA); err != nil {
		return nil, fmt.Errorf("configure trace_all_cuda: %w", err)
	}
	if opts.ProcSlots > ProcSlots {
		return nil, fmt.Errorf("at most %d process slots, not %d", ProcSlots, opts.ProcSlots)
	}
	if opts.ProcSlots != 0 {
		if err := cudaSpec.Variables["proc_slots_used"].Set(opts.ProcSlots); err != nil {
			return nil, fmt.Errorf("configure proc_slots_used: %w", err)
		}
	}
	if err := cudaSpec.Variables["sample_every"].Set(opts.SampleEvery); err != nil {
		return nil, fmt.Errorf("configure sample_every: %w", err)
	}
	if err := cudaSpec.Variables["native_stacks"].Set(!opts.NoNativeStacks); err != nil {
		return nil, fmt.Errorf("configure native_stacks: %w", err)
	}
	if err := cudaSpec.Variables["device_wait_apis"].Set(deviceWaitMask()); err != nil {
		return nil, fmt.Errorf("configure device_wait_apis: %w", err)
	}
	if err := cudaSpec.Variables["duration_bounds"].Set(durationBounds); err != nil {
		return nil, fmt.Errorf("configure duration_bounds: %w", err)
	}
	p := &Probes{attached: map[fileID]LibraryAttachment{}, pollTimeout: 10 * time.Millisecond, baseline: opts.Baseline,
		multi: !opts.PerProbeLinks && features.HaveBPFLinkUprobeMulti() == nil, keepProbes: opts.KeepProbes && opts.PinDir != ""}
	if opts.PinDir != "" {
		if p.state, err = openKernelState(opts); err != nil {
			return nil, err
		}
	}
	cudaOpts, err := p.state.pin("cuda", cudaSpec, nil)
	if err != nil {
		return nil, err
	}
	p.setUprobeAttachType(cudaSpec)
	if err := cudaSpec.LoadAndAssign(&p.cuda, cudaOpts); err != nil {
		return nil, explainLoadError("cuda probes", err)
	}
	hostSpec, err := loadHost()
	if err == nil {
		// sched_waking tells a wakeup from interrupt context by the CPU's preempt count.
		err = setPreemptCountFromRQ(hostSpec)
	}
	if err != nil {
		p.cuda.Close()
		return nil, err
	}
	shared := map[string]*ebpf.Map{
		"events":         p.cuda.Events,
		"traced_pids":    p.cuda.TracedPids,
		"traced_cgroups": p.cuda.TracedCgroups,
		"drops":          p.cuda.Drops,
		"thread_calls":   p.cuda.ThreadCalls,
		"process_waits":  p.cuda.ProcessWaits,
		"slot_waits":     p.cuda.SlotWaits,
		"proc_slots":     p.cuda.ProcSlots,
		// NCCL records read a Python process's frames as CUDA records do.
		"py_procs":   p.cuda.PyProcs,
		"py_scratch": p.cuda.PyScratch,
	}
	hostOpts, err := p.state.pin("host", hostSpec, shared)
	if err != nil {
		p.cuda.Close()
		return nil, err
	}
	if err := hostSpec.LoadAndAssign(&p.host, hostOpts); err != nil {
		p.cuda.Close()
		return nil, explainLoadError("host probes", err)
	}
	if opts.Baseline {
		if err := loadHostbaselineObjects(&p.hostBaseline, nil); err != nil {
			p.host.Close()
			p.cuda.Close()
			return nil, explainLoadError("baseline host programs", err)
		}
	}
	if err := p.loadFabric(opts, shared); err != nil {
		p.hostBaseline.Close()
		p.host.Close()
		p.cuda.Close()
		return nil, err
	}
	if err := p.loadLibraryMaps(opts, shared); err != nil {
		p.Close()
		return nil, err
	}
	if p.callStats, err = p.cuda.CallStatsTable.Memory(); err != nil {
		p.Close()
		return nil, fmt.Errorf("map call statistics: %w", err)
	}
	if p.procSlots, err = p.cuda.ProcSlots.Memory(); err != nil {
		p.Close()
		return nil, fmt.Errorf("map process slots: %w", err)
	}
	if p.reader, err = ringbuf.NewReader(p.cuda.Events); err != nil {
		p.Close()
		return nil, fmt.Errorf("open event ring: %w", err)
	}
	if p.Adopted() {
		if err := p.snapshotAdopted(); err != nil {
			p.Close()
			return nil, fmt.Errorf("read the adopted kernel state: %w", err)
		}
		if err := p.adoptLinks(); err != nil {
			p.Close()
			return nil, fmt.Errorf("adopt the previous collector's probes: %w", err)
		}
	}
	return p, nil
}

func explainLoadError(what string, err error) error {
	// The verifier also answers EACCES; a refused program is not a privileges problem.
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("load %s: the kernel's verifier refused a program: %+v", what, ve)
	}
	if errors.Is(err, syscall.EPERM) || errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("load %s: %w", what, ErrPrivileges)
	}
	return fmt.Errorf("load %s: %w", what, err)
}

// Adopted says whether the kernel state was adopted from a previous collector (see
// Options.PinDir): the traced set, communicators and call statistics it holds predate
// this collector.
func (p *Probes) Adopted() bool { return p.state != nil && p.state.adopted }

// HostTracepoints names the host tracepoints in the order hostPrograms lists them.
var HostTracepoints = []string{
	"sched_switch", "sched_waking", "sched_wakeup_new",
	"sched_process_fork", "sched_process_exec", "sched_process_exit",
	"mm_page_alloc", "block_rq_issue", "block_rq_complete", "tcp_retransmit_skb",
}

// hostPrograms are the programs AttachHost attaches, one per HostTracepoints entry:
// the empty ones when loaded as Baseline.
func (p *Probes) hostPrograms() []*ebpf.Program {
	if p.baseline {
		b := &p.hostBaseline
		return []*ebpf.Program{
			b.EmptySchedSwitch, b.EmptySchedWaking, b.EmptySchedWakeupNew,
			b.EmptySchedProcessFork, b.EmptySchedProcessExec, b.EmptySchedProcessExit,
			b.EmptyMmPageAlloc, b.EmptyBlockRqIssue, b.EmptyBlockRqComplete,
			b.EmptyTcpRetransmitSkb,
		}
	}
	h := &p.host
	return []*ebpf.Program{
		h.OnSchedSwitch, h.OnSchedWaking, h.OnSchedWakeupNew,
		h.OnSchedProcessFork, h.OnSchedProcessExec, h.OnSchedProcessExit,
		h.OnMmPageAlloc, h.OnBlockRqIssue, h.OnBlockRqComplete,
		h.OnTcpRetransmitSkb,
	}
}

// AttachHost attaches the host tracepoints (scheduler, lifecycle, memory, block, TCP).
func (p *Probes) AttachHost() error {
	progs := p.hostPrograms()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, prog := range progs {
		l, err := link.AttachTracing(link.TracingOptions{Program: prog})
		if err != nil {
			return fmt.Errorf("attach %s: %w", prog, err)
		}
		p.links = append(p.links, l)
		p.hostLinks++
		p.probes++
	}
	return nil
}

// AttachLibrary attaches the entry and return probes of every API of lib that the
// file at path defines. A file already attached (same device and inode, e.g. the same
// library seen through two containers' roots) is not attached twice; ok is false then.
func (p *Probes) AttachLibrary(path string, lib Library) (att LibraryAttachment, ok bool, err error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return att, false, fmt.Errorf("stat %s: %w", path, err)
	}
	id := fileID{dev: st.Dev, ino: st.Ino}
	p.mu.Lock()
	defer p.mu.Unlock()
	if prev, seen := p.attached[id]; seen {
		if prev.Path == "" {
			// Probed by a previous collector (adoptLinks), which left no path: now known.
			prev.Path = path
			p.attached[id] = prev
		}
		return prev, false, nil
	}
	points := p.attachPoints(lib)
	wanted := make([]string, 0, len(points))
	for _, pt := range points {
		wanted = append(wanted, pt.symbol)
	}
	syms, err := readSymbols(path, wanted)
	if err != nil {
		return att, false, err
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return att, false, err
	}
	att = LibraryAttachment{Path: path, Library: lib}
	var defined []attachPoint
	offsets := map[string]uint64{}
	for _, pt := range points {
		offset, ok := syms[pt.symbol]
		if !ok {
			att.Missing = append(att.Missing, pt.symbol)
			continue
		}
		defined = append(defined, pt)
		offsets[pt.symbol] = offset
		att.APIs = append(att.APIs, pt.symbol)
	}
	attach := p.attachEach
	if p.multi {
		attach = p.attachMulti
	}
	added, err := attach(ex, defined, offsets)
	if err != nil {
		closeAll(added)
		return LibraryAttachment{Path: path, Library: lib}, false, fmt.Errorf("%s: %w", path, err)
	}
	p.probes += 2 * len(defined)
	p.links = append(p.links, added...)
	p.attached[id] = att
	if p.keepProbes {
		if err := p.state.pinLinks(lib, id, added); err != nil {
			// Probed, but a restart would lose this file's calls until it is probed again.
			return att, true, fmt.Errorf("%s is probed, but its probes could not be pinned: %w", path, err)
		}
	}
	if err := p.markProbed(id); err != nil {
		// The file is probed; its next first-time mappers may be held for nothing.
		return att, true, fmt.Errorf("%s is probed, but the mmap watcher was not told: %w", path, err)
	}
	return att, true, nil
}

// attachEach attaches an entry and a return probe per function, each its own link. It
// returns what it attached, also on error, for the caller to close.
func (p *Probes) attachEach(ex *link.Executable, points []attachPoint, offsets map[string]uint64) ([]link.Link, error) {
	var added []link.Link
	for _, pt := range points {
		entry, err := ex.Uprobe(pt.symbol, pt.entry, &link.UprobeOptions{Offset: offsets[pt.symbol], Cookie: pt.cookie})
		if err != nil {
			return added, fmt.Errorf("uprobe %s: %w", pt.symbol, err)
		}
		added = append(added, entry)
		// The return probe goes on the symbol itself: it only replaces the return
		// address, which is the same wherever in the prologue it is taken.
		ret, err := ex.Uretprobe(pt.symbol, pt.ret, &link.UprobeOptions{Offset: offsets[pt.symbol], Cookie: pt.cookie})
		if err != nil {
			return added, fmt.Errorf("uretprobe %s: %w", pt.symbol, err)
		}
		added = append(added, ret)
	}
	return added, nil
}

// attachMulti attaches one uprobe_multi link per entry program and one per return
// program, each covering every function that program serves, with the function's
// cookie and offset (attachOffset).
func (p *Probes) attachMulti(ex *link.Executable, points []attachPoint, offsets map[string]uint64) ([]link.Link, error) {
	type group struct {
		prog             *ebpf.Program
		ret              bool
		symbols          []string
		offsets, cookies []uint64
	}
	var groups []*group
	find := func(prog *ebpf.Program, ret bool) *group {
		for _, g := range groups {
			if g.prog == prog && g.ret == ret {
				return g
			}
		}
		g := &group{prog: prog, ret: ret}
		groups = append(groups, g)
		return g
	}
	for _, pt := range points {
		for _, g := range []*group{find(pt.entry, false), find(pt.ret, true)} {
			g.symbols = append(g.symbols, pt.symbol)
			g.offsets = append(g.offsets, offsets[pt.symbol])
			g.cookies = append(g.cookies, pt.cookie)
		}
	}
	var added []link.Link
	for _, g := range groups {
		opts := &link.UprobeMultiOptions{Offsets: g.offsets, Cookies: g.cookies}
		attach, kind := ex.UprobeMulti, "uprobe"
		if g.ret {
			attach, kind = ex.UretprobeMulti, "uretprobe"
		}
		l, err := attach(g.symbols, g.prog, opts)
		if err != nil {
			return added, fmt.Errorf("%s_multi %v: %w", kind, g.symbols, err)
		}
		added = append(added, l)
	}
	return added, nil
}

// setUprobeAttachType readies spec's uprobe programs for uprobe_multi links when the
// kernel has them: the kernel checks the attach type a program was loaded with.
func (p *Probes) setUprobeAttachType(spec *ebpf.CollectionSpec) {
	if !p.multi {
		return
	}
	for _, prog := range spec.Programs {
		if prog.Type == ebpf.Kprobe && (strings.HasPrefix(prog.SectionName, "uprobe") || strings.HasPrefix(prog.SectionName, "uretprobe")) {
			prog.AttachType = ebpf.AttachTraceUprobeMulti
		}
	}
}

// closeAll detaches links. Closing perf-event uprobes concurrently does not help: the
// kernel waits out one grace period per probe (~85 ms here) either way; uprobe_multi
// links (attachMulti) wait once per link.
func closeAll(links []link.Link) {
	for _, l := range links {
		_ = l.Close()
	}
}

// IsAttached says whether the library file with this device and inode (as stat(2)
// reports them) is probed already.
func (p *Probes) IsAttached(dev, ino uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.attached[fileID{dev: dev, ino: ino}]
	return ok
}

// Attached lists the library files probed so far.
func (p *Probes) Attached() []LibraryAttachment {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]LibraryAttachment, 0, len(p.attached))
	for _, a := range p.attached {
		out = append(out, a)
	}
	return out
}

// ProbeCount is the number of attached probes (uprobes, uretprobes, tracepoints).
func (p *Probes) ProbeCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.probes
}

// TracePID adds a process to the traced set (its host events are recorded; with
// TraceAllCUDA off, its CUDA calls too).
func (p *Probes) TracePID(pid uint32) error {
	source := uint8(1) // TRACED_BY_CONFIG
	return p.cuda.TracedPids.Update(pid, source, ebpf.UpdateAny)
}

// TraceCgroup adds a cgroup (by id, the inode of its cgroupfs directory).
func (p *Probes) TraceCgroup(id uint64) error {
	return p.cuda.TracedCgroups.Update(id, uint8(1), ebpf.UpdateAny)
}

// IsTraced reports whether pid is in the kernel's traced set.
func (p *Probes) IsTraced(pid uint32) bool {
	var v uint8
	return p.cuda.TracedPids.Lookup(pid, &v) == nil
}

// InFlightCalls counts the calls thread tid has entered and not returned from. The
// slots live in the thread's task storage, reached through a pidfd of the thread; a
// thread that no longer exists has none.
func (p *Probes) InFlightCalls(tid uint32) int {
	fd, err := unix.PidfdOpen(int(tid), unix.PIDFD_THREAD)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	n, _ := p.InFlightCallsOf(fd)
	return n
}

// InFlightCallsOf is InFlightCalls through a pidfd the caller holds. Once the thread is
// gone the kernel answers ebpf.ErrKeyNotExist whatever became of its storage.
func (p *Probes) InFlightCallsOf(pidfd int) (int, error) {
	var calls cudaThreadCalls
	if err := p.cuda.ThreadCalls.Lookup(uint32(pidfd), &calls); err != nil {
		return 0, err
	}
	n := 0
	for _, c := range calls.Calls {
		if c.Ts != 0 {
			n++
		}
	}
	return n, nil
}

// SchedStateOf reports the host programs' scheduling state of the thread behind
// pidfd: whether it is marked off CPU (a thread of a traced process, switched out) and
// runnable (waiting for a CPU). Like InFlightCallsOf, it answers ebpf.ErrKeyNotExist
// once the thread is gone.
func (p *Probes) SchedStateOf(pidfd int) (offCPU, runnable bool, err error) {
	var s hostThreadSched
	if err := p.host.ThreadScheds.Lookup(uint32(pidfd), &s); err != nil {
		return false, false, err
	}
	return s.OffCpuSince != 0, s.RunnableSince != 0, nil
}

// Close detaches everything and frees the programs and maps; with KeepProbes the
// library probes stay attached, pinned, for the next collector (and HandOff, called
// before, tells it where this one stopped counting).
func (p *Probes) Close() error {
	holdErr := p.StopHolding()
	var keepErr error
	if !p.keepProbes && p.state != nil {
		keepErr = p.state.unpinLinks()
	}
	p.mu.Lock()
	closeAll(p.links)
	p.links = nil
	p.mu.Unlock()
	if p.reader != nil {
		_ = p.reader.Close()
	}
	p.libmap.Close()
	p.rdma.Close()
	p.nccl.Close()
	p.hostBaseline.Close()
	p.host.Close()
	return errors.Join(holdErr, keepErr, p.cuda.Close())
}

// HostRunStats returns each host tracepoint's program run time (the empty programs'
// when loaded as Baseline), keyed by tracepoint name.
func (p *Probes) HostRunStats() (map[string]ProgramRun, error) {
	out := map[string]ProgramRun{}
	for i, prog := range p.hostPrograms() {
		run, err := programRun(prog)
		if err != nil {
			return nil, err
		}
		out[HostTracepoints[i]] = run
	}
	return out, nil
}

// ProgramCost is one CUDA program's accumulated run time and the APIs it serves.
type ProgramCost struct {
	Program string   // the C function, e.g. enter_cu_memcpy
	APIs    []string // symbols it is attached to
	Run     ProgramRun
}

// CUDARunStats returns the run time of every CUDA program attached as an API's entry
// or return (the empty ones when loaded as Baseline, each serving every API).
func (p *Probes) CUDARunStats() ([]ProgramCost, error) {
	names := map[*ebpf.Program]string{}
	progs := reflect.ValueOf(p.cuda.cudaPrograms)
	for i := 0; i < progs.NumField(); i++ {
		if prog, ok := progs.Field(i).Interface().(*ebpf.Program); ok {
			names[prog] = progs.Type().Field(i).Tag.Get("ebpf")
		}
	}
	var out []ProgramCost
	index := map[*ebpf.Program]int{}
	add := func(prog *ebpf.Program, api string) error {
		i, ok := index[prog]
		if !ok {
			run, err := programRun(prog)
			if err != nil {
				return err
			}
			i = len(out)
			index[prog] = i
			out = append(out, ProgramCost{Program: names[prog], Run: run})
		}
		out[i].APIs = append(out[i].APIs, api)
		return nil
	}
	for _, lib := range []Library{LibCUDART, LibCUDA, LibHIP} {
		for _, pt := range p.attachPoints(lib) {
			if err := add(pt.entry, pt.symbol); err != nil {
				return nil, err
			}
			if err := add(pt.ret, pt.symbol); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// ProgramRun is a program's accumulated run time in the kernel (needs BPF statistics
// enabled: kernel.bpf_stats_enabled=1 or ebpf.EnableStats).
type ProgramRun struct {
	Runtime time.Duration
	Runs    uint64
}

// RunStats returns the run time so far of the entry program that serves symbol (a
// function of any probed library) and of its return program: what attachPoints
// attaches, so the empty ones when loaded as Baseline.
func (p *Probes) RunStats(symbol string) (entry, ret ProgramRun, err error) {
	for _, lib := range []Library{LibCUDART, LibCUDA, LibHIP, LibNCCL, LibIBVerbs} {
		for _, pt := range p.attachPoints(lib) {
			if pt.symbol != symbol {
				continue
			}
			if entry, err = programRun(pt.entry); err != nil {
				return entry, ret, err
			}
			ret, err = programRun(pt.ret)
			return entry, ret, err
		}
	}
	return entry, ret, fmt.Errorf("%s is not a probed function", symbol)
}
