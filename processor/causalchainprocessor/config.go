package causalchainprocessor

import (
	"errors"
	"fmt"
	"time"
)

// Config of the causalchain processor. It runs on the node, after the gpuebpf receiver,
// in the metrics pipeline (where the per-process and per-thread series arrive) and in
// the logs pipeline (where it writes its fathom.causal_chain records), under one
// component ID. Every threshold is documented in docs/causalchain.md.
type Config struct {
	// Window is the sliding span each evaluation looks at: percentiles and shares are
	// over the intervals that ended within it, not over a count of samples.
	Window time.Duration `mapstructure:"window"`
	// ResolveAfter: a chain whose evidence stayed under its rule's threshold this long is
	// resolved (one record). Default: one window.
	ResolveAfter time.Duration `mapstructure:"resolve_after"`
	// UpdateEvery: an open chain is written again (same fathom.chain.id, state update)
	// when its severity changes, and otherwise at most this often.
	UpdateEvery time.Duration `mapstructure:"update_every"`
	// Severity maps a chain's cost (the share of the window the process's GPU-feeding
	// threads lost to the cause) to HIGH, MEDIUM or LOW.
	Severity SeverityConfig `mapstructure:"severity"`
	Rules    RulesConfig    `mapstructure:"rules"`
	Limits   LimitsConfig   `mapstructure:"limits"`
}

// SeverityConfig: cost ≥ High is HIGH, ≥ Medium is MEDIUM, anything lower LOW.
type SeverityConfig struct {
	// High: a cost at least this share of the window is HIGH.
	High float64 `mapstructure:"high"`
	// Medium: a cost at least this share (and under High) is MEDIUM; lower is LOW.
	Medium float64 `mapstructure:"medium"`
}

// LimitsConfig bounds the state; what the caps refuse is counted.
type LimitsConfig struct {
	// MaxProcesses tracked at once; further processes are not (process_cap).
	MaxProcesses int `mapstructure:"max_processes"`
	// MaxSeriesPerProcess read per process; further series are not (series_cap).
	MaxSeriesPerProcess int `mapstructure:"max_series_per_process"`
	// MaxIntervalsInWindow kept per series, whatever the window: a short collection
	// interval with a long window keeps only the latest this many.
	MaxIntervalsInWindow int `mapstructure:"max_intervals_in_window"`
}

// RulesConfig holds one block per root-cause class.
type RulesConfig struct {
	CPUContention      CPUContentionRule      `mapstructure:"cpu_contention"`
	LockContention     LockContentionRule     `mapstructure:"lock_contention"`
	DataloaderStorm    DataloaderRule         `mapstructure:"dataloader_oversubscription"`
	HiddenSync         HiddenSyncRule         `mapstructure:"hidden_sync"`
	MemcpyBound        ShareRule              `mapstructure:"memcpy_bound"`
	IOStall            ShareRule              `mapstructure:"io_stall"`
	NetworkRetransmits NetworkRetransmitsRule `mapstructure:"network_retransmits"`
	GraphRecapture     GraphRecaptureRule     `mapstructure:"graph_recapture"`
	AllocatorChurn     AllocatorChurnRule     `mapstructure:"allocator_churn"`
}

// ShareRule fires when its cost is at least MinShare of the window.
type ShareRule struct {
	// Enabled: the rule is judged (default true).
	Enabled bool `mapstructure:"enabled"`
	// MinShare: the least cost, as a share of the window, the rule fires at.
	MinShare float64 `mapstructure:"min_share"`
}

// CPUContentionRule: a CUDA-calling thread runnable but off its CPU (preempted, or
// woken and waiting in the run queue) for at least MinShare of the window.
type CPUContentionRule struct {
	ShareRule `mapstructure:",squash"`
}

