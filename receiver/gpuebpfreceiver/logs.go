package gpuebpfreceiver

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"golang.org/x/time/rate"

	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/pyframes"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/symbolize"
	"github.com/fathom-gpu/fathom/receiver/gpuebpfreceiver/internal/collsample"
)

// maxPendingLogs bounds records waiting for the next flush, whatever the rate cap.
const maxPendingLogs = 65536

// logSink applies the log policy and the rate cap, and holds records until the next
// flush. Called with the aggregator's lock held.
type logSink struct {
	policy      string
	factor      float64
	minDuration float64
	limiter     *rate.Limiter
	clock       *wallClock
	// NCCL records have their own budget: a busy all-reduce loop must not starve the
	// CUDA outliers of theirs, nor the reverse.
	ncclLimiter *rate.Limiter
	// ncclSample picks the collectives of named communicators kept (collsample); its
	// Most is logs.nccl.sample_every.
	ncclSample   collsample.Rule
	drops        *counterSet
	hostResource func(pcommon.Resource)

	// stacks decides which records carry their stacks whole.
	stacks stackTally

	mu      sync.Mutex
	pending plog.Logs
	byPID   map[uint32]plog.LogRecordSlice
	count   int
}

func newLogSink(cfg *Config, clock *wallClock, drops *counterSet, hostResource func(pcommon.Resource)) *logSink {
	limit := rate.Limit(cfg.Logs.MaxPerSecond)
	s := &logSink{
		policy:       cfg.Logs.Policy,
		factor:       cfg.Logs.OutlierFactor,
		minDuration:  cfg.Logs.OutlierMinDuration.Seconds(),
		limiter:      rate.NewLimiter(limit, max(cfg.Logs.MaxPerSecond, 1)),
		ncclLimiter:  rate.NewLimiter(rate.Limit(cfg.Logs.NCCL.MaxPerSecond), max(cfg.Logs.NCCL.MaxPerSecond, 1)),
		ncclSample:   collsample.Rule{Most: uint64(max(cfg.Logs.NCCL.SampleEvery, 1)), PerSecond: cfg.Logs.NCCL.MinPerSecond},
		clock:        clock,
		drops:        drops,
		hostResource: hostResource,
		stacks:       stackTally{drops: drops},
	}
	s.reset()
	return s
}

func (s *logSink) reset() {
	s.pending = plog.NewLogs()
	s.byPID = map[uint32]plog.LogRecordSlice{}
	s.count = 0
}

// take returns the records gathered since the last call.
func (s *logSink) take() (plog.Logs, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out, n := s.pending, s.count
	s.reset()
	return out, n
}

// admit says whether a record passes the policy and the rate cap; refusals by the cap
// are counted, refusals by the policy are not drops.
func (s *logSink) admit(notable bool) bool {
	if s.policy == LogsNone || (s.policy == LogsNotable && !notable) {
		return false
	}
	if !s.limiter.Allow() {
		s.drops.add("log_rate", 1)
		return false
	}
	return true
}

// record appends a record to the process's scope (or the host's when p is nil).
func (s *logSink) record(p *processSeries, monoNS uint64) (plog.LogRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.count >= maxPendingLogs {
		s.drops.add("log_rate", 1)
		return plog.LogRecord{}, false
	}
	var pid uint32
	if p != nil {
		pid = p.info.PID
	}
	records, ok := s.byPID[pid]
	if !ok {
		rl := s.pending.ResourceLogs().AppendEmpty()
		if p != nil {
			fillProcessResource(rl.Resource(), p, s.hostResource)
		} else {
			s.hostResource(rl.Resource())
		}
		sl := rl.ScopeLogs().AppendEmpty()
		sl.Scope().SetName(scopeName)
		records = sl.LogRecords()
		s.byPID[pid] = records
	}
	s.count++
	lr := records.AppendEmpty()
	lr.SetTimestamp(s.clock.wall(monoNS))
	lr.SetObservedTimestamp(pcommon.NewTimestampFromTime(wallNow()))
	lr.SetSeverityNumber(plog.SeverityNumberInfo)
	lr.SetSeverityText("INFO")
	return lr, true
}

