package gpuebpfreceiver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/fathom-gpu/fathom/internal/gpustate"
	"github.com/fathom-gpu/fathom/internal/gpustate/rocmsmi"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/rdmasysfs"
	"github.com/fathom-gpu/fathom/receiver/gpuebpfreceiver/internal/metadata"
)

// eventSource feeds events to a handler: the kernel (ebpf mode) or a simulation.
type eventSource interface {
	// start begins delivering events to h until stop; errors at start are fatal.
	start(ctx context.Context, h probes.Handler) error
	// quiesce stops delivering events; the kernel side stays as it is, for a last
	// reading. stop then releases it (quiescing first if need be).
	quiesce()
	stop() error
	// hostTotals reads the kernel-side aggregates and drop counters (empty if none).
	hostTotals() (probes.HostAggregates, map[string]uint64, bool)
	probeCount() int
	// callStats reads the kernel's per-process call statistics into dst (none without
	// a kernel); releaseCallStats gives a gone process's slot back.
	callStats(dst []probes.ProcessCallStats) ([]probes.ProcessCallStats, error)
	releaseCallStats(*probes.ProcessCallStats) error
	// handOff leaves the next collector the statistics the last export carried
	// (kernel_state.keep_probes), so that it counts from there.
	handOff(last []probes.ProcessCallStats) error
	// forgetPages drops the kernel's page-allocation total of a process whose series
	// ended, so that a process reusing its pid starts from zero.
	forgetPages(pid uint32) error
	// setNotableThreshold makes calls of api lasting at least ns become records.
	setNotableThreshold(api uint32, ns uint64) error
	// selectedDevices reads the device ordinal each process last selected with
	// cudaSetDevice (none without a kernel).
	selectedDevices() map[uint32]int32
}

// controller is the one BPF controller of a receiver ID: the metrics and the logs
// pipelines that name the same gpuebpf receiver share it (and its probes).
type controller struct {
	cfg      *Config
	settings receiver.Settings

	mu      sync.Mutex
	metrics consumer.Metrics
	logs    consumer.Logs
	users   int

	source    eventSource
	clock     *wallClock
	agg       *aggregator
	hostRes   func(pcommon.Resource)
	telemetry *metadata.TelemetryBuilder
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	lastEmit pcommon.Timestamp
	prevHost hostTotals

	rdmaPoller   *rdmasysfs.Poller
	rdmaPolledAt time.Time
	rdmaPorts    []rdmasysfs.Port

	// nvml reads GPU state; nil where NVML is off or could not load (nvmlErr says
	// why).
	nvml    *gpustate.Library
	nvmlErr error
	// rocm reads AMD GPUs' state through ROCm SMI, beside NVML; nil where it is off or
	// could not load (rocmErr says why).
	rocm    *rocmsmi.Library
	rocmErr error

	pullMu    sync.Mutex // one kernel statistics reading at a time
	callStats []probes.ProcessCallStats
}

var (
	controllersMu sync.Mutex
	controllers   = map[*Config]*controller{}
)

// sharedController returns the controller of cfg, creating it for the first signal.
func sharedController(cfg *Config, set receiver.Settings) *controller {
	controllersMu.Lock()
	defer controllersMu.Unlock()
	if c, ok := controllers[cfg]; ok {
		return c
	}
	c := &controller{cfg: cfg, settings: set}
	controllers[cfg] = c
	return c
}

// signalReceiver is the component the factory returns for one signal.
type signalReceiver struct {
	c *controller
}

func (r *signalReceiver) Start(ctx context.Context, host component.Host) error {
	return r.c.start(ctx)
}

func (r *signalReceiver) Shutdown(ctx context.Context) error {
	return r.c.shutdown()
}

