package causalchainprocessor

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/fathom-gpu/fathom/internal/expohisto"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// Root-cause classes, the values of fathom.chain.root_cause.
const (
	CauseCPUContention      = "cpu_contention"
	CauseLockContention     = "lock_contention"
	CauseDataloader         = "dataloader_oversubscription"
	CauseHiddenSync         = "hidden_sync"
	CauseMemcpyBound        = "memcpy_bound"
	CauseIOStall            = "io_stall"
	CauseNetworkRetransmits = "network_retransmits"
	CauseGraphRecapture     = "graph_recapture"
	CauseAllocatorChurn     = "allocator_churn"
)

// finding is one rule's judgement of one view. cost is the share of the view's wall
// time the process's GPU-feeding threads lost to the cause; fired says the evidence is
// above the rule's threshold.
type finding struct {
	cause    string
	fired    bool
	cost     float64
	tid      int64 // the CUDA thread it names; -1 for the process
	symptom  string
	evidence string
	fix      string
}

// rule judges one root-cause class.
type rule struct {
	cause string
	judge func(c *Config, v *view) finding
}

// rules in the order they are judged. A process can have several chains at once; the
// dataloader rule, when it fires, takes the CPU-contention finding of the same process
// into itself (its workers are the contention).
var rules = []rule{
	{CauseCPUContention, judgeCPUContention},
	{CauseLockContention, judgeLockContention},
	{CauseDataloader, judgeDataloader},
	{CauseHiddenSync, judgeHiddenSync},
	{CauseMemcpyBound, judgeMemcpyBound},
	{CauseIOStall, judgeIOStall},
	{CauseNetworkRetransmits, judgeNetworkRetransmits},
	{CauseGraphRecapture, judgeGraphRecapture},
	{CauseAllocatorChurn, judgeAllocatorChurn},
}

var (
	launchAPIs       = semconv.LaunchAPIs
	memcpyAPIs       = semconv.MemcpyAPIs
	blockingReadAPIs = semconv.BlockingReadAPIs
	// allocAPIs are the synchronous allocator's calls, both ways: cudaMalloc and
	// cudaFree each wait for the device, so churn through them stalls the stream. The
	// stream-ordered ones (cudaMallocAsync) are what the fix recommends.
	allocAPIs   = []string{"cudaMalloc", "cudaFree", "cuMemAlloc_v2", "cuMemFree_v2", "hipMalloc", "hipFree"}
	captureAPIs = []string{"cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaGraphInstantiate"}
)

const deviceToHost = "device_to_host"

// blockingReads sums the blocking device-to-host reads: their calls, bytes and time.
// Durations are per API, not per direction, so their time is the API's time times the
// reads' share of its calls.
func (v *view) blockingReads() (calls, bytes, seconds float64) {
	for _, api := range blockingReadAPIs {
		n := v.apiDirCalls[[2]string{api, deviceToHost}]
		if n == 0 {
			continue
		}
		calls += n
		bytes += v.apiDirBytes[[2]string{api, deviceToHost}]
		if all := v.apiCalls[api]; all > 0 {
			seconds += v.seconds(api) * n / all
		}
	}
	return calls, bytes, seconds
}

// cpuLoss is how long a CUDA thread was runnable but off its CPU, less what the
// collector itself took from it: the collector is never a cause.
func cpuLoss(t *threadView) float64 {
	lost := t.runQueue
	if lost == 0 {
		lost = t.preempted
	}
	for _, p := range t.preemptors {
		if p.self {
			lost -= p.seconds
		}
	}
	return math.Max(lost, 0)
}

// worstThread is the CUDA thread that lost the most CPU time.
func worstThread(v *view) (int64, *threadView, float64) {
	var tid int64 = -1
	var worst *threadView
	lost := 0.0
	for id, t := range v.threads {
		if l := cpuLoss(t); worst == nil || l > lost || (l == lost && id < tid) {
			tid, worst, lost = id, t, l
		}
	}
	return tid, worst, lost
}

// otherPreemptors is the name under which the gpuebpf receiver counts the waits of
// the names it did not keep apart in an interval (a task itself named so joins them):
// no culprit, the rest.
const otherPreemptors = "other"