// LockContentionRule: a CUDA-calling thread blocked on a lock (a futex wait) for at
// least MinShare of the window, woken by at least MinHolders distinct threads of its own
// process: the threads that held the lock it waited for. One waker alone is a hand-off
// (a thread waiting for the one that produces its work), not contention.
type LockContentionRule struct {
	ShareRule `mapstructure:",squash"`
	// MinHolders is the fewest distinct waker threads of the thread's own process.
	MinHolders float64 `mapstructure:"min_holders"`
}

// DataloaderRule: the process forks at least MinForksPerSecond while its CUDA threads
// lose at least MinShare of the window waiting for a CPU, or while it allocates at least
// MinPagesPerSecond.
type DataloaderRule struct {
	ShareRule `mapstructure:",squash"`
	// MinForksPerSecond: the least fork rate of the process that makes a fork storm.
	MinForksPerSecond float64 `mapstructure:"min_forks_per_second"`
	// MinPagesPerSecond: page allocations per second that fire the rule with the forks
	// even when the CUDA threads lose less than min_share.
	MinPagesPerSecond float64 `mapstructure:"min_pages_per_second"`
}

// HiddenSyncRule: blocking device-to-host copies of at most MaxBytes on average (a
// .item(), .cpu(), .numpy()), at least MinPerSecond, costing at least MinShare.
type HiddenSyncRule struct {
	ShareRule `mapstructure:",squash"`
	// MinPerSecond: the least rate of blocking device-to-host reads.
	MinPerSecond float64 `mapstructure:"min_per_second"`
	// MaxBytes: reads larger than this on average are copies, not a hidden sync.
	MaxBytes float64 `mapstructure:"max_bytes"`
}

// NetworkRetransmitsRule: at least MinRetransmits from the process's own sockets in the
// window; each is priced at CostPerRetransmit of stalled collective (Linux's smallest
// retransmission timeout is 200 ms).
type NetworkRetransmitsRule struct {
	// Enabled: the rule is judged (default true).
	Enabled bool `mapstructure:"enabled"`
	// MinRetransmits in the window from the process's own sockets.
	MinRetransmits float64 `mapstructure:"min_retransmits"`
	// CostPerRetransmit: the stall each retransmit is priced at.
	CostPerRetransmit time.Duration `mapstructure:"cost_per_retransmit"`
}

// GraphRecaptureRule: at least MinCaptures graph captures or instantiations in the
// window, after the process's first window (a capture at start-up is normal).
type GraphRecaptureRule struct {
	ShareRule `mapstructure:",squash"`
	// MinCaptures: the least stream captures (or instantiations) in the window.
	MinCaptures float64 `mapstructure:"min_captures"`
}

// AllocatorChurnRule: device allocations and frees at least MinPerSecond, costing at
// least MinShare (cudaFree synchronises the device).
type AllocatorChurnRule struct {
	ShareRule `mapstructure:",squash"`
	// MinPerSecond: the least rate of allocations and frees.
	MinPerSecond float64 `mapstructure:"min_per_second"`
}

func createDefaultConfig() *Config {
	return &Config{
		// Three of the node's default 10 s intervals: one bad interval is a LOW chain
		// at most, a cause that lasts is found within two windows.
		Window:       30 * time.Second,
		ResolveAfter: 30 * time.Second,
		UpdateEvery:  time.Minute,
		Severity:     SeverityConfig{High: 0.20, Medium: 0.05},
		Rules: RulesConfig{
			CPUContention:      CPUContentionRule{ShareRule{Enabled: true, MinShare: 0.05}},
			LockContention:     LockContentionRule{ShareRule: ShareRule{Enabled: true, MinShare: 0.05}, MinHolders: 2},
			DataloaderStorm:    DataloaderRule{ShareRule: ShareRule{Enabled: true, MinShare: 0.02}, MinForksPerSecond: 5, MinPagesPerSecond: 50000},
			HiddenSync:         HiddenSyncRule{ShareRule: ShareRule{Enabled: true, MinShare: 0.05}, MinPerSecond: 20, MaxBytes: 1 << 20},
			MemcpyBound:        ShareRule{Enabled: true, MinShare: 0.30},
			IOStall:            ShareRule{Enabled: true, MinShare: 0.05},
			NetworkRetransmits: NetworkRetransmitsRule{Enabled: true, MinRetransmits: 2, CostPerRetransmit: 200 * time.Millisecond},
			GraphRecapture:     GraphRecaptureRule{ShareRule: ShareRule{Enabled: true, MinShare: 0}, MinCaptures: 3},
			AllocatorChurn:     AllocatorChurnRule{ShareRule: ShareRule{Enabled: true, MinShare: 0.05}, MinPerSecond: 50},
		},
		Limits: LimitsConfig{MaxProcesses: 256, MaxSeriesPerProcess: 2048, MaxIntervalsInWindow: 120},
	}
}

