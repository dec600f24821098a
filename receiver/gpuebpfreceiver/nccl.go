package gpuebpfreceiver

import (
	"fmt"
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/fathom-gpu/fathom/internal/expohisto"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/pyframes"
	"github.com/fathom-gpu/fathom/internal/rdmasysfs"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/receiver/gpuebpfreceiver/internal/collsample"
	"github.com/fathom-gpu/fathom/receiver/gpuebpfreceiver/internal/commrecovery"
)

// maxNCCLSeriesPerProcess bounds a process's (communicator, rank, op) series. A
// training process has a handful of communicators (data, tensor, pipeline parallel);
// one that creates communicators without end is cut off here and counted.
const maxNCCLSeriesPerProcess = 256

// ncclKey is one series: the calls of one op on one communicator by one rank.
type ncclKey struct {
	comm         uint64 // communicator hash, 0 for calls without a communicator (groups)
	rank, nranks int32
	api          uint32
	// recovered marks a communicator named by commrecovery, not by its unique id.
	recovered bool
}

type ncclSeries struct {
	duration expohisto.Histogram
	calls    uint64
	bytes    uint64
	errors   uint64
}

// ncclOps are the nccl.op values, by enum nccl_api.
var ncclOps = func() (ops [probes.NCCLAPICount]string) {
	for id, op := range map[uint32]string{
		probes.NCCLCommInitRank: "comm_init_rank", probes.NCCLCommInitRankConfig: "comm_init_rank_config",
		probes.NCCLCommInitAll: "comm_init_all", probes.NCCLCommSplit: "comm_split",
		probes.NCCLCommDestroy: "comm_destroy", probes.NCCLCommAbort: "comm_abort",
		probes.NCCLAllReduce: "all_reduce", probes.NCCLAllGather: "all_gather",
		probes.NCCLReduceScatter: "reduce_scatter", probes.NCCLBroadcast: "broadcast", probes.NCCLBcast: "bcast",
		probes.NCCLReduce: "reduce", probes.NCCLSend: "send", probes.NCCLRecv: "recv",
		probes.NCCLGroupStart: "group_start", probes.NCCLGroupEnd: "group_end",
	} {
		ops[id] = op
	}
	return ops
}()

// isCollective marks the collectives: calls every rank of a communicator makes for the
// same step, whose host lead compares ranks.
var isCollective = func() (c [probes.NCCLAPICount]bool) {
	for _, id := range []uint32{probes.NCCLAllReduce, probes.NCCLAllGather, probes.NCCLReduceScatter,
		probes.NCCLBroadcast, probes.NCCLBcast, probes.NCCLReduce} {
		c[id] = true
	}
	return c
}()

// commID is the nccl.comm.id value: the communicator hash in hex, the same on all ranks.
func commID(hash uint64) string { return fmt.Sprintf("%016x", hash) }

// commCohort is the fathom.cohort of a process whose world communicator is hash:
// nccl:<id>, or nccl-recovered:<id> when the communicator was named by commrecovery
// (the straggler processor lets a communicator named by its unique id win over it, for
// the ranks of one job whose nodes saw its setup and those that did not).
func commCohort(hash uint64, recovered bool) string {
	if recovered {
		return "nccl-recovered:" + commID(hash)
	}
	return "nccl:" + commID(hash)
}

// NCCLCall takes an NCCL call; every call is a record from the kernel.
func (a *aggregator) NCCLCall(ev *probes.NCCLCall) { a.ncclCall(ev, nil, false) }

func (a *aggregator) ncclCall(ev *probes.NCCLCall, frames []pyframes.Frame, truncated bool) {
	a.events.add(probes.KindNCCLCall)
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.process(ev.Hdr.Pid)
	if p == nil {
		return
	}
	if ev.Api == 0 || int(ev.Api) >= probes.NCCLAPICount {
		a.drops.add("decode", 1)
		return
	}
	if ev.CommHash != 0 && (ev.Nranks > p.worldRanks || (p.worldCommRecovered && ev.Nranks == p.worldRanks)) {
		// A communicator named by its unique id wins over a recovered one of its size.
		p.worldComm, p.worldRanks, p.worldCommRecovered = ev.CommHash, ev.Nranks, false
	}
	k := ncclKey{comm: ev.CommHash, rank: ev.Rank, nranks: ev.Nranks, api: ev.Api}
	var s *ncclSeries
	var recovered *unnamedComm
	if ev.CommHash == 0 && ev.Comm != 0 {
		// A communicator whose setup was not seen: its calls wait for a name.
		if s, k, recovered = a.unnamedCommCall(p, ev); recovered != nil {
			named := *ev
			named.CommHash, named.Rank, named.Nranks = k.comm, k.rank, k.nranks
			ev = &named
		}
	}
	if s == nil {
		if s = a.ncclSeriesOf(p, k); s == nil {
			return
		}
	}
	if isCollective[ev.Api] {
		if ev.HostLeadNs > 0 {
			p.hostLead += float64(ev.HostLeadNs) / 1e9
			p.hostLeadSeen = true
		}
		a.readAtCollective(p, wallNow())
	}
	seconds := float64(ev.DurationNs) / 1e9
	s.duration.Record(seconds)
	s.calls++
	s.bytes += ev.Bytes
	if ev.Ret != 0 {
		s.errors++
	}
	native := a.nativeOf(ev.Hdr.Pid, ev.NativeFrames, ev.Native[:])
	a.logs.ncclCall(p, ev, recovered, seconds, callStack{python: frames, truncated: truncated, native: native})
}

