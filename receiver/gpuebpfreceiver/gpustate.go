package gpuebpfreceiver

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.uber.org/zap"

	"github.com/fathom-gpu/fathom/internal/gpustate"
	"github.com/fathom-gpu/fathom/internal/gpustate/rocmsmi"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// The node's GPU state comes from NVML for NVIDIA's GPUs and ROCm SMI for AMD's, both
// read into gpustate.GPU, in the receiver rather than in a receiver
// of its own: binding a GPU to the ranks that run on it needs the receiver's process
// table (pid to rank, job, pod), and one component per node keeps one place that says
// what the node can see.

// openNVML loads NVML when configured; a node without it runs on, and says why once.
func (c *controller) openNVML() {
	if !c.cfg.NVML.Enabled || c.cfg.Mode == ModeSynthetic {
		return
	}
	lib, err := gpustate.Open(c.cfg.NVML.LibraryPath)
	if err != nil {
		c.nvmlErr = err
		c.settings.Logger.Info("no GPU state from NVML on this node; its series are off", zap.Error(err))
		return
	}
	c.nvml = lib
	version, _ := lib.DriverVersion()
	c.settings.Logger.Info("reading GPU state from NVML", zap.String("driver", version))
}

// openROCmSMI loads ROCm SMI when configured. Most nodes have no AMD GPU, so a library
// missing from the search path is said at debug level only; one configured by path,
// or one that loads and fails to start, is said once like NVML's.
func (c *controller) openROCmSMI() {
	if !c.cfg.ROCmSMI.Enabled || c.cfg.Mode == ModeSynthetic {
		return
	}
	lib, err := rocmsmi.Open(c.cfg.ROCmSMI.LibraryPath)
	if err != nil {
		c.rocmErr = err
		if errors.Is(err, rocmsmi.ErrNoLibrary) && c.cfg.ROCmSMI.LibraryPath == "" {
			c.settings.Logger.Debug("no ROCm SMI on this node", zap.Error(err))
		} else {
			c.settings.Logger.Info("no AMD GPU state from ROCm SMI on this node; its series are off", zap.Error(err))
		}
		return
	}
	c.rocm = lib
	version, _ := lib.DriverVersion()
	c.settings.Logger.Info("reading AMD GPU state from ROCm SMI", zap.String("driver", version))
}

// watchXIDs sends each XID the driver reports as a log record, on its own, the moment
// it arrives (the logs flush within a second).
func (c *controller) watchXIDs(ctx context.Context) {
	defer c.wg.Done()
	err := c.nvml.WatchXIDs(ctx, nil, func(x gpustate.XID) {
		c.agg.mu.Lock()
		ranks := c.ranksOnGPU(x.GPU)
		c.agg.mu.Unlock()
		c.agg.logs.gpuXID(x, ranks)
	})
	if err != nil {
		c.settings.Logger.Warn("XID events from NVML stopped", zap.Error(err))
	}
}

// readGPUs takes one reading of every GPU for this collection; a reading that fails
// is counted and logged, and the GPUs it could read are kept.
func (c *controller) readGPUs() []gpustate.GPU {
	return readEach(c, gpustate.Reader.Read, func(library string, err error) {
		c.settings.Logger.Warn("cannot read every GPU's state from "+library, zap.Error(err))
	})
}

// readClocks takes a quick reading of the GPUs' clocks for a rank sample, where a traced
// process runs on a GPU. A reading that fails is counted (and said at debug level: it
// comes four times a second); the sample goes without the GPUs it could not read.
func (c *controller) readClocks() []gpustate.Clock {
	c.agg.mu.Lock()
	onGPUs := len(c.agg.rankGPUs) > 0
	c.agg.mu.Unlock()
	if !onGPUs {
		return nil
	}
	return readEach(c, gpustate.Reader.ReadClocks, func(library string, err error) {
		c.settings.Logger.Debug("cannot read every GPU's clock from "+library, zap.Error(err))
	})
}

// readEach reads with read from each vendor's library the node has (NVML, ROCm SMI),
// keeping what each could read; a failure is counted as that library's drop and said
// through failed.
func readEach[T any](c *controller, read func(gpustate.Reader) ([]T, error), failed func(library string, err error)) []T {
	var out []T
	for _, lib := range []struct {
		r                   gpustate.Reader
		library, dropReason string
	}{{nvmlReader(c.nvml), "NVML", "nvml_read"}, {rocmReader(c.rocm), "ROCm SMI", "rocm_smi_read"}} {
		if lib.r == nil {
			continue
		}
		got, err := read(lib.r)
		if err != nil {
			c.agg.drops.add(lib.dropReason, 1)
			failed(lib.library, err)
		}
		out = append(out, got...)
	}
	return out
}

