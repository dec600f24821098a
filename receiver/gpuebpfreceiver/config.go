package gpuebpfreceiver

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"
)

// Mode selects where events come from.
const (
	// ModeEBPF loads the BPF programs: real events, needs root (or CAP_BPF+CAP_PERFMON).
	ModeEBPF = "ebpf"
	// ModeSynthetic makes up realistic events without privileges, for demos and for
	// trying pipelines; everything it emits carries fathom.synthetic=true.
	ModeSynthetic = "synthetic"
)

// Log policies.
const (
	LogsAll     = "all"     // every CUDA call, I/O and lifecycle event (rate-capped)
	LogsNotable = "notable" // tail outliers, errors, lifecycle, graph capture, retransmits
	LogsNone    = "none"
)

// Temporalities of the sums and histograms.
const (
	TemporalityCumulative = "cumulative"
	TemporalityDelta      = "delta"
)

// Config is the gpuebpf receiver's configuration.
type Config struct {
	// Mode is "ebpf" (default) or "synthetic".
	Mode string `mapstructure:"mode"`
	// CollectionInterval is how often metrics are emitted.
	CollectionInterval time.Duration `mapstructure:"collection_interval"`
	// RankSignals samples the signals the straggler loop compares more often than the
	// collection interval.
	RankSignals RankSignalsConfig `mapstructure:"rank_signals"`
	// Temporality of sums and histograms: "cumulative" (default, with start times) or "delta".
	Temporality string `mapstructure:"temporality"`
	// ClusterName, when set, is stamped on every resource as fathom.cluster.name.
	ClusterName string `mapstructure:"cluster_name"`
	// HostName is the node's name on every resource (host.name); empty means the
	// machine's hostname. A DaemonSet sets it from the downward API (spec.nodeName);
	// several node collectors on one machine (tests, the demo) each take their own.
	HostName string `mapstructure:"host_name"`

	Targets   TargetsConfig   `mapstructure:"targets"`
	Discovery DiscoveryConfig `mapstructure:"discovery"`
	Logs      LogsConfig      `mapstructure:"logs"`
	Stacks    StacksConfig    `mapstructure:"stacks"`
	Limits    LimitsConfig    `mapstructure:"limits"`
	Synthetic SyntheticConfig `mapstructure:"synthetic"`
	RDMA      RDMAConfig      `mapstructure:"rdma"`
	NVML      NVMLConfig      `mapstructure:"nvml"`
	ROCmSMI   ROCmSMIConfig   `mapstructure:"rocm_smi"`
	Readiness ReadinessConfig `mapstructure:"readiness"`
	// KernelState keeps what the kernel knows across collector restarts.
	KernelState KernelStateConfig `mapstructure:"kernel_state"`

	_ struct{}
}

// KernelStateConfig says where the BPF maps are pinned so that the next collector on
// the node (a DaemonSet rolling update, a crash) adopts them: the traced set, NCCL
// communicators and sequence numbers, calls in flight. Only the state of the same
// build and settings is adopted. Off by default: several node collectors on one host
// (tests, the demo) need a directory each.
type KernelStateConfig struct {
	// PinDir is a directory on a bpf file system, e.g. /sys/fs/bpf/fathom; "" pins
	// nothing.
	PinDir string `mapstructure:"pin_dir"`
	// KeepProbes (with pin_dir) leaves the library probes attached, pinned, while no
	// collector runs, and hands the next collector of the same build the counts this
	// one last exported: a restart loses no call (docs/operating.md). Removing Fathom
	// from a node then means removing pin_dir after the collector stops. false
	// detaches them at stop. Default true.
	KeepProbes bool `mapstructure:"keep_probes"`
}

// TargetsConfig says which processes are traced.
type TargetsConfig struct {
	// All traces every process that loads a CUDA library (default true). When false,
	// only PIDs and Cgroups below (and their children) are traced.
	All bool `mapstructure:"all"`
	// PIDs to trace.
	PIDs []int `mapstructure:"pids"`
	// Cgroups to trace, as cgroup v2 paths relative to the cgroup root
	// (e.g. /kubepods.slice/...), or absolute paths under /sys/fs/cgroup. Each names
	// its whole subtree: the processes of the cgroup and of every cgroup below it
	// (a QoS slice's pods, a pod's containers, a Slurm job's steps).
	Cgroups []string `mapstructure:"cgroups"`
	// Libraries are extra library files to probe (e.g. a libcudart no running process
	// has loaded yet). Each must exist; the library kind is told from the file name.
	Libraries []string `mapstructure:"libraries"`
}