// ncclSeriesOf returns the process's series k, creating it within the process's cap
// (nil past it, counted).
func (a *aggregator) ncclSeriesOf(p *processSeries, k ncclKey) *ncclSeries {
	s := p.nccl[k]
	if s == nil {
		if len(p.nccl) >= maxNCCLSeriesPerProcess {
			a.drops.add("cardinality", 1)
			return nil
		}
		s = &ncclSeries{}
		p.nccl[k] = s
	}
	return s
}

func (a *aggregator) RDMAAsync(ev *probes.RDMAAsyncEvent) {
	a.events.add(probes.KindRDMAAsync)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rdmaEvents[ev.EventType]++
	a.logs.rdmaAsync(ev)
}

// RDMAQueuePair binds a traced process to the NIC it created a queue pair on.
func (a *aggregator) RDMAQueuePair(ev *probes.RDMAQueuePair) {
	a.events.add(probes.KindRDMAQP)
	device := ev.DeviceName()
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.process(ev.Hdr.Pid)
	if p == nil || device == "" {
		return
	}
	if p.qpDevices == nil {
		p.qpDevices = map[string]bool{}
	}
	if !p.qpDevices[device] && len(p.qpDevices) >= maxRankDevices {
		a.drops.add("cardinality", 1)
		return
	}
	p.qpDevices[device] = true
}

func putNCCLSeries(attrs pcommon.Map, k ncclKey) pcommon.Map {
	attrs.PutStr(semconv.NCCLOp, ncclOps[k.api])
	if k.comm != 0 {
		attrs.PutStr(semconv.NCCLCommID, commID(k.comm))
		if k.recovered {
			attrs.PutBool(semconv.NCCLCommRecovered, true)
		}
	}
	if k.rank >= 0 {
		attrs.PutInt(semconv.NCCLRank, int64(k.rank))
	}
	if k.nranks >= 0 {
		attrs.PutInt(semconv.NCCLNRanks, int64(k.nranks))
	}
	return attrs
}

func emitNCCL(set *metricSet, p *processSeries) {
	for k, s := range p.nccl {
		if s.calls == 0 {
			continue // delta temporality: nothing this interval
		}
		putNCCLSeries(set.histogram(semconv.MetricNCCLDuration, "Duration of NCCL calls", &s.duration), k)
		putNCCLSeries(set.sum(semconv.MetricNCCLCalls, "{call}", "NCCL calls", s.calls), k)
		if s.bytes > 0 {
			putNCCLSeries(set.sum(semconv.MetricNCCLBytes, "By", "Bytes named by NCCL calls", s.bytes), k)
		}
		if s.errors > 0 {
			putNCCLSeries(set.sum(semconv.MetricNCCLErrors, "{call}", "NCCL calls that returned an error", s.errors), k)
		}
	}
}

