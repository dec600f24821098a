// Package lines keeps straggler lines, one per cohort and signal, each until its TTL:
// the node keeps those it receives, the gateway those it wrote into answers (for the GET
// fallback). It also names the GET fallback's path and its 404, which both sides must
// read alike.
package lines

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fathom-gpu/fathom/internal/pushback"
)

// CohortID names one cohort: what the GET fallback is asked for.
type CohortID struct{ Cluster, Cohort string }

// Store keeps at most max lines, one per cohort and signal, each until ttl after it
// was last renewed. The node keeps the lines it receives in one; the gateway keeps the
// lines it wrote into answers in another, which the GET fallback serves.
type Store struct {
	max int
	ttl time.Duration

	mu sync.Mutex
	// byCohort is indexed by cohort first, so that a GET finds a cohort's lines without
	// knowing its signals or walking every line.
	byCohort map[CohortID]map[string]storedLine
	n        int
}

type storedLine struct {
	t pushback.Threshold
	// renewed is when the line last arrived (node) or was last written into an answer
	// (gateway); the TTL counts from it.
	renewed time.Time
	// pushed is when an export's answer last carried the line (node); zero for a line
	// that only ever came by GET. The poller asks for what push-back does not bring.
	pushed time.Time
}

// NewStore keeps at most maxLines lines, each for ttl after it was last renewed.
func NewStore(maxLines int, ttl time.Duration) *Store {
	return &Store{max: maxLines, ttl: ttl, byCohort: map[CohortID]map[string]storedLine{}}
}

// Put keeps ts, renewed at now; pushed says they came in an answer to an export. A line
// of a new cohort and signal is refused once max lines are held and none has expired;
// Put returns how many were.
func (s *Store) Put(ts []pushback.Threshold, now time.Time, pushed bool) (refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range ts {
		id := CohortID{t.Cluster, t.Cohort}
		old, ok := s.byCohort[id][t.Signal]
		if !ok && s.n >= s.max {
			s.dropExpired(now)
			if s.n >= s.max {
				refused++
				continue
			}
		}
		l := storedLine{t: t, renewed: now, pushed: old.pushed}
		if pushed {
			l.pushed = now
		}
		signals := s.byCohort[id]
		if signals == nil {
			signals = map[string]storedLine{}
			s.byCohort[id] = signals
		}
		if !ok {
			s.n++
		}
		signals[t.Signal] = l
	}
	return refused
}

func (s *Store) dropExpired(now time.Time) {
	for id, signals := range s.byCohort {
		for signal, l := range signals {
			if now.Sub(l.renewed) > s.ttl {
				delete(signals, signal)
				s.n--
			}
		}
		if len(signals) == 0 {
			delete(s.byCohort, id)
		}
	}
}

// Get returns the line of k if one was renewed within the TTL at now.
func (s *Store) Get(k pushback.Key, now time.Time) (pushback.Threshold, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.byCohort[CohortID{k.Cluster, k.Cohort}][k.Signal]
	if !ok || now.Sub(l.renewed) > s.ttl {
		return pushback.Threshold{}, false
	}
	return l.t, true
}

// PushedSince says whether an export's answer carried the line of k at or after since.
func (s *Store) PushedSince(k pushback.Key, since time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.byCohort[CohortID{k.Cluster, k.Cohort}][k.Signal]
	return ok && !l.pushed.IsZero() && !l.pushed.Before(since)
}

// Cohort returns the lines of one cohort renewed within the TTL at now, by signal.
func (s *Store) Cohort(id CohortID, now time.Time) []pushback.Threshold {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []pushback.Threshold
	for _, l := range s.byCohort[id] {
		if now.Sub(l.renewed) <= s.ttl {
			out = append(out, l.t)
		}
	}
	slices.SortFunc(out, func(a, b pushback.Threshold) int { return strings.Compare(a.Signal, b.Signal) })
	return out
}
