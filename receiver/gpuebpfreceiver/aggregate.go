package gpuebpfreceiver

import (
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/fathom-gpu/fathom/internal/expohisto"
	"github.com/fathom-gpu/fathom/internal/gpustate"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/procinfo"
	"github.com/fathom-gpu/fathom/internal/pyframes"
	"github.com/fathom-gpu/fathom/internal/symbolize"
	"github.com/fathom-gpu/fathom/receiver/gpuebpfreceiver/internal/collsample"
)

// memcpyKinds is the number of cudaMemcpyKind values kept per API (0..4); index
// memcpyKinds is for calls that copy nothing (probes.CopyKindIndex).
const memcpyKinds = probes.CopyKinds - 1

// apiSeries is what one process's calls of one API add up to.
type apiSeries struct {
	duration expohisto.Histogram
	calls    [memcpyKinds + 1]uint64 // by copy direction; last: APIs that copy nothing
	bytes    [memcpyKinds + 1]uint64
	errors   uint64
}

// threadSeries is the scheduling of one thread (or of all "other" threads).
type threadSeries struct {
	offCPUVoluntary expohisto.Histogram
	offCPUPreempted expohisto.Histogram
	runQueue        expohisto.Histogram
	// preemptors are the tasks a thread that calls CUDA waited behind for a CPU, by
	// name: the task that took its CPU when it was preempted, or the task that held the
	// CPU while it waited in the run queue after a wakeup. Members are their processes.
	preemptors namedByWeight
	// wakers are what ended a CUDA thread's voluntary waits (blocked, not preempted), by
	// the waker's name and what the thread blocked in (the class): a task, interrupt, or
	// none (no wakeup seen). Members are the waker threads. The "other" threads keep
	// neither table.
	wakers namedByWeight
}

// A CUDA thread's preemptors and wakers are each named by weight, interval by
// interval, so that a task that takes the thread's CPU, or that the thread waits for,
// is named however many names came before it. A name here is a (comm, self, class)
// key: the class is what a blocked wait waited on (0 for preemptors), so the same
// waker's lock waits and its I/O waits are two names.
//
//   - Each export credits what every name took in the interval just ended. The
//     interval's maxPreemptorNames heaviest names (by time) each get their own
//     series, and so does any name that already holds one; the rest of the interval's
//     waits are credited to the other bucket of their (self, class). Each wait is
//     credited to exactly one series.
//   - A series, once it exists, only grows: an interval in which its name is light or
//     absent leaves it flat, never lower. At most maxPreemptorSeries names hold a series;
//     to give one to a name among an interval's heaviest, the series that grew least
//     recently is let go (it is no longer exported, and its interval's waits, if any, go
//     to the other bucket). Should that name return, its series begins again at the
//     start of the interval it returns in, after every point of the old one: a reader
//     that follows the start time (internal/series) counts it whole, nothing twice.
//   - A series that begins after the process's first interval starts at the interval
//     it was first credited in, not at the process's start: what it holds was all
//     waited within its span.
//   - Within an interval, the names not holding a series are kept in a table of
//     maxPreemptorCandidates. When it is full, a new name takes the place of the
//     candidate with the least estimate and inherits that estimate (Space-Saving), so a
//     name that took more than 1/maxPreemptorCandidates of the interval's time among
//     names without a series is never let go. A name let go this way hands its waits
//     to the other bucket at once and counts a drop per wait (preemptor_names,
//     waker_names): the wait and its time are kept, its name is not.
//
// Each name remembers up to maxPreemptorProcesses distinct members (processes of a
// preemptor, threads of a waker); its count of them saturates there, and each member it
// had no room for counts a drop (preemptor_processes, waker_threads). The other
// buckets, one per (self, class), hold no more than that either.
const (
	maxPreemptorNames      = 8
	maxPreemptorSeries     = 16
	maxPreemptorCandidates = 32
	maxPreemptorProcesses  = 64
	otherPreemptors        = "other"
)

// nameDrops says which drop reasons a table counts its losses under.
type nameDrops struct {
	counters *counterSet
	// names: waits whose name the candidates' table let go; members: members a name's
	// set had no room for.
	names, members string
}

func preemptorDrops(c *counterSet) nameDrops {
	return nameDrops{counters: c, names: "preemptor_names", members: "preemptor_processes"}
}

func wakerDrops(c *counterSet) nameDrops {
	return nameDrops{counters: c, names: "waker_names", members: "waker_threads"}
}

// nameKey is what one series of a table is about.
type nameKey struct {
	comm  [16]int8 // as the kernel wrote it, NUL-padded; zero for an other bucket
	self  bool
	class uint8 // what a blocked wait waited on (probes.BlockedOn); 0 for preemptors
}

