package causalchainprocessor

import (
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/semconv"
)

// startPreemptorAt sets the start time of the preemptor series of name in md to start,
// as the gpuebpf receiver does for a name it first names after the process's first
// interval: the series begins with the interval it was first credited in.
func startPreemptorAt(md pmetric.Metrics, name string, start time.Time) {
	ts := pcommon.NewTimestampFromTime(start)
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		sms := md.ResourceMetrics().At(i).ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				m := ms.At(k)
				if m.Name() != semconv.MetricThreadPreemptions && m.Name() != semconv.MetricThreadPreemptTime {
					continue
				}
				dps := m.Sum().DataPoints()
				for d := 0; d < dps.Len(); d++ {
					if v, ok := dps.At(d).Attributes().Get(semconv.PreemptorName); ok && v.Str() == name {
						dps.At(d).SetStartTimestamp(ts)
					}
				}
			}
		}
	}
}

// After a long healthy run in which the dispatcher met eight light names and the
// receiver's other bucket (names it did not keep apart), a newcomer takes 80% of its
// CPU, in a series of its own that begins with the incident: the chain's evidence
// names the newcomer first, with what it took in the window (ten intervals of 800 ms),
// and the other bucket last, as the rest, though it outweighs every light name: it is
// no culprit. The same holds for the dataloader rule's evidence.
func TestTheChainNamesANewcomerByItsWeightInTheWindow(t *testing.T) {
	cases := []struct {
		cause, newcomer string
		processes       int
		add             func(s *sim)
		want            string
	}{{
		cause: CauseCPUContention, newcomer: "batch-etl", processes: 3,
		add:  func(*sim) {},
		want: "its CPU went to batch-etl (3 processes) 8.00 s, ",
	}, {
		cause: CauseDataloader, newcomer: "pt_data_worker", processes: 8,
		add:  func(s *sim) { s.forks += 20; s.pages += 100000 },
		want: "its CPU went to pt_data_worker (8 processes) 8.00 s, ",
	}}
	lightNames := []string{"ksoftirqd/0", "rcu_preempt", "migration/0", "kubelet", "containerd", "node_exporter", "sshd"}
	for _, tc := range cases {
		t.Run(tc.cause, func(t *testing.T) {
			cfg := testConfig()
			cfg.UpdateEvery = time.Second
			l := newLoop(t, cfg)
			const healthy, incident = 600, 30
			s := newSim(4121, 3, time.Now().Add(-time.Duration(healthy+incident+1)*time.Second).Truncate(time.Second))
			var incidentStart time.Time
			for i := range healthy + incident {
				s.healthy(dispatcher)
				for _, name := range lightNames {
					s.preempted(dispatcher, name, false, 3, 300*time.Microsecond, 1)
				}
				s.preempted(dispatcher, otherPreemptors, false, 20, time.Millisecond, 12)
				if i >= healthy {
					if i == healthy {
						incidentStart = s.t
					}
					s.preempted(dispatcher, tc.newcomer, false, 200, 4*time.Millisecond, tc.processes)
					tc.add(s)
				}
				md := s.export(time.Second)
				if i >= healthy {
					startPreemptorAt(md, tc.newcomer, incidentStart)
				}
				l.feed(md)
			}
			var last *rec
			for _, r := range l.chainRecords() {
				if r.cause == tc.cause && r.state != "resolved" {
					last = &r
				}
			}
			if last == nil {
				t.Fatalf("no %s chain; records %+v", tc.cause, l.chainRecords())
			}
			t.Logf("%s: %s", last.state, last.evidence)
			at := strings.Index(last.evidence, tc.want)
			if at < 0 {
				t.Fatalf("evidence %q does not name %s first with its 8.00 s of the window (%q)", last.evidence, tc.newcomer, tc.want)
			}
			named := last.evidence[at+len(tc.want):]
			if !strings.HasSuffix(named, "other tasks (12 processes) 200.0 ms") {
				t.Errorf("evidence %q: the receiver's other bucket is not last, as the rest (other tasks (12 processes) 200.0 ms)", last.evidence)
			}
			if strings.Count(last.evidence, "other") != 1 {
				t.Errorf("evidence %q names the other bucket as a competitor", last.evidence)
			}
		})
	}
}
