package causalchainprocessor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/semconv"
)

const dispatcher = 4125

// testConfig is the default with a 10 s window, as for 1 s collection intervals.
func testConfig() *Config {
	cfg := createDefaultConfig()
	cfg.Window, cfg.ResolveAfter = 10*time.Second, 10*time.Second
	return cfg
}

// trouble is what a scenario adds to second i of a process (a healthy loop runs too).
type trouble func(s *sim, i int)

// run feeds intervals [0, n) of one second: healthy throughout, with the trouble added
// in [from, to).
func run(t *testing.T, cfg *Config, n, from, to int, add trouble) (*loop, *sim) {
	t.Helper()
	l := newLoop(t, cfg)
	s := newSim(4121, 3, time.Now().Add(-time.Duration(n+1)*time.Second).Truncate(time.Second))
	for i := range n {
		s.healthy(dispatcher)
		if i >= from && i < to {
			add(s, i)
		}
		l.feed(s.export(time.Second))
	}
	return l, s
}

// Each rule, on its own trouble from second 10 on: the chain it opens (root cause,
// severity once the window is full of it, the thread it names, evidence with numbers),
// opened within two windows of the cause's start; and the same trouble kept under the
// rule's threshold opens nothing.
func TestEachRuleFindsItsCauseAndNothingBelowItsThreshold(t *testing.T) {
	cases := []struct {
		cause    string
		above    trouble
		below    trouble
		severity string // of the last record while the trouble lasts
		tid      int64
		evidence []string
	}{{
		cause: CauseCPUContention,
		above: func(s *sim, _ int) {
			s.preempted(dispatcher, "hog", false, 400, time.Millisecond, 3)
			s.preempted(dispatcher, "fathom", true, 100, 500*time.Microsecond, 1)
		},
		below: func(s *sim, _ int) {
			s.preempted(dispatcher, "hog", false, 30, time.Millisecond, 3)
			s.preempted(dispatcher, "fathom", true, 400, time.Millisecond, 1)
		},
		severity: SeverityHigh, tid: dispatcher,
		evidence: []string{"thread 4125 waited", "its CPU went to hog (3 processes)"},
	}, {
		cause: CauseDataloader,
		above: func(s *sim, _ int) {
			s.forks += 20
			s.pages += 100000
			s.preempted(dispatcher, "python3", false, 200, time.Millisecond, 8)
		},
		below: func(s *sim, _ int) {
			s.forks += 2
			s.preempted(dispatcher, "python3", false, 200, time.Millisecond, 8)
		},
		severity: SeverityHigh, tid: dispatcher,
		evidence: []string{"processes forked (20.0/s)", "python3 (8 processes)"},
	}, {
		cause:    CauseHiddenSync,
		above:    func(s *sim, _ int) { s.call("cudaMemcpy", "device_to_host", 100, 3*time.Millisecond, 4096) },
		below:    func(s *sim, _ int) { s.call("cudaMemcpy", "device_to_host", 10, 3*time.Millisecond, 4096) },
		severity: SeverityHigh, tid: -1,
		evidence: []string{"the host waited"},
	}, {
		cause:    CauseMemcpyBound,
		above:    func(s *sim, _ int) { s.call("cudaMemcpy", "host_to_device", 10, 50*time.Millisecond, 64<<20) },
		below:    func(s *sim, _ int) { s.call("cudaMemcpy", "host_to_device", 10, 20*time.Millisecond, 64<<20) },
		severity: SeverityHigh, tid: -1,
		evidence: []string{"MiB/s host-to-device"},
	}, {
		cause:    CauseIOStall,
		above:    func(s *sim, _ int) { s.io("write", 10, 30*time.Millisecond).slept(dispatcher, 10, 30*time.Millisecond) },
		below:    func(s *sim, _ int) { s.io("write", 2, 10*time.Millisecond).slept(dispatcher, 2, 10*time.Millisecond) },
		severity: SeverityHigh, tid: dispatcher,
		evidence: []string{"block I/O requests took", "thread 4125 slept"},
	}, {
		cause: CauseNetworkRetransmits,
		above: func(s *sim, i int) {
			if i%3 == 0 {
				s.retransmits++
			}
		},
		below: func(s *sim, i int) {
			if i == 10 {
				s.retransmits++
			}
		},
		severity: SeverityMedium, tid: -1,
		evidence: []string{"TCP segments retransmitted"},
	}, {
		cause: CauseGraphRecapture,
		above: func(s *sim, _ int) {
			s.call("cudaStreamBeginCapture", "", 2, time.Millisecond, 0).call("cudaStreamEndCapture", "", 2, time.Millisecond, 0)
			s.call("cudaGraphInstantiate", "", 2, 30*time.Millisecond, 0).call("cudaGraphLaunch", "", 10, 10*time.Microsecond, 0)
		},
		below: func(s *sim, i int) {
			if i == 10 || i == 20 {
				s.call("cudaStreamBeginCapture", "", 1, time.Millisecond, 0).call("cudaGraphInstantiate", "", 1, 30*time.Millisecond, 0)
			}
		},
		severity: SeverityMedium, tid: -1,
		evidence: []string{"capture and instantiation took"},
	}, {
		cause: CauseAllocatorChurn,
		above: func(s *sim, _ int) {
			s.call("cudaMalloc", "", 100, 200*time.Microsecond, 0).call("cudaFree", "", 100, 800*time.Microsecond, 0)
		},
		below: func(s *sim, _ int) {
			s.call("cudaMalloc", "", 20, 200*time.Microsecond, 0).call("cudaFree", "", 20, 800*time.Microsecond, 0)
		},
		severity: SeverityMedium, tid: -1,
		evidence: []string{"cudaFree waits for the device"},
	}}
	for _, tc := range cases {
		t.Run(tc.cause, func(t *testing.T) {
			cfg := testConfig()
			l, s := run(t, cfg, 30, 10, 30, tc.above)
			recs := l.chainRecords()
			if len(recs) == 0 {
				t.Fatalf("no chain")
			}
			for _, r := range recs {
				if r.cause != tc.cause {
					t.Errorf("another cause: %+v", r)
				}
				if r.id != recs[0].id {
					t.Errorf("chain id changed from %s: %+v", recs[0].id, r)
				}
				if r.pid != s.pid || r.tid != tc.tid {
					t.Errorf("names pid %d thread %d, want %d and %d", r.pid, r.tid, s.pid, tc.tid)
				}
			}
			first, last := recs[0], recs[len(recs)-1]
			causeStart := s.start.Add(11 * time.Second) // the end of second 10
			if first.state != StateOpen || first.at.Sub(causeStart) > 2*cfg.Window {
				t.Errorf("first record %s at %s, %s after the cause began", first.state, first.at, first.at.Sub(causeStart))
			}
			if last.severity != tc.severity {
				t.Errorf("severity %s (cost %.3f), want %s; %s", last.severity, last.cost, tc.severity, last.body)
			}
			for _, want := range tc.evidence {
				if !strings.Contains(last.evidence, want) {
					t.Errorf("evidence %q lacks %q", last.evidence, want)
				}
			}
			if strings.Contains(last.body, "fathom") {
				t.Errorf("the collector is named: %s", last.body)
			}
			if last.timeline == "" || last.symptom == "" {
				t.Errorf("no timeline or symptom: %+v", last)
			}
			t.Log(last.body)

			// Below the threshold: no chain of this cause. (The dataloader case keeps its
			// workers' CPU contention with few forks: that is a cpu_contention chain.)
			l, _ = run(t, cfg, 30, 10, 30, tc.below)
			for _, r := range l.chainRecords() {
				if r.cause == tc.cause || tc.cause != CauseDataloader {
					t.Errorf("below the threshold: %s", r.body)
				}
			}
		})
	}
}