// Validate explains what is wrong in the words of the YAML.
func (c *Config) Validate() error {
	var errs []error
	if c.Window < time.Second {
		errs = append(errs, fmt.Errorf("causalchain: `window` must be at least 1s, got %s", c.Window))
	}
	if c.ResolveAfter <= 0 {
		errs = append(errs, fmt.Errorf("causalchain: `resolve_after` must be positive, got %s", c.ResolveAfter))
	}
	if c.UpdateEvery <= 0 {
		errs = append(errs, fmt.Errorf("causalchain: `update_every` must be positive, got %s", c.UpdateEvery))
	}
	if !(c.Severity.Medium > 0 && c.Severity.Medium < c.Severity.High && c.Severity.High <= 1) {
		errs = append(errs, fmt.Errorf("causalchain: `severity` needs 0 < medium < high <= 1, got medium %g, high %g", c.Severity.Medium, c.Severity.High))
	}
	share := func(name string, r ShareRule) {
		if r.MinShare < 0 || r.MinShare >= 1 {
			errs = append(errs, fmt.Errorf("causalchain: `rules.%s.min_share` must be in [0, 1), got %g", name, r.MinShare))
		}
	}
	r := c.Rules
	share("cpu_contention", r.CPUContention.ShareRule)
	share("lock_contention", r.LockContention.ShareRule)
	share("dataloader_oversubscription", r.DataloaderStorm.ShareRule)
	share("hidden_sync", r.HiddenSync.ShareRule)
	share("memcpy_bound", r.MemcpyBound)
	share("io_stall", r.IOStall)
	share("graph_recapture", r.GraphRecapture.ShareRule)
	share("allocator_churn", r.AllocatorChurn.ShareRule)
	positive := func(name string, v float64) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("causalchain: `rules.%s` must be positive, got %g", name, v))
		}
	}
	positive("lock_contention.min_holders", r.LockContention.MinHolders)
	positive("dataloader_oversubscription.min_forks_per_second", r.DataloaderStorm.MinForksPerSecond)
	positive("dataloader_oversubscription.min_pages_per_second", r.DataloaderStorm.MinPagesPerSecond)
	positive("hidden_sync.min_per_second", r.HiddenSync.MinPerSecond)
	positive("hidden_sync.max_bytes", r.HiddenSync.MaxBytes)
	positive("network_retransmits.min_retransmits", r.NetworkRetransmits.MinRetransmits)
	positive("network_retransmits.cost_per_retransmit", r.NetworkRetransmits.CostPerRetransmit.Seconds())
	positive("graph_recapture.min_captures", r.GraphRecapture.MinCaptures)
	positive("allocator_churn.min_per_second", r.AllocatorChurn.MinPerSecond)
	l := c.Limits
	if l.MaxProcesses < 1 || l.MaxSeriesPerProcess < 16 || l.MaxIntervalsInWindow < 2 {
		errs = append(errs, fmt.Errorf("causalchain: `limits` need max_processes >= 1, max_series_per_process >= 16, max_intervals_in_window >= 2; got %d, %d, %d",
			l.MaxProcesses, l.MaxSeriesPerProcess, l.MaxIntervalsInWindow))
	}
	return errors.Join(errs...)
}
