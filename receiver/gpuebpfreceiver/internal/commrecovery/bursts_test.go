package commrecovery

import (
	"math/rand/v2"
	"testing"
)

// burstView is the job's collectives one rank records: from call number from on (its
// collector began there), call i entered at gapNS*i plus lagNS and up to jitterNS, on a
// wall clock that starts at start. It returns, per wall-clock period, the job's call
// numbers the rank recorded, and the period it began in.
func burstView(from, calls int, start, gapNS, lagNS, jitterNS int64, rng *rand.Rand) (map[int64][]int, int64) {
	var s BurstState
	out := map[int64][]int{}
	began := int64(-1)
	for i := from; i < calls; i++ {
		wall := start + int64(i)*gapNS + lagNS + rng.Int64N(jitterNS+1)
		if began < 0 {
			began = wall / DefaultBursts.PeriodNS
		}
		if s.Keep(DefaultBursts, wall) {
			p := wall / DefaultBursts.PeriodNS
			out[p] = append(out[p], i)
		}
	}
	return out, began
}

// Eight ranks whose collectors began at different calls, entering each collective up to
// a millisecond apart, record bursts that overlap: in every period each rank records 16
// consecutive calls beginning at the first it entered after the boundary, and all eight
// share at least 15 of them for collectives 2 ms to 300 ms apart (at most the period's
// calls, less one). Collectives closer than the ranks' spread of entries share fewer:
// 100 µs apart, the ranks' bursts begin up to 10 calls apart, and share 16-1-10. No rank
// records in the period it began in (the others' bursts began before it), and none
// records more than 16 a period.
func TestEveryRanksBurstsHoldTheSameCollectives(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const start = int64(1_700_000_000_123_456_789)
	for _, gap := range []int64{100e3, 2e6, 6e6, 300e6} {
		calls := int(20e9 / gap)
		views := make([]map[int64][]int, 8)
		last := int64(0)   // the period the last rank began in: all record from the next
		const spread = 1e6 // the ranks' lags, and jitter, lie within a millisecond
		for r := range views {
			from := rng.IntN(calls / 4)
			lag := rng.Int64N(spread - 50e3)
			var began int64
			views[r], began = burstView(from, calls, start, gap, lag, 50e3, rng)
			last = max(last, began)
		}
		shared := 0
		for period := range views[0] {
			common := map[int]int{}
			for r, v := range views {
				got := v[period]
				if len(got) == 0 && period > last {
					t.Fatalf("gap %d ns: rank %d recorded nothing in period %d", gap, r, period)
				}
				if len(got) > DefaultBursts.Len {
					t.Fatalf("gap %d ns: rank %d recorded %d in period %d, want at most %d", gap, r, len(got), period, DefaultBursts.Len)
				}
				for k, i := range got {
					if i != got[0]+k {
						t.Fatalf("gap %d ns: rank %d's burst in period %d is not consecutive: %v", gap, r, period, got)
					}
					common[i]++
				}
			}
			n := 0
			for _, c := range common {
				if c == len(views) {
					n++
				}
			}
			// A burst longer than the period (collectives 300 ms apart: 16 take 4.8
			// s) is cut by the next boundary's; every rank's still begins within one
			// call of the others'.
			want := min(DefaultBursts.Len, int(DefaultBursts.PeriodNS/gap)) - 1 - int((spread+gap-1)/gap-1)
			if period <= last {
				continue
			}
			if n < want {
				t.Errorf("gap %d ns, period %d: the ranks share %d collectives, want at least %d", gap, period, n, want)
			}
			shared++
		}
		if shared < 10 {
			t.Errorf("gap %d ns: %d periods compared, want at least 10", gap, shared)
		}
	}
}

// A rank's first collective does not begin a burst: the communicator is named at a
// different moment on each rank, and a burst begun then would not be the others'.
func TestTheFirstPeriodRecordsNothing(t *testing.T) {
	var s BurstState
	base := int64(5e9) + 400e6
	for i := range 100 {
		if s.Keep(DefaultBursts, base+int64(i)*1e6) {
			t.Fatalf("call %d at %d ns recorded: the burst began in the period the rank began in", i, base+int64(i)*1e6)
		}
	}
	for i := range 20 {
		if got := s.Keep(DefaultBursts, 6e9+int64(i)*1e6); got != (i < 16) {
			t.Fatalf("call %d after the boundary: recorded %v, want %v", i, got, i < 16)
		}
	}
}