// A healthy loop for a minute opens no chain at all.
func TestAHealthyLoopHasNoChain(t *testing.T) {
	l, _ := run(t, testConfig(), 60, 0, 0, nil)
	if recs := l.chainRecords(); len(recs) != 0 {
		t.Errorf("chains in a healthy loop: %+v", recs)
	}
}

// A chain keeps its identity while its cause lasts: open when found, one update when
// its severity rises, resolved once the evidence stayed under the threshold for
// resolve_after; the fathom.causal_chains gauge counts it while it is open.
func TestAChainIsOpenedUpdatedAndResolvedUnderOneID(t *testing.T) {
	cfg := testConfig()
	l, _ := run(t, cfg, 50, 10, 25, func(s *sim, _ int) {
		s.preempted(dispatcher, "hog", false, 400, time.Millisecond, 1)
	})
	var got []string
	recs := l.chainRecords()
	for _, r := range recs {
		got = append(got, r.state+" "+r.severity)
		if r.id != recs[0].id {
			t.Errorf("id %s, then %s", recs[0].id, r.id)
		}
	}
	if want := "open MEDIUM, update HIGH, update MEDIUM, resolved MEDIUM"; strings.Join(got, ", ") != want {
		t.Errorf("records: %s, want %s", strings.Join(got, ", "), want)
	}
	// The cause began with second 10 (which ended 11 s after the start).
	since := recs[0]
	if !strings.Contains(since.body, "waited") {
		t.Errorf("body: %s", since.body)
	}
	open := map[string]int64{}
	for _, md := range l.out.AllMetrics() {
		rms := md.ResourceMetrics()
		for i := 0; i < rms.Len(); i++ {
			ms := rms.At(i).ScopeMetrics()
			for j := 0; j < ms.Len(); j++ {
				for k := 0; k < ms.At(j).Metrics().Len(); k++ {
					m := ms.At(j).Metrics().At(k)
					if m.Name() != "fathom.causal_chains" {
						continue
					}
					for p := 0; p < m.Gauge().DataPoints().Len(); p++ {
						dp := m.Gauge().DataPoints().At(p)
						if c, ok := dp.Attributes().Get("fathom.chain.root_cause"); ok {
							open[c.AsString()] = max(open[c.AsString()], dp.IntValue())
						}
					}
				}
			}
		}
	}
	if open[CauseCPUContention] != 1 {
		t.Errorf("gauge: %v", open)
	}
}

