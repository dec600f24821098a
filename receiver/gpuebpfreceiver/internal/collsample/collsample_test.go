package collsample

import (
	"math/rand/v2"
	"testing"
)

// rank replays a communicator's collectives on one rank: seq at each entry (unix ns).
type entry struct {
	seq    uint64
	wallNS int64
}

// steady is a communicator making perSecond collectives a second for seconds, from
// startNS, each rank entering lag (up to maxLagNS) after the first.
func steady(perSecond float64, seconds float64, startNS int64) []entry {
	var out []entry
	gap := int64(1e9 / perSecond)
	for i := int64(0); float64(i*gap) < seconds*1e9; i++ {
		out = append(out, entry{seq: uint64(i), wallNS: startNS + i*gap})
	}
	return out
}

func keptBy(r Rule, entries []entry, lagNS func(int) int64, fromSeq uint64) (kept map[uint64]bool, every uint64) {
	var s State
	kept = map[uint64]bool{}
	for i, e := range entries {
		if s.Keep(r, e.seq, e.wallNS+lagNS(i)) && e.seq >= fromSeq {
			kept[e.seq] = true
		}
	}
	return kept, s.Every(r)
}

// Each rate settles on the largest halving of Most that keeps PerSecond a second, and
// a rate that never needs fewer stays at Most.
func TestEveryFollowsTheCommunicatorsRate(t *testing.T) {
	r := Rule{Most: 16, PerSecond: 8}
	for _, c := range []struct {
		rate  float64
		every uint64
	}{{1000, 16}, {500, 16}, {128, 16}, {100, 8}, {45, 4}, {20, 2}, {10, 1}, {1.5, 1}, {0.2, 1}} {
		_, every := keptBy(r, steady(c.rate, 30, 1_700_000_000_300_000_000), func(int) int64 { return 0 }, 0)
		if every != c.every {
			t.Errorf("%g collectives a second: every %d, want %d", c.rate, every, c.every)
		}
	}
	if _, every := keptBy(Rule{Most: 16}, steady(1.5, 30, 0), func(int) int64 { return 0 }, 0); every != 16 {
		t.Errorf("with no PerSecond: every %d, want Most", every)
	}
	// Most not a power of two: its halvings, down to an odd one.
	if _, every := keptBy(Rule{Most: 12, PerSecond: 8}, steady(1.5, 30, 0), func(int) int64 { return 0 }, 0); every != 3 {
		t.Errorf("Most 12 at 1.5 a second: every %d, want 3", every)
	}
}

// The ranks of a communicator (one of them 40 ms late to every collective, the others
// within 3 ms of each other), their collectors started up to 5 s apart, keep the same
// collectives once each has measured a whole window. On the edge between two choices
// (a rate whose count in a window sits on a threshold), ranks may choose differently
// and stay so: the collectives the larger choice keeps are still kept by all, and
// still PerSecond a second at least, and the others, kept by some ranks only, are at
// most as many (the gateway counts them as incomplete instances).
func TestRanksKeepTheSameCollectives(t *testing.T) {
	r := Rule{Most: 16, PerSecond: 8}
	rng := rand.New(rand.NewPCG(1, 2))
	edges := map[float64]bool{7.9: true, 8: true, 31.9: true, 32: true, 64: true, 129: true}
	for _, rate := range []float64{0.7, 1.5, 5, 7.9, 8, 8.1, 11, 16, 23, 31.9, 32, 33, 45, 64, 90, 127, 128, 129, 300, 500, 1000} {
		const seconds, ranks = 60.0, 8
		entries := steady(rate, seconds, 1_700_000_000_000_000_000)
		var from uint64
		starts := make([]int, ranks)
		for k := range starts {
			starts[k] = rng.IntN(max(1, int(5*rate)))
			// Every rank has measured a whole window 3 windows after its start.
			for i := starts[k]; i < len(entries); i++ {
				if entries[i].wallNS-entries[starts[k]].wallNS > 3*WindowNS {
					from = max(from, entries[i].seq)
					break
				}
			}
		}
		var sets []map[uint64]bool
		for k := range ranks {
			late := int64(0)
			if k == 5 {
				late = 40e6
			}
			lags := make([]int64, len(entries))
			for i := range lags {
				lags[i] = late + rng.Int64N(3e6)
			}
			kept, _ := keptBy(r, entries[starts[k]:], func(i int) int64 { return lags[i] }, from)
			sets = append(sets, kept)
		}
		union, shared := map[uint64]bool{}, 0
		for _, s := range sets {
			for seq := range s {
				union[seq] = true
			}
		}
		for seq := range union {
			all := true
			for _, s := range sets {
				all = all && s[seq]
			}
			if all {
				shared++
			}
		}
		measured := seconds - float64(from)/rate
		t.Logf("%g a second: %d kept by all %d ranks (%.1f a second), %d by some only", rate, shared, ranks, float64(shared)/measured, len(union)-shared)
		if want := min(rate, r.PerSecond) * 0.9; float64(shared)/measured < want {
			t.Errorf("%g a second: %.1f a second kept by every rank, want at least %.1f", rate, float64(shared)/measured, want)
		}
		if partial := len(union) - shared; (!edges[rate] && partial != 0) || partial > shared {
			t.Errorf("%g a second: %d collectives kept by some ranks only, %d by all", rate, partial, shared)
		}
	}
}

// What a larger Every keeps, a smaller keeps too: ranks that chose differently still
// share every collective the larger kept.
func TestASmallerEveryKeepsWhatALargerKeeps(t *testing.T) {
	for _, most := range []uint64{16, 12, 1} {
		var chain []uint64
		for e := most; ; e /= 2 {
			chain = append(chain, e)
			if e%2 != 0 || e == 1 {
				break
			}
		}
		for seq := range uint64(1000) {
			for i := 1; i < len(chain); i++ {
				if seq%chain[i-1] == 0 && seq%chain[i] != 0 {
					t.Fatalf("most %d: seq %d kept at %d, not at %d", most, seq, chain[i-1], chain[i])
				}
			}
		}
	}
}

// A job that speeds up moves to keeping fewer, within two windows; a restarted count
// is measured anew rather than read as a rate.
func TestEveryMovesWithTheJobAndARestart(t *testing.T) {
	r := Rule{Most: 16, PerSecond: 8}
	var s State
	at := int64(1_700_000_000_000_000_000)
	seq := uint64(0)
	run := func(rate float64, seconds float64) {
		gap := int64(1e9 / rate)
		for end := at + int64(seconds*1e9); at < end; at += gap {
			s.Keep(r, seq, at)
			seq++
		}
	}
	run(1.5, 20)
	if got := s.Every(r); got != 1 {
		t.Fatalf("at 1.5 a second: every %d, want 1", got)
	}
	run(500, 2*WindowNS/1e9+0.1)
	if got := s.Every(r); got != 16 {
		t.Errorf("two windows after speeding up to 500 a second: every %d, want 16", got)
	}
	seq = 0 // the rank restarted: its count begins again
	run(500, 1)
	if got := s.Every(r); got != 16 {
		t.Errorf("after a restart: every %d, want 16 (no rate from a fallen count)", got)
	}
	run(1.5, 3*WindowNS/1e9)
	if got := s.Every(r); got != 1 {
		t.Errorf("slow again: every %d, want 1", got)
	}
}