// emitRDMA adds the node's verbs async event counts and RDMA port counters.
func (a *aggregator) emitRDMA(set *metricSet, host hostTotals, prev *hostTotals, delta bool) {
	for t, n := range a.rdmaEvents {
		attrs := set.sum(semconv.MetricRDMAAsyncEvents, "{event}", "Verbs asynchronous events", n)
		attrs.PutStr(semconv.RDMAEventType, probes.IBVEventName(t))
		attrs.PutBool(semconv.RDMAFabricError, probes.IBVFabricError(t))
	}
	if delta {
		clear(a.rdmaEvents)
	}
	before := map[string]uint64{}
	if delta {
		for _, port := range prev.rdmaPorts {
			for name, v := range port.Values {
				before[port.Device+"/"+strconv.Itoa(port.Port)+"/"+name] = v
			}
		}
	}
	for _, port := range host.rdmaPorts {
		for name, v := range port.Values {
			if b, ok := before[port.Device+"/"+strconv.Itoa(port.Port)+"/"+name]; ok && b <= v {
				v -= b
			}
			c, _ := rdmasysfs.CounterByName(name)
			var attrs pcommon.Map
			switch c.Kind {
			case rdmasysfs.KindError:
				attrs = set.sum(semconv.MetricRDMAPortErrors, "{error}", "RDMA port error counters", v)
				attrs.PutStr(semconv.RDMACounter, name)
			case rdmasysfs.KindData:
				// The IB spec counts data in units of 4 bytes (octets divided by four).
				attrs = set.sum(semconv.MetricRDMAPortIO, "By", "Bytes through RDMA ports", 4*v)
				attrs.PutStr(semconv.NetworkDirection, c.Direction)
			case rdmasysfs.KindPackets:
				attrs = set.sum(semconv.MetricRDMAPortPackets, "{packet}", "Packets through RDMA ports", v)
				attrs.PutStr(semconv.NetworkDirection, c.Direction)
			case rdmasysfs.KindXmitWait:
				attrs = set.sum(semconv.MetricRDMAPortXmitWait, "{tick}", "Ticks RDMA ports waited for credits to send", v)
			}
			attrs.PutStr(semconv.RDMADevice, port.Device)
			attrs.PutInt(semconv.RDMAPort, int64(port.Port))
			attrs.PutStr(semconv.RDMATransport, port.Transport)
		}
	}
}

// maxSampledComms bounds the communicators per process whose rate picks the
// collectives kept; past it, one in sample_every is kept (counted as
// nccl_sample_comms).
const maxSampledComms = 64

// keepCollective says whether the collective ev, which has a sequence number, is kept:
// by its communicator's rate (collsample), so that every rank keeps the same ones.
func (s *logSink) keepCollective(p *processSeries, ev *probes.NCCLCall) bool {
	st := p.collSample[ev.CommHash]
	if st == nil {
		if len(p.collSample) >= maxSampledComms {
			s.drops.add("nccl_sample_comms", 1)
			return ev.Seq%s.ncclSample.Most == 0
		}
		if p.collSample == nil {
			p.collSample = map[uint64]*collsample.State{}
		}
		st = &collsample.State{}
		p.collSample[ev.CommHash] = st
	}
	return st.Keep(s.ncclSample, ev.Seq, int64(s.clock.wall(ev.Hdr.TsNs)))
}

func isCommLifecycle(api uint32) bool {
	switch api {
	case probes.NCCLCommInitRank, probes.NCCLCommInitRankConfig, probes.NCCLCommInitAll, probes.NCCLCommSplit,
		probes.NCCLCommDestroy, probes.NCCLCommAbort:
		return true
	}
	return false
}