// competitors names who took the thread's CPU within the view, heaviest first by the
// time each took in it, never the collector: up to three names, then how many more
// there were, and last what the receiver counted under no name of its own (other),
// however much that was, since it is many tasks and none of them the culprit.
func competitors(t *threadView) string {
	ps, rest := rankedCompetitors(t)
	parts := heaviestFirst(len(ps), func(i int) (string, float64) {
		return withProcesses(ps[i].name, ps[i].processes) + " " + seconds(ps[i].seconds), ps[i].seconds
	})
	if rest != nil {
		parts = append(parts, withProcesses("other tasks", rest.processes)+" "+seconds(rest.seconds))
	}
	return strings.Join(parts, ", ")
}

// rankedCompetitors are the names that took the thread's CPU in the view, heaviest
// first by their time (then by name), never the collector; rest is what the receiver
// counted under other, nil if nothing.
func rankedCompetitors(t *threadView) (ps []*preemptorView, rest *preemptorView) {
	for _, p := range t.preemptors {
		switch {
		case p.self || p.count <= 0:
		case p.name == otherPreemptors:
			rest = p
		default:
			ps = append(ps, p)
		}
	}
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].seconds != ps[j].seconds {
			return ps[i].seconds > ps[j].seconds
		}
		return ps[i].name < ps[j].name
	})
	return ps, rest
}

// heaviestFirst writes the first three of n items, given heaviest first (item i is its
// text and its time), then how many more there were and their time in all.
func heaviestFirst(n int, item func(i int) (string, float64)) []string {
	var parts []string
	more := 0.0
	for i := range n {
		text, secs := item(i)
		if i < 3 {
			parts = append(parts, text)
		} else {
			more += secs
		}
	}
	if n > 3 {
		parts = append(parts, fmt.Sprintf("%d more names %s", n-3, seconds(more)))
	}
	return parts
}

func withProcesses(name string, processes float64) string {
	if processes > 1 {
		return fmt.Sprintf("%s (%.0f processes)", name, processes)
	}
	return name
}

func judgeCPUContention(c *Config, v *view) finding {
	r := c.Rules.CPUContention
	f := finding{cause: CauseCPUContention, tid: -1,
		fix: "pin the thread that drives the GPU to its own cores (taskset, a cpuset or the CPU manager's static policy) or lower the competitors' priority (nice, a CPU limit)"}
	tid, t, lost := worstThread(v)
	if t == nil || v.wall <= 0 {
		return f
	}
	f.tid, f.cost = tid, lost/v.wall
	// A thread whose trouble is its own process's lock is the lock rule's (lockBound):
	// pinning it does nothing for a lock.
	f.fired = r.Enabled && f.cost >= r.MinShare && f.cost > 0 && !lockBound(c, t)
	f.symptom = launchSymptom(v)
	f.evidence = fmt.Sprintf("thread %d waited %s for a CPU (%s of the window; preempted %d times, %s)",
		tid, seconds(lost), percent(f.cost), t.preemptions, seconds(t.preempted))
	if who := competitors(t); who != "" {
		f.evidence += "; its CPU went to " + who
	}
	return f
}

// lockWait is a CUDA thread's time blocked on a lock that threads of its own process
// woke it from, and those holders heaviest first: the threads that held the lock (a
// mutex handed over, the GIL released) wake the waiter when they let it go. Wakeups
// from interrupts (timers, I/O completions), from other processes and those nobody was
// seen making are not a lock of the process's own.
func lockWait(t *threadView) (seconds, waits, holderThreads float64, holders []*wakerView) {
	for _, w := range t.wakers {
		if w.on != blockedOnLock || !w.self || w.name == wokenByInterrupt || w.name == wokenByNobody {
			continue
		}
		seconds += w.seconds
		waits += w.count
		holderThreads += w.threads
		holders = append(holders, w)
	}
	sort.Slice(holders, func(i, j int) bool {
		if holders[i].seconds != holders[j].seconds {
			return holders[i].seconds > holders[j].seconds
		}
		return holders[i].name < holders[j].name
	})
	return seconds, waits, holderThreads, holders
}

// The values of fathom.blocked.on and fathom.waker.name the lock rule reads.
const (
	blockedOnLock    = "lock"
	wokenByInterrupt = "interrupt"
	wokenByNobody    = "none"
)