func (c *controller) start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.users > 0 {
		c.users++
		return nil // the other signal started it
	}
	synthetic := c.cfg.Mode == ModeSynthetic
	c.clock = &wallClock{}
	c.clock.refresh()
	var err error
	if c.telemetry, err = metadata.NewTelemetryBuilder(c.settings.TelemetrySettings); err != nil {
		return err
	}
	c.hostRes = namedHostIdentity(c.cfg.HostName, c.cfg.ClusterName, synthetic)
	c.rdmaPoller = rdmasysfs.NewPoller(c.cfg.RDMA.SysfsRoot)
	c.agg = newAggregator(c.cfg, c.clock, nil, synthetic)
	c.agg.logs = newLogSink(c.cfg, c.clock, &c.agg.drops, c.hostRes)
	if synthetic {
		c.source = newSyntheticSource(c.cfg)
	} else {
		c.source, err = newEBPFSource(c.cfg, c.settings.Logger)
		if err != nil {
			return err
		}
	}
	if ps, ok := c.source.(interface{ python() pythonFrames }); ok {
		c.agg.python = ps.python()
	}
	if ns, ok := c.source.(interface{ native() nativeFrames }); ok {
		c.agg.native = ns.native()
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	if err := c.source.start(runCtx, c.agg); err != nil {
		cancel()
		_ = c.source.stop()
		return err
	}
	c.pullCallStats() // thresholds in place before the first second of calls
	c.users++
	c.registerTelemetry()
	c.lastEmit = pcommon.NewTimestampFromTime(wallNow())
	c.openNVML()
	c.openROCmSMI()
	c.wg.Add(1)
	go c.emitLoop(runCtx)
	if c.nvml != nil {
		c.wg.Add(1)
		go c.watchXIDs(runCtx)
	}
	if c.cfg.Readiness.Enabled {
		c.wg.Add(1)
		go c.watchReadiness(runCtx)
	}
	c.settings.Logger.Info("gpuebpf receiver started", zap.String("mode", c.cfg.Mode), zap.Int("probes", c.source.probeCount()))
	return nil
}

func (c *controller) registerTelemetry() {
	_ = c.telemetry.RegisterReceiverGpuebpfEventsCallback(func(_ context.Context, o metric.Int64Observer) error {
		for name, n := range c.agg.events.snapshot() {
			o.Observe(int64(n), metric.WithAttributes(attribute.String("event", name)))
		}
		return nil
	})
	_ = c.telemetry.RegisterReceiverGpuebpfDropsCallback(func(_ context.Context, o metric.Int64Observer) error {
		for reason, n := range c.allDrops() {
			o.Observe(int64(n), metric.WithAttributes(attribute.String("reason", reason)))
		}
		return nil
	})
	_ = c.telemetry.RegisterReceiverGpuebpfProbesCallback(func(_ context.Context, o metric.Int64Observer) error {
		o.Observe(int64(c.source.probeCount()))
		return nil
	})
}

// allDrops merges the kernel's drop counters with the receiver's own.
func (c *controller) allDrops() map[string]uint64 {
	drops := c.agg.drops.snapshot()
	if _, kernelDrops, ok := c.source.hostTotals(); ok {
		for k, v := range kernelDrops {
			drops[k] += v
		}
	}
	return drops
}

func (c *controller) emitLoop(ctx context.Context) {
	defer c.wg.Done()
	// With rank-signal samples, one ticker drives both: every samplesPerCollection-th
	// tick is a collection, the others are samples. Two tickers would drift apart and
	// now and then put a sample a millisecond before a collection, a sample of a
	// millisecond that the straggler loop would read as a rate.
	tick, samplesPerCollection := c.cfg.CollectionInterval, 1
	if iv := c.cfg.RankSignals.Interval; iv > 0 {
		tick, samplesPerCollection = iv, int(c.cfg.CollectionInterval/iv)
	}
	metricsTick := time.NewTicker(tick)
	defer metricsTick.Stop()
	// Logs leave every second whatever the metrics interval, so a notable event reaches
	// Loki while it still matters.
	logsTick := time.NewTicker(time.Second)
	defer logsTick.Stop()
	// CPU time a collective leaves as it is read where rank samples are on (a
	// nil channel never wakes).
	var perCollective <-chan struct{}
	if c.cfg.RankSignals.Interval > 0 {
		perCollective = c.agg.perCollectiveRead
	}
	for ticks := 1; ; {
		select {
		case <-ctx.Done():
			return
		case <-logsTick.C:
			c.clock.refresh()
			c.pullCallStats()
			c.flushLogs(ctx)
		case <-perCollective:
			c.flushCPUPerCollective(ctx)
		case <-metricsTick.C:
			if ticks%samplesPerCollection == 0 {
				c.flushMetrics(ctx)
			} else {
				c.flushRankSamples(ctx)
			}
			ticks++
		}
	}
}