// namedSeries is what one name took from one CUDA thread: its waits, their time, and
// the distinct members (processes or threads) seen under it. For preemptors, waits
// behind the collector's own process are kept apart from any other process of the same
// name (self); for wakers, self is a waker of the thread's own process.
type namedSeries struct {
	nameKey
	other bool // the bucket of names not named on their own
	// held: the name has a series, exported at every export from start on; false for
	// a name of the current interval not judged yet.
	held  bool
	start pcommon.Timestamp
	grew  pcommon.Timestamp // the last export that credited it
	// The series' totals: waits and their time.
	preemptions uint64
	seconds     float64
	// The current interval's waits under the name, credited at the next export.
	pendingWaits   uint64
	pendingSeconds float64
	// estimate bounds from above what the name took in the current interval: its
	// pending time plus the estimate of the candidate it replaced (Space-Saving).
	estimate float64
	pids     []uint32 // distinct members, up to maxPreemptorProcesses
}

func (s *namedSeries) name() string {
	if s.other {
		return otherPreemptors
	}
	return probes.Comm(s.comm)
}

// namedByWeight is a CUDA thread's table of one kind of names: those with a series,
// the other buckets, and the names of the current interval still to be judged (see
// maxPreemptorNames).
type namedByWeight []namedSeries

// Comms that the kernel left empty are named unknown, and a task named "other" is
// counted in the other bucket: each (name, self, class) is then one series.
var (
	unknownPreemptorComm = commOf("unknown")
	otherPreemptorComm   = commOf(otherPreemptors)
)

func commOf(name string) (c [16]int8) {
	for i := 0; i < len(name) && i < len(c)-1; i++ {
		c[i] = int8(name[i])
	}
	return c
}

// waitedBehind counts a wait of the thread for a CPU held by process pid under comm,
// of seconds, in the current interval.
func (t *threadSeries) waitedBehind(comm [16]int8, pid uint32, seconds float64, self bool, drops *counterSet) {
	t.preemptors.credit(nameKey{comm: comm, self: self}, pid, seconds, preemptorDrops(drops))
}

// namePreemptors ends an interval that began at from, at now, for the preemptors.
func (t *threadSeries) namePreemptors(from, now pcommon.Timestamp, drops *counterSet) {
	t.preemptors.nameInterval(from, now, preemptorDrops(drops))
}

// Waker names that are not a task's comm: they cannot clash with one, since a task
// named so is counted in the other bucket.
var (
	interruptWakerComm = commOf("interrupt")
	noWakerComm        = commOf("none")
)

// blocked counts a voluntary wait of the thread of seconds (switch-out to wakeup),
// ended by the waker ev names, in what ev's system call says it waited on.
func (t *threadSeries) blocked(ev *probes.SchedSwitchIn, seconds float64, self bool, drops *counterSet) {
	key := nameKey{class: uint8(probes.BlockedOnSyscall(ev.SyscallNr))}
	var member uint32
	switch probes.SchedWaker(ev.WakerKind) {
	case probes.WakerTask:
		key.comm, key.self, member = ev.WakerComm, self, ev.WakerTid
		if c := trimComm(key.comm); c == interruptWakerComm || c == noWakerComm {
			key.comm = otherPreemptorComm
		}
	case probes.WakerInterrupt:
		key.comm = interruptWakerComm
	default:
		key.comm = noWakerComm
	}
	t.wakers.credit(key, member, seconds, wakerDrops(drops))
}

// nameWakers ends an interval that began at from, at now, for the wakers.
func (t *threadSeries) nameWakers(from, now pcommon.Timestamp, drops *counterSet) {
	t.wakers.nameInterval(from, now, wakerDrops(drops))
}

// trimComm clears whatever follows a comm's NUL: the kernel pads a comm with NULs
// (strscpy_pad), and bytes after one are not part of the name, so they must not split
// one name into two series.
func trimComm(comm [16]int8) [16]int8 {
	if i := slices.Index(comm[:], 0); i >= 0 {
		clear(comm[i:])
	}
	return comm
}

// credit counts a wait of seconds under key, with member (0: none, e.g. the idle
// task), in the current interval. A member the name's set has no room for, and a name
// the interval's table lets go, are counted in drops.
func (n *namedByWeight) credit(key nameKey, member uint32, seconds float64, drops nameDrops) {
	key.comm = trimComm(key.comm)
	if key.comm[0] == 0 {
		key.comm = unknownPreemptorComm
	}
	s := n.entry(key, drops)
	s.pendingWaits++
	s.pendingSeconds += seconds
	s.estimate += seconds
	s.rememberMember(member, drops)
}

// rememberMember adds a member (0: none) to the name's members.
func (s *namedSeries) rememberMember(member uint32, drops nameDrops) {
	if member == 0 || slices.Contains(s.pids, member) {
		return
	}
	if len(s.pids) >= maxPreemptorProcesses {
		drops.counters.add(drops.members, 1)
		return
	}
	s.pids = append(s.pids, member)
}