// worstLockWait is the CUDA thread that waited longest on its own process's lock.
func worstLockWait(v *view) (int64, *threadView, float64) {
	var tid int64 = -1
	var worst *threadView
	waited := 0.0
	for id, t := range v.threads {
		if s, _, _, _ := lockWait(t); s > 0 && (worst == nil || s > waited || (s == waited && id < tid)) {
			tid, worst, waited = id, t, s
		}
	}
	return tid, worst, waited
}

// lockBound says whether a thread's trouble is its own process's lock rather than its
// CPU: it lost more to the lock than to its CPU, or at least a quarter as much and its
// CPU went mostly to the lock's own holders (threads that spin while they hold it, as
// tokenizers and GIL holders do). Then pinning it would not help, and CPU contention is
// not its cause.
func lockBound(c *Config, t *threadView) bool {
	r := c.Rules.LockContention
	waited, _, threads, holders := lockWait(t)
	if threads < r.MinHolders || waited <= 0 {
		return false
	}
	if waited > cpuLoss(t) {
		return true
	}
	// The lock must be a real part of what the thread lost, not a few stray waits.
	if waited < cpuLoss(t)/4 {
		return false
	}
	top := heaviestCompetitor(t)
	for _, h := range holders {
		if h.name == top {
			return true
		}
	}
	return false
}

// heaviestCompetitor is the name that took the most of the thread's CPU, never the
// collector nor the receiver's other bucket; "" for none.
func heaviestCompetitor(t *threadView) string {
	if ps, _ := rankedCompetitors(t); len(ps) > 0 && ps[0].seconds > 0 {
		return ps[0].name
	}
	return ""
}

func judgeLockContention(c *Config, v *view) finding {
	r := c.Rules.LockContention
	f := finding{cause: CauseLockContention, tid: -1,
		fix: "shorten or split the critical section the threads share (hold the lock only around the shared state), move that work out of the process (a separate tokenizer or data-loading process), release the GIL around native work in Python extensions, or run fewer threads that take the lock"}
	tid, t, waited := worstLockWait(v)
	if t == nil || v.wall <= 0 {
		return f
	}
	_, waits, threads, holders := lockWait(t)
	f.tid, f.cost = tid, waited/v.wall
	f.fired = r.Enabled && f.cost >= r.MinShare && threads >= r.MinHolders
	f.symptom = launchSymptom(v)
	f.evidence = fmt.Sprintf("thread %d blocked %s on a lock held in its own process (%s of the window, %.0f waits; preempted %s)",
		tid, seconds(waited), percent(f.cost), waits, seconds(t.preempted))
	parts := heaviestFirst(len(holders), func(i int) (string, float64) {
		h := holders[i]
		name := h.name
		if name == otherPreemptors {
			name = "other threads"
		}
		if h.threads > 1 {
			name = fmt.Sprintf("%s (%.0f threads)", name, h.threads)
		}
		return fmt.Sprintf("%s %s (%s)", name, seconds(h.seconds), percent(h.seconds/waited)), h.seconds
	})
	f.evidence += "; woken by the holders " + strings.Join(parts, ", ")
	return f
}

func judgeDataloader(c *Config, v *view) finding {
	r := c.Rules.DataloaderStorm
	f := finding{cause: CauseDataloader, tid: -1,
		fix: "lower the DataLoader's num_workers to the cores left after the GPU threads, keep them alive (persistent_workers=True), and pin the GPU threads away from them"}
	if v.wall <= 0 {
		return f
	}
	tid, t, lost := worstThread(v)
	forks, pages := v.forks/v.wall, v.pages/v.wall
	f.tid, f.cost = tid, lost/v.wall
	f.fired = r.Enabled && forks >= r.MinForksPerSecond && (f.cost >= r.MinShare || pages >= r.MinPagesPerSecond)
	f.symptom = launchSymptom(v)
	f.evidence = fmt.Sprintf("%.0f processes forked (%.1f/s), %.0f pages allocated (%.0f/s)", v.forks, forks, v.pages, pages)
	if t != nil {
		f.evidence += fmt.Sprintf("; thread %d waited %s for a CPU (%s of the window)", tid, seconds(lost), percent(f.cost))
		if who := competitors(t); who != "" {
			f.evidence += ", its CPU went to " + who
		}
	}
	return f
}