// DiscoveryConfig controls how libraries and processes are found.
type DiscoveryConfig struct {
	// ProcRoot is where /proc is mounted (a DaemonSet mounts the host's at /host/proc).
	ProcRoot string `mapstructure:"proc_root"`
	// CgroupRoot is where the cgroup v2 hierarchy is mounted. On a hybrid host, whose
	// /sys/fs/cgroup holds the v1 controllers, its unified/ subdirectory is used.
	CgroupRoot string `mapstructure:"cgroup_root"`
	// RescanInterval is how often every process's mappings are scanned for new
	// libraries; processes that exec are also scanned shortly after their exec.
	RescanInterval time.Duration `mapstructure:"rescan_interval"`
	// AttachOnMap attaches to a library the moment a process maps its code (from the
	// mmap tracepoints, through tracefs), not at the next scan: a job's first calls and
	// its NCCL communicators are seen (default true). Scans remain the fallback.
	AttachOnMap bool `mapstructure:"attach_on_map"`
	// FirstLoadHold is the longest a traced process is stopped when it maps a probed
	// library file that no probe is on yet (the first process on the node to load that
	// file), while its probes attach: without it, what the process calls in the first
	// milliseconds (a CUDA context, NCCL's communicator setup) is never seen. It is
	// continued as soon as the attach is done (a few milliseconds, docs/gpuebpf.md),
	// at this limit at the latest. 0 turns holding off. Needs attach_on_map; processes
	// with a controlling terminal or a debugger are never held.
	FirstLoadHold time.Duration `mapstructure:"first_load_hold"`
}

// StacksConfig controls where in a program the recorded calls are said to come from.
type StacksConfig struct {
	// Python reads, for each CUDA call record of a CPython process (3.9 to 3.14), the
	// calling thread's Python frames in the kernel, and puts the innermost on the
	// record (code.function, code.filepath, code.lineno) with the whole stack
	// (fathom.python.stack, fathom.stack.id). Default true.
	Python bool `mapstructure:"python"`
	// Native reads, for each CUDA call record, the calling thread's native user stack
	// (16 return addresses, by frame pointers) and names each frame's file and function
	// from its ELF symbols (fathom.native.stack). Libraries built without frame
	// pointers end it early (docs/stacks.md). Default true.
	Native bool `mapstructure:"native"`
	// SampleEvery records one CUDA call in this many of each thread, with its stacks,
	// whether it is notable or not (fathom.notable.reason=sample), so that get_stacks
	// knows where the ordinary calls come from, not only the slow ones. 0 (the default)
	// records none; 1000 costs a record's few microseconds once per 1,000 calls.
	SampleEvery int `mapstructure:"sample_every"`
}

// LogsConfig controls per-event log records.
type LogsConfig struct {
	// Policy is "notable" (default), "all" or "none".
	Policy string `mapstructure:"policy"`
	// MaxPerSecond caps log records per second; the rest are counted as dropped.
	MaxPerSecond int `mapstructure:"max_per_second"`
	// OutlierFactor: a call is a tail outlier when it takes longer than this many times
	// the running median of the same API across the node's traced processes (refreshed
	// every second; the kernel records only calls over it).
	OutlierFactor float64 `mapstructure:"outlier_factor"`
	// OutlierMinDuration ignores outliers shorter than this (microsecond jitter on
	// microsecond calls is not news).
	OutlierMinDuration time.Duration `mapstructure:"outlier_min_duration"`
	// NCCL shapes the per-call records of collectives (event.name nccl.collective).
	NCCL NCCLLogsConfig `mapstructure:"nccl"`
}

// NCCLLogsConfig shapes the nccl.collective records the gateway matches across ranks
// (docs/nccl.md explains the choice).
type NCCLLogsConfig struct {
	// SampleEvery keeps, under the notable policy, the collectives whose sequence number
	// is a multiple of it. The sequence is the same on every rank for the same
	// collective, so every rank keeps the same instances and each kept instance can be
	// matched in full. 1 keeps all. Errors and communicator setup are always kept.
	SampleEvery int `mapstructure:"sample_every"`
	// MinPerSecond keeps more of a communicator's collectives where it makes few: one
	// in sample_every, halved (down to every one) while fewer than this many a second
	// would be kept, so that a job of long steps still has its collectives matched and
	// its arrival lag judged every step. Every rank of a communicator chooses the same
	// from the same rate. 0 keeps one in sample_every always.
	MinPerSecond float64 `mapstructure:"min_per_second"`
	// MaxPerSecond caps nccl.* records per second on the node, apart from the other
	// records' cap; the rest are counted as dropped (nccl_log_rate).
	MaxPerSecond int `mapstructure:"max_per_second"`
}

