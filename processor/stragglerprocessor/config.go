package stragglerprocessor

import (
	"errors"
	"fmt"
	"math"
	"time"

	"go.opentelemetry.io/collector/component"

	"github.com/fathom-gpu/fathom/internal/semconv"
)

// Where the processor runs.
const (
	// ModeGateway compares the ranks of each cohort with each other, writes the
	// records, and answers each node's export with its cohorts' lines.
	ModeGateway = "gateway"
	// ModeNode judges the node's own ranks against the lines the gateway pushed back
	// (held by the thresholds extension), so the slow rank's node knows it first.
	ModeNode = "node"
)

// Which way a signal gets worse.
const (
	WorseHigher = "higher"
	WorseLower  = "lower"
)

// Config of the straggler processor. It runs on the gateway, where the ranks of a job
// meet, in the metrics pipeline (where the signals arrive) and in the logs pipeline
// (where it writes its fathom.straggler records), under one component ID.
type Config struct {
	// Mode is gateway (default) or node.
	Mode string `mapstructure:"mode"`
	// Thresholds names the thresholds extension that holds the pushed-back lines
	// (node mode only).
	Thresholds component.ID `mapstructure:"thresholds"`
	// Signals are the per-rank metrics compared across each cohort. Each is a
	// monotonic sum per process (cumulative or delta), compared per second of each
	// interval, or a gauge, compared as it is at each new point.
	Signals []SignalConfig `mapstructure:"signals"`
	// K is how many scaled MADs from the cohort's median a rank must lie, in the
	// signal's worse direction, to count as beyond the line.
	K float64 `mapstructure:"k"`
	// Quorum is the fewest ranks with a fresh sample that make a comparison.
	Quorum int `mapstructure:"quorum"`
	// Pairs (default true) judges a cohort of exactly two fresh ranks, which no
	// quorum allows, by the difference between them over time: each signal with
	// evidence (min_duration > 0) learns the pair's own level and noise over its first
	// healthy 20 s and flags the rank that moved away from it, in the signal's worse
	// direction (docs/straggler.md, Pairs). Judged at the gateway (a node never holds
	// both ranks), which pushes its verdict back for the nodes to say.
	Pairs bool `mapstructure:"pairs"`
	// MADFloor keeps the line from collapsing onto the median when the ranks agree
	// closely, so scheduling jitter flags nobody.
	MADFloor MADFloorConfig `mapstructure:"mad_floor"`
	// Warmup is how many evaluations with a quorum a cohort has before it flags anyone.
	Warmup int `mapstructure:"warmup"`
	// Persistence: a rank is flagged when Beyond of its last Of samples were beyond the
	// line, and resolved when no more than Of-Beyond of them were.
	Persistence PersistenceConfig `mapstructure:"persistence"`
	// MinDuration is how long a rank must be slower than its cohort to be a
	// straggler when no single sample says so: besides each sample, the median of a
	// rank's samples over windows of 2, 4 and 8 times it is judged against that
	// window's line, which finds a small, steady slowdown that a busy host's samples
	// hide in noise. A window's median is past its line only when at least half the
	// window's samples are, and it counts once it has stayed past for a whole window,
	// so a stall shorter than MinDuration flags nobody there. A rank's evidence (a
	// CUSUM of its scores) reaches its height only after the persistence's share of
	// MinDuration (Beyond/Of: 1.25 s at 5 of 6) of excess, the time the samples rule
	// asks. 0 judges samples only.
	MinDuration time.Duration `mapstructure:"min_duration"`
	// ResolveWithin is the hysteresis of a flag: a flagged rank counts as back within
	// its cohort only for samples within this fraction of the way from the median to
	// the line (0.5: half way; 1: the line itself), so a rank whose slowness keeps it
	// near the line stays flagged instead of flapping between straggler and resolved.
	ResolveWithin float64 `mapstructure:"resolve_within"`
	// SilentAfter: a rank with no sample for this long, while its cohort keeps a
	// quorum, is reported silent.
	SilentAfter time.Duration `mapstructure:"silent_after"`
	// ForgetAfter: a rank (or a whole cohort) heard nothing from for this long is
	// dropped from memory (counted).
	ForgetAfter time.Duration `mapstructure:"forget_after"`
	// EvaluationInterval is how often the cohorts are judged; the node's collection
	// interval is a good value.
	EvaluationInterval time.Duration `mapstructure:"evaluation_interval"`
	Limits             LimitsConfig  `mapstructure:"limits"`
	// PassThrough (default true) passes what the processor reads on down the
	// pipeline. False forwards only what it writes (its gauges and records): a gateway
	// that runs the loop for a whole cluster and leaves storing the nodes' telemetry to
	// other gateways (docs/straggler.md, Scale).
	PassThrough bool `mapstructure:"pass_through"`
	// ArrivalLag bounds the matching of collective instances for the arrival-lag
	// signal (gateway, when fathom.rank.arrival_lag is among the signals).
	ArrivalLag ArrivalLagConfig `mapstructure:"arrival_lag"`
	// Verdicts is the local remediation hook (off unless a socket or webhook is set).
	Verdicts VerdictsConfig `mapstructure:"verdicts"`
}