// entry returns the entry of key: its series, the other bucket for a task named
// other, or the interval's candidate of that name, which it makes room for when the
// candidates' table is full.
func (n *namedByWeight) entry(key nameKey, drops nameDrops) *namedSeries {
	if key.comm == otherPreemptorComm {
		return &(*n)[n.otherBucket(key)]
	}
	t := *n
	candidates, lightest := 0, -1
	for i := range t {
		s := &t[i]
		if s.other {
			continue
		}
		if s.nameKey == key {
			return s
		}
		if !s.held {
			candidates++
			if lightest < 0 || s.estimate < t[lightest].estimate {
				lightest = i
			}
		}
	}
	if candidates < maxPreemptorCandidates {
		*n = append(t, namedSeries{nameKey: key})
		return &(*n)[len(*n)-1]
	}
	drops.counters.add(drops.names, t[lightest].pendingWaits)
	estimate := t[lightest].estimate
	n.foldIntoOther(lightest, drops)
	t = *n // the other bucket may have been added
	t[lightest] = namedSeries{nameKey: key, estimate: estimate}
	return &t[lightest]
}

// otherBucket is the index of the other bucket of key's (self, class), added if missing.
func (n *namedByWeight) otherBucket(key nameKey) int {
	key.comm = [16]int8{}
	for i := range *n {
		if s := &(*n)[i]; s.other && s.nameKey == key {
			return i
		}
	}
	*n = append(*n, namedSeries{nameKey: key, other: true})
	return len(*n) - 1
}

// foldIntoOther hands the current interval's waits of entry i, and its members, to
// its other bucket; the entry keeps its credited totals.
func (n *namedByWeight) foldIntoOther(i int, drops nameDrops) {
	if (*n)[i].pendingWaits == 0 {
		return
	}
	o := n.otherBucket((*n)[i].nameKey)
	t := *n
	s := &t[i]
	t[o].pendingWaits += s.pendingWaits
	t[o].pendingSeconds += s.pendingSeconds
	t[o].estimate += s.pendingSeconds
	for _, member := range s.pids {
		t[o].rememberMember(member, drops)
	}
	s.pendingWaits, s.pendingSeconds = 0, 0
}

// nameInterval ends an interval that began at from, at now: it names its heaviest
// names and credits every wait of it to one series (see maxPreemptorNames).
func (n *namedByWeight) nameInterval(from, now pcommon.Timestamp, drops nameDrops) {
	t := *n
	var waited []int // the interval's names (not the other buckets), heaviest first
	held := 0
	for i := range t {
		s := &t[i]
		if s.other {
			continue
		}
		if s.held {
			held++
		}
		if s.pendingWaits > 0 {
			waited = append(waited, i)
		}
	}
	sort.Slice(waited, func(a, b int) bool {
		x, y := &t[waited[a]], &t[waited[b]]
		if x.pendingSeconds != y.pendingSeconds {
			return x.pendingSeconds > y.pendingSeconds
		}
		if x.comm != y.comm {
			return probes.Comm(x.comm) < probes.Comm(y.comm)
		}
		if x.self != y.self {
			return !x.self
		}
		return x.class < y.class
	})
	top := make([]bool, len(t))
	for _, i := range waited[:min(len(waited), maxPreemptorNames)] {
		top[i] = true
	}
	letGo := make([]bool, len(t))
	for _, i := range waited[:min(len(waited), maxPreemptorNames)] {
		if (*n)[i].held {
			continue
		}
		if held >= maxPreemptorSeries {
			// There are more series than top names: one outside the top grew least
			// recently (lighter first among those that grew at the same export).
			victim := -1
			for j := range *n {
				s := &(*n)[j]
				if s.other || !s.held || top[j] || letGo[j] {
					continue
				}
				if victim < 0 || growsLater(&(*n)[victim], s) {
					victim = j
				}
			}
			n.foldIntoOther(victim, drops)
			letGo[victim] = true
			held--
		}
		(*n)[i].held, (*n)[i].start = true, from
		held++
	}
	for i := range letGo {
		if s := &(*n)[i]; !s.other && !s.held {
			n.foldIntoOther(i, drops)
			letGo[i] = true
		}
	}
	// Other buckets added while folding lie beyond letGo: they are kept.
	t = *n
	kept := 0
	for i := range t {
		if i < len(letGo) && letGo[i] {
			continue
		}
		s := &t[i]
		if s.pendingWaits > 0 {
			if !s.held {
				s.held, s.start = true, from // an other bucket's first credit
			}
			s.preemptions += s.pendingWaits
			s.seconds += s.pendingSeconds
			s.grew = now
		}
		s.pendingWaits, s.pendingSeconds, s.estimate = 0, 0, 0
		t[kept] = *s
		kept++
	}
	clear(t[kept:])
	*n = t[:kept]
}

// growsLater says whether series a is to be kept over b when one must be let go: b
// grew less recently, or at the same export with less waited time in the interval.
func growsLater(a, b *namedSeries) bool {
	if (a.pendingWaits > 0) != (b.pendingWaits > 0) {
		return a.pendingWaits > 0
	}
	if a.grew != b.grew {
		return a.grew > b.grew
	}
	return a.pendingSeconds > b.pendingSeconds || (a.pendingSeconds == b.pendingSeconds && a.seconds > b.seconds)
}