// RDMAConfig controls the RDMA port counter poller.
type RDMAConfig struct {
	// SysfsRoot is where the RDMA devices are listed (/sys/class/infiniband; a DaemonSet
	// mounting the host's /sys elsewhere points it there). Missing: no RDMA on this host.
	SysfsRoot string `mapstructure:"sysfs_root"`
	// PollInterval is how often port counters are read (at most once per metrics
	// collection).
	PollInterval time.Duration `mapstructure:"poll_interval"`
}

// NVMLConfig controls GPU state from NVML (clocks and why they are held down, power,
// heat, memory, the PCIe link, memory errors, XIDs), read at every metrics collection
// and bound to the ranks running on each GPU.
type NVMLConfig struct {
	// Enabled reads GPU state where libnvidia-ml.so.1 loads (default true). A node
	// without the library says so once in the log and in its node check, and runs on
	// without these series.
	Enabled bool `mapstructure:"enabled"`
	// LibraryPath loads NVML from this file instead of the loader's search path (a
	// DaemonSet that mounts the host's driver libraries somewhere of its own).
	LibraryPath string `mapstructure:"library_path"`
}

// ROCmSMIConfig controls AMD GPU state from ROCm SMI (librocm_smi64.so.1: clocks,
// power, temperature, memory, the PCIe link, ECC), read beside NVML at every metrics
// collection into the same series and bound to the ranks on each GPU as NVIDIA's are.
type ROCmSMIConfig struct {
	// Enabled reads AMD GPU state where librocm_smi64.so.1 loads (default true). A node
	// without the library runs on without these series; its node check names it only
	// where a process runs AMD's HIP runtime.
	Enabled bool `mapstructure:"enabled"`
	// LibraryPath loads ROCm SMI from this file (an absolute path) instead of the
	// loader's search path (a DaemonSet that mounts the host's /opt/rocm/lib somewhere
	// of its own).
	LibraryPath string `mapstructure:"library_path"`
}

func (c ROCmSMIConfig) validate() []error {
	var errs []error
	if c.LibraryPath != "" && !filepath.IsAbs(c.LibraryPath) {
		errs = append(errs, fmt.Errorf("rocm_smi.library_path must be an absolute path to librocm_smi64.so.1 (e.g. /host/opt/rocm/lib/librocm_smi64.so.1), got %q", c.LibraryPath))
	}
	if c.LibraryPath != "" && !c.Enabled {
		errs = append(errs, errors.New("rocm_smi.library_path is set but rocm_smi.enabled is false: the library would never be loaded; drop one of them"))
	}
	return errs
}

// RankSignalsConfig: the per-rank signals the straggler loop compares
// (fathom.rank.device_wait.time, host_lead.time, launches and run_queue.time) of the
// processes whose rank is known, emitted every Interval as an export of their own,
// under the scope semconv.RankSignalsScope, between the collections that carry
// everything. A slow rank is then found in a few short samples, not in a few whole
// collection intervals (docs/straggler.md, Detection).
type RankSignalsConfig struct {
	// Interval between rank-signal samples; collection_interval must be a whole
	// multiple of it. 0 (default): the rank signals go only with each collection.
	Interval time.Duration `mapstructure:"interval"`
}

func (c *Config) validateRankSignals() []error {
	iv := c.RankSignals.Interval
	switch {
	case iv == 0:
		return nil
	case iv < 100*time.Millisecond:
		return []error{fmt.Errorf("rank_signals.interval must be 0 (with each collection) or at least 100ms, got %s", iv)}
	case c.CollectionInterval%iv != 0:
		return []error{fmt.Errorf("collection_interval (%s) must be a whole multiple of rank_signals.interval (%s): every collection carries a rank-signal sample", c.CollectionInterval, iv)}
	case c.Temporality == TemporalityDelta:
		// A delta sample between collections would leave the collection's own point
		// covering only the time since that sample, and consumers that take each
		// collection as one interval (the causalchain processor) would undercount.
		return []error{errors.New("rank_signals.interval needs temporality: cumulative; with delta, leave it 0")}
	}
	return nil
}

// ReadinessConfig controls the fathom.node.check log record: what `fathom check` finds
// on this node, sent so that the gateway can tell a node that cannot trace from one
// with nothing to trace.
type ReadinessConfig struct {
	// Enabled sends the record (default true); it needs a logs pipeline.
	Enabled bool `mapstructure:"enabled"`
	// CheckInterval is how often the checks run again; a record goes out when a check's
	// result changes.
	CheckInterval time.Duration `mapstructure:"check_interval"`
	// ReportInterval is the longest time between two records, changed or not, so that
	// the newest result is always among recent data.
	ReportInterval time.Duration `mapstructure:"report_interval"`
}

