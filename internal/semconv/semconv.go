// Package semconv names every attribute and metric Fathom emits, in one place.
// OpenTelemetry semantic-convention names are used where they exist (host.name,
// process.pid, thread.id, k8s.*, container.id); Fathom's own live under fathom.*,
// and probe data under cuda.*, nccl.*, rdma.*. docs/semconv.md is generated from the
// tables below (go generate), so the doc never drifts from the code.
package semconv

//go:generate go run ../../tools/semconvdoc -out ../../docs/semconv.md

// Resource attributes: who and where.
const (
	HostName              = "host.name"
	ProcessPID            = "process.pid"
	ProcessExecutableName = "process.executable.name"
	ProcessCommandLine    = "process.command_line"
	ContainerID           = "container.id"
	K8sPodUID             = "k8s.pod.uid"
	ClusterName           = "fathom.cluster.name"
	JobName               = "fathom.job.name"
	Rank                  = "fathom.rank"
	LocalRank             = "fathom.local_rank"
	WorldSize             = "fathom.world_size"
	CgroupPath            = "fathom.cgroup.path"
	Synthetic             = "fathom.synthetic"
	Cohort                = "fathom.cohort"
	GPUModel              = "fathom.gpu.model"
	GPUVendor             = "fathom.gpu.vendor"
	CloudProvider         = "cloud.provider"
)

// The causal-chain records the node pipeline writes (log records with event.name
// EventCausalChain), which the Echo store serves to agents.
const (
	EventCausalChain = "fathom.causal_chain"
	ChainRootCause   = "fathom.chain.root_cause"
	ChainSeverity    = "fathom.chain.severity"
	ChainFix         = "fathom.chain.fix"
	ChainID          = "fathom.chain.id"
	ChainState       = "fathom.chain.state"
	ChainSymptom     = "fathom.chain.symptom"
	ChainStack       = "fathom.chain.stack"
	ChainStackID     = "fathom.chain.stack.id"
	ChainStackShare  = "fathom.chain.stack.share"
	ChainEvidence    = "fathom.chain.evidence"
	ChainTimeline    = "fathom.chain.timeline"
	ChainCost        = "fathom.chain.cost"
	ChainSince       = "fathom.chain.since"
)

// The straggler processor's records (log records with event.name EventStraggler), one
// each time a rank becomes a straggler, falls silent, or is back within its cohort,
// and its per-rank and per-cohort gauges.
const (
	EventStraggler     = "fathom.straggler"
	StragglerState     = "fathom.straggler.state"
	StragglerSource    = "fathom.straggler.source"
	StragglerSignal    = "fathom.straggler.signal"
	StragglerValue     = "fathom.straggler.value"
	StragglerMedian    = "fathom.straggler.median"
	StragglerThreshold = "fathom.straggler.threshold"
	StragglerScore     = "fathom.straggler.score"
	StragglerSince     = "fathom.straggler.since"
	StragglerWindow    = "fathom.straggler.window"
	StragglerRule      = "fathom.straggler.rule"
)

// What the gateway's inputbounds processor cut from a record, point, scope or resource
// it passed on (docs/security.md).
const InputCut = "fathom.input.cut"

// The node check record the gpuebpf receiver sends (a log record with event.name
// EventNodeCheck) at start, when a check's result changes, and at least every
// readiness.report_interval: what `fathom check` finds on the node, so that a node that
// cannot trace is told apart from one with nothing to trace. The body holds every check
// (name, ok, advisory, detail, impact, fix) and the kernel release.
const (
	EventNodeCheck   = "fathom.node.check"
	NodeReady        = "fathom.node.ready"
	NodeChecksFailed = "fathom.node.checks.failed"
	NodeChecksWarned = "fathom.node.checks.warned"
	ReceiverMode     = "fathom.receiver.mode"
)

// RankSignalsScope is the instrumentation scope of the rank-signal samples the
// gpuebpf receiver emits between its collections (rank_signals.interval): exports that
// carry only fathom.rank.device_wait.time, host_lead.time, launches and run_queue.time.
// A consumer that takes each export of a process as one interval of everything (the
// causalchain processor) leaves them out; the cumulative points of the next collection
// cover the same time.
const RankSignalsScope = "github.com/fathom-gpu/fathom/receiver/gpuebpfreceiver/ranksignals"

// Data point and log attributes.
const (
	ThreadID        = "thread.id"
	CUDAAPIName     = "cuda.api.name"
	CUDALibrary     = "cuda.library"
	CUDAMemcpyDir   = "cuda.memcpy.direction"
	CUDAResult      = "cuda.api.result"
	CUDAStream      = "cuda.stream"
	CUDAGrid        = "cuda.kernel.grid"
	CUDABlock       = "cuda.kernel.block"
	CUDABytes       = "cuda.bytes"
	OffCPUReason    = "fathom.off_cpu.reason"
	ThreadRole      = "fathom.thread.role"
	PreemptorName   = "fathom.preemptor.name"
	PreemptorSelf   = "fathom.preemptor.self"
	WakerName       = "fathom.waker.name"
	WakerSelf       = "fathom.waker.self"
	BlockedOn       = "fathom.blocked.on"
	DiskIODirection = "disk.io.direction"
	NetworkType     = "network.type"
	EventName       = "event.name"
	DurationSeconds = "fathom.duration_s"
	MedianSeconds   = "fathom.median_s"
	NotableReason   = "fathom.notable.reason"
	// Where in a Python program a call was made: its innermost Python frame (OTel's
	// code attributes), and the whole Python stack.
	CodeFunction      = "code.function"
	CodeFilepath      = "code.filepath"
	CodeLineno        = "code.lineno"
	PythonStack       = "fathom.python.stack"
	NativeStack       = "fathom.native.stack"
	StackID           = "fathom.stack.id"
	ParentPID         = "process.parent_pid"
	ExitCode          = "process.exit.code"
	SourceAddress     = "source.address"
	SourcePort        = "source.port"
	DestAddress       = "destination.address"
	DestPort          = "destination.port"
	ReceiverDropCause = "fathom.drop.reason"
	// MetricTemporality is not sent by anyone: the duckdb exporter writes it into each
	// stored sum and histogram row, which has no column for the point's temporality.
	MetricTemporality = "fathom.metric.temporality"

	NCCLCommID        = "nccl.comm.id"
	NCCLCommRecovered = "nccl.comm.recovered"
	NCCLRank          = "nccl.rank"
	NCCLNRanks        = "nccl.nranks"
	NCCLOp            = "nccl.op"
	NCCLSeq           = "nccl.seq"
	NCCLSeqLocal      = "nccl.seq.local"
	NCCLPeer          = "nccl.peer"
	NCCLCount         = "nccl.count"
	NCCLBytes         = "nccl.bytes"
	NCCLDataType      = "nccl.datatype"
	NCCLReduceOp      = "nccl.reduce_op"
	NCCLStream        = "nccl.stream"
	NCCLGroupDepth    = "nccl.group.depth"
	NCCLResult        = "nccl.result"
	NCCLEntryTime     = "nccl.entry.time_unix_nano"
	NCCLReturnTime    = "nccl.return.time_unix_nano"
	RDMADevice        = "rdma.device"
	RDMAPort          = "rdma.port"
	RDMATransport     = "rdma.transport"
	RDMACounter       = "rdma.counter"
	NetworkDirection  = "network.io.direction"
	RDMAEventType     = "rdma.async_event.type"
	RDMAFabricError   = "rdma.async_event.fabric_error"
)