// metricsNext is the metrics pipeline's consumer; nil until one is wired.
func (c *controller) metricsNext() consumer.Metrics {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.metrics
}

// flushRankSamples sends one rank-signal sample between collections.
func (c *controller) flushRankSamples(ctx context.Context) {
	next := c.metricsNext()
	if next == nil {
		return
	}
	c.pullCallStats()
	clocks := c.readClocks()
	c.agg.mu.Lock()
	md := c.agg.emitRankSamples(wallNow(), c.hostRes, clocks)
	c.agg.mu.Unlock()
	c.sendRankSample(ctx, next, md)
}

// sendRankSample passes a rank-signal sample on, unless it is empty.
func (c *controller) sendRankSample(ctx context.Context, next consumer.Metrics, md pmetric.Metrics) {
	if md.ResourceMetrics().Len() == 0 {
		return
	}
	if err := next.ConsumeMetrics(ctx, md); err != nil {
		c.settings.Logger.Warn("rank-signal sample refused by the next consumer", zap.Int("points", md.DataPointCount()), zap.Error(err))
	}
}

// flushCPUPerCollective sends the CPU time a collective read since the last sample.
func (c *controller) flushCPUPerCollective(ctx context.Context) {
	next := c.metricsNext()
	if next == nil {
		return
	}
	c.agg.mu.Lock()
	md := c.agg.emitCPUPerCollectiveNow(wallNow(), c.hostRes)
	c.agg.mu.Unlock()
	c.sendRankSample(ctx, next, md)
}

func (c *controller) flushLogs(ctx context.Context) {
	c.mu.Lock()
	next := c.logs
	c.mu.Unlock()
	ld, n := c.agg.logs.take()
	if n == 0 || next == nil {
		return
	}
	if err := next.ConsumeLogs(ctx, ld); err != nil {
		c.agg.drops.add("consumer_refused", uint64(n))
		c.settings.Logger.Warn("logs refused by the next consumer", zap.Int("records", n), zap.Error(err))
	}
}

func (c *controller) flushMetrics(ctx context.Context) {
	next := c.metricsNext()
	if next == nil {
		return
	}
	c.pullCallStats()
	kernel, kernelDrops, haveKernel := c.source.hostTotals()
	c.pollRDMA()
	gpus := c.readGPUs()
	host := hostTotals{kernel: kernel, haveKernel: haveKernel, events: c.agg.events.snapshot(), drops: c.agg.drops.snapshot(), probes: c.source.probeCount(), rdmaPorts: c.rdmaPorts, gpus: gpus}
	if len(gpus) > 0 {
		host.selectedDevices = c.source.selectedDevices()
	}
	for k, v := range kernelDrops {
		host.drops[k] += v
	}
	now := wallNow()
	c.agg.mu.Lock()
	c.agg.gpus = gpus
	md := c.agg.emit(now, c.lastEmit, host, &c.prevHost, c.hostRes)
	ended := c.agg.ended
	c.agg.ended = nil
	c.agg.mu.Unlock()
	for _, pid := range ended {
		if c.agg.python != nil {
			c.agg.python.forget(pid)
		}
		if c.agg.native != nil {
			c.agg.native.forget(pid)
		}
		if err := c.source.forgetPages(pid); err != nil {
			c.settings.Logger.Warn("cannot drop an exited process's page count", zap.Uint32("pid", pid), zap.Error(err))
		}
	}
	c.prevHost = host
	c.lastEmit = pcommon.NewTimestampFromTime(now)
	if err := next.ConsumeMetrics(ctx, md); err != nil {
		c.settings.Logger.Warn("metrics refused by the next consumer", zap.Int("points", md.DataPointCount()), zap.Error(err))
	}
}

