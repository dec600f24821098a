package gpuebpfreceiver

import (
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/series"
)

// preemptorSum is one preemptor series' point in one export, with its start time.
type preemptorSum struct {
	start     pcommon.Timestamp
	ts        pcommon.Timestamp
	waits     int64
	seconds   float64
	processes int64
}

// preemptorSums reads the preemptor series of thread tid of process pid in one export,
// keyed by "name self=BOOL"; the two sums of a name must share their start time.
func preemptorSums(t *testing.T, md pmetric.Metrics, pid, tid int64) map[string]*preemptorSum {
	t.Helper()
	out := map[string]*preemptorSum{}
	get := func(key string) *preemptorSum {
		if out[key] == nil {
			out[key] = &preemptorSum{}
		}
		return out[key]
	}
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		rm := md.ResourceMetrics().At(i)
		if p, ok := rm.Resource().Attributes().Get(semconv.ProcessPID); !ok || p.Int() != pid {
			continue
		}
		ms := rm.ScopeMetrics().At(0).Metrics()
		for j := 0; j < ms.Len(); j++ {
			m := ms.At(j)
			var dps pmetric.NumberDataPointSlice
			switch m.Name() {
			case semconv.MetricThreadPreemptions, semconv.MetricThreadPreemptTime:
				dps = m.Sum().DataPoints()
			case semconv.MetricThreadPreemptors:
				dps = m.Gauge().DataPoints()
			default:
				continue
			}
			for k := 0; k < dps.Len(); k++ {
				dp := dps.At(k)
				a := dp.Attributes()
				if th, ok := a.Get(semconv.ThreadID); !ok || th.Int() != tid {
					continue
				}
				name, _ := a.Get(semconv.PreemptorName)
				self, _ := a.Get(semconv.PreemptorSelf)
				s := get(fmt.Sprintf("%s self=%v", name.Str(), self.Bool()))
				switch m.Name() {
				case semconv.MetricThreadPreemptions:
					s.waits = dp.IntValue()
				case semconv.MetricThreadPreemptTime:
					s.seconds = dp.DoubleValue()
				default:
					s.processes = dp.IntValue()
					continue
				}
				if s.start != 0 && s.start != dp.StartTimestamp() {
					t.Fatalf("%s: its two sums start at %v and %v", name.Str(), s.start, dp.StartTimestamp())
				}
				s.start, s.ts = dp.StartTimestamp(), dp.Timestamp()
			}
		}
	}
	return out
}

// healthyNames are what a node's CUDA thread meets in a healthy hour: daemons, kernel
// threads, the job's own helpers, 24 names in all.
var healthyNames = []string{
	"kworker/0:1", "ksoftirqd/0", "rcu_preempt", "migration/0", "kubelet", "containerd",
	"node_exporter", "systemd-journal", "sshd", "dockerd", "cron", "pt_data_worker",
	"kworker/u4:2", "irqbalance", "chronyd", "fluent-bit", "python3", "nvidia-persiste",
	"dcgm-exporter", "kube-proxy", "calico-node", "gcsfuse", "sidecar", "tensorboard",
}

// feedInterval gives the thread its waits of interval i: 12 of the healthy names, 1-5
// waits of 1 ms each, rotating through all 24 so that the thread's names and their
// order of weight change from interval to interval; in an incident, batch-etl (three
// processes) 200 waits of 4 ms, 80% of a one-second interval. It returns what came in.
func feedInterval(a *aggregator, pid, tid uint32, i int, incident bool) (waits int64, seconds float64) {
	for j := range 12 {
		name := healthyNames[(i+j)%len(healthyNames)]
		n := 1 + (i*7+j*3)%5
		for range n {
			a.Sched(preemption(pid, tid, 20_000+uint32((i+j)%len(healthyNames)), name, time.Millisecond))
			waits++
			seconds += 1e-3
		}
	}
	if incident {
		for k := range 200 {
			a.Sched(preemption(pid, tid, 30_001+uint32(k%3), "batch-etl", 4*time.Millisecond))
			waits++
			seconds += 4e-3
		}
	}
	return waits, seconds
}