// processSeries is everything kept about one traced process.
type processSeries struct {
	info procinfo.Process
	// stacks are the stacks its records carried whole in this interval (stackTally).
	stacks   *processStacks
	start    pcommon.Timestamp
	apis     [probes.APICount]*apiSeries
	threads  map[uint32]*threadSeries // threads that call CUDA, up to the cap
	other    threadSeries             // all other threads of the process
	cudaTIDs map[uint32]bool
	forks    uint64
	// pagesExported is the kernel's page-allocation total at the last export.
	pagesExported uint64
	blockIO       [2]expohisto.Histogram // read, write
	nccl          map[ncclKey]*ncclSeries
	// worldComm is the communicator with the most ranks the process has used: its
	// job's world, named on its resource as fathom.cohort (the ranks the straggler
	// processor compares it with). 0 until a call names one.
	worldComm  uint64
	worldRanks int32
	// worldCommRecovered says worldComm was named by commrecovery (unnamedComms).
	worldCommRecovered bool
	// unnamedComms are the communicators whose setup was not seen, by comm pointer.
	unnamedComms map[uint64]*unnamedComm
	// recoveredPeerCalls counts its sends and receives on recovered communicators,
	// whose records are sampled by it (they have no nccl.seq; collectives are kept in
	// bursts, unnamedComm.bursts).
	recoveredPeerCalls uint64
	// collSample picks, per named communicator, which of its collectives are kept
	// (at most maxSampledComms).
	collSample map[uint64]*collsample.State
	// hostLead sums, over the process's collectives, the time from its thread's last
	// return from a device wait to its entry into the collective (seconds).
	hostLead     float64
	hostLeadSeen bool
	// cpu is the time its CUDA-calling threads ran on a CPU (refreshCPUTime).
	cpu threadsCPU
	// fabric follows the counters of the RDMA ports the rank may use; nil until the
	// first reading that binds it to one.
	fabric *rankFabric
	// qpDevices are the verbs devices the process created queue pairs on: the NICs it
	// sends over (at most maxRankDevices).
	qpDevices map[string]bool
	// tcpRetransmits counts the TCP segments retransmitted from sockets the process
	// holds (since the last delta export, or since it was first seen).
	tcpRetransmits uint64
	// gpuErrors follows the error counters of the GPU the process runs on.
	gpuErrors *rankGPUErrors
	exited    bool
	// exitRead is the number of call-statistics readings begun when the exit was seen:
	// the series may end once a later one is merged, which holds the last counts.
	exitRead  uint64
	hasSched  bool
	hasBlock  bool
	synthetic bool
}

// threadsCPU sums the on-CPU time of a process's CUDA-calling threads, from the
// scheduler's own account of each (procinfo.ThreadCPUTime), since the collector first
// read each thread: a thread first read late adds nothing for its past, so a sample
// never jumps by what it ran before.
type threadsCPU struct {
	last    map[uint32]uint64 // ns, per thread, at the last read
	seconds float64
	seen    bool
	// readAt is when seconds was read: the time of its point, which is a collective's
	// (readAtCollective) while the process makes them.
	readAt time.Time
	// collectiveAt is when it was last read at a collective.
	collectiveAt time.Time
	// exported is seconds at the last delta export.
	exported float64
	// collectives counts the process's collectives; base and baseCollectives are
	// seconds and it at the read at a collective that began the current span (at
	// baseAt); perCollective is the CPU time a collective over the last span, read at
	// perCollectiveAt.
	collectives     uint64
	base            float64
	baseCollectives uint64
	baseAt          time.Time
	perCollective   float64
	perCollectiveAt time.Time
	// sampled and perSampled are the reads the last rank sample carried.
	sampled, perSampled time.Time
}

// cpuReadEvery is the least time between two reads of a process's CPU time at its
// collectives. A step's host work then falls whole between two reads of a job whose
// steps are longer (the reason for reading there, see readAtCollective), and a job of
// millisecond steps costs a process's threads' schedstat files ten reads a second.
const cpuReadEvery = 100 * time.Millisecond

// perCollectiveEvery is the least span of CPU time a collective: a read comes a poll
// of the event ring (10 ms) or more after its collective, and the rank's next step
// runs meanwhile, so a span of 100 ms of 2 ms steps was off by a few per cent, as much
// as a 5% slowdown (the matrix's 5% row found in 3 of 5 trials, in 53 s). With half a
// second it was found in every trial, in 8 s, and a step of 0.8 s is still a span of
// its own.
const perCollectiveEvery = 500 * time.Millisecond

// cpuAtCollectivesFor is how long after its last read at a collective a process's
// samples keep that read rather than reading at the sample: longer than a step, and
// short enough that a rank that stopped making collectives (hung, or evaluating) is
// followed again within seconds.
const cpuAtCollectivesFor = 5 * time.Second