// ncclCall logs one NCCL call. Under the notable policy the collectives kept are those
// whose sequence number is a multiple of sample_every: every rank keeps the same
// instances, so the gateway can match each kept instance across all of its ranks.
//
// A recovered communicator's calls (recovered not nil) have no sequence number its
// ranks agree on, only each process's own count (nccl.seq.local), which differs from
// another rank's by a constant. So that every rank keeps the same instances all the
// same, its collectives are kept in bursts that begin at a wall-clock boundary
// (commrecovery.Bursts): every rank's burst holds nearly the same collectives, and the
// gateway learns each rank's offset from them (docs/straggler.md, Arrival lag).
func (s *logSink) ncclCall(p *processSeries, ev *probes.NCCLCall, recovered *unnamedComm, seconds float64, stack callStack) {
	collective := probes.IsCollective(ev.Api) || ev.Api == probes.NCCLSend || ev.Api == probes.NCCLRecv
	reason := ""
	switch {
	case ev.Ret != 0:
		reason = "error"
	case isCommLifecycle(ev.Api):
		reason = "communicator"
	case collective && ev.HasSeq != 0 && s.keepCollective(p, ev):
		reason = "sampled"
	case recovered != nil && probes.IsCollective(ev.Api):
		if recovered.bursts.Keep(commrecovery.DefaultBursts, int64(s.clock.wall(ev.Hdr.TsNs))) {
			reason = "sampled"
		}
	case recovered != nil && collective:
		// Sends and receives: no rank matches them with another's, so one in
		// sample_every of the process's own, for the store.
		if p.recoveredPeerCalls++; (p.recoveredPeerCalls-1)%s.ncclSample.Most == 0 {
			reason = "sampled"
		}
	}
	if s.policy == LogsNone || (s.policy == LogsNotable && reason == "") {
		return
	}
	if !s.ncclLimiter.Allow() {
		s.drops.add("nccl_log_rate", 1)
		return
	}
	lr, ok := s.record(p, ev.Hdr.TsNs)
	if !ok {
		return
	}
	name := semconv.EventNCCLCall
	if collective {
		name = semconv.EventNCCLCollective
	}
	api := probes.NCCLAPIName(ev.Api)
	attrs := lr.Attributes()
	attrs.PutStr(semconv.EventName, name)
	lr.SetEventName(name)
	putNCCLSeries(attrs, ncclKey{comm: ev.CommHash, rank: ev.Rank, nranks: ev.Nranks, api: ev.Api, recovered: recovered != nil})
	if ev.HasSeq != 0 {
		attrs.PutInt(semconv.NCCLSeq, int64(ev.Seq))
	}
	if recovered != nil && probes.IsCollective(ev.Api) {
		attrs.PutInt(semconv.NCCLSeqLocal, int64(recovered.collectives))
	}
	if ev.Peer >= 0 {
		attrs.PutInt(semconv.NCCLPeer, int64(ev.Peer))
	}
	if dt := probes.NCCLDataType(ev.Datatype); dt != "" {
		attrs.PutInt(semconv.NCCLCount, int64(ev.Count))
		attrs.PutInt(semconv.NCCLBytes, int64(ev.Bytes))
		attrs.PutStr(semconv.NCCLDataType, dt)
	}
	if op := probes.NCCLRedOp(ev.Redop); op != "" {
		attrs.PutStr(semconv.NCCLReduceOp, op)
	}
	if ev.Stream != 0 {
		attrs.PutStr(semconv.NCCLStream, fmt.Sprintf("%#x", ev.Stream))
	}
	attrs.PutInt(semconv.NCCLGroupDepth, int64(ev.GroupDepth))
	attrs.PutInt(semconv.NCCLResult, int64(ev.Ret))
	attrs.PutInt(semconv.NCCLEntryTime, int64(s.clock.wall(ev.Hdr.TsNs)))
	attrs.PutInt(semconv.NCCLReturnTime, int64(s.clock.wall(ev.Hdr.TsNs+ev.DurationNs)))
	attrs.PutDouble(semconv.DurationSeconds, seconds)
	attrs.PutInt(semconv.ThreadID, int64(ev.Hdr.Tid))
	attrs.PutStr(semconv.NotableReason, reason)
	body := fmt.Sprintf("%s took %s", api, fmtDuration(seconds))
	if ev.CommHash != 0 {
		body += fmt.Sprintf(" on communicator %s rank %d/%d", commID(ev.CommHash), ev.Rank, ev.Nranks)
	}
	if ev.HasSeq != 0 {
		body += fmt.Sprintf(" seq %d", ev.Seq)
	}
	if ev.Ret != 0 {
		body += fmt.Sprintf(" and failed with error %d", ev.Ret)
		lr.SetSeverityNumber(plog.SeverityNumberError)
		lr.SetSeverityText("ERROR")
	}
	if where := s.putStack(attrs, p, ev.Hdr.TsNs, stack); where != "" {
		body += " from " + where
	}
	lr.Body().SetStr(body + " " + who(p, ev.Hdr.Tid))
}

// rdmaAsync logs a verbs async event on the node's resource: fabric events are rare and
// each one is news, so all are notable; none names a process, QP or GID.
func (s *logSink) rdmaAsync(ev *probes.RDMAAsyncEvent) {
	if !s.admit(true) {
		return
	}
	lr, ok := s.record(nil, ev.Hdr.TsNs)
	if !ok {
		return
	}
	typ, fabricError := probes.IBVEventName(ev.EventType), probes.IBVFabricError(ev.EventType)
	attrs := lr.Attributes()
	attrs.PutStr(semconv.EventName, semconv.EventRDMAAsync)
	lr.SetEventName(semconv.EventRDMAAsync)
	attrs.PutStr(semconv.NotableReason, "fabric")
	attrs.PutStr(semconv.RDMAEventType, typ)
	attrs.PutBool(semconv.RDMAFabricError, fabricError)
	body := "RDMA async event " + typ
	if dev := ev.DeviceName(); dev != "" {
		attrs.PutStr(semconv.RDMADevice, dev)
		body += " on " + dev
	}
	if ev.Port >= 0 {
		attrs.PutInt(semconv.RDMAPort, int64(ev.Port))
		body += fmt.Sprintf(" port %d", ev.Port)
	}
	if fabricError {
		lr.SetSeverityNumber(plog.SeverityNumberError)
		lr.SetSeverityText("ERROR")
	}
	lr.Body().SetStr(body)
}