// GPU state the gpuebpf receiver reads from NVML: per GPU on the node's resource, and
// the GPU a rank runs on beside its own series. OpenTelemetry's hardware conventions
// name the GPU (hw.id is its UUID) and the readings they cover.
const (
	HWID               = "hw.id"
	HWName             = "hw.name"
	HWVendor           = "hw.vendor"
	GPUIndex           = "fathom.gpu.index"
	GPUBusID           = "fathom.gpu.pci.bus_id"
	GPUClockDomain     = "fathom.gpu.clock.domain"
	GPUClockReason     = "fathom.gpu.clock_event.reason"
	GPUMemoryErrorType = "fathom.gpu.memory.error.type"
	GPURemapCause      = "fathom.gpu.memory.remap.cause"
	GPUXIDCode         = "fathom.gpu.xid.code"
	// SignalDetail is a short human text on a rank's signal point that the straggler
	// processor carries into the record naming the rank ("GPU 1 SM clock 1,410 of
	// 1,980 MHz: sw_thermal_slowdown").
	SignalDetail = "fathom.signal.detail"
)

// Metric names.
const (
	MetricCUDAAPIDuration      = "cuda.api.duration"
	MetricCUDAAPICalls         = "cuda.api.calls"
	MetricCUDAAPIErrors        = "cuda.api.errors"
	MetricCUDAMemcpyBytes      = "cuda.memcpy.bytes"
	MetricCUDAMallocBytes      = "cuda.malloc.bytes"
	MetricCUDAGraphLaunches    = "cuda.graph.launches"
	MetricThreadOffCPU         = "host.thread.off_cpu.duration"
	MetricThreadRunQueue       = "host.thread.runqueue.latency"
	MetricThreadPreemptions    = "host.thread.preemptions"
	MetricThreadPreemptTime    = "host.thread.preemption.time"
	MetricThreadPreemptors     = "host.thread.preemptor.processes"
	MetricThreadBlockedTime    = "host.thread.blocked.time"
	MetricThreadBlocks         = "host.thread.blocks"
	MetricThreadWakerThreads   = "host.thread.waker.threads"
	MetricProcessForks         = "host.process.forks"
	MetricProcessPageAllocs    = "host.process.page_allocs"
	MetricBlockIODuration      = "host.block.io.duration"
	MetricBlockIOBytes         = "host.block.io.bytes"
	MetricHostRunQueue         = "host.sched.runqueue.latency"
	MetricHostPageAllocsOther  = "host.memory.page_allocs"
	MetricTCPRetransmits       = "host.tcp.retransmits"
	MetricReceiverEvents       = "fathom.receiver.events"
	MetricReceiverDrops        = "fathom.receiver.drops"
	MetricReceiverProbes       = "fathom.receiver.probes"
	MetricRankDeviceWait       = "fathom.rank.device_wait.time"
	MetricRankHostLead         = "fathom.rank.host_lead.time"
	MetricRankLaunches         = "fathom.rank.launches"
	MetricRankRunQueue         = "fathom.rank.run_queue.time"
	MetricRankCPUTime          = "fathom.rank.cpu.time"
	MetricRankCPUPerCollective = "fathom.rank.cpu.per_collective"
	MetricStragglerScore       = "fathom.straggler.score"
	MetricStragglerFlag        = "fathom.straggler.flag"
	MetricStragglerThreshold   = "fathom.straggler.threshold"
	MetricStragglerMedian      = "fathom.straggler.median"
	MetricStragglerTimeLost    = "fathom.straggler.time_lost"
	MetricCausalChains         = "fathom.causal_chains"
	MetricRankArrivalLag       = "fathom.rank.arrival_lag"
	MetricRankTCPRetransmits   = "fathom.rank.tcp.retransmits"
	MetricNodeClockOffset      = "fathom.node.clock.offset"
	MetricNodeClockUncertain   = "fathom.node.clock.uncertainty"
	MetricNCCLDuration         = "nccl.call.duration"
	MetricNCCLCalls            = "nccl.calls"
	MetricNCCLBytes            = "nccl.bytes"
	MetricNCCLErrors           = "nccl.errors"
	MetricRDMAPortErrors       = "rdma.port.errors"
	MetricRDMAPortIO           = "rdma.port.io"
	MetricRDMAPortPackets      = "rdma.port.packets"
	MetricRDMAPortXmitWait     = "rdma.port.xmit_wait"
	MetricRDMAAsyncEvents      = "rdma.async_events"

	MetricGPUUtilization      = "hw.gpu.utilization"
	MetricGPUMemoryUsage      = "hw.gpu.memory.usage"
	MetricGPUMemoryLimit      = "hw.gpu.memory.limit"
	MetricGPUPower            = "hw.power"
	MetricGPUTemperature      = "hw.temperature"
	MetricGPUPowerLimit       = "fathom.gpu.power.limit"
	MetricGPUClock            = "fathom.gpu.clock.frequency"
	MetricGPUClockMax         = "fathom.gpu.clock.frequency.max"
	MetricGPUClockEvent       = "fathom.gpu.clock_event.active"
	MetricGPUPCIeGen          = "fathom.gpu.pcie.link.generation"
	MetricGPUPCIeGenMax       = "fathom.gpu.pcie.link.generation.max"
	MetricGPUPCIeWidth        = "fathom.gpu.pcie.link.width"
	MetricGPUPCIeWidthMax     = "fathom.gpu.pcie.link.width.max"
	MetricGPUPCIeReplays      = "fathom.gpu.pcie.replays"
	MetricGPUECCErrors        = "fathom.gpu.memory.ecc.errors"
	MetricGPURemappedRows     = "fathom.gpu.memory.remapped_rows"
	MetricGPURemapPending     = "fathom.gpu.memory.remap.pending"
	MetricGPURemapFailed      = "fathom.gpu.memory.remap.failed"
	MetricRankGPUClockDeficit = "fathom.rank.gpu.sm_clock.deficit"
	MetricRankGPUErrors       = "fathom.rank.gpu.errors"
	MetricRankRDMAXmitWait    = "fathom.rank.rdma.xmit_wait"
	MetricRankRDMAErrors      = "fathom.rank.rdma.errors"
)