// errOutOfMemory is cudaErrorMemoryAllocation in the runtime API and
// CUDA_ERROR_OUT_OF_MEMORY in the driver API: both are 2. Out of memory gets its own
// notable reason because it is the failure that kills training jobs, and the one a
// person searches the logs for.
const errOutOfMemory = 2

// cudaCall logs a call under the policy; median is 0 when the call cannot be an
// outlier (too short, or too few calls of its kind yet).
func (s *logSink) cudaCall(p *processSeries, ev *probes.CUDACall, seconds, median float64, stack callStack) {
	reason := ""
	switch {
	case ev.Ret == errOutOfMemory:
		reason = "oom"
	case ev.Ret != 0:
		reason = "error"
	case ev.Api == apiBeginCapture || ev.Api == apiEndCapture || ev.Api == apiGraphInstantiate:
		reason = "graph"
	case median > 0 && seconds > s.factor*median:
		reason = "outlier"
	case ev.Sampled == 1:
		// One of the thread's calls in stacks.sample_every: where ordinary calls come from.
		reason = "sample"
	}
	if !s.admit(reason != "") {
		return
	}
	lr, ok := s.record(p, ev.Hdr.TsNs)
	if !ok {
		return
	}
	api := probes.APIName(ev.Api)
	dir := probes.MemcpyKind(ev.MemcpyKind).Direction()
	attrs := lr.Attributes()
	attrs.PutStr(semconv.EventName, semconv.EventCUDACall)
	lr.SetEventName(semconv.EventCUDACall)
	attrs.PutStr(semconv.CUDAAPIName, api)
	attrs.PutInt(semconv.ThreadID, int64(ev.Hdr.Tid))
	attrs.PutDouble(semconv.DurationSeconds, seconds)
	attrs.PutInt(semconv.CUDAResult, int64(ev.Ret))
	if ev.Stream != 0 {
		attrs.PutStr(semconv.CUDAStream, fmt.Sprintf("%#x", ev.Stream))
	}
	if ev.Bytes != 0 {
		attrs.PutInt(semconv.CUDABytes, int64(ev.Bytes))
	}
	if dir != "" {
		attrs.PutStr(semconv.CUDAMemcpyDir, dir)
	}
	if ev.Grid[0] != 0 {
		attrs.PutStr(semconv.CUDAGrid, fmt.Sprintf("%d,%d,%d", ev.Grid[0], ev.Grid[1], ev.Grid[2]))
		attrs.PutStr(semconv.CUDABlock, fmt.Sprintf("%d,%d,%d", ev.Block[0], ev.Block[1], ev.Block[2]))
	}
	body := fmt.Sprintf("%s took %s", api, fmtDuration(seconds))
	if reason != "" {
		attrs.PutStr(semconv.NotableReason, reason)
	}
	switch reason {
	case "outlier":
		attrs.PutDouble(semconv.MedianSeconds, median)
		body += fmt.Sprintf(", %.0fx its median of %s", seconds/median, fmtDuration(median))
		lr.SetSeverityNumber(plog.SeverityNumberWarn)
		lr.SetSeverityText("WARN")
	case "oom":
		body += fmt.Sprintf(" and failed: out of device memory (error %d)", ev.Ret)
		lr.SetSeverityNumber(plog.SeverityNumberError)
		lr.SetSeverityText("ERROR")
	case "error":
		body += fmt.Sprintf(" and failed with error %d", ev.Ret)
		lr.SetSeverityNumber(plog.SeverityNumberError)
		lr.SetSeverityText("ERROR")
	}
	if ev.Bytes != 0 {
		body += fmt.Sprintf(" (%d bytes%s)", ev.Bytes, map[bool]string{true: " " + dir, false: ""}[dir != ""])
	}
	if where := s.putStack(attrs, p, ev.Hdr.TsNs, stack); where != "" {
		body += " from " + where
	}
	lr.Body().SetStr(body + " " + who(p, ev.Hdr.Tid))
}