// LimitsConfig bounds every table the receiver keeps, in the kernel and in Go.
type LimitsConfig struct {
	// RingBufferBytes sizes the kernel-to-userspace event ring (power of two, ≥ 4 KiB).
	RingBufferBytes uint32 `mapstructure:"ring_buffer_bytes"`
	// MaxProcesses bounds the processes with metric series; events of further
	// processes are counted as dropped (cardinality).
	MaxProcesses int `mapstructure:"max_processes"`
	// MaxThreadsPerProcess bounds per-thread series (threads that call CUDA); the
	// rest of a process's threads share one "other" series.
	MaxThreadsPerProcess int `mapstructure:"max_threads_per_process"`
}

// SyntheticConfig shapes the made-up workload of synthetic mode.
type SyntheticConfig struct {
	// Ranks is how many rank processes to simulate on this node.
	Ranks int `mapstructure:"ranks"`
	// CallsPerSecond per rank.
	CallsPerSecond int `mapstructure:"calls_per_second"`
	// SlowRank, if ≥ 0, is a rank whose synchronizations take SlowFactor times longer.
	SlowRank int `mapstructure:"slow_rank"`
	// SlowFactor multiplies the slow rank's synchronization times.
	SlowFactor float64 `mapstructure:"slow_factor"`
}

func createDefaultConfig() *Config {
	return &Config{
		Mode:               ModeEBPF,
		CollectionInterval: 10 * time.Second,
		Temporality:        TemporalityCumulative,
		Targets:            TargetsConfig{All: true},
		Discovery: DiscoveryConfig{
			ProcRoot:       "/proc",
			CgroupRoot:     "/sys/fs/cgroup",
			RescanInterval: 30 * time.Second,
			AttachOnMap:    true,
			FirstLoadHold:  50 * time.Millisecond,
		},
		Stacks:      StacksConfig{Python: true, Native: true},
		KernelState: KernelStateConfig{KeepProbes: true},
		Logs: LogsConfig{
			Policy:             LogsNotable,
			MaxPerSecond:       1000,
			OutlierFactor:      4,
			OutlierMinDuration: time.Millisecond,
			NCCL:               NCCLLogsConfig{SampleEvery: 16, MinPerSecond: 8, MaxPerSecond: 500},
		},
		RDMA:    RDMAConfig{SysfsRoot: "/sys/class/infiniband", PollInterval: 10 * time.Second},
		NVML:    NVMLConfig{Enabled: true},
		ROCmSMI: ROCmSMIConfig{Enabled: true},
		Limits: LimitsConfig{
			RingBufferBytes:      8 << 20,
			MaxProcesses:         512,
			MaxThreadsPerProcess: 16,
		},
		Synthetic: SyntheticConfig{Ranks: 4, CallsPerSecond: 2000, SlowRank: -1, SlowFactor: 8},
		Readiness: ReadinessConfig{Enabled: true, CheckInterval: 5 * time.Minute, ReportInterval: time.Hour},
	}
}