// Log event names (event.name).
const (
	EventCUDACall       = "cuda.api.call"
	EventProcessFork    = "process.fork"
	EventProcessExec    = "process.exec"
	EventProcessExit    = "process.exit"
	EventBlockIO        = "host.block.io"
	EventTCPRetransmit  = "host.tcp.retransmit"
	EventNCCLCollective = "nccl.collective"
	EventNCCLCall       = "nccl.call"
	EventRDMAAsync      = "rdma.async_event"
	EventGPUXID         = "fathom.gpu.xid"
)

// Doc is one row of the generated convention tables.
type Doc struct {
	Name, Kind, Unit, Description string
}

// Attributes documents every attribute constant above.
var Attributes = []Doc{
	{HostName, "resource", "", "node the event was seen on"},
	{ProcessPID, "resource", "", "process id (tgid) on the node"},
	{ProcessExecutableName, "resource", "", "base name of /proc/PID/exe, or for a process gone from /proc of the executable the kernel recorded at its first traced call"},
	{ProcessCommandLine, "resource", "", "command line, truncated to 256 bytes"},
	{ContainerID, "resource", "", "container id parsed from the cgroup path"},
	{K8sPodUID, "resource", "", "pod uid parsed from the cgroup path"},
	{ClusterName, "resource", "", "cluster the node belongs to (node collector config)"},
	{JobName, "resource", "", "training or inference job (FATHOM_JOB, TORCHELASTIC_RUN_ID or SLURM_JOB_ID)"},
	{Rank, "resource", "", "global rank (RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK)"},
	{LocalRank, "resource", "", "rank on the node (LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK)"},
	{WorldSize, "resource", "", "number of ranks (WORLD_SIZE, SLURM_NTASKS, OMPI_COMM_WORLD_SIZE)"},
	{CgroupPath, "resource", "", "cgroup v2 path of the process"},
	{Synthetic, "resource", "", "true on everything the receiver's synthetic mode made up"},
	{Cohort, "resource", "", "group of ranks compared with each other: nccl:<nccl.comm.id> (a job's communicator), nccl-recovered:<id> (one the node named from its calls, nccl.comm.recovered), or a set the operator names"},
	{GPUModel, "resource", "", "GPU model, e.g. H100-SXM; prices straggler time in the Echo store's get_cost"},
	{GPUVendor, "resource", "", "whose GPU runtime the process calls: `nvidia` (CUDA runtime or driver API) or `amd` (HIP); `cuda.*` names and metrics cover both, with HIP's function names in cuda.api.name"},
	{CloudProvider, "resource", "", "cloud provider (OTel name); prices straggler time with fathom.gpu.model"},
	{StragglerState, "log", "", "on fathom.straggler records: straggler (beyond its cohort's line), silent (stopped reporting while its cohort reports), resolved, no_thresholds (a node lost the gateway's line), or stall (beyond the line for a while but back before it was flagged: a record, not a flag)"},
	{StragglerSource, "log", "", "on fathom.straggler records: gateway (the cohort compared at the gateway) or node (a node's own ranks judged against the line the gateway pushed back)"},
	{StragglerSignal, "point/log", "", "the per-rank signal compared, e.g. fathom.rank.device_wait.time"},
	{StragglerValue, "log", "", "on fathom.straggler records: the rank's value of the signal, per second of the interval"},
	{StragglerMedian, "log", "", "on fathom.straggler records: the cohort's median of the signal"},
	{StragglerThreshold, "log", "", "on fathom.straggler records: the cohort's line, median -/+ k x 1.4826 x MAD (floored)"},
	{StragglerScore, "log", "", "on fathom.straggler records: distance beyond the median in scaled MADs, positive in the worse direction"},
	{StragglerSince, "log", "", "on fathom.straggler records: when the rank's first interval beyond the line (or its last report) began, RFC 3339"},
	{InputCut, "log, point, scope, resource", "", "on a record, point, scope or resource the gateway's inputbounds processor cut: why, comma-separated (attribute_value: a value cut to max_attribute_value_bytes; attributes: attributes past max_attributes dropped)"},
	{StragglerWindow, "log", "s", "on fathom.straggler records of a rank flagged over a window (min_duration): the window's length; value, median, threshold and score are then the median of the rank's samples over it and that window's line"},
	{StragglerRule, "log", "", "on fathom.straggler records of state straggler: what flagged the rank: samples (enough of its last samples past the line), window (its median over a window past that window's line) evidence (its scores, less a drift, accumulated past a height over at least min_duration; docs/straggler.md) or pair (a cohort of two ranks: the difference between them moved away from the level learned over their healthy time, in this rank's worse direction; value is the rank's, median what it would read at that level)"},
	{ChainRootCause, "point/log", "", "on fathom.causal_chain records and the fathom.causal_chains gauge: the root-cause class (cpu_contention, dataloader_oversubscription, hidden_sync, memcpy_bound, io_stall, network_retransmits, graph_recapture, allocator_churn)"},
	{ChainSeverity, "point/log", "", "on fathom.causal_chain records and the fathom.causal_chains gauge: HIGH, MEDIUM or LOW, from the chain's cost (docs/causalchain.md)"},
	{ChainFix, "log", "", "on fathom.causal_chain records: what to change"},
	{ChainID, "log", "", "on fathom.causal_chain records: the chain's identity, the same on every record while its cause persists"},
	{ChainState, "log", "", "on fathom.causal_chain records: open (first found), update (severity changed, or a periodic restatement) or resolved (the evidence went away)"},
	{ChainSymptom, "log", "", "on fathom.causal_chain records: what the GPU-feeding side saw, with numbers (a call's tail, a rate)"},
	{ChainStack, "log", "", "on fathom.causal_chain records of a Python process: the Python stack (as fathom.python.stack) most of the process's recorded CUDA call time in the window came from; code.function, code.filepath and code.lineno name its innermost frame"},
	{ChainStackID, "log", "", "that stack's fathom.stack.id"},
	{ChainStackShare, "log", "1", "that stack's share of the process's recorded CUDA call time in the window"},
	{ChainEvidence, "log", "", "on fathom.causal_chain records: the host evidence over the window, with numbers"},
	{ChainTimeline, "log", "", "on fathom.causal_chain records: the cause's cost in each of the window's last intervals"},
	{ChainCost, "log", "", "on fathom.causal_chain records: share of the window the process's GPU-feeding threads lost to the cause; sets the severity"},
	{ChainSince, "log", "", "on fathom.causal_chain records: when the cause's first costly interval began, RFC 3339"},
	{NodeReady, "log", "", "on fathom.node.check records: true when every check that matters passed, so the receiver can trace in ebpf mode"},
	{NodeChecksFailed, "log", "", "on fathom.node.check records: names of the failed checks that make the node unready (kernel, btf, privileges, bpf_load, gpu_libraries)"},
	{NodeChecksWarned, "log", "", "on fathom.node.check records: names of the failed advisory checks (tracefs with a uprobe PMU, debugfs)"},
	{ReceiverMode, "log", "", "on fathom.node.check records: ebpf (real events) or synthetic (made-up events, nothing traced)"},
	{ThreadID, "point/log", "", "thread id; on thread metrics only for threads that call CUDA"},
	{CUDAAPIName, "point/log", "", "probed function, e.g. cudaLaunchKernel, cuMemcpyHtoD_v2"},
	{CUDALibrary, "point/log", "", "libcudart (runtime API) or libcuda (driver API)"},
	{CUDAMemcpyDir, "point/log", "", "host_to_device, device_to_host, device_to_device, host_to_host, default"},
	{CUDAResult, "log", "", "cudaError_t / CUresult returned"},
	{CUDAStream, "log", "", "stream handle (0: legacy default stream)"},
	{CUDAGrid, "log", "", "kernel grid dimensions x,y,z"},
	{CUDABlock, "log", "", "kernel block dimensions x,y,z"},
	{CUDABytes, "log", "By", "bytes copied or allocated"},
	{OffCPUReason, "point", "", "preempted (switched out while runnable) or voluntary (blocked)"},
	{ThreadRole, "point", "", "cuda (thread calls CUDA) or other (all other threads of the process)"},
	{PreemptorName, "point", "", "on a CUDA thread's preemption series: the thread name (comm) of the task the thread waited behind for a CPU, the task that took its CPU when it was preempted, or the task that held the CPU until it got it after waiting woken in the run queue; named by weight: each interval's 8 heaviest names get a series (as does a name that still holds one, up to 16), the rest of the interval's waits are counted under other, so a task that takes the thread's CPU is named however many names came before it; a series that begins after its process's first interval starts at the interval it was first credited in; swapper/N is the idle task taking a preempted thread's CPU"},
	{PreemptorSelf, "point", "", "on a CUDA thread's preemption series: true when the task it waited behind belongs to the collector's own process, so that its own cost is not blamed on the node"},
	{WakerName, "point", "", "on a CUDA thread's blocked series: the thread name (comm) of the task whose wakeup ended a voluntary wait (the first wakeup between switch-out and switch-in), interrupt when it came from interrupt context (a timer, a device, a softirq: the end of a sleep, a packet), none when no wakeup was seen (the wait began before the programs attached, or the wakeup came while the thread was still switching out); named by weight like fathom.preemptor.name (8 heaviest names an interval, up to 16 series), the rest under other"},
	{WakerSelf, "point", "", "on a CUDA thread's blocked series: true when the waker belongs to the blocked thread's own process (a lock held by its own threads), false for another process, an interrupt or none"},
	{BlockedOn, "point", "", "on a CUDA thread's blocked series: what the thread waited in, from the system call it blocked in: lock (futex, futex_waitv), io (read, write, pread, pwrite, readv, writev, fsync, fdatasync, io_uring_enter, io_getevents), sleep (nanosleep, clock_nanosleep), poll (poll, select, epoll waits, socket send/receive, accept, connect: waiting for a file descriptor or a peer), device (ioctl: real CUDA drivers block a sync in an ioctl; a sync that spins or waits on a condition variable shows as lock), other (any other system call, or none: a page fault, a kernel-internal wait)"},
	{DiskIODirection, "point/log", "", "read or write"},
	{NetworkType, "point/log", "", "ipv4 or ipv6"},
	{EventName, "log", "", "what the log record is about (see the event table)"},
	{DurationSeconds, "log", "s", "duration of the call or I/O"},
	{MedianSeconds, "log", "s", "running median of the same API across the node's traced processes, when the record is an outlier"},
	{NotableReason, "log", "", "why a record passed the notable policy: outlier, oom, error, lifecycle, graph, retransmit, sample (a CUDA call recorded as one in stacks.sample_every of its thread, for its stack)"},
	{CodeFunction, "log", "", "the function (qualified name) of the innermost Python frame the call was made from, on a CUDA call record of a CPython process"},
	{CodeFilepath, "log", "", "that frame's file (co_filename)"},
	{CodeLineno, "log", "", "that frame's line"},
	{PythonStack, "log", "", "the calling thread's Python frames, innermost first, as \"function (file:line)\" joined by \" < \"; at most 32 frames, \" < ...\" when cut"},
	{NativeStack, "log", "", "the calling thread's native user stack on a CUDA call record, innermost first, as \"symbol+0xoff (file)\" (\"file+0xoff\" without a symbol) joined by \" < \": the return address into the caller first, 16 frames at most, by frame pointers (cut where a return address falls in no mapped file)"},
	{StackID, "log", "", "16 hex digits naming the stack: FNV-1a of fathom.python.stack, or of fathom.native.stack for a process without Python frames; equal stacks, equal ids"},
	{ParentPID, "log", "", "parent of a forked process"},
	{ExitCode, "log", "", "exit code of an exited process; 128 + the signal for one killed by a signal"},
	{SourceAddress, "log", "", "local address of a retransmitting socket"},
	{SourcePort, "log", "", "local port"},
	{DestAddress, "log", "", "peer address"},
	{DestPort, "log", "", "peer port"},
	{ReceiverDropCause, "point", "", "why events (or what they carry) were lost: ringbuf_full, entry_missing, traced_set_full, call_stats_full (a call of a process with no kernel statistics slot, sent as a record instead: counted, not lost), call_stats_read, log_rate, nccl_log_rate, nccl_sample_comms (a collective of a process's 65th or later named communicator, kept one in logs.nccl.sample_every instead of by its communicator's rate), cardinality, decode, consumer_refused (records the next component refused), attach_failed (a library that could not be probed), rescan_queue_full (an exec not followed by scans), attach_queue_full (a library mapping left to the scans: attach on first use fell behind), first_load_hold_expired (a process held at its first load of a library file continued at discovery.first_load_hold before its probes were on: its calls until then are not seen), first_load_hold_overflow (a process held past the 4,096 held at once, or while the collector stopped, continued at once), python_queue_full (a new process not looked at for a Python interpreter: its records carry no Python frames), python_stacks (a CPython process whose frames cannot be read: an unsupported or free-threaded version, a stripped interpreter, no memory access; its records carry none), python_frames (a record whose captured frames could not all be read from the process: a code object freed meanwhile), stack_cap (a CUDA call record of a process that already sent 256 distinct stacks whole in the minute: it carries no stack), rdma_sysfs (an unreadable RDMA counter poll), cgroup_unresolved (a process gone from /proc whose cgroup could not be found by id: removed, or no CAP_DAC_READ_SEARCH), program_recursion (runs of a BPF program the kernel skipped because it was already running on that CPU, e.g. a block completion in an interrupt over another: what they would have counted is lost), nvml_read (a reading of the GPUs in which NVML could not read some GPU or field: what it read is kept), rocm_smi_read (the same for ROCm SMI, AMD's), preemptor_processes (a CUDA thread's wait for a CPU behind a process its preemptor name's set of 64 distinct processes had no room for: the wait and its time are counted, host.thread.preemptor.processes stays at 64), preemptor_names (a CUDA thread's wait behind a name its table of an interval's 32 names not yet holding a series had to let go for a new one, the name with the least estimated time (Space-Saving): the wait and its time are counted under other, the name is not), waker_names (a CUDA thread's voluntary wait ended by a waker name its table of an interval's 32 candidates let go, as for preemptor_names: counted under other), waker_threads (a waker thread a waker series' set of 64 distinct threads had no room for: the wait is counted, host.thread.waker.threads stays at 64)"},
	{MetricTemporality, "stored row", "", "on Echo store rows of sums and histograms: the point's aggregation temporality, cumulative (a total since the series began) or delta (this interval only), written by the duckdb exporter; Echo tools total a window with it"},
	{NCCLCommID, "point/log", "", "communicator: 16 hex digits of FNV-1a 64 over its 128-byte ncclUniqueId, the same on every rank"},
	{NCCLCommRecovered, "point/log", "", "true on a communicator whose setup the collector did not see (the job made it before the collector ran): its nccl.comm.id is made from the job (fathom.job.name and the rendezvous address) and the shapes of its collectives, the same on every rank, not from the unique id; it carries no nccl.seq but nccl.seq.local (docs/gpuebpf.md, Communicators made before the collector)"},
	{NCCLRank, "point/log", "", "rank in the communicator (-1: unknown, e.g. after ncclCommSplit)"},
	{NCCLNRanks, "point/log", "", "ranks in the communicator (-1: unknown)"},
	{NCCLOp, "point/log", "", "all_reduce, all_gather, reduce_scatter, broadcast, bcast, reduce, send, recv, group_start, group_end, comm_init_rank, comm_init_rank_config, comm_init_all, comm_split, comm_destroy, comm_abort"},
	{NCCLSeq, "log", "", "collectives: per (communicator, rank) call number, equal on every rank for the same collective; send/recv: per (communicator, peer, direction)"},
	{NCCLSeqLocal, "log", "", "collectives on a recovered communicator (nccl.comm.recovered): the process's own count of its collectives on it since its collector began watching, which differs from another rank's by a constant the gateway learns (docs/straggler.md, Arrival lag); kept in bursts of 16 consecutive collectives from the first entered after each wall-clock second"},
	{NCCLPeer, "log", "", "send/recv peer rank, or broadcast/reduce root"},
	{NCCLCount, "log", "", "element count argument"},
	{NCCLBytes, "log", "By", "count x element size"},
	{NCCLDataType, "log", "", "ncclDataType_t: float32, bfloat16 ..."},
	{NCCLReduceOp, "log", "", "ncclRedOp_t: sum, prod, max, min, avg, custom"},
	{NCCLStream, "log", "", "CUDA stream the operation was enqueued on"},
	{NCCLGroupDepth, "log", "", "ncclGroupStart nesting at the call; > 0: the call only queued work, ncclGroupEnd ran it"},
	{NCCLResult, "log", "", "ncclResult_t returned"},
	{NCCLEntryTime, "log", "ns", "wall-clock time the call was entered (also the record's timestamp)"},
	{NCCLReturnTime, "log", "ns", "wall-clock time the call returned"},
	{RDMADevice, "point/log", "", "RDMA device, e.g. mlx5_0"},
	{RDMAPort, "point/log", "", "port number of the device"},
	{RDMATransport, "point", "", "infiniband or roce (from the port's link_layer)"},
	{RDMACounter, "point", "", "sysfs error counter: port_rcv_errors, symbol_error, link_downed, port_xmit_discards, local_link_integrity_errors ..."},
	{NetworkDirection, "point", "", "receive or transmit"},
	{RDMAEventType, "point/log", "", "enum ibv_event_type without IBV_EVENT_: PORT_ERR, PORT_ACTIVE, QP_FATAL, DEVICE_FATAL, GID_CHANGE ..."},
	{RDMAFabricError, "point/log", "", "true for events that mean something failed (port, QP, CQ, SRQ, WQ, device, path migration)"},
	{HWID, "point/log", "", "the GPU's UUID (GPU-...), as nvidia-smi -L prints it"},
	{HWName, "point", "", "the GPU's product name (NVIDIA H100 80GB HBM3)"},
	{HWVendor, "point", "", "NVIDIA"},
	{GPUIndex, "point/log", "", "NVML's index of the GPU on the node (which may differ from a process's CUDA device number under CUDA_VISIBLE_DEVICES)"},
	{GPUBusID, "point/log", "", "PCI address, domain:bus:device.function"},
	{GPUClockDomain, "point", "", "sm or memory"},
	{GPUClockReason, "point", "", "why the clocks are below their maximum, from NVML's clock event reasons: gpu_idle, applications_clocks_setting, sw_power_cap, hw_slowdown, sync_boost, sw_thermal_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown, display_clock_setting"},
	{GPUMemoryErrorType, "point", "", "corrected or uncorrected (ECC)"},
	{GPURemapCause, "point", "", "correctable or uncorrectable: the kind of memory error that retired the rows"},
	{GPUXIDCode, "log", "", "the XID number the driver reported (79: fallen off the bus, 48: double-bit ECC, 94/95: contained/uncontained ECC, 63/64: row remapping)"},
	{SignalDetail, "point", "", "on a rank's signal point: a short text on what the value means for this rank, carried into the straggler record that names it"},
}