func judgeHiddenSync(c *Config, v *view) finding {
	r := c.Rules.HiddenSync
	f := finding{cause: CauseHiddenSync, tid: -1,
		fix: "keep step values on the GPU (no .item(), .cpu() or .numpy() in the step loop); read them every N steps, or copy with non_blocking=True into pinned memory"}
	if v.wall <= 0 {
		return f
	}
	reads, bytes, blocked := v.blockingReads()
	if reads == 0 {
		return f
	}
	perRead := bytes / reads
	f.cost = blocked / v.wall
	f.fired = r.Enabled && reads/v.wall >= r.MinPerSecond && perRead <= r.MaxBytes && f.cost >= r.MinShare
	f.symptom = fmt.Sprintf("%.0f blocking device-to-host reads (%.0f/s, %s each on average)", reads, reads/v.wall, byteSize(perRead))
	f.evidence = fmt.Sprintf("the host waited %s in them (%s of the window) while the GPU's queue drained", seconds(blocked), percent(f.cost))
	return f
}

func judgeMemcpyBound(c *Config, v *view) finding {
	r := c.Rules.MemcpyBound
	f := finding{cause: CauseMemcpyBound, tid: -1,
		fix: "copy from pinned memory (pin_memory=True) with non_blocking=True on a side stream so copies overlap compute, or move the preprocessing onto the GPU"}
	if v.wall <= 0 {
		return f
	}
	// Small blocking reads are the hidden-sync rule's.
	_, _, reads := v.blockingReads()
	in := v.seconds(memcpyAPIs...) - reads
	var h2d, d2h float64
	for k, b := range v.apiDirBytes {
		switch k[1] {
		case "host_to_device":
			h2d += b
		case deviceToHost:
			d2h += b
		}
	}
	f.cost = math.Max(in, 0) / v.wall
	f.fired = r.Enabled && f.cost >= r.MinShare
	f.symptom = fmt.Sprintf("copies took %s of the window (%s host-to-device, %s device-to-host)", percent(f.cost), byteSize(h2d), byteSize(d2h))
	f.evidence = fmt.Sprintf("%.0f copy calls, %s in them", v.calls(memcpyAPIs...), seconds(in))
	if h2d > 0 {
		f.evidence += fmt.Sprintf(", %s/s host-to-device", byteSize(h2d/v.wall))
	}
	return f
}

func judgeIOStall(c *Config, v *view) finding {
	r := c.Rules.IOStall
	f := finding{cause: CauseIOStall, tid: -1,
		fix: "write checkpoints from a background thread or process (e.g. torch.distributed.checkpoint's async_save) to fast local storage, and upload from there"}
	if v.wall <= 0 {
		return f
	}
	var io expohisto.Histogram
	for _, h := range v.blockIO {
		io.Merge(h)
	}
	if io.Count == 0 {
		return f
	}
	// The I/O costs the GPU what the GPU-feeding thread spent asleep, at most: a
	// background writer's requests do not stall the dispatcher.
	tid, asleep := int64(-1), 0.0
	for id, t := range v.threads {
		if t.voluntary > asleep || (t.voluntary == asleep && id < tid) {
			tid, asleep = id, t.voluntary
		}
	}
	f.tid = tid
	f.cost = math.Min(io.Sum, asleep) / v.wall
	f.fired = r.Enabled && f.cost >= r.MinShare
	f.symptom = launchSymptom(v)
	f.evidence = fmt.Sprintf("%d block I/O requests took %s (p99 %s); thread %d slept %s (%s of the window)",
		io.Count, seconds(io.Sum), seconds(io.Quantile(0.99)), tid, seconds(asleep), percent(asleep/v.wall))
	return f
}

func judgeNetworkRetransmits(c *Config, v *view) finding {
	r := c.Rules.NetworkRetransmits
	f := finding{cause: CauseNetworkRetransmits, tid: -1,
		fix: "check the NIC and switch port of this host (errors, flaps, congestion); give NCCL an RDMA transport (NCCL_IB_HCA) or a dedicated interface (NCCL_SOCKET_IFNAME)"}
	if v.wall <= 0 || v.retransmits == 0 {
		return f
	}
	f.cost = math.Min(1, v.retransmits*r.CostPerRetransmit.Seconds()/v.wall)
	f.fired = r.Enabled && v.retransmits >= r.MinRetransmits
	f.symptom = ncclSymptom(v)
	f.evidence = fmt.Sprintf("%.0f TCP segments retransmitted from the process's own sockets (%.2f/s); each stalls its stream for at least %s",
		v.retransmits, v.retransmits/v.wall, seconds(r.CostPerRetransmit.Seconds()))
	return f
}