// SignalConfig names one compared metric.
type SignalConfig struct {
	// Metric is the per-rank metric's name.
	Metric string `mapstructure:"metric"`
	// Worse is "higher" or "lower": which side of the median is the straggler's.
	Worse string `mapstructure:"worse"`
	// MADFloor is an absolute floor for the MAD, in the metric's unit per second (a
	// sum's) or in its unit (a gauge's, judged as it is).
	MADFloor float64 `mapstructure:"mad_floor"`
	// Persistence, when set, is this signal's own; unset, the processor's. Persistence
	// counts samples, and a node samples the rank signals (device wait, host lead,
	// launches, run-queue time, the GPU's clock) every rank_signals.interval but the
	// GPU's error counts and the fabric signals only with each collection: the default
	// list gives those 3 of 4.
	Persistence *PersistenceConfig `mapstructure:"persistence"`
	// Windows, when false, judges the signal's samples only, not the medians of its
	// windows (min_duration). Unset is true. The default list turns it off for the
	// signals that come only with each collection (GPU, fabric, TCP): their floors say
	// how large a difference matters (a 2% slower clock does not), not how noisy one
	// sample is, so they must not shrink over a window.
	Windows *bool `mapstructure:"windows"`
	// Evidence, when false, judges the signal without accumulating evidence (see
	// docs/straggler.md). Unset is as Windows is: a signal judged by its floors alone
	// has neither. A signal of exact values whose lines must stay small on the wire
	// (CPU time a collective) has evidence without windows.
	Evidence *bool `mapstructure:"evidence"`
	// Paced says the signal's samples come at the rank's own pace, once a step or
	// more, rather than at the node's sampling interval: its persistence then counts
	// the latest samples that cover what it stands for (persistenceCovers), which are
	// fewer than `of` where steps are long. Only for a signal of little noise: two
	// samples of arrival lag a second apart, past the line together by chance, flagged
	// healthy ranks 14 times in 20 minutes of the busy host's model
	// (TestARankLateIntoSparseCollectivesIsFoundOverItsWindows).
	Paced bool `mapstructure:"paced"`
}

// windowed says whether signal sig is judged over windows as well as samples.
func (c *Config) windowed(sig int) bool {
	w := c.Signals[sig].Windows
	return len(windowMultiples) > 0 && c.MinDuration > 0 && (w == nil || *w)
}

// evidenced says whether signal sig accumulates evidence (evidence.go).
func (c *Config) evidenced(sig int) bool {
	if e := c.Signals[sig].Evidence; e != nil {
		return *e && c.MinDuration > 0
	}
	return c.windowed(sig)
}

// persistence is the signal's own, else the processor's.
func (c *Config) persistence(sig int) PersistenceConfig {
	if p := c.Signals[sig].Persistence; p != nil {
		return *p
	}
	return c.Persistence
}