// Metrics documents every metric.
var Metrics = []Doc{
	{MetricCUDAAPIDuration, "exponential histogram", "s", "duration of each probed CUDA call, per process and API"},
	{MetricCUDAAPICalls, "sum", "{call}", "calls per process, API (and copy direction)"},
	{MetricCUDAAPIErrors, "sum", "{call}", "calls that returned an error"},
	{MetricCUDAMemcpyBytes, "sum", "By", "bytes copied per API and direction"},
	{MetricCUDAMallocBytes, "sum", "By", "bytes requested from device allocators"},
	{MetricCUDAGraphLaunches, "sum", "{launch}", "CUDA graph launches (runtime and driver)"},
	{MetricThreadOffCPU, "exponential histogram", "s", "time threads of traced processes spent off CPU, by reason"},
	{MetricThreadRunQueue, "exponential histogram", "s", "time threads of traced processes waited runnable for a CPU"},
	{MetricThreadPreemptions, "sum", "{preemption}", "a CUDA thread's waits for a CPU, by the name of the task it waited behind (fathom.preemptor.name, fathom.preemptor.self): preempted (switched out while still runnable), attributed to the task that took its CPU, or woken and waiting in the run queue, attributed to the task that ran until the thread got the CPU (none when the CPU was idle)"},
	{MetricThreadPreemptTime, "sum", "s", "time of those waits, by the name of the task waited behind: a preemption's off-CPU time (switch-out to switch-in), a woken wait's run-queue time (wakeup to switch-in)"},
	{MetricThreadPreemptors, "gauge", "{process}", "distinct processes (tgids) a CUDA thread waited behind for a CPU under that name, since the series began (per interval under delta temporality); saturates at 64"},
	{MetricThreadBlockedTime, "sum", "s", "time a CUDA thread spent blocked voluntarily (switched out while not runnable, until its wakeup), by who woke it (fathom.waker.name, fathom.waker.self) and what it waited in (fathom.blocked.on); cumulative like the other thread sums"},
	{MetricThreadBlocks, "sum", "{wait}", "a CUDA thread's voluntary waits, same attributes as host.thread.blocked.time"},
	{MetricThreadWakerThreads, "gauge", "{thread}", "distinct thread ids that woke a CUDA thread in that series (same attributes as host.thread.blocked.time, fathom.blocked.on included: sum over it for a name's wakers, which may count a thread twice), since the series began (per interval under delta temporality); saturates at 64; 0 for interrupt and none"},
	{MetricProcessForks, "sum", "{process}", "child processes forked by a traced process (DataLoader workers)"},
	{MetricProcessPageAllocs, "sum", "{page}", "pages allocated by a traced process (aggregated in the kernel)"},
	{MetricBlockIODuration, "exponential histogram", "s", "block I/O latency of requests a traced process issued"},
	{MetricBlockIOBytes, "sum", "By", "block I/O bytes on the node, by direction"},
	{MetricHostRunQueue, "histogram", "s", "run-queue latency of every other thread on the node (log2 buckets from the kernel); a traced thread's first wait, before it was ever switched out as traced, counts here"},
	{MetricHostPageAllocsOther, "sum", "{page}", "pages allocated by untraced processes on the node"},
	{MetricTCPRetransmits, "sum", "{segment}", "TCP retransmits on the node, by network type"},
	{MetricReceiverEvents, "sum", "{event}", "events the receiver decoded, by event.name"},
	{MetricReceiverDrops, "sum", "{event}", "events lost, by reason"},
	{MetricReceiverProbes, "gauge", "{probe}", "attached probes (uprobes, uretprobes, tracepoints)"},
	{MetricNCCLDuration, "exponential histogram", "s", "duration of NCCL calls per process, communicator, rank and op"},
	{MetricNCCLCalls, "sum", "{call}", "NCCL calls per process, communicator, rank and op"},
	{MetricStragglerScore, "gauge", "1", "per rank and signal: distance from its cohort's median in scaled MADs, positive in the worse direction (straggler processor)"},
	{MetricStragglerFlag, "gauge", "1", "per rank and signal: 1 while the rank is flagged a straggler, else 0 (straggler processor)"},
	{MetricStragglerThreshold, "gauge", "", "per cohort and signal: the line beyond which a rank counts as beyond, in the signal's unit per second (straggler processor)"},
	{MetricStragglerMedian, "gauge", "", "per cohort and signal: the median across its ranks (straggler processor)"},
	{MetricRankTCPRetransmits, "sum", "{segment}", "per process: TCP segments retransmitted from sockets it holds (matched by the socket's inode in /proc/PID/fd: a retransmit fires from a timer, in whatever task was running); every traced process gets a point, zero included"},
	{MetricRankArrivalLag, "gauge", "s", "per rank and evaluation: the mean, over the sampled collective instances matched since the last evaluation, of how long after the instance's median rank it entered, each entry taken back by its node's clock offset (straggler processor, gateway)"},
	{MetricNodeClockOffset, "gauge", "s", "the node collector's clock minus the gateway's, from the times traded in its exports and their answers, the exchange with the shortest round trip of the last two minutes (straggler processor, node)"},
	{MetricNodeClockUncertain, "gauge", "s", "half the round trip of the exchange fathom.node.clock.offset comes from: the most it can be off (straggler processor, node)"},
	{MetricCausalChains, "gauge", "{chain}", "causal chains open on the node, by fathom.chain.root_cause and fathom.chain.severity (causalchain processor)"},
	{MetricStragglerTimeLost, "sum", "s", "delta, per flagged rank and interval: GPU time its peers spent waiting for it, its lag behind the median of a time signal (seconds per second) x the interval x its peers; the larger where two signals flag it (straggler processor, gateway)"},
	{MetricRankDeviceWait, "sum", "s", "time a process's threads spent in CUDA calls that wait for the device (stream, event, device and context syncs, blocking copies, cudaFree) and in NCCL calls that wait for peers (collectives, send/recv, group end); per interval, the straggler of a job waits least"},
	{MetricRankHostLead, "sum", "s", "per collective, the time from the last return of any of the process's threads from a device wait to its entry into the collective, summed (frameworks issue collectives from another thread than the one that syncs); per interval, the straggler of a job leads most (its host is what the others wait for)"},
	{MetricRankLaunches, "sum", "{launch}", "kernel and graph launches a process made (cudaLaunchKernel, cuLaunchKernel, cudaGraphLaunch and their variants); for ranks that do not wait for each other, the slow one launches least"},
	{MetricRankRunQueue, "sum", "s", "time a process's CUDA-calling threads were runnable but not running (preempted, or woken and waiting for a CPU)"},
	{MetricRankCPUTime, "sum", "s", "time a process's CUDA-calling threads ran on a CPU (the scheduler's account, /proc/PID/task/TID/schedstat), since the collector first read each; per interval, the rank of a synchronous job whose host does more work per step runs most, busy host or not"},
	{MetricRankCPUPerCollective, "gauge", "s", "per process: the CPU time of its CUDA-calling threads between two reads at its collectives (at least half a second apart, or a step where steps are longer) over the collectives it made between them; the ranks of a job make the same collectives, so the one whose host does more work per step spends more a collective, however its steps' timing varies"},
	{MetricNCCLBytes, "sum", "By", "bytes named by NCCL calls (count x element size) per communicator, rank and op"},
	{MetricNCCLErrors, "sum", "{call}", "NCCL calls that returned an error"},
	{MetricRDMAPortErrors, "sum", "{error}", "sysfs error counters of RDMA ports, by device, port, transport and counter"},
	{MetricRDMAPortIO, "sum", "By", "bytes through RDMA ports (port_rcv_data / port_xmit_data x 4), by direction"},
	{MetricRDMAPortPackets, "sum", "{packet}", "packets through RDMA ports, by direction"},
	{MetricRDMAPortXmitWait, "sum", "{tick}", "ticks an RDMA port had data to send but no credits (congestion)"},
	{MetricRDMAAsyncEvents, "sum", "{event}", "verbs asynchronous events received on the node, by type and fabric_error"},
	{MetricGPUUtilization, "gauge", "1", "share of NVML's last sample period with a kernel running on the GPU, 0 to 1 (NVML)"},
	{MetricGPUMemoryUsage, "gauge", "By", "device memory in use (NVML)"},
	{MetricGPUMemoryLimit, "gauge", "By", "device memory installed (NVML)"},
	{MetricGPUPower, "gauge", "W", "power the GPU draws (NVML)"},
	{MetricGPUTemperature, "gauge", "Cel", "GPU die temperature (NVML)"},
	{MetricGPUPowerLimit, "gauge", "W", "power limit the driver enforces (NVML)"},
	{MetricGPUClock, "gauge", "MHz", "clock frequency now, by domain (sm, memory) (NVML)"},
	{MetricGPUClockMax, "gauge", "MHz", "the highest clock frequency of the domain (NVML)"},
	{MetricGPUClockEvent, "gauge", "1", "1 while the reason holds the GPU's clocks down, else 0, for every reason (NVML)"},
	{MetricGPUPCIeGen, "gauge", "1", "PCIe generation the link trained to (NVML)"},
	{MetricGPUPCIeGenMax, "gauge", "1", "highest PCIe generation of the GPU and its slot (NVML)"},
	{MetricGPUPCIeWidth, "gauge", "{lane}", "PCIe lanes the link trained to; below the maximum, the link is downtrained (NVML)"},
	{MetricGPUPCIeWidthMax, "gauge", "{lane}", "PCIe lanes of the GPU and its slot (NVML)"},
	{MetricGPUPCIeReplays, "sum", "{packet}", "PCIe packets the link resent since the driver loaded (NVML)"},
	{MetricGPUECCErrors, "sum", "{error}", "device memory ECC errors since the driver loaded, by type (NVML)"},
	{MetricGPURemappedRows, "gauge", "{row}", "device memory rows remapped to spares, by cause (NVML)"},
	{MetricGPURemapPending, "gauge", "1", "1 while a row remap waits for the next GPU reset (NVML)"},
	{MetricGPURemapFailed, "gauge", "1", "1 once a remap failed: the GPU has no spare rows left (NVML)"},
	{MetricRankGPUErrors, "sum", "{error}", "per rank process: PCIe replays and ECC errors (corrected and uncorrected) its GPU counted since the process was first seen on it; a rank whose GPU's link or memory is failing counts more than its cohort (higher is worse); its detail says how many of each"},
	{MetricRankRDMAXmitWait, "sum", "{tick}", "per rank process: ticks the RDMA ports NCCL may use for it (its NCCL_IB_HCA) waited for credits to send, summed over those ports, since the rank was first seen; a rank behind a congested link waits most (higher is worse); its detail names the ports"},
	{MetricRankRDMAErrors, "sum", "{error}", "per rank process: the error counters (symbol errors, link downs, discards ...) of the RDMA ports NCCL may use for it, summed, since the rank was first seen; higher is worse"},
	{MetricRankGPUClockDeficit, "gauge", "1", "per rank process: 1 minus its GPU's SM clock over the clock's maximum (0: full clock), from NVML (ROCm SMI for AMD) with each collection and each rank sample, the GPU found by NVML's list of the processes running on it; a throttled GPU's rank runs further below its maximum than its cohort (higher is worse), and its point's detail names the GPU and the reasons"},
}