// callStack is where a call was made: the calling thread's Python frames (truncated:
// deeper than the kernel keeps) and its native frames, innermost first.
type callStack struct {
	python    []pyframes.Frame
	truncated bool
	native    []symbolize.Frame
}

// putStack puts a call's stacks on its record: the innermost Python frame as OTel's
// code attributes, the id of the stack (the Python one when there is one: a Python
// process's native frames run through the interpreter's loop, which says nothing of
// where in the program the call was), and each stack as one string when the process's
// stack tally says this record carries them whole (stackTally). It returns where the
// call was made from, as "function() at file:line", "" without Python frames.
func (s *logSink) putStack(attrs pcommon.Map, p *processSeries, at uint64, st callStack) string {
	var native, python string
	if len(st.native) > 0 {
		parts := make([]string, len(st.native))
		for i, f := range st.native {
			parts[i] = f.String()
		}
		native = strings.Join(parts, " < ")
	}
	if len(st.python) > 0 {
		var b strings.Builder
		for i, f := range st.python {
			if i > 0 {
				b.WriteString(" < ")
			}
			fmt.Fprintf(&b, "%s (%s:%d)", nameOr(f.Function, "?"), nameOr(f.File, "?"), f.Line)
		}
		if st.truncated {
			b.WriteString(" < ...")
		}
		python = b.String()
	}
	id := stackID(python)
	if python == "" {
		id = stackID(native)
	}
	if python == "" && native == "" {
		return ""
	}
	switch s.stacks.admit(p, id, at) {
	case stackRefused:
		return ""
	case stackWhole:
		if native != "" {
			attrs.PutStr(semconv.NativeStack, native)
		}
		if python != "" {
			attrs.PutStr(semconv.PythonStack, python)
		}
	}
	attrs.PutStr(semconv.StackID, id)
	if len(st.python) == 0 {
		return ""
	}
	top := st.python[0]
	if top.File == "" {
		return ""
	}
	attrs.PutStr(semconv.CodeFunction, top.Function)
	attrs.PutStr(semconv.CodeFilepath, top.File)
	attrs.PutInt(semconv.CodeLineno, int64(top.Line))
	return fmt.Sprintf("%s() at %s:%d", top.Function, filepath.Base(top.File), top.Line)
}

func stackID(stack string) string {
	h := fnv.New64a()
	h.Write([]byte(stack))
	return fmt.Sprintf("%016x", h.Sum64())
}

func nameOr(s, missing string) string {
	if s == "" {
		return missing
	}
	return s
}

func (s *logSink) lifecycle(p *processSeries, kind probes.EventKind, ev *probes.ProcessEvent) {
	if !s.admit(true) {
		return
	}
	lr, ok := s.record(p, ev.Hdr.TsNs)
	if !ok {
		return
	}
	attrs := lr.Attributes()
	comm := probes.Comm(ev.Comm)
	var name, body string
	switch kind {
	case probes.KindFork:
		name = semconv.EventProcessFork
		attrs.PutInt(semconv.ParentPID, int64(ev.ParentPid))
		attrs.PutInt(semconv.ProcessPID, int64(ev.Hdr.Pid))
		body = fmt.Sprintf("forked child %s[%d] %s", comm, ev.Hdr.Pid, who(p, 0))
	case probes.KindExec:
		name = semconv.EventProcessExec
		body = fmt.Sprintf("exec %s %s", comm, who(p, 0))
	case probes.KindExit:
		name = semconv.EventProcessExit
		code, how := exitStatus(ev.ExitCode)
		attrs.PutInt(semconv.ExitCode, code)
		body = how + " " + who(p, 0)
	}
	attrs.PutStr(semconv.EventName, name)
	attrs.PutStr(semconv.NotableReason, "lifecycle")
	lr.SetEventName(name)
	lr.Body().SetStr(body)
}