// persistenceCovers is the time a paced signal's persistence stands for: `of`
// evaluations' worth, at least min_duration (5 of 6 at the shipped 250 ms evaluations:
// 1.5 s); 0, counting samples, for the others. A paced signal whose samples come less
// often than the evaluations (CPU time a collective, once a step of 0.8 s) counts the
// latest samples that cover it (persisting).
func (c *Config) persistenceCovers(sig int) time.Duration {
	if !c.Signals[sig].Paced {
		return 0
	}
	return max(c.MinDuration, time.Duration(c.persistence(sig).Of)*c.EvaluationInterval)
}

// MADFloorConfig: the MAD used is max(MAD, Relative x |median|, the signal's floor).
type MADFloorConfig struct {
	// Relative floors the MAD at this share of the cohort's |median|.
	Relative float64 `mapstructure:"relative"`
}

// PersistenceConfig is "Beyond of the last Of samples".
type PersistenceConfig struct {
	// Beyond: how many of the rank's last Of samples must be past the line to flag it.
	Beyond int `mapstructure:"beyond"`
	// Of: how many of the rank's latest samples are looked at.
	Of int `mapstructure:"of"`
}

func (p PersistenceConfig) valid() bool { return p.Beyond >= 1 && p.Of >= p.Beyond && p.Of <= 64 }

// ArrivalLagConfig: an instance waits MatchWindow for all its ranks' records (then it is
// dropped as incomplete); at most MaxInstances wait at once.
type ArrivalLagConfig struct {
	// MatchWindow: how long an instance waits for every rank's record before it is dropped as incomplete.
	MatchWindow time.Duration `mapstructure:"match_window"`
	// MaxInstances waiting at once; more are dropped (instance_cap).
	MaxInstances int `mapstructure:"max_instances"`
}

// gatewayOnly are the signals the gateway makes itself from what several nodes send; a
// node has no samples of them and the gateway pushes no line back.
var gatewayOnly = map[string]bool{semconv.MetricRankArrivalLag: true}

// LimitsConfig bounds the state. Cohorts over the cap evict the one heard from least
// recently; ranks over a cohort's cap are not tracked. Both are counted.
type LimitsConfig struct {
	// MaxCohorts held; over it the cohort heard from least recently is evicted (counted).
	MaxCohorts int `mapstructure:"max_cohorts"`
	// MaxRanksPerCohort held; further ranks are not tracked (rank_cap).
	MaxRanksPerCohort int `mapstructure:"max_ranks_per_cohort"`
}

// perCollection is the persistence of the signals a node sends only with each
// collection (GPU, fabric, TCP), whatever the processor's: with the rank signals
// sampled faster, the processor's counts those samples.
func perCollection() *PersistenceConfig { return &PersistenceConfig{Beyond: 3, Of: 4} }

// off is the Windows setting of the signals that come with each collection; on is an
// Evidence setting.
var off, on = false, true