// Events documents every log event name.
var Events = []Doc{
	{EventCUDACall, "log", "", "one CUDA call: API, duration, bytes, direction, stream, grid/block, result"},
	{EventGPUXID, "log", "", "a critical error (XID) the NVIDIA driver reported for a GPU, the moment NVML's event set delivers it, with the GPU and the ranks running on it"},
	{EventProcessFork, "log", "", "a traced process forked a child"},
	{EventProcessExec, "log", "", "a traced process ran exec"},
	{EventProcessExit, "log", "", "a traced process exited"},
	{EventBlockIO, "log", "", "a block I/O request of a traced process completed"},
	{EventTCPRetransmit, "log", "", "a TCP segment was retransmitted on the node"},
	{EventCausalChain, "log", "", "a host event tied to CUDA/NCCL tail latency, with root cause and fix"},
	{EventNCCLCollective, "log", "", "one collective or send/recv: communicator, rank, op, seq, entry and return times, bytes, peer (docs/nccl.md)"},
	{EventNCCLCall, "log", "", "one other NCCL call: communicator setup and teardown, group start/end"},
	{EventNodeCheck, "log", "", "what fathom check finds on the node (kernel, BTF, privileges, tracefs, BPF load, GPU libraries): at the receiver's start, when a result changes, and at least every readiness.report_interval"},
	{EventRDMAAsync, "log", "", "a verbs asynchronous event on the node: device, type, port"},
}

