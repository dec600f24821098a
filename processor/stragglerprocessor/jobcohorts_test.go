package stragglerprocessor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/fathom-gpu/fathom/internal/pushback"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/processor/stragglerprocessor/internal/metadata"
)

// Node-3 never saw the job's communicator created (its collector started after the
// job): it sends its ranks with the job's name only, or with the communicator it named
// from the calls (a recovered cohort). They are still compared with the rest of the
// job, in the communicator's cohort, and node-3's answers carry the line under the
// name node-3 sent, which is what it looks it up by. Seen in two communicators, a job's
// name means nothing and ranks known by it alone stay in a cohort of their own; a
// recovered cohort does not make a job ambiguous.
func TestARankKnownOnlyByItsJobJoinsItsJobsCommunicator(t *testing.T) {
	for _, c := range []struct {
		name            string
		node3Cohort     string // "" removes it
		secondComm      bool
		wantCohort      string
		wantRank7Record bool
	}{
		{"one communicator", "", false, "comm-1", true},
		{"ambiguous job", "", true, "job:llama", false},
		{"recovered on node-3", "nccl-recovered:00000000000000aa", false, "comm-1", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := createDefaultConfig()
			s, err := newStraggler(cfg, processortest.NewNopSettings(metadata.Type))
			if err != nil {
				t.Fatal(err)
			}
			logsOut := new(consumertest.LogsSink)
			s.logsNext, s.metricsNext = logsOut, new(consumertest.MetricsSink)
			var clock time.Time
			s.now = func() time.Time { return clock }
			start := time.Unix(1_800_000_000, 0)
			totals := map[int64]float64{}
			var answer []pushback.Threshold
			for i := 1; i <= 20; i++ {
				clock = start.Add(time.Duration(i) * time.Second)
				for rank := range int64(8) {
					rate := 0.30 + 0.002*float64(rank%3)
					if rank == 7 && i > 10 {
						rate = 0.10
					}
					totals[rank] += rate
				}
				for node := range 4 {
					md := nodeRequest(fmt.Sprintf("node-%d", node), []int64{int64(2 * node), int64(2*node + 1)}, totals, start, clock)
					for r := range md.ResourceMetrics().Len() {
						res := md.ResourceMetrics().At(r).Resource().Attributes()
						switch {
						case node == 3 && c.node3Cohort == "":
							res.Remove(semconv.Cohort)
						case node == 3:
							res.PutStr(semconv.Cohort, c.node3Cohort)
						case node == 2 && c.secondComm:
							res.PutStr(semconv.Cohort, "comm-2")
						}
					}
					ctx, resp := pushback.NewContext(context.Background())
					if _, err := s.processMetrics(ctx, md); err != nil {
						t.Fatal(err)
					}
					if node == 3 {
						answer = resp.Thresholds()
					}
				}
				s.evaluate(context.Background())
			}
			cohort := s.det.cohorts[cohortKey{cluster: "c1", cohort: c.wantCohort}]
			if cohort == nil {
				t.Fatalf("no cohort %q; cohorts: %v", c.wantCohort, s.det.cohorts)
			}
			if _, ok := cohort.ranks[7]; !ok {
				t.Errorf("rank 7 is not in cohort %q", c.wantCohort)
			}
			var flagged []string
			for _, ld := range logsOut.AllLogs() {
				rl := ld.ResourceLogs().At(0)
				rank, _ := rl.Resource().Attributes().Get(semconv.Rank)
				cohort, _ := rl.Resource().Attributes().Get(semconv.Cohort)
				state, _ := rl.ScopeLogs().At(0).LogRecords().At(0).Attributes().Get(semconv.StragglerState)
				flagged = append(flagged, fmt.Sprintf("%d/%s/%s", rank.Int(), cohort.Str(), state.Str()))
			}
			if c.wantRank7Record {
				if len(flagged) != 1 || flagged[0] != "7/comm-1/straggler" {
					t.Errorf("records %v, want rank 7 flagged in comm-1", flagged)
				}
				sentAs := "job:llama"
				if c.node3Cohort != "" {
					sentAs = c.node3Cohort
				}
				if len(answer) != 1 || answer[0].Cohort != sentAs || answer[0].Cluster != "c1" {
					t.Errorf("node-3's answer %+v, want comm-1's line under %s", answer, sentAs)
				}
			} else if len(flagged) != 0 {
				t.Errorf("records %v from ranks whose job is ambiguous", flagged)
			}
		})
	}
}

// The job table holds at most max jobs, forgetting the one heard of least recently, and
// drops jobs silent past forget_after.
func TestTheJobTableIsBounded(t *testing.T) {
	j := newJobCohorts(2)
	t0 := time.Unix(1_800_000_000, 0)
	j.learn("c", "a", "comm-a", false, t0)
	j.learn("c", "b", "comm-b", false, t0.Add(time.Second))
	j.learn("c", "a", "comm-a", false, t0.Add(2*time.Second)) // a heard of again
	j.learn("c", "c", "comm-c", false, t0.Add(3*time.Second)) // evicts b
	if j.resolve("c", "a") != "comm-a" || j.resolve("c", "b") != "" || j.resolve("c", "c") != "comm-c" {
		t.Errorf("after eviction: a=%q b=%q c=%q", j.resolve("c", "a"), j.resolve("c", "b"), j.resolve("c", "c"))
	}
	j.forget(t0.Add(3 * time.Second))
	if len(j.byJob) != 1 || j.resolve("c", "c") != "comm-c" {
		t.Errorf("after forgetting: %v", j.byJob)
	}
}

// A recovered communicator serves a job until one named by its unique id is seen, which
// wins and stays; recovered ones do not make the job ambiguous, two named by unique ids
// do.
func TestAUniqueIdsCommunicatorWinsOverARecoveredOne(t *testing.T) {
	j := newJobCohorts(8)
	t0 := time.Unix(1_800_000_000, 0)
	j.learn("c", "r", "nccl-recovered:01", true, t0)
	if got := j.resolve("c", "r"); got != "nccl-recovered:01" {
		t.Errorf("a job seen only in a recovered communicator resolves to %q", got)
	}
	j.learn("c", "r", "nccl:real", false, t0)
	j.learn("c", "r", "nccl-recovered:02", true, t0)
	if got := j.resolve("c", "r"); got != "nccl:real" {
		t.Errorf("after its unique id's communicator, the job resolves to %q, want nccl:real", got)
	}
	j.learn("c", "r", "nccl:other", false, t0)
	if got := j.resolve("c", "r"); got != "" {
		t.Errorf("a job in two communicators named by unique ids resolves to %q, want none", got)
	}
}