// pullCallStats brings the kernel's call statistics into the series (every second, and
// before each export), gives back the slots of exited processes, and writes back the
// notable thresholds when the medians moved them.
func (c *controller) pullCallStats() {
	c.pullMu.Lock()
	defer c.pullMu.Unlock()
	c.agg.mu.Lock()
	read, goneBefore := c.agg.beginCallStatsRead()
	c.agg.mu.Unlock()
	stats, err := c.source.callStats(c.callStats[:0])
	if err != nil {
		c.agg.drops.add("call_stats_read", 1)
		c.settings.Logger.Warn("cannot read the kernel's call statistics", zap.Error(err))
		return
	}
	c.callStats = stats
	c.agg.mu.Lock()
	gone := c.agg.mergeCallStats(stats, read, goneBefore)
	c.agg.refreshMedians()
	thresholds, changed := c.agg.notableThresholds()
	c.agg.mu.Unlock()
	for _, s := range gone {
		if err := c.source.releaseCallStats(s); err != nil {
			c.settings.Logger.Warn("cannot free a process's call statistics", zap.Uint32("pid", s.PID), zap.Error(err))
		}
	}
	if !changed {
		return
	}
	for api, ns := range thresholds {
		if err := c.source.setNotableThreshold(uint32(api), ns); err != nil {
			c.settings.Logger.Warn("cannot set a notable-call threshold", zap.String("api", probes.APIName(uint32(api))), zap.Error(err))
			return
		}
	}
	c.agg.mu.Lock()
	c.agg.kernel.thresholds, c.agg.kernel.written = thresholds, true
	c.agg.mu.Unlock()
}

// pollRDMA reads the RDMA port counters when poll_interval has passed; between polls
// the last reading stands.
func (c *controller) pollRDMA() {
	if time.Since(c.rdmaPolledAt) < c.cfg.RDMA.PollInterval {
		return
	}
	c.rdmaPolledAt = time.Now()
	ports, err := c.rdmaPoller.Poll()
	if err != nil {
		c.agg.drops.add("rdma_sysfs", 1)
		c.settings.Logger.Warn("cannot read RDMA port counters", zap.String("sysfs_root", c.cfg.RDMA.SysfsRoot), zap.Error(err))
		return
	}
	c.rdmaPorts = ports
}

// finalFlushTimeout bounds the last flush at shutdown.
const finalFlushTimeout = 10 * time.Second

func (c *controller) shutdown() error {
	// The first signal's Shutdown stops the source and flushes both signals; the other's
	// then has nothing to do. The collector shuts its pipelines' components down in a
	// topological order, which may stop one pipeline's exporter before the other
	// pipeline's receiver: a flush from the last receiver to go then waited forever on
	// an exporter queue that no longer ran (the one-host config, whose duckdb exporter
	// waits for each write's result, hung on SIGTERM so). At the first Shutdown every
	// component downstream of either receiver is still running.
	c.mu.Lock()
	if c.users == 0 {
		c.mu.Unlock()
		return nil
	}
	c.users = 0
	c.mu.Unlock()
	controllersMu.Lock()
	delete(controllers, c.cfg)
	controllersMu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.source.quiesce()
	// A last flush, so what was seen before shutdown is not lost: flushMetrics reads the
	// kernel's last counts while the probes are still there, and what it exports is
	// what handOff leaves the next collector (kernel_state.keep_probes), no more, no less.
	// Bounded all the same: an exporter that waits for a result the shutdown will not
	// let come must not hold the collector past its stop timeout.
	flushCtx, cancelFlush := context.WithTimeout(context.Background(), finalFlushTimeout)
	c.flushLogs(flushCtx)
	c.flushMetrics(flushCtx)
	cancelFlush()
	if herr := c.source.handOff(c.callStats); herr != nil {
		c.settings.Logger.Warn("cannot hand the last counts to the next collector: it will count from its own start", zap.Error(herr))
	}
	err := c.source.stop()
	if c.nvml != nil {
		if cerr := c.nvml.Close(); cerr != nil {
			c.settings.Logger.Warn("NVML shutdown", zap.Error(cerr))
		}
		c.nvml = nil
	}
	if c.rocm != nil {
		if cerr := c.rocm.Close(); cerr != nil {
			c.settings.Logger.Warn("ROCm SMI shutdown", zap.Error(cerr))
		}
		c.rocm = nil
	}
	c.telemetry.Shutdown()
	if err != nil {
		return fmt.Errorf("stop gpuebpf event source: %w", err)
	}
	return nil
}