// A launch rate that fell is part of the symptom, against the process's rate in the
// intervals no rule fired in.
func TestTheSymptomSaysHowFarTheLaunchRateFell(t *testing.T) {
	cfg := testConfig()
	cfg.UpdateEvery = time.Second // a record each interval: the last one is the full window's
	l := newLoop(t, cfg)
	s := newSim(4121, 3, time.Now().Add(-time.Minute).Truncate(time.Second))
	for i := range 30 {
		if i < 15 {
			s.healthy(dispatcher)
		} else {
			s.call("cudaLaunchKernel", "", 400, 20*time.Microsecond, 0)
			s.preempted(dispatcher, "hog", false, 400, time.Millisecond, 1)
		}
		l.feed(s.export(time.Second))
	}
	recs := l.chainRecords()
	if len(recs) == 0 {
		t.Fatal("no chain")
	}
	last := recs[len(recs)-1]
	if want := "400 launches/s (down 60% from its healthy 1000/s)"; !strings.Contains(last.symptom, want) {
		t.Errorf("symptom %q lacks %q", last.symptom, want)
	}
}

// The rules read delta series as they read cumulative ones: the same records, at the
// same times, with the same costs.
func TestDeltaTemporalityFindsTheSameChains(t *testing.T) {
	start := time.Now().Add(-time.Minute).Truncate(time.Second)
	records := func(delta bool) []string {
		l := newLoop(t, testConfig())
		s := newSim(4121, 3, start)
		s.delta = delta
		for i := range 40 {
			s.healthy(dispatcher)
			if i >= 5 && i < 20 {
				s.preempted(dispatcher, "hog", false, 400, time.Millisecond, 2)
				s.call("cudaMemcpy", "device_to_host", 100, 3*time.Millisecond, 4096)
			}
			l.feed(s.export(time.Second))
		}
		var out []string
		for _, r := range l.chainRecords() {
			out = append(out, fmt.Sprintf("%s %s %s %.3f at +%s", r.cause, r.state, r.severity, r.cost, r.at.Sub(start)))
		}
		return out
	}
	cumulative, delta := records(false), records(true)
	if len(cumulative) < 6 || strings.Join(cumulative, "\n") != strings.Join(delta, "\n") {
		t.Errorf("cumulative:\n%s\ndelta:\n%s", strings.Join(cumulative, "\n"), strings.Join(delta, "\n"))
	}
}