// readAtCollective reads the process's CPU time as one of its collectives comes in
// (at most every cpuReadEvery). The ranks of a job enter each step's collectives
// together, so points read there cut every rank's time at the same place in its step:
// a rank whose host does 20% more per step runs 20% more between two of them. Read at
// the sample's clock instead, a point cuts a step wherever it falls, and with steps
// longer than the sample interval (200 ms of host work a step on a busy host) one
// sample holds a rank's whole step and the next none of it: the slow rank's samples
// scattered over 0 to 0.68 s/s against a difference of 0.04.
//
// Per second, the time between two reads still varies by rank: each enters a step's
// collective when the scheduler lets it finish the step's work, which on the busy host
// jittered a healthy rank's 0.8 s steps by ±0.15 s and its CPU time a second by as
// much, for 0.200 s of CPU a step to the slow rank's 0.240. So the read also gives the
// CPU time per collective over spans of at least perCollectiveEvery (perCollective),
// which is the same for every healthy rank of a job whatever its timing: a rank's
// collectives are its steps, counted.
func (a *aggregator) readAtCollective(p *processSeries, now time.Time) {
	p.cpu.collectives++
	if now.Sub(p.cpu.collectiveAt) < cpuReadEvery {
		return
	}
	previous := p.cpu.collectiveAt
	if !a.refreshCPUTime(p, now) {
		return
	}
	p.cpu.collectiveAt = now
	switch {
	case previous.IsZero() || now.Sub(previous) >= cpuAtCollectivesFor:
		// A span across a pause (an evaluation, a checkpoint) would spread the
		// pause's work over the collectives around it: one begins here.
	case now.Sub(p.cpu.baseAt) < perCollectiveEvery:
		return
	default:
		if n := p.cpu.collectives - p.cpu.baseCollectives; n > 0 {
			p.cpu.perCollective, p.cpu.perCollectiveAt = (p.cpu.seconds-p.cpu.base)/float64(n), now
			select {
			case a.perCollectiveRead <- struct{}{}:
			default:
			}
		}
	}
	p.cpu.base, p.cpu.baseCollectives, p.cpu.baseAt = p.cpu.seconds, p.cpu.collectives, now
}

// readForSample reads the process's CPU time for a sample at now, unless a read at one
// of its collectives within cpuAtCollectivesFor stands for it.
func (a *aggregator) readForSample(p *processSeries, now time.Time) {
	if now.Sub(p.cpu.collectiveAt) < cpuAtCollectivesFor {
		return
	}
	a.refreshCPUTime(p, now)
}

// refreshCPUTime reads the on-CPU time of the process's CUDA threads (at most
// limits.max_threads_per_process of them, as cudaTIDs is bounded) and adds what each
// ran since its last read. A thread that is gone keeps what it added. It says whether
// any thread was read.
func (a *aggregator) refreshCPUTime(p *processSeries, now time.Time) bool {
	if a.synthetic || len(p.cudaTIDs) == 0 {
		return false
	}
	if p.cpu.last == nil {
		p.cpu.last = map[uint32]uint64{}
	}
	read := false
	for tid := range p.cudaTIDs {
		ns, err := procinfo.ThreadCPUTime(a.procRoot, p.info.PID, tid)
		if err != nil {
			delete(p.cpu.last, tid)
			continue
		}
		if last, ok := p.cpu.last[tid]; ok && ns >= last {
			p.cpu.seconds += float64(ns-last) / 1e9
		}
		p.cpu.last[tid] = ns
		p.cpu.seen, read = true, true
	}
	if read {
		p.cpu.readAt = now
	}
	return read
}

// api returns the process's series of an API, creating it on first use.
func (p *processSeries) api(id int) *apiSeries {
	if p.apis[id] == nil {
		p.apis[id] = &apiSeries{}
	}
	return p.apis[id]
}

// aggregator turns events into series. Events arrive on the reader goroutine; the
// emitter takes the lock at each interval.
type aggregator struct {
	mu       sync.Mutex
	cfg      *Config
	clock    *wallClock
	procRoot string
	// cgroupRoot is the cgroup v2 mount, found from Discovery.CgroupRoot.
	cgroupRoot string
	processes  map[uint32]*processSeries
	sockets    socketOwners
	logs       *logSink
	synthetic  bool
	// python reads CPython processes' frames; nil in synthetic mode or with
	// stacks.python off.
	python pythonFrames
	// native names records' native frames; nil in synthetic mode or with
	// stacks.native off.
	native nativeFrames

	events              eventCounters
	drops               counterSet
	processStartDefault pcommon.Timestamp
	rdmaEvents          map[uint32]uint64 // verbs async events on the node, by enum ibv_event_type
	gpus                []gpustate.GPU    // the last reading of the node's GPUs (NVML)
	// rankGPUs is each traced process's GPU as the last collection read it, whose
	// clock the rank samples between collections read anew (keepRankGPUs).
	rankGPUs map[uint32]*gpustate.GPU
	kernel   kernelCalls
	// ended lists the processes whose series ended in an export, for the controller
	// to drop their kernel-side state.
	ended []uint32
	// selfPID is the collector's own process: a preemption by one of its threads is
	// marked as such, so the collector's cost is never blamed on the node.
	selfPID uint32
	// perCollectiveRead wakes the controller when a process's CPU time a collective
	// is new (readAtCollective), to send it as read rather than with the next rank
	// sample; one pending wake stands for any number of points.
	perCollectiveRead chan struct{}
}

