// Package semconv names every attribute and metric Fathom emits, in one place.
// OpenTelemetry semantic-convention names are used where they exist (host.name,
// process.pid, thread.id, k8s.*, container.id); Fathom's own live under fathom.*,
// and probe data under cuda.*, nccl.*, rdma.*. docs/semconv.md is generated from the
// tables below (go generate), so the doc never drifts from the code.
package semconv

//go:generate go run ./gendoc -out ../../docs/semconv.md

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
	CloudProvider         = "cloud.provider"
)

// The causal-chain records the node pipeline writes (log records with event.name
// EventCausalChain), which the Echo store serves to agents.
const (
	EventCausalChain = "fathom.causal_chain"
	ChainRootCause   = "fathom.chain.root_cause"
	ChainSeverity    = "fathom.chain.severity"
	ChainFix         = "fathom.chain.fix"
)

// Data point and log attributes.
const (
	ThreadID          = "thread.id"
	CUDAAPIName       = "cuda.api.name"
	CUDALibrary       = "cuda.library"
	CUDAMemcpyDir     = "cuda.memcpy.direction"
	CUDAResult        = "cuda.api.result"
	CUDAStream        = "cuda.stream"
	CUDAGrid          = "cuda.kernel.grid"
	CUDABlock         = "cuda.kernel.block"
	CUDABytes         = "cuda.bytes"
	OffCPUReason      = "fathom.off_cpu.reason"
	ThreadRole        = "fathom.thread.role"
	DiskIODirection   = "disk.io.direction"
	NetworkType       = "network.type"
	EventName         = "event.name"
	DurationSeconds   = "fathom.duration_s"
	MedianSeconds     = "fathom.median_s"
	NotableReason     = "fathom.notable.reason"
	ParentPID         = "process.parent_pid"
	ExitCode          = "process.exit.code"
	SourceAddress     = "source.address"
	SourcePort        = "source.port"
	DestAddress       = "destination.address"
	DestPort          = "destination.port"
	ReceiverDropCause = "fathom.drop.reason"
)

// Metric names.
const (
	MetricCUDAAPIDuration     = "cuda.api.duration"
	MetricCUDAAPICalls        = "cuda.api.calls"
	MetricCUDAAPIErrors       = "cuda.api.errors"
	MetricCUDAMemcpyBytes     = "cuda.memcpy.bytes"
	MetricCUDAMallocBytes     = "cuda.malloc.bytes"
	MetricCUDAGraphLaunches   = "cuda.graph.launches"
	MetricThreadOffCPU        = "host.thread.off_cpu.duration"
	MetricThreadRunQueue      = "host.thread.runqueue.latency"
	MetricProcessForks        = "host.process.forks"
	MetricProcessPageAllocs   = "host.process.page_allocs"
	MetricBlockIODuration     = "host.block.io.duration"
	MetricBlockIOBytes        = "host.block.io.bytes"
	MetricHostRunQueue        = "host.sched.runqueue.latency"
	MetricHostPageAllocsOther = "host.memory.page_allocs"
	MetricTCPRetransmits      = "host.tcp.retransmits"
	MetricReceiverEvents      = "fathom.receiver.events"
	MetricReceiverDrops       = "fathom.receiver.drops"
	MetricReceiverProbes      = "fathom.receiver.probes"
)

// Log event names (event.name).
const (
	EventCUDACall      = "cuda.api.call"
	EventProcessFork   = "process.fork"
	EventProcessExec   = "process.exec"
	EventProcessExit   = "process.exit"
	EventBlockIO       = "host.block.io"
	EventTCPRetransmit = "host.tcp.retransmit"
)

// Doc is one row of the generated convention tables.
type Doc struct {
	Name, Kind, Unit, Description string
}

// Attributes documents every attribute constant above.
var Attributes = []Doc{
	{HostName, "resource", "", "node the event was seen on"},
	{ProcessPID, "resource", "", "process id (tgid) on the node"},
	{ProcessExecutableName, "resource", "", "executable name (comm)"},
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
	{Cohort, "resource", "", "group of ranks compared with each other (a job's communicator, or a set the operator names)"},
	{GPUModel, "resource", "", "GPU model, e.g. H100-SXM; prices straggler time in the Echo store's get_cost"},
	{CloudProvider, "resource", "", "cloud provider (OTel name); prices straggler time with fathom.gpu.model"},
	{ChainRootCause, "log", "", "on fathom.causal_chain records: the host cause found"},
	{ChainSeverity, "log", "", "on fathom.causal_chain records: how much GPU time the chain cost"},
	{ChainFix, "log", "", "on fathom.causal_chain records: what to change"},
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
	{DiskIODirection, "point/log", "", "read or write"},
	{NetworkType, "point/log", "", "ipv4 or ipv6"},
	{EventName, "log", "", "what the log record is about (see the event table)"},
	{DurationSeconds, "log", "s", "duration of the call or I/O"},
	{MedianSeconds, "log", "s", "running median of the same API in the same process, when the record is an outlier"},
	{NotableReason, "log", "", "why a record passed the notable policy: outlier, error, lifecycle, graph, retransmit"},
	{ParentPID, "log", "", "parent of a forked process"},
	{ExitCode, "log", "", "exit code of an exited process"},
	{SourceAddress, "log", "", "local address of a retransmitting socket"},
	{SourcePort, "log", "", "local port"},
	{DestAddress, "log", "", "peer address"},
	{DestPort, "log", "", "peer port"},
	{ReceiverDropCause, "point", "", "why events were lost: ringbuf_full, entry_missing, traced_set_full, log_rate, cardinality, decode"},
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
	{MetricProcessForks, "sum", "{process}", "child processes forked by a traced process (DataLoader workers)"},
	{MetricProcessPageAllocs, "sum", "{page}", "pages allocated by a traced process (aggregated in the kernel)"},
	{MetricBlockIODuration, "exponential histogram", "s", "block I/O latency of requests a traced process issued"},
	{MetricBlockIOBytes, "sum", "By", "block I/O bytes on the node, by direction"},
	{MetricHostRunQueue, "histogram", "s", "run-queue latency of every other thread on the node (log2 buckets from the kernel)"},
	{MetricHostPageAllocsOther, "sum", "{page}", "pages allocated by untraced processes on the node"},
	{MetricTCPRetransmits, "sum", "{segment}", "TCP retransmits on the node, by network type"},
	{MetricReceiverEvents, "sum", "{event}", "events the receiver decoded, by event.name"},
	{MetricReceiverDrops, "sum", "{event}", "events lost, by reason"},
	{MetricReceiverProbes, "gauge", "{probe}", "attached probes (uprobes, uretprobes, tracepoints)"},
}

// Events documents every log event name.
var Events = []Doc{
	{EventCUDACall, "log", "", "one CUDA call: API, duration, bytes, direction, stream, grid/block, result"},
	{EventProcessFork, "log", "", "a traced process forked a child"},
	{EventProcessExec, "log", "", "a traced process ran exec"},
	{EventProcessExit, "log", "", "a traced process exited"},
	{EventBlockIO, "log", "", "a block I/O request of a traced process completed"},
	{EventTCPRetransmit, "log", "", "a TCP segment was retransmitted on the node"},
	{EventCausalChain, "log", "", "a host event tied to CUDA/NCCL tail latency, with root cause and fix"},
}