// Only the collector took the thread's CPU: no chain, however much it took.
func TestTheCollectorIsNeverACause(t *testing.T) {
	l, _ := run(t, testConfig(), 30, 5, 30, func(s *sim, _ int) {
		s.preempted(dispatcher, "fathom", true, 500, time.Millisecond, 1)
	})
	if recs := l.chainRecords(); len(recs) != 0 {
		t.Errorf("the collector's own preemptions made a chain: %+v", recs)
	}
}

// Processes beyond the cap are not tracked (counted), and a process gone quiet is let go.
func TestProcessesAreBounded(t *testing.T) {
	cfg := testConfig()
	cfg.Limits.MaxProcesses = 2
	l := newLoop(t, cfg)
	start := time.Now().Add(-time.Minute).Truncate(time.Second)
	var sims []*sim
	for pid := int64(1); pid <= 3; pid++ {
		sims = append(sims, newSim(pid, pid, start))
	}
	for range 15 {
		for _, s := range sims {
			s.healthy(dispatcher).preempted(dispatcher, "hog", false, 400, time.Millisecond, 1)
			l.feed(s.export(time.Second))
		}
	}
	pids := map[int64]bool{}
	for _, r := range l.chainRecords() {
		pids[r.pid] = true
	}
	if fmt.Sprint(pids) != "map[1:true 2:true]" {
		t.Errorf("chains for %v, want pids 1 and 2 only", pids)
	}
	c, _ := instances.Get(l.id)
	c.mu.Lock()
	c.now = func() time.Time { return time.Now().Add(time.Hour) }
	c.mu.Unlock()
	l.feed(sims[0].export(time.Second))
	c.mu.Lock()
	n := len(c.processes)
	c.mu.Unlock()
	if n != 1 {
		t.Errorf("%d processes kept after an hour of silence, want the one that spoke", n)
	}
	resolved := 0
	for _, r := range l.chainRecords() {
		if r.state == StateResolved {
			resolved++
		}
	}
	if resolved != 1 {
		t.Errorf("%d chains resolved for the process gone quiet, want 1", resolved)
	}
}

// What is not a traced process's export (a workload's own OTLP through the node) passes
// through as it came: no point added, none taken.
func TestOtherMetricsPassThroughUntouched(t *testing.T) {
	l := newLoop(t, testConfig())
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "trainer")
	g := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	g.SetName("loss")
	dps := g.SetEmptyGauge().DataPoints()
	for i := range 7 {
		dps.AppendEmpty().SetDoubleValue(float64(i))
	}
	l.feed(md)
	if n := l.out.DataPointCount(); n != 7 {
		t.Errorf("%d points went on, want the 7 that came", n)
	}
}

// The series of a thread that is gone are let go two windows after its last point, so
// a long-lived process whose threads come and go stays under its series cap.
func TestSeriesOfGoneThreadsAreLetGo(t *testing.T) {
	cfg := testConfig()
	cfg.Limits.MaxSeriesPerProcess = 40
	cfg.UpdateEvery = time.Second // a record each interval, naming the thread then
	l := newLoop(t, cfg)
	s := newSim(4121, 3, time.Now().Add(-10*time.Minute).Truncate(time.Second))
	s.delta = true
	for i := range 300 {
		// A new CUDA thread every 10 s, preempted by the hog: 5 series each.
		s.healthy(dispatcher).preempted(int64(5000+i/10), "hog", false, 400, time.Millisecond, 1)
		l.feed(s.export(time.Second))
	}
	c, _ := instances.Get(l.id)
	c.mu.Lock()
	n := len(c.processes[processID{"node-a", 4121}].series)
	c.mu.Unlock()
	if n > 40 {
		t.Errorf("%d series held, over the cap of 40", n)
	}
	recs := l.chainRecords()
	if len(recs) == 0 {
		t.Fatal("no chain")
	}
	if last := recs[len(recs)-1]; last.state == StateResolved || last.tid != 5029 || !strings.Contains(last.evidence, "hog") {
		t.Errorf("the last thread's contention is not the open chain: %s (thread %d)", last.body, last.tid)
	}
}