func judgeGraphRecapture(c *Config, v *view) finding {
	r := c.Rules.GraphRecapture
	f := finding{cause: CauseGraphRecapture, tid: -1,
		fix: "keep shapes static so the captured graph is replayed (pad or bucket the batch), warm up before capturing, or let torch.compile mark the dynamic dimensions"}
	if v.wall <= 0 {
		return f
	}
	captures := v.calls("cudaStreamBeginCapture")
	if captures == 0 {
		captures = v.calls("cudaGraphInstantiate")
	}
	if captures == 0 {
		return f
	}
	in := v.seconds(captureAPIs...)
	f.cost = in / v.wall
	f.fired = r.Enabled && !v.early && captures >= r.MinCaptures && f.cost >= r.MinShare
	f.symptom = fmt.Sprintf("%.0f graph captures in the window (%.1f/s) against %.0f graph launches", captures, captures/v.wall,
		v.calls(semconv.GraphLaunchAPIs...))
	f.evidence = fmt.Sprintf("capture and instantiation took %s (%s of the window)", seconds(in), percent(f.cost))
	return f
}

func judgeAllocatorChurn(c *Config, v *view) finding {
	r := c.Rules.AllocatorChurn
	f := finding{cause: CauseAllocatorChurn, tid: -1,
		fix: "let the caching allocator keep its blocks (no torch.cuda.empty_cache() in the loop), set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or allocate once outside the step"}
	if v.wall <= 0 {
		return f
	}
	n := v.calls(allocAPIs...)
	if n == 0 {
		return f
	}
	in := v.seconds(allocAPIs...)
	f.cost = in / v.wall
	// Allocating at start-up (loading a model) is not churn.
	f.fired = r.Enabled && !v.early && n/v.wall >= r.MinPerSecond && f.cost >= r.MinShare
	f.symptom = fmt.Sprintf("%.0f device allocations and frees (%.0f/s)", n, n/v.wall)
	f.evidence = fmt.Sprintf("%s in them (%s of the window); cudaFree waits for the device", seconds(in), percent(f.cost))
	return f
}

// launchSymptom is the tail of the process's most frequent launch API, and its launch
// rate.
func launchSymptom(v *view) string {
	api, n := "", 0.0
	for _, a := range launchAPIs {
		if c := v.apiCalls[a]; c > n {
			api, n = a, c
		}
	}
	h := v.apiDur[api]
	if api == "" || h == nil || h.Count == 0 {
		return "no kernel launches in the window"
	}
	total := v.calls(launchAPIs...) / v.wall
	s := tail(api, h) + fmt.Sprintf(", %.0f launches/s", total)
	if b := v.launchBaseline; b > 0 && total < 0.9*b {
		s += fmt.Sprintf(" (down %.0f%% from its healthy %.0f/s)", 100*(1-total/b), b)
	}
	return s
}

// ncclSymptom is the tail of the process's slowest NCCL operation, or its launch tail.
func ncclSymptom(v *view) string {
	op, worst := "", 0.0
	for name, h := range v.ncclDur {
		if q := h.Quantile(0.99); h.Count > 0 && q > worst {
			op, worst = name, q
		}
	}
	if op == "" {
		return launchSymptom(v)
	}
	return tail(op, v.ncclDur[op])
}

func tail(api string, h *expohisto.Histogram) string {
	p50, p99 := h.Quantile(0.5), h.Quantile(0.99)
	s := fmt.Sprintf("%s p99 %s", api, seconds(p99))
	switch {
	case p50 > 0 && p99 >= 2*p50:
		s += fmt.Sprintf(" (%.0fx p50 of %s)", p99/p50, seconds(p50))
	case p50 > 0:
		s += fmt.Sprintf(" (p50 %s)", seconds(p50))
	}
	return s
}

func seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", s)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", s*1e3)
	default:
		return fmt.Sprintf("%.0f µs", s*1e6)
	}
}

func percent(share float64) string { return fmt.Sprintf("%.0f%%", 100*share) }

func byteSize(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", b)
	}
}