// eventCounters counts decoded events by kind without a lock: they are bumped once per
// event on the hot path.
type eventCounters [probes.KindRDMAQP + 1]atomic.Uint64

var eventCounterNames = map[probes.EventKind]string{
	probes.KindCUDACall: "cuda.api.call", probes.KindSched: "host.sched", probes.KindFork: "process.fork",
	probes.KindExec: "process.exec", probes.KindExit: "process.exit", probes.KindBlockIO: "host.block.io",
	probes.KindTCPRetransmit: "host.tcp.retransmit", probes.KindIdentity: "process.identity",
	probes.KindNCCLCall: "nccl.call", probes.KindRDMAAsync: "rdma.async_event", probes.KindCUDAThread: "cuda.thread",
	probes.KindRDMAQP: "rdma.queue_pair",
}

func (e *eventCounters) add(kind probes.EventKind) { e[kind].Add(1) }

func (e *eventCounters) snapshot() map[string]uint64 {
	out := make(map[string]uint64, len(eventCounterNames))
	for kind, name := range eventCounterNames {
		out[name] = e[kind].Load()
	}
	return out
}

// counterSet is a small set of named counters read by telemetry callbacks.
type counterSet struct {
	mu sync.Mutex
	m  map[string]*atomic.Uint64
}

func (c *counterSet) add(name string, n uint64) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]*atomic.Uint64{}
	}
	v, ok := c.m[name]
	if !ok {
		v = &atomic.Uint64{}
		c.m[name] = v
	}
	c.mu.Unlock()
	v.Add(n)
}

func (c *counterSet) snapshot() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]uint64, len(c.m))
	for k, v := range c.m {
		out[k] = v.Load()
	}
	return out
}

func newAggregator(cfg *Config, clock *wallClock, logs *logSink, synthetic bool) *aggregator {
	return &aggregator{
		cfg:                 cfg,
		clock:               clock,
		procRoot:            cfg.Discovery.ProcRoot,
		cgroupRoot:          procinfo.CgroupV2Mount(cfg.Discovery.CgroupRoot),
		processes:           map[uint32]*processSeries{},
		logs:                logs,
		synthetic:           synthetic,
		processStartDefault: pcommon.NewTimestampFromTime(wallNow()),
		rdmaEvents:          map[uint32]uint64{},
		selfPID:             uint32(os.Getpid()),
		perCollectiveRead:   make(chan struct{}, 1),
	}
}

// process returns the series of pid, creating it (and reading its identity) on first
// sight; nil when the process cap is reached.
func (a *aggregator) process(pid uint32) *processSeries {
	if p, ok := a.processes[pid]; ok {
		return p
	}
	if len(a.processes) >= a.cfg.Limits.MaxProcesses {
		a.drops.add("cardinality", 1)
		return nil
	}
	p := &processSeries{
		start:     pcommon.NewTimestampFromTime(wallNow()),
		threads:   map[uint32]*threadSeries{},
		cudaTIDs:  map[uint32]bool{},
		nccl:      map[ncclKey]*ncclSeries{},
		synthetic: a.synthetic,
	}
	if a.synthetic {
		p.info = syntheticProcess(pid)
	} else if info, err := procinfo.Read(a.procRoot, pid); err == nil {
		p.info = info
	} else {
		p.info = procinfo.Process{PID: pid, Rank: -1, LocalRank: -1, WorldSize: -1}
	}
	a.processes[pid] = p
	if a.python != nil {
		a.python.track(pid)
	}
	return p
}

// pythonFrames reads the Python frames of CPython processes' CUDA call records (the
// eBPF source's pythonTracker).
type pythonFrames interface {
	// track looks, off the event path, at whether a newly seen process runs CPython.
	track(pid uint32)
	frames(pid uint32, raw []probes.PyFrame) ([]pyframes.Frame, error)
	forget(pid uint32)
}

// nativeFrames names the native return addresses of CUDA call records.
type nativeFrames interface {
	frames(pid uint32, addrs []uint64) []symbolize.Frame
	forget(pid uint32)
}

// CUDACallPy takes a call record of a CPython process, with its Python frames.
func (a *aggregator) CUDACallPy(ev *probes.CUDACallPy) {
	a.cudaCall(&ev.Call, a.pythonFrames(ev.Call.Hdr.Pid, ev.PyFrames()), ev.PyTruncated())
}

