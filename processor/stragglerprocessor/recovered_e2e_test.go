//go:build linux

package stragglerprocessor_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// A job already running when its node collectors start (a DaemonSet rollout): its eight
// ranks made their communicator and began their steps before the four collectors
// started, one after another, so no node saw its setup, each names it from its
// collectives' shapes, each rank's own count begins at a different call (hundreds of
// calls apart), and no record carries an nccl.seq. The nodes keep each rank's
// collectives in bursts with that count, and the gateway learns each rank's offset from
// them: every rank gets fathom.rank.arrival_lag, in the recovered communicator's cohort,
// within 12 s of the last collector's start (the naming takes 2 s of calls, the offsets
// three bursts a second apart), within 2 ms of 0 while healthy. Then rank 5 sleeps 1 ms
// before each all-reduce (a data-loader wait): its mean arrival lag over the next 8 s
// is the largest of all, at least 0.5 ms, and at least 0.4 ms past every other rank's.
func TestAJobStartedBeforeItsCollectorsGetsArrivalLag(t *testing.T) {
	j := startJob(t, jobOptions{ncclMode: fakegpu.NCCLAsync, slowMode: "stall", transport: allOver("grpc"), initBeforeCollectors: true})
	released := time.Now() // the last collector is up
	lagged := func(since time.Time) map[int]float64 {
		out := map[int]float64{}
		for _, row := range j.sqlRows(fmt.Sprintf(`SELECT rank, avg(value) FROM events WHERE name = '%s' AND epoch_ms(ts) >= %d GROUP BY rank`,
			semconv.MetricRankArrivalLag, since.UnixMilli())) {
			out[int(row[0].(float64))] = row[1].(float64)
		}
		return out
	}
	var first time.Duration
	for {
		if got := lagged(released); len(got) == jobRanks {
			first = time.Since(released)
			break
		} else if time.Since(released) > 12*time.Second {
			t.Fatalf("arrival lags of %d ranks 12 s after the last collector started, want %d: %v", len(got), jobRanks, got)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("every rank's arrival lag in the store %v after the last collector started", first.Round(100*time.Millisecond))
	rows := j.sqlRows(`SELECT DISTINCT cohort FROM events WHERE name = '` + semconv.MetricRankArrivalLag + `'`)
	if len(rows) != 1 || !strings.HasPrefix(fmt.Sprint(rows[0][0]), "nccl-recovered:") {
		t.Errorf("arrival lags' cohorts %v, want one nccl-recovered:<id>", rows)
	}
	time.Sleep(time.Until(released.Add(16 * time.Second)))
	// Healthy: as with a communicator whose setup was seen, every rank within 2 ms of
	// the median (the line's floor is 2.2 ms past it).
	healthy := lagged(released)
	for r := range jobRanks {
		t.Logf("rank %d: mean arrival lag %.6f s while healthy", r, healthy[r])
		if math.Abs(healthy[r]) > 0.002 {
			t.Errorf("rank %d enters %.6f s after the median on average while healthy, want within 2 ms", r, healthy[r])
		}
	}
	onset := j.slowDown()
	time.Sleep(8 * time.Second)
	slow := lagged(onset.Add(time.Second))
	if len(slow) != jobRanks {
		t.Fatalf("arrival lags of %d ranks after the slowdown, want %d: %v", len(slow), jobRanks, slow)
	}
	next := math.Inf(-1)
	for r := range jobRanks {
		t.Logf("rank %d: mean arrival lag %.6f s while rank 5 stalls", r, slow[r])
		if r != slowRank {
			next = max(next, slow[r])
		}
	}
	if slow[slowRank] < 0.0005 || slow[slowRank] < next+0.0004 {
		t.Errorf("rank 5 stalls 1 ms before each all-reduce: mean arrival lag %.6f s, the next rank's %.6f s: want rank 5's at least 0.5 ms and 0.4 ms past every other", slow[slowRank], next)
	}
}
