package gateway

import (
	"sync"
	"time"
)

// maxRotationPeers bounds the peers whose place in the rotation is kept. A peer that
// is forgotten only starts again from its request's first line.
const maxRotationPeers = 4096

// answerRotation takes turns among the lines of a request when they do not all fit in
// max_response_bytes. A node whose ranks belong to more cohorts than one answer holds
// (several jobs sharing its GPUs) would otherwise get the same first lines in every
// answer and never the rest, since the pipeline adds them in the order of the request.
// Each answer to a peer (one connection of one node collector) starts where the
// previous answer to it stopped, so every line reaches it within a few exports.
type answerRotation struct {
	ttl time.Duration

	mu   sync.Mutex
	next map[string]rotationPlace
}

type rotationPlace struct {
	offset int
	at     time.Time
}

func newAnswerRotation(ttl time.Duration) *answerRotation {
	return &answerRotation{ttl: ttl, next: map[string]rotationPlace{}}
}

// order returns lines starting at the peer's place in the rotation. An unknown peer,
// or one without an address, starts at the first line.
func (r *answerRotation) order(peer string, lines int) int {
	if peer == "" || lines == 0 {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next[peer].offset % lines
}

// advance moves the peer's place past the written lines of an answer that started at
// start and left some out. An answer that carried every line resets it.
func (r *answerRotation) advance(peer string, start, written, lines int, now time.Time) {
	if peer == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if written >= lines {
		delete(r.next, peer)
		return
	}
	written = max(written, 1) // a line too long for any answer is passed over, not repeated
	if _, ok := r.next[peer]; !ok && len(r.next) >= maxRotationPeers {
		for p, place := range r.next {
			if now.Sub(place.at) > r.ttl {
				delete(r.next, p)
			}
		}
		if len(r.next) >= maxRotationPeers {
			return
		}
	}
	r.next[peer] = rotationPlace{offset: (start + written) % lines, at: now}
}