// NCCLCallPy takes an NCCL call of a CPython process, with its Python frames.
func (a *aggregator) NCCLCallPy(ev *probes.NCCLCallPy) {
	a.ncclCall(&ev.Call, a.pythonFrames(ev.Call.Hdr.Pid, ev.PyFrames()), ev.PyTruncated())
}

// pythonFrames names a record's Python frames (nil with stacks.python off).
func (a *aggregator) pythonFrames(pid uint32, raw []probes.PyFrame) []pyframes.Frame {
	if a.python == nil || len(raw) == 0 {
		return nil
	}
	frames, err := a.python.frames(pid, raw)
	if err != nil {
		a.drops.add("python_frames", 1)
	}
	return frames
}

// nativeOf names a record's native return addresses (nil with stacks.native off).
func (a *aggregator) nativeOf(pid uint32, count uint8, addrs []uint64) []symbolize.Frame {
	if n := min(int(count), len(addrs)); n > 0 && a.native != nil {
		return a.native.frames(pid, addrs[:n])
	}
	return nil
}

// CUDACall takes a call the kernel recorded. Most calls are only counted in the
// kernel (mergeCallStats); a record comes for a notable call, for every call under the
// "all" policy, and for a call the kernel could not count (Counted == 0), which is
// counted here.
func (a *aggregator) CUDACall(ev *probes.CUDACall) { a.cudaCall(ev, nil, false) }

func (a *aggregator) cudaCall(ev *probes.CUDACall, frames []pyframes.Frame, truncated bool) {
	a.events.add(probes.KindCUDACall)
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.process(ev.Hdr.Pid)
	if p == nil {
		return
	}
	if int(ev.Api) >= probes.APICount || ev.Api == 0 {
		a.drops.add("decode", 1)
		return
	}
	seconds := float64(ev.DurationNs) / 1e9
	if ev.Counted == 0 {
		s := p.api(int(ev.Api))
		s.duration.Record(seconds)
		dir := probes.CopyKindIndex(probes.MemcpyKind(ev.MemcpyKind))
		s.calls[dir]++
		s.bytes[dir] += ev.Bytes
		if ev.Ret != 0 {
			s.errors++
		}
	}
	if len(p.cudaTIDs) < a.cfg.Limits.MaxThreadsPerProcess {
		p.cudaTIDs[ev.Hdr.Tid] = true
	}
	// An outlier is judged against the API's running median on the node, the one the
	// kernel's threshold was derived from.
	median := a.kernel.medians[ev.Api]
	if seconds < a.logs.minDuration {
		median = 0
	}
	native := a.nativeOf(ev.Hdr.Pid, ev.NativeFrames, ev.Native[:])
	a.logs.cudaCall(p, ev, seconds, median, callStack{python: frames, truncated: truncated, native: native})
}

// CUDAThread marks a thread as one that drives a GPU: its scheduling gets its own series.
func (a *aggregator) CUDAThread(h *probes.EventHeader) {
	a.events.add(probes.KindCUDAThread)
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.process(h.Pid)
	if p != nil && len(p.cudaTIDs) < a.cfg.Limits.MaxThreadsPerProcess {
		p.cudaTIDs[h.Tid] = true
	}
}

func (a *aggregator) Sched(ev *probes.SchedSwitchIn) {
	a.events.add(probes.KindSched)
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.process(ev.Hdr.Pid)
	if p == nil {
		return
	}
	p.hasSched = true
	t := &p.other
	if p.cudaTIDs[ev.Hdr.Tid] {
		if t = p.threads[ev.Hdr.Tid]; t == nil {
			t = &threadSeries{}
			p.threads[ev.Hdr.Tid] = t
		}
	}
	offCPU, runq := float64(ev.OffCpuNs)/1e9, float64(ev.RunqNs)/1e9
	// What the thread waited for a CPU, and behind whom: a preempted thread all its
	// off-CPU time, behind the task that took its CPU; a woken one its run-queue time,
	// behind the task that held the CPU until it got it (none if the CPU was idle).
	var waited float64
	var named bool
	if ev.Preempted != 0 {
		t.offCPUPreempted.Record(offCPU)
		waited, named = offCPU, true
	} else {
		t.offCPUVoluntary.Record(offCPU)
		waited, named = runq, probes.SchedWait(ev.WaitKind) == probes.WaitWoken && ev.PreemptorPid != 0
	}
	if named && t != &p.other {
		t.waitedBehind(ev.PreemptorComm, ev.PreemptorPid, waited, ev.PreemptorPid == a.selfPID, &a.drops)
	}
	if ev.Preempted == 0 && t != &p.other {
		// Blocked from the switch-out until the wakeup; the run-queue wait after it is
		// the preemptors' (none seen: all of the off-CPU time).
		blocked := offCPU
		if ev.RunqNs <= ev.OffCpuNs {
			blocked = float64(ev.OffCpuNs-ev.RunqNs) / 1e9
		}
		t.blocked(ev, blocked, probes.SchedWaker(ev.WakerKind) == probes.WakerTask && ev.WakerPid == ev.Hdr.Pid, &a.drops)
	}
	if ev.RunqNs != 0 {
		t.runQueue.Record(runq)
	}
}