// exitStatus decodes the kernel's exit_code (a wait status): the exit code, or for a
// process killed by a signal 128 + the signal as shells report it, and a phrase for
// people.
func exitStatus(waitStatus uint32) (int64, string) {
	if sig := waitStatus & 0x7f; sig != 0 {
		return 128 + int64(sig), fmt.Sprintf("was killed by signal %d (%s)", sig, syscall.Signal(sig))
	}
	code := int64(waitStatus>>8) & 0xff
	return code, fmt.Sprintf("exited with code %d", code)
}

func (s *logSink) blockIO(p *processSeries, ev *probes.BlockIO, seconds float64) {
	if !s.admit(false) {
		return
	}
	lr, ok := s.record(p, ev.Hdr.TsNs)
	if !ok {
		return
	}
	dir := map[bool]string{true: "write", false: "read"}[ev.Write != 0]
	attrs := lr.Attributes()
	attrs.PutStr(semconv.EventName, semconv.EventBlockIO)
	lr.SetEventName(semconv.EventBlockIO)
	attrs.PutStr(semconv.DiskIODirection, dir)
	attrs.PutInt(semconv.CUDABytes, int64(ev.Bytes))
	attrs.PutDouble(semconv.DurationSeconds, seconds)
	attrs.PutInt(semconv.ThreadID, int64(ev.Hdr.Tid))
	lr.Body().SetStr(fmt.Sprintf("block %s of %d bytes took %s %s", dir, ev.Bytes, fmtDuration(seconds), who(p, ev.Hdr.Tid)))
}

// retransmit logs one retransmitted segment, under the process that holds its socket
// when one is known (p), else under the node.
func (s *logSink) retransmit(ev *probes.TCPRetransmit, p *processSeries) {
	if !s.admit(true) {
		return
	}
	lr, ok := s.record(p, ev.Hdr.TsNs)
	if !ok {
		return
	}
	var src, dst netip.Addr
	network := "ipv4"
	if ev.Family == 10 {
		network = "ipv6"
		src, dst = netip.AddrFrom16(ev.Saddr), netip.AddrFrom16(ev.Daddr)
	} else {
		src = netip.AddrFrom4([4]byte(ev.Saddr[:4]))
		dst = netip.AddrFrom4([4]byte(ev.Daddr[:4]))
	}
	attrs := lr.Attributes()
	attrs.PutStr(semconv.EventName, semconv.EventTCPRetransmit)
	lr.SetEventName(semconv.EventTCPRetransmit)
	attrs.PutStr(semconv.NotableReason, "retransmit")
	attrs.PutStr(semconv.NetworkType, network)
	attrs.PutStr(semconv.SourceAddress, src.String())
	attrs.PutInt(semconv.SourcePort, int64(ev.Sport))
	attrs.PutStr(semconv.DestAddress, dst.String())
	attrs.PutInt(semconv.DestPort, int64(ev.Dport))
	lr.SetSeverityNumber(plog.SeverityNumberWarn)
	lr.SetSeverityText("WARN")
	lr.Body().SetStr(fmt.Sprintf("TCP retransmit %s -> %s", netip.AddrPortFrom(src, ev.Sport), netip.AddrPortFrom(dst, ev.Dport)))
}

// who names the process, rank and thread an event belongs to, for log bodies.
func who(p *processSeries, tid uint32) string {
	s := fmt.Sprintf("in %s[%d]", p.info.Executable, p.info.PID)
	if p.info.Rank >= 0 {
		s += fmt.Sprintf(" rank %d", p.info.Rank)
	}
	if tid != 0 {
		s += fmt.Sprintf(" thread %d", tid)
	}
	return s
}

func fmtDuration(seconds float64) string {
	return time.Duration(seconds * 1e9).Round(time.Microsecond).String()
}

var (
	apiBeginCapture     = apiID("cudaStreamBeginCapture")
	apiEndCapture       = apiID("cudaStreamEndCapture")
	apiGraphInstantiate = apiID("cudaGraphInstantiate")
)

func apiID(symbol string) uint32 {
	for _, a := range probes.APIs {
		if a.Symbol == symbol {
			return a.ID
		}
	}
	return 0
}