// Validate explains what is wrong in the user's words.
func (c *Config) Validate() error {
	var errs []error
	switch c.Mode {
	case ModeEBPF, ModeSynthetic:
	default:
		errs = append(errs, fmt.Errorf("mode must be %q or %q, not %q", ModeEBPF, ModeSynthetic, c.Mode))
	}
	if c.CollectionInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("collection_interval must be at least 100ms, got %s", c.CollectionInterval))
	}
	switch c.Temporality {
	case TemporalityCumulative, TemporalityDelta:
	default:
		errs = append(errs, fmt.Errorf("temporality must be %q or %q, not %q", TemporalityCumulative, TemporalityDelta, c.Temporality))
	}
	errs = append(errs, c.validateRankSignals()...)
	if !c.Targets.All && len(c.Targets.PIDs) == 0 && len(c.Targets.Cgroups) == 0 {
		errs = append(errs, errors.New("targets: with all: false, name at least one of pids or cgroups, or nothing is traced"))
	}
	for _, pid := range c.Targets.PIDs {
		if pid <= 0 {
			errs = append(errs, fmt.Errorf("targets.pids: %d is not a process id", pid))
		}
	}
	if c.KernelState.PinDir != "" && !filepath.IsAbs(c.KernelState.PinDir) {
		errs = append(errs, fmt.Errorf("kernel_state.pin_dir must be an absolute path on a bpf file system (e.g. /sys/fs/bpf/fathom), got %q", c.KernelState.PinDir))
	}
	if c.Discovery.ProcRoot == "" {
		errs = append(errs, errors.New("discovery.proc_root must not be empty (the host's /proc, e.g. /proc or /host/proc)"))
	}
	if c.Stacks.SampleEvery < 0 || c.Stacks.SampleEvery > 1<<30 {
		errs = append(errs, fmt.Errorf("stacks.sample_every must be between 0 (none) and %d, got %d", 1<<30, c.Stacks.SampleEvery))
	}
	if c.Discovery.FirstLoadHold < 0 || c.Discovery.FirstLoadHold > time.Second {
		errs = append(errs, fmt.Errorf("discovery.first_load_hold must be between 0 (off) and 1s, got %s: a held process is stopped, all its threads", c.Discovery.FirstLoadHold))
	}
	if c.Discovery.RescanInterval < time.Second {
		errs = append(errs, fmt.Errorf("discovery.rescan_interval must be at least 1s, got %s", c.Discovery.RescanInterval))
	}
	switch c.Logs.Policy {
	case LogsAll, LogsNotable, LogsNone:
	default:
		errs = append(errs, fmt.Errorf("logs.policy must be %q, %q or %q, not %q", LogsAll, LogsNotable, LogsNone, c.Logs.Policy))
	}
	if c.Logs.MaxPerSecond < 0 {
		errs = append(errs, fmt.Errorf("logs.max_per_second must not be negative, got %d", c.Logs.MaxPerSecond))
	}
	// NaN compares false with everything: `<= 1` alone let .nan through, and with it no
	// call was ever an outlier; .inf did the same.
	if !(c.Logs.OutlierFactor > 1) || math.IsInf(c.Logs.OutlierFactor, 0) {
		errs = append(errs, fmt.Errorf("logs.outlier_factor must be a number greater than 1, got %g", c.Logs.OutlierFactor))
	}
	if c.Logs.NCCL.SampleEvery < 1 {
		errs = append(errs, fmt.Errorf("logs.nccl.sample_every must be at least 1 (1 keeps every collective), got %d", c.Logs.NCCL.SampleEvery))
	}
	if !(c.Logs.NCCL.MinPerSecond >= 0) || math.IsInf(c.Logs.NCCL.MinPerSecond, 0) {
		errs = append(errs, fmt.Errorf("logs.nccl.min_per_second must be a number of at least 0 (0 keeps one in sample_every always), got %g", c.Logs.NCCL.MinPerSecond))
	}
	if c.Logs.NCCL.MaxPerSecond < 0 {
		errs = append(errs, fmt.Errorf("logs.nccl.max_per_second must not be negative, got %d", c.Logs.NCCL.MaxPerSecond))
	}
	if c.RDMA.SysfsRoot == "" {
		errs = append(errs, errors.New("rdma.sysfs_root must not be empty (normally /sys/class/infiniband)"))
	}
	if c.RDMA.PollInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("rdma.poll_interval must be at least 100ms, got %s", c.RDMA.PollInterval))
	}
	errs = append(errs, c.ROCmSMI.validate()...)
	if c.Readiness.Enabled {
		errs = append(errs, c.Readiness.validate()...)
	}
	if rb := c.Limits.RingBufferBytes; rb < 4096 || rb&(rb-1) != 0 {
		errs = append(errs, fmt.Errorf("limits.ring_buffer_bytes must be a power of two of at least 4096, got %d", rb))
	}
	if c.Limits.MaxProcesses < 1 || c.Limits.MaxThreadsPerProcess < 1 {
		errs = append(errs, errors.New("limits.max_processes and limits.max_threads_per_process must be at least 1"))
	}
	if c.Mode == ModeSynthetic {
		if c.Synthetic.Ranks < 1 || c.Synthetic.Ranks > 64 {
			errs = append(errs, fmt.Errorf("synthetic.ranks must be between 1 and 64, got %d", c.Synthetic.Ranks))
		}
		if c.Synthetic.CallsPerSecond < 1 {
			errs = append(errs, fmt.Errorf("synthetic.calls_per_second must be at least 1, got %d", c.Synthetic.CallsPerSecond))
		}
		if !(c.Synthetic.SlowFactor >= 1) || math.IsInf(c.Synthetic.SlowFactor, 0) {
			errs = append(errs, fmt.Errorf("synthetic.slow_factor must be a number of at least 1, got %g", c.Synthetic.SlowFactor))
		}
	}
	return errors.Join(errs...)
}
