package gpuebpfreceiver

import (
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/fathom-gpu/fathom/internal/expohisto"
	"github.com/fathom-gpu/fathom/internal/probes"
)

// minCallsForMedian is how many calls of an API the node must have made before its
// median means anything: until then no call of it is an outlier.
const minCallsForMedian = 20

// kernelCalls is what the aggregator keeps of the kernel's call statistics: the last
// reading of each process (the kernel keeps totals; series take the differences), and
// the thresholds last written back.
type kernelCalls struct {
	prev map[uint32]*[probes.APICount]probes.CallStats
	// reads counts the readings begun, merged the last one merged: a process whose
	// exit was seen before a reading began has its last counts in that reading.
	reads, merged uint64
	medians       [probes.APICount]float64 // seconds; 0 = not known yet
	thresholds    [probes.APICount]uint64  // ns, as last written to the kernel
	written       bool
	scratch       expohisto.Histogram
}

// beginCallStatsRead numbers the reading about to be taken, and says which processes
// with statistics are gone already: the reading holds their last counts. Decided
// before the reading, not after: a process that exits between the two would lose the
// calls it made after the reading, its slot given back and zeroed.
func (a *aggregator) beginCallStatsRead() (read uint64, goneBefore map[uint32]bool) {
	a.kernel.reads++
	goneBefore = map[uint32]bool{}
	for pid := range a.kernel.prev {
		if a.processGone(pid) {
			goneBefore[pid] = true
		}
	}
	return a.kernel.reads, goneBefore
}

// mergeCallStats adds what each process's calls added since the last reading to its
// series, and returns the processes gone before the reading began (beginCallStatsRead):
// their slots can be given back, their last counts being in.
func (a *aggregator) mergeCallStats(stats []probes.ProcessCallStats, read uint64, goneBefore map[uint32]bool) (gone []*probes.ProcessCallStats) {
	if a.kernel.prev == nil {
		a.kernel.prev = map[uint32]*[probes.APICount]probes.CallStats{}
	}
	for i := range stats {
		cur := &stats[i]
		prev := a.kernel.prev[cur.PID]
		if prev == nil {
			prev = new([probes.APICount]probes.CallStats)
			a.kernel.prev[cur.PID] = prev
		}
		var p *processSeries
		for api := range cur.ByAPI {
			if cur.ByAPI[api] == prev[api] {
				continue
			}
			if p == nil {
				if p = a.process(cur.PID); p == nil {
					break // over the process cap, counted there
				}
			}
			a.addCallDelta(p, api, &cur.ByAPI[api], &prev[api])
			prev[api] = cur.ByAPI[api]
		}
		if goneBefore[cur.PID] {
			delete(a.kernel.prev, cur.PID)
			gone = append(gone, cur)
		}
	}
	a.kernel.merged = read
	return gone
}

// addCallDelta adds cur - prev of one API to the process's series.
func (a *aggregator) addCallDelta(p *processSeries, api int, cur, prev *probes.CallStats) {
	s := p.api(api)
	for k := range cur.Calls {
		s.calls[k] += cur.Calls[k] - prev.Calls[k]
		s.bytes[k] += cur.Bytes[k] - prev.Bytes[k]
	}
	s.errors += cur.Errors - prev.Errors
	var delta [probes.DurationBuckets]uint64
	for b := range cur.Buckets {
		delta[b] = uint64(cur.Buckets[b] - prev.Buckets[b]) // uint32 arithmetic: wraps right
	}
	s.duration.AddBuckets(probes.DurationFirstIndex, delta[:], float64(cur.DurationNs-prev.DurationNs)/1e9)
}

// processGone says whether a process with kernel statistics has exited: its exit was
// seen, or it is no longer in /proc (an exit the ring lost).
func (a *aggregator) processGone(pid uint32) bool {
	if p, ok := a.processes[pid]; ok && p.exited {
		return true
	}
	if a.synthetic {
		return false
	}
	_, err := os.Stat(filepath.Join(a.procRoot, strconv.FormatUint(uint64(pid), 10)))
	return os.IsNotExist(err)
}

// refreshMedians recomputes each API's running median over the node's processes. A
// window with too few calls keeps the previous median.
func (a *aggregator) refreshMedians() {
	for api := range a.kernel.medians {
		h := &a.kernel.scratch
		h.Reset()
		for _, p := range a.processes {
			if s := p.apis[api]; s != nil {
				h.Merge(&s.duration)
			}
		}
		if h.Count >= minCallsForMedian {
			a.kernel.medians[api] = h.Quantile(0.5)
		}
	}
}

// notableThresholds returns the per-API thresholds the kernel should record calls at,
// under the log policy, and whether they differ from those last written.
func (a *aggregator) notableThresholds() ([probes.APICount]uint64, bool) {
	var t [probes.APICount]uint64
	for api := range t {
		switch {
		case a.cfg.Logs.Policy == LogsAll:
			t[api] = 0
		case a.cfg.Logs.Policy == LogsNone:
			t[api] = probes.NeverNotable
		case uint32(api) == apiBeginCapture || uint32(api) == apiEndCapture || uint32(api) == apiGraphInstantiate:
			t[api] = 0 // always notable
		case a.kernel.medians[api] > 0:
			seconds := math.Max(a.logs.factor*a.kernel.medians[api], a.logs.minDuration)
			t[api] = uint64(seconds * 1e9)
		default:
			t[api] = probes.NeverNotable
		}
	}
	changed := !a.kernel.written || t != a.kernel.thresholds
	return t, changed
}
