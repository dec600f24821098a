package node

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/lines"
	"github.com/fathom-gpu/fathom/internal/pushback"
)

// wantedLines are the lines the node's straggler processor asks the Subscriber for:
// the cohorts of the node's own ranks, and so what the poller may fetch. They are
// bounded by max_held like the lines themselves (a line that could not be wanted could
// not be held either), and forgotten a TTL after the processor last asked.
type wantedLines struct {
	max int
	ttl time.Duration

	mu    sync.Mutex
	asked map[pushback.Key]time.Time
}

func newWantedLines(maxLines int, ttl time.Duration) *wantedLines {
	return &wantedLines{max: maxLines, ttl: ttl, asked: map[pushback.Key]time.Time{}}
}

func (w *wantedLines) ask(k pushback.Key, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.asked[k]; !ok && len(w.asked) >= w.max {
		w.forgetOld(now)
		if len(w.asked) >= w.max {
			return
		}
	}
	w.asked[k] = now
}

func (w *wantedLines) forgetOld(now time.Time) {
	for k, at := range w.asked {
		if now.Sub(at) > w.ttl {
			delete(w.asked, k)
		}
	}
}

// keys returns what was asked for within the TTL at now.
func (w *wantedLines) keys(now time.Time) []pushback.Key {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.forgetOld(now)
	out := make([]pushback.Key, 0, len(w.asked))
	for k := range w.asked {
		out = append(out, k)
	}
	return out
}

// jittered spreads d uniformly over d·(1±jitter), u being uniform in [0, 1): the nodes
// of a cluster start together (a job's DaemonSet rollout), and without it would poll
// the gateway in step for as long as they run.
func jittered(d time.Duration, jitter, u float64) time.Duration {
	return time.Duration(math.Round(float64(d) * (1 + jitter*(2*u-1))))
}

// poller is the node's GET fallback.
type poller struct {
	n      *Subscriber
	url    string
	client *http.Client
	cancel context.CancelFunc
	done   chan struct{}
	// failing is set once a poll failed and a warning was logged, so that a gateway
	// down for an hour logs one warning, not one per cohort and interval.
	failing bool
}

func (p *poller) run(ctx context.Context) {
	defer close(p.done)
	cfg := p.n.settings.Poll
	// The first wait too: a node that has just started gives push-back one interval
	// to arrive before it asks.
	wait := time.NewTimer(jittered(cfg.Interval, cfg.Jitter, rand.Float64()))
	defer wait.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
		}
		for _, c := range p.cohortsToPoll(time.Now()) {
			if ctx.Err() != nil {
				return
			}
			p.poll(ctx, c)
		}
		// Counted from the end of this round, so that polls are never closer than
		// interval·(1-jitter) however long a round took.
		wait.Reset(jittered(cfg.Interval, cfg.Jitter, rand.Float64()))
	}
}

// cohortsToPoll are the cohorts with a wanted line that no export's answer carried
// within the poll interval: those push-back does not bring. With push-back present
// there are none, and the gateway gets no GET at all.
func (p *poller) cohortsToPoll(now time.Time) []lines.CohortID {
	since := now.Add(-p.n.settings.Poll.Interval)
	var out []lines.CohortID
	for _, k := range p.n.wanted.keys(now) {
		id := lines.CohortID{Cluster: k.Cluster, Cohort: k.Cohort}
		if !slices.Contains(out, id) && !p.n.held.PushedSince(k, since) {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, func(a, b lines.CohortID) int {
		if c := strings.Compare(a.Cluster, b.Cluster); c != 0 {
			return c
		}
		return strings.Compare(a.Cohort, b.Cohort)
	})
	return out
}

// Outcomes of one poll, as counted in fathom_thresholds_polls.
const (
	pollFound  = "found"
	pollNone   = "none"
	pollFailed = "failed"
)

// poll asks the gateway for one cohort's lines and keeps what it answers, with the same
// TTL as pushed lines. A failure changes nothing held: the node keeps the last lines
// until their TTL, then says it has none.
func (p *poller) poll(ctx context.Context, c lines.CohortID) {
	outcome, err := p.fetch(ctx, c)
	if ctx.Err() != nil { // shutting down: a poll cut short is no failure of the gateway
		return
	}
	p.n.polls.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
	switch {
	case err == nil:
		p.failing = false
	case !p.failing:
		p.failing = true
		p.n.telemetry.Logger.Warn("thresholds poll failed; the node keeps the lines it holds until their ttl (further failures are logged at debug level until a poll succeeds)",
			zap.String("endpoint", p.url), zap.String("cohort", c.Cohort), zap.Error(err))
	default:
		p.n.telemetry.Logger.Debug("thresholds poll failed", zap.String("cohort", c.Cohort), zap.Error(err))
	}
}

func (p *poller) fetch(ctx context.Context, c lines.CohortID) (string, error) {
	q := url.Values{"cohort": {c.Cohort}}
	if c.Cluster != "" {
		q.Set("cluster", c.Cluster)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"?"+q.Encode(), http.NoBody)
	if err != nil {
		return pollFailed, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return pollFailed, err
	}
	defer resp.Body.Close()
	// One byte past what Decode accepts, so that an oversized answer is refused as
	// such rather than cut into something that might parse.
	body, err := io.ReadAll(io.LimitReader(resp.Body, pushback.MaxDecode+1))
	if err != nil {
		return pollFailed, fmt.Errorf("reading the answer: %w", err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		if err := p.n.take(ctx, strings.TrimSpace(string(body)), false); err != nil {
			return pollFailed, err
		}
		return pollFound, nil
	// A 404 of the thresholds server itself says the gateway has no line for the
	// cohort (yet): not a failure. Any other 404 is a wrong endpoint.
	case resp.StatusCode == http.StatusNotFound && strings.HasPrefix(string(body), lines.NoLinesFor):
		return pollNone, nil
	}
	return pollFailed, fmt.Errorf("%s answered %s: %s", p.url, resp.Status, firstLine(body))
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

func (p *poller) shutdown() {
	p.cancel()
	<-p.done
	p.client.CloseIdleConnections()
}
