package gpuebpfreceiver

import (
	"math"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/expohisto"
	"github.com/fathom-gpu/fathom/internal/gpustate"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/procinfo"
	"github.com/fathom-gpu/fathom/internal/rdmasysfs"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

const scopeName = "github.com/fathom-gpu/fathom/receiver/gpuebpfreceiver"

var apiLibrary = func() (libs [probes.APICount]probes.Library) {
	for _, a := range probes.APIs {
		libs[a.ID] = a.Library
	}
	return libs
}()

// wallClock turns the kernel's CLOCK_MONOTONIC timestamps into wall-clock time. The
// offset is refreshed on every poll, not computed once: NTP slews and steps the wall
// clock while the monotonic clock runs on.
type wallClock struct {
	offsetNS atomic.Int64
}

func (c *wallClock) refresh() {
	c.offsetNS.Store(wallNow().UnixNano() - monotonicNow())
}

func (c *wallClock) wall(monoNS uint64) pcommon.Timestamp {
	return pcommon.Timestamp(int64(monoNS) + c.offsetNS.Load())
}

// hostIdentity fills the node's resource attributes, with the machine's hostname.
func hostIdentity(cluster string, synthetic bool) func(pcommon.Resource) {
	return namedHostIdentity("", cluster, synthetic)
}

// namedHostIdentity is hostIdentity under the node name host (the machine's hostname
// when empty).
func namedHostIdentity(host, cluster string, synthetic bool) func(pcommon.Resource) {
	if host == "" {
		host, _ = os.Hostname()
	}
	return func(r pcommon.Resource) {
		r.Attributes().PutStr(semconv.HostName, host)
		if cluster != "" {
			r.Attributes().PutStr(semconv.ClusterName, cluster)
		}
		if synthetic {
			r.Attributes().PutBool(semconv.Synthetic, true)
		}
	}
}

func fillProcessResource(r pcommon.Resource, p *processSeries, host func(pcommon.Resource)) {
	host(r)
	a := r.Attributes()
	info := p.info
	a.PutInt(semconv.ProcessPID, int64(info.PID))
	putIfSet(a, semconv.ProcessExecutableName, info.Executable)
	putIfSet(a, semconv.ProcessCommandLine, info.CommandLine)
	putIfSet(a, semconv.CgroupPath, info.CgroupPath)
	putIfSet(a, semconv.ContainerID, info.ContainerID)
	putIfSet(a, semconv.K8sPodUID, info.PodUID)
	putIfSet(a, semconv.JobName, info.Job)
	putIfSet(a, semconv.GPUVendor, p.gpuVendor())
	if p.worldComm != 0 {
		a.PutStr(semconv.Cohort, commCohort(p.worldComm, p.worldCommRecovered))
	}
	putIntIfKnown(a, semconv.Rank, info.Rank)
	putIntIfKnown(a, semconv.LocalRank, info.LocalRank)
	putIntIfKnown(a, semconv.WorldSize, info.WorldSize)
}

// gpuVendor is the vendor of the first runtime API the process was seen calling; a
// process calls one vendor's runtime.
func (p *processSeries) gpuVendor() string {
	for id, s := range p.apis {
		if s != nil {
			if v := probes.APILibrary(uint32(id)).Vendor(); v != "" {
				return v
			}
		}
	}
	return ""
}

func putIfSet(a pcommon.Map, k, v string) {
	if v != "" {
		a.PutStr(k, v)
	}
}

func putIntIfKnown(a pcommon.Map, k string, v int) {
	if v >= 0 {
		a.PutInt(k, int64(v))
	}
}

// metricSet appends metrics of one resource, with the temporality and start time of
// their series.
type metricSet struct {
	metrics   pmetric.MetricSlice
	start, ts pcommon.Timestamp
	// interval is when the interval this export covers began (the last export, or the
	// process's start when later): where a series first credited now begins.
	interval pcommon.Timestamp
	delta    bool
	byName   map[string]pmetric.Metric
}

func (m *metricSet) metric(name, unit, desc string, kind pmetric.MetricType) pmetric.Metric {
	if existing, ok := m.byName[name]; ok {
		return existing
	}
	metric := m.metrics.AppendEmpty()
	metric.SetName(name)
	metric.SetUnit(unit)
	metric.SetDescription(desc)
	temporality := pmetric.AggregationTemporalityCumulative
	if m.delta {
		temporality = pmetric.AggregationTemporalityDelta
	}
	switch kind {
	case pmetric.MetricTypeSum:
		metric.SetEmptySum().SetIsMonotonic(true)
		metric.Sum().SetAggregationTemporality(temporality)
	case pmetric.MetricTypeExponentialHistogram:
		metric.SetEmptyExponentialHistogram().SetAggregationTemporality(temporality)
	case pmetric.MetricTypeHistogram:
		metric.SetEmptyHistogram().SetAggregationTemporality(temporality)
	case pmetric.MetricTypeGauge:
		metric.SetEmptyGauge()
	}
	m.byName[name] = metric
	return metric
}

func (m *metricSet) sum(name, unit, desc string, v uint64) pcommon.Map {
	dp := m.metric(name, unit, desc, pmetric.MetricTypeSum).Sum().DataPoints().AppendEmpty()
	dp.SetStartTimestamp(m.start)
	dp.SetTimestamp(m.ts)
	dp.SetIntValue(int64(v))
	return dp.Attributes()
}

func (m *metricSet) sumDouble(name, unit, desc string, v float64) pcommon.Map {
	return m.sumDoubleAt(name, unit, desc, v, m.ts)
}

// sumDoubleAt writes a point read at ts rather than at the export's time.
func (m *metricSet) sumDoubleAt(name, unit, desc string, v float64, ts pcommon.Timestamp) pcommon.Map {
	dp := m.metric(name, unit, desc, pmetric.MetricTypeSum).Sum().DataPoints().AppendEmpty()
	dp.SetStartTimestamp(m.start)
	dp.SetTimestamp(ts)
	dp.SetDoubleValue(v)
	return dp.Attributes()
}

func (m *metricSet) gaugeInt(name, unit, desc string, v int64) pcommon.Map {
	dp := m.metric(name, unit, desc, pmetric.MetricTypeGauge).Gauge().DataPoints().AppendEmpty()
	dp.SetTimestamp(m.ts)
	dp.SetIntValue(v)
	return dp.Attributes()
}

func (m *metricSet) histogram(name, desc string, h *expohisto.Histogram) pcommon.Map {
	dp := m.metric(name, "s", desc, pmetric.MetricTypeExponentialHistogram).ExponentialHistogram().DataPoints().AppendEmpty()
	dp.SetStartTimestamp(m.start)
	dp.SetTimestamp(m.ts)
	h.CopyTo(dp)
	return dp.Attributes()
}

// log2Histogram turns a kernel log2(ns) histogram into an explicit-bucket histogram
// in seconds.
func (m *metricSet) log2Histogram(name, desc string, buckets *[64]uint64) pcommon.Map {
	dp := m.metric(name, "s", desc, pmetric.MetricTypeHistogram).Histogram().DataPoints().AppendEmpty()
	dp.SetStartTimestamp(m.start)
	dp.SetTimestamp(m.ts)
	bounds := make([]float64, 0, 63)
	counts := make([]uint64, 0, 64)
	var total uint64
	for i := 0; i < 64; i++ {
		counts = append(counts, buckets[i])
		total += buckets[i]
		if i < 63 {
			bounds = append(bounds, math.Exp2(float64(i+1))/1e9)
		}
	}
	dp.ExplicitBounds().FromRaw(bounds)
	dp.BucketCounts().FromRaw(counts)
	dp.SetCount(total)
	return dp.Attributes()
}

// hostTotals are kernel aggregates plus the receiver's own counters, as totals since
// start (the emitter turns them into deltas when configured so).
type hostTotals struct {
	kernel     probes.HostAggregates
	haveKernel bool
	events     map[string]uint64
	drops      map[string]uint64
	probes     int
	rdmaPorts  []rdmasysfs.Port
	gpus       []gpustate.GPU
	// selectedDevices is each process's cudaSetDevice ordinal (read only with GPUs).
	selectedDevices map[uint32]int32
}

// emit builds one interval's metrics. Called with the aggregator's lock held.
func (a *aggregator) emit(now time.Time, lastEmit pcommon.Timestamp, host hostTotals, prevHost *hostTotals, hostResource func(pcommon.Resource)) pmetric.Metrics {
	md := pmetric.NewMetrics()
	ts := pcommon.NewTimestampFromTime(now)
	delta := a.cfg.Temporality == TemporalityDelta
	newSet := func(rm pmetric.ResourceMetrics, start pcommon.Timestamp) *metricSet {
		sm := rm.ScopeMetrics().AppendEmpty()
		sm.Scope().SetName(scopeName)
		if delta {
			start = lastEmit
		}
		return &metricSet{metrics: sm.Metrics(), start: start, ts: ts, interval: max(start, lastEmit), delta: delta, byName: map[string]pmetric.Metric{}}
	}
	gpuOf := gpuOfProcess(host.gpus, a.processes, host.selectedDevices)
	a.keepRankGPUs(gpuOf)
	mono := monotonicNow()
	for pid, p := range a.processes {
		last := p.exited && p.exitRead < a.kernel.merged
		a.settleUnnamedComms(p, mono, last)
		rm := md.ResourceMetrics().AppendEmpty()
		fillProcessResource(rm.Resource(), p, hostResource)
		set := newSet(rm, p.start)
		a.emitProcess(set, p, host.kernel.PagesByPID)
		emitRankGPU(set, gpuOf[pid])
		emitRankGPUErrors(set, p, gpuOf[pid])
		emitRankFabric(set, p, host.rdmaPorts)
		if last {
			// Its series end with this export, which carries the last counts the
			// kernel kept for it (a reading begun after its exit); its slot is freed.
			delete(a.processes, pid)
			a.ended = append(a.ended, pid)
		} else if delta {
			p.resetSeries()
		}
	}
	rm := md.ResourceMetrics().AppendEmpty()
	hostResource(rm.Resource())
	set := newSet(rm, a.processStartDefault)
	emitHost(set, host, prevHost, delta)
	a.emitRDMA(set, host, prevHost, delta)
	emitGPUs(set, host.gpus, prevHost.gpus)
	return md
}

func (a *aggregator) emitProcess(set *metricSet, p *processSeries, pageAllocs map[uint32]uint64) {
	var graphLaunches uint64
	for id, s := range p.apis {
		if s == nil {
			continue
		}
		api := probes.APIName(uint32(id))
		library := string(apiLibrary[id])
		attrs := set.histogram(semconv.MetricCUDAAPIDuration, "Duration of CUDA API calls", &s.duration)
		attrs.PutStr(semconv.CUDAAPIName, api)
		attrs.PutStr(semconv.CUDALibrary, library)
		for dir := 0; dir <= memcpyKinds; dir++ {
			if s.calls[dir] == 0 {
				continue
			}
			calls := set.sum(semconv.MetricCUDAAPICalls, "{call}", "CUDA API calls", s.calls[dir])
			calls.PutStr(semconv.CUDAAPIName, api)
			calls.PutStr(semconv.CUDALibrary, library)
			if dir < memcpyKinds {
				direction := probes.MemcpyKind(dir).Direction()
				calls.PutStr(semconv.CUDAMemcpyDir, direction)
				bytes := set.sum(semconv.MetricCUDAMemcpyBytes, "By", "Bytes copied by CUDA memcpy calls", s.bytes[dir])
				bytes.PutStr(semconv.CUDAAPIName, api)
				bytes.PutStr(semconv.CUDAMemcpyDir, direction)
			}
		}
		if s.errors > 0 {
			set.sum(semconv.MetricCUDAAPIErrors, "{call}", "CUDA API calls that returned an error", s.errors).PutStr(semconv.CUDAAPIName, api)
		}
		if mallocAPIs[id] {
			set.sum(semconv.MetricCUDAMallocBytes, "By", "Bytes requested from CUDA device allocators", s.bytes[memcpyKinds]).PutStr(semconv.CUDAAPIName, api)
		}
		if graphLaunchAPIs[id] {
			graphLaunches += s.calls[memcpyKinds]
		}
	}
	if graphLaunches > 0 {
		set.sum(semconv.MetricCUDAGraphLaunches, "{launch}", "CUDA graph launches", graphLaunches)
	}
	a.readForSample(p, set.ts.AsTime())
	emitRankSignals(set, p, false)
	set.sum(semconv.MetricRankTCPRetransmits, "{segment}", "TCP segments retransmitted from sockets the process holds", p.tcpRetransmits)
	if p.hasSched {
		for tid, t := range p.threads {
			emitThread(set, t, "cuda", int64(tid), &a.drops)
		}
		emitThread(set, &p.other, "other", -1, &a.drops)
	}
	if p.forks > 0 {
		set.sum(semconv.MetricProcessForks, "{process}", "Child processes forked", p.forks)
	}
	if p.hasBlock {
		for i, dir := range []string{"read", "write"} {
			if p.blockIO[i].Count > 0 {
				set.histogram(semconv.MetricBlockIODuration, "Block I/O latency of requests the process issued", &p.blockIO[i]).PutStr(semconv.DiskIODirection, dir)
			}
		}
	}
	if n, ok := pageAllocs[p.info.PID]; ok {
		// The kernel keeps a running total per process (dropped once the process's
		// series end, see ended); a delta is what it gained since the last export.
		v := n
		if set.delta && n >= p.pagesExported {
			v = n - p.pagesExported
		}
		p.pagesExported = n
		set.sum(semconv.MetricProcessPageAllocs, "{page}", "Pages allocated by the process", v)
	}
	emitNCCL(set, p)
}

// emitRankSignals writes the signals the straggler loop compares across a job's ranks.
// A rank sample (sample) leaves out CPU time and CPU time a collective where it would
// repeat the read the last one carried: while a rank's steps are longer than the
// sample interval, most samples come between two of its collectives, and a point
// repeated adds nothing downstream but rows.
func emitRankSignals(set *metricSet, p *processSeries, sample bool) {
	emitDeviceWait(set, p)
	if p.hostLeadSeen {
		set.sumDouble(semconv.MetricRankHostLead, "s", "Time from the process's last return from a device wait to its entry into each collective, summed", p.hostLead)
	}
	emitLaunches(set, p)
	emitRunQueue(set, p)
	if p.cpu.seen && !(sample && p.cpu.readAt.Equal(p.cpu.sampled)) {
		emitCPUTime(set, p)
		if sample {
			p.cpu.sampled = p.cpu.readAt
		}
	}
	emitCPUPerCollective(set, p, sample)
}

// emitCPUPerCollective writes the process's latest CPU time a collective, at the time
// it was read; a sample (sample) leaves out a point one before it carried. A rank
// that stopped making collectives has no CPU time a collective of now.
func emitCPUPerCollective(set *metricSet, p *processSeries, sample bool) {
	at := p.cpu.perCollectiveAt
	if at.IsZero() || set.ts.AsTime().Sub(at) >= cpuAtCollectivesFor || sample && at.Equal(p.cpu.perSampled) {
		return
	}
	if sample {
		p.cpu.perSampled = at
	}
	set.gaugeAt(semconv.MetricRankCPUPerCollective, "s", "CPU time of the process's CUDA threads per collective it made, over its latest span of at least half a second between reads at collectives", p.cpu.perCollective, pcommon.NewTimestampFromTime(at))
}

// emitCPUTime writes the process's CPU time as of its last read, at the time of that
// read: cumulative, it is the read at the process's latest collective while it makes
// them (readAtCollective), so that the increase between two points covers whole steps.
// Delta, it is what the process ran between the reads before the last export and this
// one, at the export's time.
func emitCPUTime(set *metricSet, p *processSeries) {
	const name, desc = semconv.MetricRankCPUTime, "Time the process's CUDA threads ran on a CPU"
	if set.delta {
		set.sumDouble(name, "s", desc, p.cpu.seconds-p.cpu.exported)
		p.cpu.exported = p.cpu.seconds
		return
	}
	at := set.ts
	if !p.cpu.readAt.IsZero() {
		at = pcommon.NewTimestampFromTime(p.cpu.readAt)
	}
	set.sumDoubleAt(name, "s", desc, p.cpu.seconds, at)
}

// emitRankSamples builds one rank-signal sample between collections (cumulative
// temporality only, see RankSignalsConfig): the rank signals of every live process
// whose rank is known, as they stand now, each process under its own resource and the
// RankSignalsScope. A process without a rank is compared with nobody, and would only
// be counted as dropped at the gateway. Called with the aggregator's lock held.
//
// clocks is a quick reading of the node's GPU clocks taken for this sample: a rank's
// GPU clock deficit comes with its other signals where its GPU's clock was read.
func (a *aggregator) emitRankSamples(now time.Time, hostResource func(pcommon.Resource), clocks []gpustate.Clock) pmetric.Metrics {
	return a.eachRank(now, hostResource, func(set *metricSet, p *processSeries) {
		a.readForSample(p, now)
		emitRankSignals(set, p, true)
		if g := a.rankGPUs[p.info.PID]; g != nil {
			if i := slices.IndexFunc(clocks, func(c gpustate.Clock) bool { return c.Index == g.Index && c.Vendor == g.Vendor }); i >= 0 {
				clocks[i].Refresh(g)
				emitRankGPU(set, g)
			}
		}
	})
}

// emitCPUPerCollectiveNow builds a rank-signal sample of the CPU time a collective
// alone, for the ranks whose latest was read since a sample carried it. Sent as read
// (the controller wakes on perCollectiveRead), a point of a job with long steps
// reaches the gateway up to a sample interval sooner: its spans are whole steps, half
// a second or more, and each is one of the few samples its evidence is built from.
// Called with the aggregator's lock held.
func (a *aggregator) emitCPUPerCollectiveNow(now time.Time, hostResource func(pcommon.Resource)) pmetric.Metrics {
	return a.eachRank(now, hostResource, func(set *metricSet, p *processSeries) {
		emitCPUPerCollective(set, p, true)
	})
}

// eachRank builds a rank-signal sample at now of what emit writes for every live
// process whose rank is known, each under its own resource and the RankSignalsScope.
func (a *aggregator) eachRank(now time.Time, hostResource func(pcommon.Resource), emit func(*metricSet, *processSeries)) pmetric.Metrics {
	md := pmetric.NewMetrics()
	ts := pcommon.NewTimestampFromTime(now)
	for _, p := range a.processes {
		if p.info.Rank < 0 || p.exited {
			continue
		}
		sm := pmetric.NewScopeMetrics()
		set := &metricSet{metrics: sm.Metrics(), start: p.start, ts: ts, byName: map[string]pmetric.Metric{}}
		emit(set, p)
		if sm.Metrics().Len() == 0 {
			continue // no signal yet (no device wait, launch or CUDA thread seen)
		}
		sm.Scope().SetName(semconv.RankSignalsScope)
		rm := md.ResourceMetrics().AppendEmpty()
		fillProcessResource(rm.Resource(), p, hostResource)
		sm.MoveTo(rm.ScopeMetrics().AppendEmpty())
	}
	return md
}

// keepRankGPUs keeps, for the rank samples until the next collection, the GPU each
// traced process runs on as this collection read it (copies: a sample's clock is
// written into them, not into the collection's reading).
func (a *aggregator) keepRankGPUs(gpuOf map[uint32]*gpustate.GPU) {
	copies := map[*gpustate.GPU]*gpustate.GPU{}
	a.rankGPUs = make(map[uint32]*gpustate.GPU, len(gpuOf))
	for pid, g := range gpuOf {
		if g == nil {
			continue
		}
		c, ok := copies[g]
		if !ok {
			cp := *g
			c = &cp
			copies[g] = c
		}
		a.rankGPUs[pid] = c
	}
}

// waitsForDevice marks probes.DeviceWaitAPIs: what a rank's host spends in them is its
// device wait.
var waitsForDevice = func() (w [probes.APICount]bool) {
	for _, name := range probes.DeviceWaitAPIs {
		w[apiID(name)] = true
	}
	return w
}()

// waitsForPeers marks the NCCL calls that can hold the host until peers arrive: real
// NCCL only enqueues them and returns in microseconds, unless its launch queue is full
// or the call sets up connections; a blocking implementation waits in them for the
// last rank. Communicator setup is left out: it happens once and its wait is not a step's.
var waitsForPeers = func() (w [probes.NCCLAPICount]bool) {
	for _, id := range []uint32{
		probes.NCCLAllReduce, probes.NCCLAllGather, probes.NCCLReduceScatter, probes.NCCLBroadcast,
		probes.NCCLBcast, probes.NCCLReduce, probes.NCCLSend, probes.NCCLRecv, probes.NCCLGroupEnd,
	} {
		w[id] = true
	}
	return w
}()

// emitDeviceWait sums the time spent in calls that wait for the device, and in NCCL
// calls that wait for peers. With asynchronous collectives (real NCCL) a rank's peers
// wait for it on the device, and their hosts see that wait in their next synchronising
// call; where collectives block, they wait inside the collective. Either way the rank
// that holds the others back is the one that waits least. A process that has made such
// calls gets a point every interval, zero included.
func emitDeviceWait(set *metricSet, p *processSeries) {
	var seconds float64
	seen := false
	for id, s := range p.apis {
		if s != nil && waitsForDevice[id] {
			seconds += s.duration.Sum
			seen = true
		}
	}
	for k, s := range p.nccl {
		if waitsForPeers[k.api] {
			seconds += s.duration.Sum
			seen = true
		}
	}
	if seen {
		set.sumDouble(semconv.MetricRankDeviceWait, "s", "Time the process's threads spent in CUDA calls that wait for the device and NCCL calls that wait for peers", seconds)
	}
}

// launchAPIs, mallocAPIs and graphLaunchAPIs mark by API ID the calls that put kernels
// (or graphs of them) on the device, the allocations and the graph launches.
var launchAPIs, mallocAPIs, graphLaunchAPIs = apiSet(semconv.LaunchAPIs), apiSet(semconv.MallocAPIs), apiSet(semconv.GraphLaunchAPIs)

func apiSet(names []string) (w [probes.APICount]bool) {
	for _, name := range names {
		w[apiID(name)] = true
	}
	return w
}

// emitLaunches counts the process's kernel and graph launches: for ranks that do not
// wait for each other (no NCCL, or replicas serving apart), the slow one launches
// least. Ranks of one synchronous job launch in step, so it names nobody there.
func emitLaunches(set *metricSet, p *processSeries) {
	var n uint64
	seen := false
	for id, s := range p.apis {
		if s != nil && launchAPIs[id] {
			for _, c := range s.calls {
				n += c
			}
			seen = true
		}
	}
	if seen {
		set.sum(semconv.MetricRankLaunches, "{launch}", "Kernel and graph launches the process made", n)
	}
}

// emitRunQueue sums the time the process's CUDA-calling threads were runnable but not
// running (preempted, or woken and waiting for a CPU): a rank whose CPU is shared with
// other work falls behind by that much, whatever its job does.
func emitRunQueue(set *metricSet, p *processSeries) {
	if !p.hasSched || len(p.threads) == 0 {
		return
	}
	var seconds float64
	for _, t := range p.threads {
		seconds += t.runQueue.Sum
	}
	set.sumDouble(semconv.MetricRankRunQueue, "s", "Time the process's CUDA threads were runnable but not running", seconds)
}

func emitThread(set *metricSet, t *threadSeries, role string, tid int64, drops *counterSet) {
	put := func(attrs pcommon.Map) pcommon.Map {
		attrs.PutStr(semconv.ThreadRole, role)
		if tid >= 0 {
			attrs.PutInt(semconv.ThreadID, tid)
		}
		return attrs
	}
	if t.offCPUPreempted.Count > 0 {
		put(set.histogram(semconv.MetricThreadOffCPU, "Time threads spent off CPU", &t.offCPUPreempted)).PutStr(semconv.OffCPUReason, "preempted")
	}
	if t.offCPUVoluntary.Count > 0 {
		put(set.histogram(semconv.MetricThreadOffCPU, "Time threads spent off CPU", &t.offCPUVoluntary)).PutStr(semconv.OffCPUReason, "voluntary")
	}
	if t.runQueue.Count > 0 {
		put(set.histogram(semconv.MetricThreadRunQueue, "Time threads waited runnable for a CPU", &t.runQueue))
	}
	t.namePreemptors(set.interval, set.ts, drops)
	emitNamed(set, t.preemptors, func(attrs pcommon.Map, s *namedSeries) {
		put(attrs).PutStr(semconv.PreemptorName, s.name())
		attrs.PutBool(semconv.PreemptorSelf, s.self)
	}, func(set *metricSet, s *namedSeries, put func(pcommon.Map)) {
		put(set.sum(semconv.MetricThreadPreemptions, "{preemption}", "Times the thread waited for a CPU, preempted or woken into the run queue, by the name of the task it waited behind", s.preemptions))
		put(set.sumDouble(semconv.MetricThreadPreemptTime, "s", "Time the thread waited for a CPU, preempted (off CPU) or woken (in the run queue), by the name of the task it waited behind", s.seconds))
		put(set.gaugeInt(semconv.MetricThreadPreemptors, "{process}", "Distinct processes the thread waited behind for a CPU under that name", int64(len(s.pids))))
	})
	t.nameWakers(set.interval, set.ts, drops)
	emitNamed(set, t.wakers, func(attrs pcommon.Map, s *namedSeries) {
		put(attrs).PutStr(semconv.WakerName, s.name())
		attrs.PutBool(semconv.WakerSelf, s.self)
		attrs.PutStr(semconv.BlockedOn, probes.BlockedOn(s.class).String())
	}, func(set *metricSet, s *namedSeries, put func(pcommon.Map)) {
		put(set.sumDouble(semconv.MetricThreadBlockedTime, "s", "Time the thread spent blocked (switched out while not runnable, until its wakeup), by who woke it and what it waited in", s.seconds))
		put(set.sum(semconv.MetricThreadBlocks, "{wait}", "Times the thread blocked, by who woke it and what it waited in", s.preemptions))
		put(set.gaugeInt(semconv.MetricThreadWakerThreads, "{thread}", "Distinct threads that woke the thread under that name", int64(len(s.pids))))
	})
}

// emitNamed emits each series of a table of names (see maxPreemptorNames): attrs puts a
// series' attributes, points its data points.
func emitNamed(set *metricSet, table namedByWeight, attrs func(pcommon.Map, *namedSeries), points func(*metricSet, *namedSeries, func(pcommon.Map))) {
	for i := range table {
		s := &table[i]
		// A cumulative series that began after the process's first interval says so
		// (see maxPreemptorNames); a delta point covers the interval whatever its name.
		set := set
		if !set.delta && s.start > set.start {
			since := *set
			since.start = s.start
			set = &since
		}
		points(set, s, func(m pcommon.Map) { attrs(m, s) })
	}
}

func (p *processSeries) resetSeries() {
	for _, s := range p.apis {
		if s != nil {
			s.duration.Reset()
			s.calls = [memcpyKinds + 1]uint64{}
			s.bytes = [memcpyKinds + 1]uint64{}
			s.errors = 0
		}
	}
	for _, t := range p.threads {
		*t = threadSeries{}
	}
	p.other = threadSeries{}
	p.forks = 0
	p.blockIO = [2]expohisto.Histogram{}
	for _, s := range p.nccl {
		*s = ncclSeries{}
	}
	p.hostLead = 0
	p.tcpRetransmits = 0
}

func emitHost(set *metricSet, host hostTotals, prev *hostTotals, delta bool) {
	diff := func(now, before uint64) uint64 {
		if delta && before <= now {
			return now - before
		}
		return now
	}
	k, pk := host.kernel, prev.kernel
	if host.haveKernel {
		runq := k.RunQueueOther
		blockRead, blockWrite := k.BlockRead, k.BlockWrite
		if delta {
			for i := range runq {
				runq[i] = diff(runq[i], pk.RunQueueOther[i])
				blockRead[i] = diff(blockRead[i], pk.BlockRead[i])
				blockWrite[i] = diff(blockWrite[i], pk.BlockWrite[i])
			}
		}
		set.log2Histogram(semconv.MetricHostRunQueue, "Run-queue latency of untraced threads", &runq)
		set.log2Histogram(semconv.MetricBlockIODuration, "Block I/O latency on the node", &blockRead).PutStr(semconv.DiskIODirection, "read")
		set.log2Histogram(semconv.MetricBlockIODuration, "Block I/O latency on the node", &blockWrite).PutStr(semconv.DiskIODirection, "write")
		set.sum(semconv.MetricBlockIOBytes, "By", "Block I/O bytes on the node", diff(k.BlockBytesRead, pk.BlockBytesRead)).PutStr(semconv.DiskIODirection, "read")
		set.sum(semconv.MetricBlockIOBytes, "By", "Block I/O bytes on the node", diff(k.BlockBytesWrite, pk.BlockBytesWrite)).PutStr(semconv.DiskIODirection, "write")
		set.sum(semconv.MetricHostPageAllocsOther, "{page}", "Pages allocated by untraced processes", diff(k.PagesOther, pk.PagesOther))
		set.sum(semconv.MetricTCPRetransmits, "{segment}", "TCP retransmits", diff(k.RetransmitsIPv4, pk.RetransmitsIPv4)).PutStr(semconv.NetworkType, "ipv4")
		set.sum(semconv.MetricTCPRetransmits, "{segment}", "TCP retransmits", diff(k.RetransmitsIPv6, pk.RetransmitsIPv6)).PutStr(semconv.NetworkType, "ipv6")
	}
	for name, n := range host.events {
		set.sum(semconv.MetricReceiverEvents, "{event}", "Events the receiver decoded", diff(n, prev.events[name])).PutStr(semconv.EventName, name)
	}
	for reason, n := range host.drops {
		set.sum(semconv.MetricReceiverDrops, "{event}", "Events lost", diff(n, prev.drops[reason])).PutStr(semconv.ReceiverDropCause, reason)
	}
	set.gaugeInt(semconv.MetricReceiverProbes, "{probe}", "Attached probes", int64(host.probes))
}

// syntheticProcess is the identity of a made-up rank process.
func syntheticProcess(pid uint32) procinfo.Process {
	rank := int(pid % 1000)
	return procinfo.Process{
		PID: pid, Executable: "python3", CommandLine: "python3 train.py (synthetic)",
		Job: "synthetic-job", Rank: rank, LocalRank: rank, WorldSize: -1,
		CgroupPath: "/fathom/synthetic/rank" + strconv.Itoa(rank),
	}
}