// A CUDA thread that met 24 names over a healthy hour (60 one-minute exports, 12
// names each, the heaviest of them changing), and then meets batch-etl, which takes
// 80% of its CPU for five seconds: batch-etl is named, with exactly the waits and time
// it took, three processes, in a series that begins with the incident. Every wait is
// in exactly one series: a reader that follows the cumulative series by the rule of
// internal/series, joined during the healthy hour, gets exactly each interval's waits
// and time from their increases, names entering and leaving the named set included,
// so "other" holds exactly the rest; and over every series the thread ever exported,
// the last totals add up to everything that came in. The thread never holds more than
// its bounded set of series. Under delta, each export holds exactly its interval.
func TestANewcomerAfterAHealthyHourIsNamedByWeight(t *testing.T) {
	const pid, tid = 5100, 5101
	const healthy, incident = 60, 5
	for _, temporality := range []string{TemporalityCumulative, TemporalityDelta} {
		t.Run(temporality, func(t *testing.T) {
			cfg := createDefaultConfig()
			cfg.Temporality = temporality
			cfg.Discovery.ProcRoot = t.TempDir()
			a := newAggregator(cfg, &wallClock{}, nil, false)
			a.selfPID = 1
			a.CUDAThread(&probes.EventHeader{Pid: pid, Tid: tid})
			var totalWaits int64
			var totalSeconds float64

			base := time.Now().Add(time.Second)
			var last pcommon.Timestamp
			// The reader joins at the tenth export.
			const joins = 10
			var horizon int64
			readers := map[string]*series.Cumulative{}
			// ever holds the last point of every series identity (name, start).
			ever := map[string]*preemptorSum{}
			var newcomer *preemptorSum
			namedAtAll := map[string]bool{}
			for i := range healthy + incident {
				inIncident := i >= healthy
				step := time.Minute
				if inIncident {
					step = time.Second
				}
				base = base.Add(step)
				waits, seconds := feedInterval(a, pid, tid, i, inIncident)
				totalWaits += waits
				totalSeconds += seconds
				md := a.emit(base, last, hostTotals{}, &hostTotals{}, hostIdentity("", false))
				got := preemptorSums(t, md, pid, tid)
				ts := pcommon.NewTimestampFromTime(base)

				if n := len(a.processes[pid].threads[tid].preemptors); n > maxPreemptorSeries+2 {
					t.Fatalf("export %d: the thread keeps %d preemptor entries, more than %d series and the other buckets", i, n, maxPreemptorSeries)
				}
				var exportWaits int64
				var exportSeconds float64
				for key, p := range got {
					if key != "other self=false" {
						namedAtAll[key] = true
					}
					exportWaits += p.waits
					exportSeconds += p.seconds
					if temporality == TemporalityDelta {
						continue
					}
					if p.start >= ts || p.start < a.processes[pid].start {
						t.Errorf("export %d: %s starts at %v, outside the process's span up to %v", i, key, p.start, ts)
					}
					id := fmt.Sprintf("%s@%d", key, p.start)
					if before := ever[id]; before != nil && (p.waits < before.waits || p.seconds < before.seconds) {
						t.Errorf("export %d: %s went back from %d waits, %.6f s to %d, %.6f s", i, id, before.waits, before.seconds, p.waits, p.seconds)
					}
					ever[id] = p
				}
				if temporality == TemporalityDelta {
					if exportWaits != waits || math.Abs(exportSeconds-seconds) > 1e-9 {
						t.Errorf("export %d: %d waits, %.6f s over its series; %d, %.6f s came in", i, exportWaits, exportSeconds, waits, seconds)
					}
					if inIncident {
						if p := got["batch-etl self=false"]; p == nil || p.waits != 200 || math.Abs(p.seconds-0.8) > 1e-9 || p.processes != 3 {
							t.Errorf("export %d: batch-etl %+v, want 200 waits, 0.8 s, 3 processes; series %v", i, p, sortedKeys(got))
						}
					}
				} else {
					if i == joins {
						horizon = int64(ts)
					}
					if i >= joins {
						var incWaits, incSeconds float64
						for key, p := range got {
							for _, v := range []struct {
								kind  string
								total float64
								sum   *float64
							}{{"waits", float64(p.waits), &incWaits}, {"seconds", p.seconds, &incSeconds}} {
								r := readers[key+" "+v.kind]
								if r == nil {
									r = &series.Cumulative{}
									readers[key+" "+v.kind] = r
								}
								if inc, ok := r.Add(series.Mark{Start: int64(p.start), Time: int64(p.ts), Total: v.total}, horizon); ok {
									*v.sum += inc.Value
								}
							}
						}
						if i > joins && (int64(math.Round(incWaits)) != waits || math.Abs(incSeconds-seconds) > 1e-9) {
							t.Errorf("export %d: a reader's increases add up to %.0f waits, %.6f s; %d, %.6f s came in", i, incWaits, incSeconds, waits, seconds)
						}
					}
					if inIncident {
						newcomer = got["batch-etl self=false"]
						if newcomer == nil {
							t.Fatalf("export %d (incident): batch-etl, 80%% of the thread's CPU, is not named; series %v", i, sortedKeys(got))
						}
						if want := pcommon.NewTimestampFromTime(base.Add(-time.Duration(i-healthy+1) * time.Second)); newcomer.start != want {
							t.Errorf("export %d: batch-etl's series starts at %v, want the incident's first interval's start %v", i, newcomer.start.AsTime(), want.AsTime())
						}
					}
				}
				last = ts
			}
			if temporality == TemporalityDelta {
				return
			}
			if newcomer.waits != 200*incident || math.Abs(newcomer.seconds-0.8*incident) > 1e-9 || newcomer.processes != 3 {
				t.Errorf("batch-etl: %d waits, %.6f s, %d processes; want %d, %.1f s, 3", newcomer.waits, newcomer.seconds, newcomer.processes, 200*incident, 0.8*incident)
			}
			var everWaits int64
			var everSeconds float64
			for _, p := range ever {
				everWaits += p.waits
				everSeconds += p.seconds
			}
			if everWaits != totalWaits || math.Abs(everSeconds-totalSeconds) > 1e-9 {
				t.Errorf("the thread's series, each at its last point, add up to %d waits, %.6f s; %d, %.6f s came in", everWaits, everSeconds, totalWaits, totalSeconds)
			}
			t.Logf("%d series identities over %d exports, %d names ever named", len(ever), healthy+incident, len(namedAtAll))
		})
	}
}