// A process's first export can cover a few milliseconds of its start-up: ten
// allocations there are not churn at 3,000 a second, nor a thread's one wait a CPU
// shortage. Nothing is judged until the window covers a fifth of its span.
func TestStartUpSliversAreNotJudged(t *testing.T) {
	l := newLoop(t, testConfig())
	s := newSim(4121, 3, time.Now().Add(-time.Minute).Truncate(time.Second))
	s.call("cudaMalloc", "", 10, 100*time.Microsecond, 0).call("cudaFree", "", 10, 200*time.Microsecond, 0)
	s.preempted(dispatcher, "kworker/0:1", false, 1, time.Millisecond, 1)
	l.feed(s.export(3 * time.Millisecond))
	for range 20 {
		l.feed(s.healthy(dispatcher).export(time.Second))
	}
	if recs := l.chainRecords(); len(recs) != 0 {
		t.Errorf("start-up made chains: %s", recs[0].body)
	}
}

// The receiver's rank-signal samples between collections (semconv.RankSignalsScope)
// pass through and open no interval: each export of a process is an interval of
// everything here, and a sample is a few signals of a fraction of one.
func TestRankSamplesBetweenCollectionsOpenNoInterval(t *testing.T) {
	l := newLoop(t, testConfig())
	s := newSim(4121, 3, time.Now().Add(-time.Minute).Truncate(time.Second))
	sample := func(at time.Time) pmetric.Metrics {
		md := pmetric.NewMetrics()
		rm := md.ResourceMetrics().AppendEmpty()
		rm.Resource().Attributes().PutStr(semconv.HostName, "node-a")
		rm.Resource().Attributes().PutInt(semconv.ProcessPID, 4121)
		sm := rm.ScopeMetrics().AppendEmpty()
		sm.Scope().SetName(semconv.RankSignalsScope)
		m := sm.Metrics().AppendEmpty()
		m.SetName(semconv.MetricRankLaunches)
		m.SetEmptySum().SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		dp := m.Sum().DataPoints().AppendEmpty()
		dp.SetTimestamp(pcommon.NewTimestampFromTime(at))
		dp.SetIntValue(1)
		return md
	}
	for range 5 {
		l.feed(s.healthy(dispatcher).export(time.Second))
		for q := 1; q <= 3; q++ {
			l.feed(sample(s.t.Add(time.Duration(q) * 250 * time.Millisecond)))
		}
	}
	c, _ := instances.Get(l.id)
	c.mu.Lock()
	n := len(c.processes[processID{"node-a", 4121}].intervals)
	c.mu.Unlock()
	if n != 5 {
		t.Errorf("%d intervals, want the 5 collections", n)
	}
	if got := samplePoints(l.out.AllMetrics()); got != 15 {
		t.Errorf("%d sample points went on, want the 15 that came", got)
	}
}

func samplePoints(mds []pmetric.Metrics) int {
	n := 0
	for _, md := range mds {
		for i := 0; i < md.ResourceMetrics().Len(); i++ {
			sms := md.ResourceMetrics().At(i).ScopeMetrics()
			for j := 0; j < sms.Len(); j++ {
				if sms.At(j).Scope().Name() == semconv.RankSignalsScope {
					n += sms.At(j).Metrics().At(0).Sum().DataPoints().Len()
				}
			}
		}
	}
	return n
}
