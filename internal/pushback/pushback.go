// Package pushback carries straggler thresholds from the gateway to the nodes in the
// answers to their own OTLP exports: the gateway's straggler processor adds the lines of
// the cohorts it saw in a request to that request's context, the thresholds extension's
// server middleware writes them into the response (an HTTP header, gRPC header
// metadata), and its client middleware on the node reads them back. The wire form is
// small, bounded and versioned: "v1." and base64url of a JSON array.
package pushback

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// HTTPHeader is the response header (HTTP) and MetadataKey the header metadata key
// (gRPC) that carry thresholds.
const (
	HTTPHeader  = "Fathom-Thresholds"
	MetadataKey = "fathom-thresholds"
	version     = "v1."
)

// Threshold is one cohort's line for one signal at one evaluation.
type Threshold struct {
	Cluster string  `json:"cl,omitempty"`
	Cohort  string  `json:"co"`
	Signal  string  `json:"s"`
	Median  float64 `json:"m"`
	Line    float64 `json:"l"`
	// Worse is "higher" or "lower": the side of the line a straggler is on.
	Worse string `json:"w"`
	// At is when the gateway computed it (unix milliseconds).
	At int64 `json:"t"`
}

// Beyond says whether value lies past the line on the worse side.
func (t Threshold) Beyond(value float64) bool {
	if t.Worse == "lower" {
		return value < t.Line
	}
	return value > t.Line
}

// Key identifies a threshold: one signal of one cohort.
type Key struct{ Cluster, Cohort, Signal string }

func (t Threshold) Key() Key { return Key{t.Cluster, t.Cohort, t.Signal} }

// Encode writes thresholds in the wire form, as many as fit in maxBytes (in the order
// given), and returns how many were left out.
func Encode(ts []Threshold, maxBytes int) (string, int) {
	for n := len(ts); n > 0; n-- {
		raw, err := json.Marshal(ts[:n])
		if err != nil {
			return "", len(ts)
		}
		s := version + base64.RawURLEncoding.EncodeToString(raw)
		if len(s) <= maxBytes {
			return s, len(ts) - n
		}
	}
	return "", len(ts)
}

// MaxDecode bounds what a node reads from one response.
const MaxDecode = 16 << 10

// Decode reads the wire form; an unknown version or a malformed value is an error (the
// node then keeps what it had).
func Decode(s string) ([]Threshold, error) {
	if len(s) > MaxDecode {
		return nil, fmt.Errorf("thresholds value of %d bytes is over the %d-byte limit", len(s), MaxDecode)
	}
	rest, ok := strings.CutPrefix(s, version)
	if !ok {
		return nil, errors.New("thresholds value has no known version prefix (want v1.)")
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("thresholds value: %w", err)
	}
	var ts []Threshold
	if err := json.Unmarshal(raw, &ts); err != nil {
		return nil, fmt.Errorf("thresholds value: %w", err)
	}
	for _, t := range ts {
		if t.Cohort == "" || t.Signal == "" || (t.Worse != "lower" && t.Worse != "higher") {
			return nil, fmt.Errorf("thresholds value: incomplete entry %+v", t)
		}
	}
	return ts, nil
}

// Response collects the thresholds one request should be answered with.
type Response struct {
	mu    sync.Mutex
	items map[Key]Threshold
	order []Key
}

type responseKey struct{}

// NewContext returns a context that collects thresholds for the answer to one request.
func NewContext(ctx context.Context) (context.Context, *Response) {
	r := &Response{items: map[Key]Threshold{}}
	return context.WithValue(ctx, responseKey{}, r), r
}

// FromContext returns the request's collector, or nil when no middleware asked for one.
func FromContext(ctx context.Context) *Response {
	r, _ := ctx.Value(responseKey{}).(*Response)
	return r
}

// Add records a threshold for the answer (a later one for the same key replaces it).
func (r *Response) Add(t Threshold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := t.Key()
	if _, ok := r.items[k]; !ok {
		r.order = append(r.order, k)
	}
	r.items[k] = t
}

// Thresholds returns what was added, in the order first added.
func (r *Response) Thresholds() []Threshold {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Threshold, 0, len(r.order))
	for _, k := range r.order {
		out = append(out, r.items[k])
	}
	return out
}

// Source is what the node side offers: the latest thresholds pushed back, kept until
// their TTL. The straggler processor in node mode finds it among the extensions.
type Source interface {
	// Threshold returns the cohort's line for the signal, and whether one is held
	// (received and not older than the TTL at now). The processor asks for every
	// cohort and signal of its ranks at each evaluation, held or not: that is how a
	// source that polls the gateway when push-back is absent learns what to ask for.
	Threshold(k Key, now time.Time) (Threshold, bool)
}