// An interval with more names than the candidates' table (40 light ones, then
// batch-etl, 100 waits of 4 ms): batch-etl is still named with exactly what it took,
// each light name the table let go counts a preemptor_names drop per wait, and the
// series add up to what came in.
func TestAHeavyNameIsNamedWhenTheIntervalHasMoreNamesThanTheTable(t *testing.T) {
	const pid, tid = 5200, 5201
	cfg := createDefaultConfig()
	cfg.Discovery.ProcRoot = t.TempDir()
	a := newAggregator(cfg, &wallClock{}, nil, false)
	a.selfPID = 1
	a.CUDAThread(&probes.EventHeader{Pid: pid, Tid: tid})
	const light = 40
	for n := range light {
		a.Sched(preemption(pid, tid, 40_000+uint32(n), fmt.Sprintf("light-%02d", n), time.Millisecond))
	}
	for k := range 100 {
		a.Sched(preemption(pid, tid, 50_000+uint32(k%2), "batch-etl", 4*time.Millisecond))
	}
	got := preemptorSums(t, a.emit(time.Now().Add(time.Second), 0, hostTotals{}, &hostTotals{}, hostIdentity("", false)), pid, tid)
	if p := got["batch-etl self=false"]; p == nil || p.waits != 100 || math.Abs(p.seconds-0.4) > 1e-9 || p.processes != 2 {
		t.Errorf("batch-etl %+v, want 100 waits, 0.4 s, 2 processes; series %v", p, sortedKeys(got))
	}
	var waits int64
	var seconds float64
	for _, p := range got {
		waits += p.waits
		seconds += p.seconds
	}
	if waits != light+100 || math.Abs(seconds-(light*1e-3+0.4)) > 1e-9 {
		t.Errorf("series add up to %d waits, %.6f s; %d, %.6f s came in", waits, seconds, light+100, light*1e-3+0.4)
	}
	if len(got) != maxPreemptorNames+1 {
		t.Errorf("series %v, want the %d heaviest names and other", sortedKeys(got), maxPreemptorNames)
	}
	// 32 light names fill the table; the other 8 and batch-etl each let one go.
	if n := a.drops.snapshot()["preemptor_names"]; n != light-maxPreemptorCandidates+1 {
		t.Errorf("preemptor_names drops %d, want %d", n, light-maxPreemptorCandidates+1)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := keysOf(m)
	sort.Strings(out)
	return out
}