func createDefaultConfig() *Config {
	return &Config{
		Mode:        ModeGateway,
		PassThrough: true,
		Signals: []SignalConfig{{
			// Seconds waited per second; a 1% floor keeps ranks that all wait almost
			// nothing (a job bound by its own compute) from flagging on noise.
			Metric: semconv.MetricRankDeviceWait, Worse: WorseLower, MADFloor: 0.01,
		}, {
			// Seconds of lead per second: the same floor keeps a preemption between a
			// sync and a collective, now and then, from counting.
			Metric: semconv.MetricRankHostLead, Worse: WorseHigher, MADFloor: 0.01,
		}, {
			// Seconds on a CPU per second of the rank's CUDA threads. The ranks of a
			// synchronous job run the same steps at the same rate, so the one whose
			// host does more work per step runs more, however busy the host: six
			// ranks sharing two cores, one with 20% more host work ran 0.28 s/s
			// against its peers' 0.24 (a MAD of 0.01 a 250 ms sample), while its
			// device wait moved by a third of a sample's spread. The 5 ms floor keeps
			// ranks that barely run from flagging on noise.
			Metric: semconv.MetricRankCPUTime, Worse: WorseHigher, MADFloor: 0.005,
		}, {
			// Seconds on a CPU per collective, read at the rank's collectives: the
			// same for every healthy rank of a job whatever its steps' timing, where
			// CPU time a second varies with it (800 ms steps on the busy host: a
			// healthy rank's 0.200 s a step exact to a millisecond, its seconds a
			// second ±15%). The 100 µs floor keeps ranks that barely run from flagging
			// on noise. It has evidence, for a small steady excess, but no windows,
			// whose lines would not fit beside the others' in a node's 1 KiB answer
			// (the evidence judges small excesses, and there is little noise to
			// shrink). Its samples come once a step where steps are long (paced).
			// Two-rank jobs are judged on it as a pair, as on the others.
			Metric: semconv.MetricRankCPUPerCollective, Worse: WorseHigher, MADFloor: 0.0001, Windows: &off, Evidence: &on, Paced: true,
		}, {
			// How far the rank's GPU runs below its maximum SM clock, a gauge from
			// NVML: a cohort at full clock has a median of 0, so the 2% floor puts the
			// line at about 9% below the cohort (3 x 1.4826 x 0.02). Nodes without
			// NVML do not send it, and their cohorts are judged on the others. A node
			// reads the clock with each rank sample, so the processor's persistence
			// counts it like the other rank signals.
			Metric: semconv.MetricRankGPUClockDeficit, Worse: WorseHigher, MADFloor: 0.02, Windows: &off,
		}, {
			// PCIe replays and ECC errors per second of the rank's GPU: none on a
			// healthy GPU, so the floor puts the line near 0.44/s.
			Metric: semconv.MetricRankGPUErrors, Worse: WorseHigher, MADFloor: 0.1, Persistence: perCollection(), Windows: &off,
		}, {
			// Error counts per second of the RDMA ports a rank may use: a healthy
			// cohort counts none, so the floor puts the line near 0.44 errors/s.
			Metric: semconv.MetricRankRDMAErrors, Worse: WorseHigher, MADFloor: 0.1, Persistence: perCollection(), Windows: &off,
		}, {
			// Credit-wait ticks per second of the same ports. A tick's length is the
			// NIC's own; 10,000/s is a starting floor for an idle fabric, and a busy
			// one sets its own MAD.
			Metric: semconv.MetricRankRDMAXmitWait, Worse: WorseHigher, MADFloor: 10000, Persistence: perCollection(), Windows: &off,
		}, {
			// TCP segments retransmitted per second from the rank's own sockets
			// (NCCL's socket transport, RoCE's TCP side): none on a healthy network,
			// so the floor puts the line near 0.44/s.
			Metric: semconv.MetricRankTCPRetransmits, Worse: WorseHigher, MADFloor: 0.1, Persistence: perCollection(), Windows: &off,
		}, {
			// Seconds a rank enters the sampled collectives after the median rank,
			// clocks corrected (gateway only). A 0.5 ms floor puts the line about
			// 2.2 ms past the median: past what wake-up jitter and the clock
			// exchange's error add on a busy host.
			Metric: semconv.MetricRankArrivalLag, Worse: WorseHigher, MADFloor: 0.0005,
		}},
		K:                  3,
		Quorum:             3,
		Pairs:              true,
		MADFloor:           MADFloorConfig{Relative: 0.05},
		Warmup:             3,
		Persistence:        PersistenceConfig{Beyond: 3, Of: 4},
		ResolveWithin:      0.5,
		MinDuration:        1500 * time.Millisecond,
		SilentAfter:        30 * time.Second,
		ForgetAfter:        10 * time.Minute,
		EvaluationInterval: time.Second,
		// A 1,024-rank communicator fits one cohort with room; 1,024 cohorts is a
		// gateway's share of a large cluster (a job's ranks must meet on one gateway).
		Limits:     LimitsConfig{MaxCohorts: 1024, MaxRanksPerCohort: 16384},
		ArrivalLag: ArrivalLagConfig{MatchWindow: 10 * time.Second, MaxInstances: 4096},
		Verdicts:   VerdictsConfig{QueueSize: 256, MaxClients: 16, Webhook: WebhookConfig{Timeout: 2 * time.Second}},
	}
}