// nvmlReader and rocmReader are the libraries as Readers: nil where the node has none
// (a nil *Library in an interface is not a nil Reader).
func nvmlReader(l *gpustate.Library) gpustate.Reader {
	if l == nil {
		return nil
	}
	return l
}

func rocmReader(l *rocmsmi.Library) gpustate.Reader {
	if l == nil {
		return nil
	}
	return l
}

// ranksOnGPU names the traced processes on GPU index as of the last reading, for an
// XID's record. Called with the aggregator's lock held.
func (c *controller) ranksOnGPU(index int) string {
	var names []string
	for _, g := range c.agg.gpus {
		if g.Index != index {
			continue
		}
		for _, proc := range g.Processes {
			p, ok := c.agg.processes[proc.PID]
			if !ok {
				continue
			}
			if p.info.Rank >= 0 {
				names = append(names, fmt.Sprintf("rank %d (pid %d)", p.info.Rank, proc.PID))
			} else {
				names = append(names, fmt.Sprintf("pid %d", proc.PID))
			}
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// gpuOfProcess maps each traced process's pid to its GPU: the one NVML lists it on (the
// first, for a process on several), else the one its cudaSetDevice ordinal names through
// its CUDA_VISIBLE_DEVICES. NVML's list is what the driver knows and covers every way a
// process picks a GPU; the ordinal covers processes NVML does not show (a container
// whose pids the driver reports in another namespace, a driver that hides processes).
func gpuOfProcess(gpus []gpustate.GPU, processes map[uint32]*processSeries, selected map[uint32]int32) map[uint32]*gpustate.GPU {
	out := map[uint32]*gpustate.GPU{}
	for i := range gpus {
		for _, p := range gpus[i].Processes {
			if _, ok := out[p.PID]; !ok {
				out[p.PID] = &gpus[i]
			}
		}
	}
	for pid, ordinal := range selected {
		p := processes[pid]
		if _, listed := out[pid]; listed || p == nil {
			continue
		}
		index, uuid, ok := p.info.VisibleDevices.GPU(int(ordinal))
		if !ok {
			continue
		}
		for i := range gpus {
			if (uuid == "" && gpus[i].Index == index) || (uuid != "" && strings.HasPrefix(gpus[i].UUID, uuid)) {
				out[pid] = &gpus[i]
				break
			}
		}
	}
	return out
}

func (m *metricSet) gauge(name, unit, desc string, v float64) pcommon.Map {
	return m.gaugeAt(name, unit, desc, v, m.ts)
}

// gaugeAt writes a gauge read at ts rather than at the export's time.
func (m *metricSet) gaugeAt(name, unit, desc string, v float64, ts pcommon.Timestamp) pcommon.Map {
	dp := m.metric(name, unit, desc, pmetric.MetricTypeGauge).Gauge().DataPoints().AppendEmpty()
	dp.SetTimestamp(ts)
	dp.SetDoubleValue(v)
	return dp.Attributes()
}

func putGPU(attrs pcommon.Map, g *gpustate.GPU) {
	attrs.PutStr(semconv.HWID, g.UUID)
	attrs.PutInt(semconv.GPUIndex, int64(g.Index))
}

// emitGPUs writes every GPU's reading on the node's resource. Sums (PCIe replays,
// ECC errors) are the driver's own totals since it loaded; with delta temporality,
// the change since the last reading.
func emitGPUs(set *metricSet, gpus, prev []gpustate.GPU) {
	before := map[string]*gpustate.GPU{}
	if set.delta {
		for i := range prev {
			before[prev[i].UUID] = &prev[i]
		}
	}
	since := func(now uint64, then func(*gpustate.GPU) uint64, uuid string) uint64 {
		if b, ok := before[uuid]; ok && then(b) <= now {
			return now - then(b)
		}
		return now
	}
	for i := range gpus {
		g := &gpus[i]
		gauge := func(name, unit, desc string, v float64, field string) pcommon.Map {
			if !g.Supports(field) {
				return pcommon.NewMap()
			}
			attrs := set.gauge(name, unit, desc, v)
			putGPU(attrs, g)
			return attrs
		}
		attrs := gauge(semconv.MetricGPUUtilization, "1", "Share of the last sample period with a kernel running", float64(g.UtilizationPercent)/100, "utilization")
		attrs.PutStr(semconv.HWName, g.Name)
		attrs.PutStr(semconv.HWVendor, g.Vendor)
		attrs.PutStr(semconv.GPUBusID, g.BusID)
		gauge(semconv.MetricGPUMemoryUsage, "By", "Device memory in use", float64(g.MemoryUsedBytes), "memory")
		gauge(semconv.MetricGPUMemoryLimit, "By", "Device memory installed", float64(g.MemoryTotalBytes), "memory")
		gauge(semconv.MetricGPUPower, "W", "Power the GPU draws", g.PowerWatts, "power")
		gauge(semconv.MetricGPUPowerLimit, "W", "Power limit the driver enforces", g.PowerLimitWatts, "power_limit")
		gauge(semconv.MetricGPUTemperature, "Cel", "GPU die temperature", float64(g.TemperatureC), "temperature")
		for _, clock := range []struct {
			domain    string
			now, most uint32
		}{{"sm", g.SMClockMHz, g.SMClockMaxMHz}, {"memory", g.MemClockMHz, g.MemClockMaxMHz}} {
			gauge(semconv.MetricGPUClock, "MHz", "Clock frequency now", float64(clock.now), clock.domain+"_clock").PutStr(semconv.GPUClockDomain, clock.domain)
			gauge(semconv.MetricGPUClockMax, "MHz", "Highest clock frequency", float64(clock.most), clock.domain+"_clock_max").PutStr(semconv.GPUClockDomain, clock.domain)
		}
		if g.Supports("clock_event_reasons") {
			for _, r := range gpustate.ClockEventReasons {
				active := 0.0
				if g.ClockEventReasons&r.Bit != 0 {
					active = 1
				}
				gauge(semconv.MetricGPUClockEvent, "1", "1 while the reason holds the clocks down", active, "clock_event_reasons").PutStr(semconv.GPUClockReason, r.Name)
			}
		}
		gauge(semconv.MetricGPUPCIeGen, "1", "PCIe generation the link trained to", float64(g.PCIeGen), "pcie_gen")
		gauge(semconv.MetricGPUPCIeGenMax, "1", "Highest PCIe generation of the GPU and its slot", float64(g.PCIeGenMax), "pcie_gen_max")
		gauge(semconv.MetricGPUPCIeWidth, "{lane}", "PCIe lanes the link trained to", float64(g.PCIeWidth), "pcie_width")
		gauge(semconv.MetricGPUPCIeWidthMax, "{lane}", "PCIe lanes of the GPU and its slot", float64(g.PCIeWidthMax), "pcie_width_max")
		if g.Supports("pcie_replays") {
			putGPU(set.sum(semconv.MetricGPUPCIeReplays, "{packet}", "PCIe packets the link resent", since(g.PCIeReplays, func(b *gpustate.GPU) uint64 { return b.PCIeReplays }, g.UUID)), g)
		}
		for _, ecc := range []struct {
			kind, field string
			n           uint64
			then        func(*gpustate.GPU) uint64
		}{
			{"corrected", "ecc_corrected", g.ECCCorrected, func(b *gpustate.GPU) uint64 { return b.ECCCorrected }},
			{"uncorrected", "ecc_uncorrected", g.ECCUncorrected, func(b *gpustate.GPU) uint64 { return b.ECCUncorrected }},
		} {
			if g.Supports(ecc.field) {
				attrs := set.sum(semconv.MetricGPUECCErrors, "{error}", "Device memory ECC errors", since(ecc.n, ecc.then, g.UUID))
				putGPU(attrs, g)
				attrs.PutStr(semconv.GPUMemoryErrorType, ecc.kind)
			}
		}
		if g.Supports("remapped_rows") {
			gauge(semconv.MetricGPURemappedRows, "{row}", "Device memory rows remapped to spares", float64(g.RemappedCorrectable), "remapped_rows").PutStr(semconv.GPURemapCause, "correctable")
			gauge(semconv.MetricGPURemappedRows, "{row}", "Device memory rows remapped to spares", float64(g.RemappedUncorrectable), "remapped_rows").PutStr(semconv.GPURemapCause, "uncorrectable")
			gauge(semconv.MetricGPURemapPending, "1", "1 while a row remap waits for a GPU reset", b2f(g.RemapPending), "remapped_rows")
			gauge(semconv.MetricGPURemapFailed, "1", "1 once a remap failed (no spare rows left)", b2f(g.RemapFailed), "remapped_rows")
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// emitRankGPU writes, among a rank process's own series, the state of the GPU it runs
// on that the straggler loop compares across a cohort: how far its SM clock is below
// the clock's maximum (0 at full clock, so that a cohort at full clock has a median of
// 0 and the signal's absolute MAD floor sets the line), with a detail that names the
// GPU and why its clocks are down.
func emitRankGPU(set *metricSet, g *gpustate.GPU) {
	if g == nil || g.SMClockMaxMHz == 0 || !g.Supports("sm_clock") || !g.Supports("sm_clock_max") {
		return
	}
	attrs := set.gauge(semconv.MetricRankGPUClockDeficit, "1", "1 minus the SM clock of the process's GPU over its maximum", 1-float64(g.SMClockMHz)/float64(g.SMClockMaxMHz))
	putGPU(attrs, g)
	attrs.PutStr(semconv.SignalDetail, gpuDetail(g))
}

// rankGPUErrors is what a rank's GPU counted since the rank was first seen on it.
type rankGPUErrors struct {
	uuid          string
	replays, ecc  uint64 // the GPU's totals at the rank's first reading
	exportedTotal uint64
}

// emitRankGPUErrors writes the rank's fathom.rank.gpu.errors: PCIe replays and ECC
// errors (corrected and not) its GPU counted since the rank was first seen on it, with
// a detail saying which. A GPU that does not count one of them leaves it out.
func emitRankGPUErrors(set *metricSet, p *processSeries, g *gpustate.GPU) {
	if g == nil {
		return
	}
	// A field the GPU does not count reads 0 and adds nothing.
	if !g.Supports("pcie_replays") && !g.Supports("ecc_corrected") {
		return
	}
	replays, ecc := g.PCIeReplays, g.ECCCorrected+g.ECCUncorrected
	e := p.gpuErrors
	if e == nil || e.uuid != g.UUID || replays < e.replays || ecc < e.ecc { // new, moved, or the driver reloaded
		e = &rankGPUErrors{uuid: g.UUID, replays: replays, ecc: ecc}
		p.gpuErrors = e
	}
	dReplays, dECC := replays-e.replays, ecc-e.ecc
	total := dReplays + dECC
	out := total
	if set.delta {
		out = total - min(total, e.exportedTotal)
	}
	e.exportedTotal = total
	attrs := set.sum(semconv.MetricRankGPUErrors, "{error}", "PCIe replays and ECC errors of the process's GPU since the process was first seen on it", out)
	putGPU(attrs, g)
	attrs.PutStr(semconv.SignalDetail, fmt.Sprintf("GPU %d (%s) since the rank started: %s PCIe replays, %s ECC errors", g.Index, g.UUID,
		thousands64(dReplays), thousands64(dECC)))
}

func thousands64(v uint64) string {
	s := strconv.FormatUint(v, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// gpuDetail is the text a straggler record carries for a rank flagged on its GPU.
func gpuDetail(g *gpustate.GPU) string {
	s := fmt.Sprintf("GPU %d (%s) SM clock %s of %s MHz", g.Index, g.UUID, thousands(g.SMClockMHz), thousands(g.SMClockMaxMHz))
	if reasons := g.Reasons(); len(reasons) > 0 {
		s += ": " + strings.Join(reasons, ", ")
	}
	return s
}

func thousands(v uint32) string { return thousands64(uint64(v)) }

// gpuXID writes one XID as a log record on the node's resource. An XID is a fault of
// the device, not a call record, so it goes out whatever logs.policy says (none
// included), within logs.max_per_second.
func (s *logSink) gpuXID(x gpustate.XID, ranks string) {
	if !s.limiter.Allow() {
		s.drops.add("log_rate", 1)
		return
	}
	lr, ok := s.record(nil, 0)
	if !ok {
		return
	}
	lr.SetTimestamp(pcommon.NewTimestampFromTime(wallNow()))
	lr.SetEventName(semconv.EventGPUXID)
	attrs := lr.Attributes()
	attrs.PutStr(semconv.EventName, semconv.EventGPUXID)
	attrs.PutStr(semconv.NotableReason, "xid")
	attrs.PutStr(semconv.HWID, x.UUID)
	attrs.PutInt(semconv.GPUIndex, int64(x.GPU))
	attrs.PutInt(semconv.GPUXIDCode, int64(x.Code))
	lr.SetSeverityNumber(plog.SeverityNumberError)
	lr.SetSeverityText("ERROR")
	on := "no traced process"
	if ranks != "" {
		on = ranks
	}
	lr.Body().SetStr(fmt.Sprintf("XID %d on GPU %d (%s), running %s", x.Code, x.GPU, x.UUID, on))
}