// The probed GPU runtime functions (cuda.api.name values) by what they do, CUDA's and
// HIP's together: the one list the receiver's signals, the causal-chain rules and the
// Echo tools read.
var (
	// LaunchAPIs put kernels, or graphs of them, on the device.
	LaunchAPIs = []string{"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernel_ptsz",
		"cuLaunchKernelEx", "cudaGraphLaunch", "cuGraphLaunch",
		"hipLaunchKernel", "hipModuleLaunchKernel", "hipExtLaunchKernel", "hipGraphLaunch"}
	// GraphLaunchAPIs launch a captured graph.
	GraphLaunchAPIs = []string{"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"}
	// MemcpyAPIs copy memory, either direction, blocking or not.
	MemcpyAPIs = []string{"cudaMemcpy", "cudaMemcpyAsync", "cuMemcpy", "cuMemcpyAsync", "cuMemcpyHtoD_v2",
		"cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoDAsync_v2",
		"hipMemcpy", "hipMemcpyAsync", "hipMemcpyHtoD", "hipMemcpyDtoH"}
	// BlockingReadAPIs are the copies that block the host until the device has produced
	// the data: a .item(), .cpu() or .numpy() in the step loop.
	BlockingReadAPIs = []string{"cudaMemcpy", "cuMemcpy", "cuMemcpyDtoH_v2", "hipMemcpy", "hipMemcpyDtoH"}
	// MallocAPIs ask a device allocator for memory.
	MallocAPIs = []string{"cudaMalloc", "cudaMallocAsync", "cuMemAlloc_v2", "hipMalloc", "hipMallocAsync"}
	// FreeAPIs give it back synchronously (cudaFree waits for the device).
	FreeAPIs = []string{"cudaFree", "cuMemFree_v2", "hipFree"}
)
