package causalchainprocessor

import (
	"time"

	"github.com/fathom-gpu/fathom/internal/expohisto"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// view is one process over a span of its intervals: what the rules judge.
type view struct {
	wall float64 // seconds the span covers
	// early: the span includes the process's first interval (start-up work, such as a
	// first graph capture, is not a finding).
	early bool
	// launchBaseline is the process's launch rate when healthy (0: not known yet).
	launchBaseline float64

	apiCalls    map[string]float64              // by cuda.api.name, all directions
	apiDirCalls map[[2]string]float64           // by (api, direction)
	apiDirBytes map[[2]string]float64           // by (api, direction)
	apiDur      map[string]*expohisto.Histogram // by api
	ncclDur     map[string]*expohisto.Histogram // by nccl.op
	threads     map[int64]*threadView           // CUDA-calling threads
	blockIO     map[string]*expohisto.Histogram // by direction

	forks, pages, retransmits, launches, deviceWait float64
}

type threadView struct {
	preempted, voluntary, runQueue float64 // seconds
	preemptions                    uint64
	preemptors                     map[preemptorKey]*preemptorView
	// wakers are its voluntary waits by who woke it and what it waited on.
	wakers map[wakerKey]*wakerView
}

type wakerKey struct {
	name string // fathom.waker.name: a thread name, interrupt, none or other
	self bool   // the waker is a thread of the same process
	on   string // fathom.blocked.on: lock, io, sleep, network, device or other
}

type wakerView struct {
	wakerKey
	count, seconds, threads float64
}

type preemptorKey struct {
	name string
	self bool
}

type preemptorView struct {
	preemptorKey
	count, seconds, processes float64
}

func newView() *view {
	return &view{
		apiCalls: map[string]float64{}, apiDirCalls: map[[2]string]float64{}, apiDirBytes: map[[2]string]float64{},
		apiDur: map[string]*expohisto.Histogram{}, ncclDur: map[string]*expohisto.Histogram{},
		threads: map[int64]*threadView{}, blockIO: map[string]*expohisto.Histogram{},
	}
}

func (v *view) thread(tid int64) *threadView {
	t := v.threads[tid]
	if t == nil {
		t = &threadView{preemptors: map[preemptorKey]*preemptorView{}, wakers: map[wakerKey]*wakerView{}}
		v.threads[tid] = t
	}
	return t
}

func (t *threadView) preemptor(k preemptorKey) *preemptorView {
	p := t.preemptors[k]
	if p == nil {
		p = &preemptorView{preemptorKey: k}
		t.preemptors[k] = p
	}
	return p
}

func (t *threadView) waker(k wakerKey) *wakerView {
	w := t.wakers[k]
	if w == nil {
		w = &wakerView{wakerKey: k}
		t.wakers[k] = w
	}
	return w
}

func mergeInto(m map[string]*expohisto.Histogram, k string, h *expohisto.Histogram) {
	if h == nil {
		return
	}
	if m[k] == nil {
		m[k] = &expohisto.Histogram{}
	}
	m[k].Merge(h)
}

// viewOf sums the process's deltas that ended in (from, to].
func (p *process) viewOf(from, to time.Time) *view {
	v := newView()
	for _, iv := range p.intervals {
		if iv.end.After(from) && !iv.end.After(to) {
			v.wall += iv.end.Sub(iv.start).Seconds()
			if iv.start.Equal(p.firstStart) {
				v.early = true
			}
		}
	}
	for k, s := range p.series {
		for _, d := range s.deltas {
			if !d.end.After(from) || d.end.After(to) {
				continue
			}
			v.add(k, d)
		}
	}
	return v
}

// intervalView is one interval of the process on its own.
func (p *process) intervalView(iv interval) *view {
	return p.viewOf(iv.end.Add(-time.Nanosecond), iv.end)
}

func (v *view) add(k seriesKey, d delta) {
	switch k.metric {
	case semconv.MetricCUDAAPIDuration:
		mergeInto(v.apiDur, k.name, d.hist)
	case semconv.MetricCUDAAPICalls:
		v.apiCalls[k.name] += d.value
		v.apiDirCalls[[2]string{k.name, k.attr}] += d.value
	case semconv.MetricCUDAMemcpyBytes:
		v.apiDirBytes[[2]string{k.name, k.attr}] += d.value
	case semconv.MetricNCCLDuration:
		mergeInto(v.ncclDur, k.name, d.hist)
	case semconv.MetricBlockIODuration:
		mergeInto(v.blockIO, k.attr, d.hist)
	case semconv.MetricThreadOffCPU:
		t := v.thread(k.tid)
		if k.attr == "preempted" {
			t.preempted += d.value
			t.preemptions += d.count
		} else {
			t.voluntary += d.value
		}
	case semconv.MetricThreadRunQueue:
		v.thread(k.tid).runQueue += d.value
	case semconv.MetricThreadPreemptions:
		v.thread(k.tid).preemptor(preemptorKey{k.name, k.self}).count += d.value
	case semconv.MetricThreadPreemptTime:
		v.thread(k.tid).preemptor(preemptorKey{k.name, k.self}).seconds += d.value
	case semconv.MetricThreadBlockedTime:
		v.thread(k.tid).waker(wakerKey{k.name, k.self, k.attr}).seconds += d.value
	case semconv.MetricThreadBlocks:
		v.thread(k.tid).waker(wakerKey{k.name, k.self, k.attr}).count += d.value
	case semconv.MetricThreadWakerThreads:
		w := v.thread(k.tid).waker(wakerKey{k.name, k.self, k.attr})
		w.threads = max(w.threads, d.value)
	case semconv.MetricThreadPreemptors:
		p := v.thread(k.tid).preemptor(preemptorKey{k.name, k.self})
		p.processes = max(p.processes, d.value)
	case semconv.MetricProcessForks:
		v.forks += d.value
	case semconv.MetricProcessPageAllocs:
		v.pages += d.value
	case semconv.MetricRankTCPRetransmits:
		v.retransmits += d.value
	case semconv.MetricRankLaunches:
		v.launches += d.value
	case semconv.MetricRankDeviceWait:
		v.deviceWait += d.value
	}
}

// calls sums the calls of the named APIs (every direction).
func (v *view) calls(apis ...string) float64 {
	var n float64
	for _, a := range apis {
		n += v.apiCalls[a]
	}
	return n
}

// seconds sums the time spent in the named APIs.
func (v *view) seconds(apis ...string) float64 {
	var s float64
	for _, a := range apis {
		if h := v.apiDur[a]; h != nil {
			s += h.Sum
		}
	}
	return s
}