// Validate explains what is wrong in the words of the YAML.
func (c *Config) Validate() error {
	var errs []error
	switch c.Mode {
	case ModeGateway:
	case ModeNode:
		if c.Thresholds.Type().String() == "" {
			errs = append(errs, errors.New("straggler: `mode: node` needs `thresholds:` naming the thresholds extension that holds the gateway's lines"))
		}
	default:
		errs = append(errs, fmt.Errorf("straggler: `mode` is %q; want %q or %q", c.Mode, ModeGateway, ModeNode))
	}
	if len(c.Signals) == 0 {
		errs = append(errs, errors.New("straggler: `signals` must name at least one per-rank metric"))
	}
	seen := map[string]bool{}
	for i, s := range c.Signals {
		switch {
		case s.Metric == "":
			errs = append(errs, fmt.Errorf("straggler: signals[%d].metric is empty", i))
		case seen[s.Metric]:
			errs = append(errs, fmt.Errorf("straggler: signal %q is listed twice", s.Metric))
		}
		seen[s.Metric] = true
		if s.Worse != WorseHigher && s.Worse != WorseLower {
			errs = append(errs, fmt.Errorf("straggler: signals[%d].worse is %q; want %q or %q", i, s.Worse, WorseHigher, WorseLower))
		}
		if !(s.MADFloor >= 0) || math.IsInf(s.MADFloor, 0) {
			errs = append(errs, fmt.Errorf("straggler: signals[%d].mad_floor must be a finite number >= 0", i))
		}
		if p := s.Persistence; p != nil && !p.valid() {
			errs = append(errs, fmt.Errorf("straggler: signals[%d].persistence needs 1 <= beyond <= of <= 64", i))
		}
	}
	if !(c.K > 0) || math.IsInf(c.K, 0) {
		errs = append(errs, errors.New("straggler: `k` must be a finite number > 0"))
	}
	if !(c.ResolveWithin > 0) || c.ResolveWithin > 1 {
		errs = append(errs, errors.New("straggler: `resolve_within` must be above 0 and at most 1 (the fraction of the way from the median to the line within which a flagged rank counts as back)"))
	}
	if c.MinDuration < 0 || c.MinDuration > maxMinDuration {
		errs = append(errs, fmt.Errorf("straggler: `min_duration` must be between 0 (samples only) and %v", maxMinDuration))
	}
	if c.Quorum < 3 {
		errs = append(errs, errors.New("straggler: `quorum` must be at least 3 (a median of two ranks cannot tell which one is slow)"))
	}
	if !(c.MADFloor.Relative >= 0) || c.MADFloor.Relative > 1 {
		errs = append(errs, errors.New("straggler: `mad_floor.relative` must be between 0 and 1"))
	}
	if c.Warmup < 0 {
		errs = append(errs, errors.New("straggler: `warmup` must be >= 0"))
	}
	if !c.Persistence.valid() {
		errs = append(errs, errors.New("straggler: `persistence` needs 1 <= beyond <= of <= 64"))
	}
	if c.EvaluationInterval <= 0 {
		errs = append(errs, errors.New("straggler: `evaluation_interval` must be > 0"))
	}
	if c.SilentAfter < c.EvaluationInterval {
		errs = append(errs, errors.New("straggler: `silent_after` must be at least `evaluation_interval`"))
	}
	if c.ForgetAfter <= c.SilentAfter {
		errs = append(errs, errors.New("straggler: `forget_after` must be longer than `silent_after` (a silent rank is reported before it is forgotten)"))
	}
	if c.Limits.MaxCohorts < 1 || c.Limits.MaxRanksPerCohort < c.Quorum {
		errs = append(errs, errors.New("straggler: `limits.max_cohorts` must be >= 1 and `limits.max_ranks_per_cohort` >= `quorum`"))
	}
	if c.ArrivalLag.MatchWindow <= 0 || c.ArrivalLag.MaxInstances < 1 {
		errs = append(errs, errors.New("straggler: `arrival_lag` needs match_window > 0 and max_instances >= 1"))
	}
	if err := c.Verdicts.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