func (a *aggregator) Process(kind probes.EventKind, ev *probes.ProcessEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch kind {
	case probes.KindFork:
		a.events.add(probes.KindFork)
		if parent := a.process(ev.ParentPid); parent != nil {
			parent.forks++
			a.logs.lifecycle(parent, kind, ev)
		}
	case probes.KindExec:
		a.events.add(probes.KindExec)
		// Exec events come for every process on the host (discovery needs them); only
		// those of processes already traced are news for the pipeline.
		if p, ok := a.processes[ev.Hdr.Pid]; ok {
			if info, err := procinfo.Read(a.procRoot, ev.Hdr.Pid); err == nil && !a.synthetic {
				p.info = info
			}
			a.logs.lifecycle(p, kind, ev)
		}
	case probes.KindExit:
		a.events.add(probes.KindExit)
		if p, ok := a.processes[ev.Hdr.Pid]; ok {
			p.exited = true
			p.exitRead = a.kernel.reads
			a.logs.lifecycle(p, kind, ev)
		}
	}
}

func (a *aggregator) BlockIO(ev *probes.BlockIO) {
	a.events.add(probes.KindBlockIO)
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.process(ev.Hdr.Pid)
	if p == nil {
		return
	}
	p.hasBlock = true
	seconds := float64(ev.DurationNs) / 1e9
	p.blockIO[ev.Write&1].Record(seconds)
	a.logs.blockIO(p, ev, seconds)
}

// Identity arrives before the first call of a process the kernel started tracing. Read
// /proc now, while the process surely exists; if it is already gone (a short-lived
// process), the kernel's copy of its environment tells rank and job.
func (a *aggregator) Identity(ev *probes.ProcessIdentity) {
	a.events.add(probes.KindIdentity)
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.process(ev.Hdr.Pid)
	if p == nil || a.synthetic {
		return
	}
	if p.info.Executable == "" || p.info.Rank < 0 {
		fromKernel := procinfo.FromEnviron(ev.Hdr.Pid, ev.Executable(), ev.EnvBytes())
		if p.info.Executable == "" {
			p.info.Executable = fromKernel.Executable
		}
		if p.info.Rank < 0 {
			p.info.Rank, p.info.LocalRank, p.info.WorldSize = fromKernel.Rank, fromKernel.LocalRank, fromKernel.WorldSize
		}
		if p.info.Job == "" {
			p.info.Job = fromKernel.Job
		}
	}
	// Gone from /proc before its cgroup file was read: the record's cgroup id still
	// finds the cgroup, and with it the pod and container.
	if p.info.CgroupPath == "" && ev.Hdr.CgroupId != 0 {
		if path, err := procinfo.CgroupPathByID(a.cgroupRoot, ev.Hdr.CgroupId); err == nil {
			p.info.WithCgroup(path)
		} else {
			a.drops.add("cgroup_unresolved", 1)
		}
	}
}

func (a *aggregator) TCPRetransmit(ev *probes.TCPRetransmit) {
	a.events.add(probes.KindTCPRetransmit)
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.socketOwner(ev.SockIno)
	if p != nil {
		p.tcpRetransmits++
	}
	a.logs.retransmit(ev, p)
}

// socketOwners maps socket inodes to the traced processes that hold them: a retransmit
// fires from a timer, in whatever task was running, so its socket's inode is what names
// the process. Rebuilt from the traced processes' /proc/PID/fd on a miss, at most once
// per socketScanEvery, and bounded by maxSocketOwners.
type socketOwners struct {
	byIno   map[uint64]uint32
	scanned time.Time
}

const (
	maxSocketOwners = 65536
	socketScanEvery = time.Second
)

// socketOwner returns the traced process holding the socket, or nil (no socket, a
// process not traced, or not found before the next scan is due).
func (a *aggregator) socketOwner(ino uint64) *processSeries {
	if ino == 0 || a.synthetic {
		return nil
	}
	if pid, ok := a.sockets.byIno[ino]; ok {
		if p := a.processes[pid]; p != nil && !p.exited {
			return p
		}
	}
	now := time.Now()
	if now.Sub(a.sockets.scanned) < socketScanEvery {
		return nil
	}
	a.sockets.scanned = now
	if a.sockets.byIno == nil {
		a.sockets.byIno = map[uint64]uint32{}
	}
	clear(a.sockets.byIno)
	for pid, p := range a.processes {
		if p.exited {
			continue
		}
		for _, sock := range procinfo.SocketInodes(a.procRoot, pid) {
			if len(a.sockets.byIno) >= maxSocketOwners {
				break
			}
			a.sockets.byIno[sock] = pid
		}
	}
	if pid, ok := a.sockets.byIno[ino]; ok {
		return a.processes[pid]
	}
	return nil
}
