package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/lines"
	"github.com/fathom-gpu/fathom/internal/pushback"
)

// getServer is the gateway's GET fallback.
type getServer struct {
	http *http.Server
	done chan struct{}
}

func (p *Publisher) startGETServer(ctx context.Context, host component.Host) (*getServer, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+lines.GETPath, p.serveCohort)
	l, err := p.settings.Server.ToListener(ctx)
	if err != nil {
		return nil, fmt.Errorf("thresholds: `server.endpoint` %s: %w", p.settings.Server.NetAddr.Endpoint, err)
	}
	srv, err := p.settings.Server.ToServer(ctx, host.GetExtensions(), p.telemetry, mux)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("thresholds: `server`: %w", err)
	}
	s := &getServer{http: srv, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.telemetry.Logger.Error("thresholds server stopped; nodes that poll it keep their lines until their ttl", zap.String("endpoint", p.settings.Server.NetAddr.Endpoint), zap.Error(err))
		}
	}()
	p.telemetry.Logger.Info("thresholds server answers GET "+lines.GETPath, zap.String("endpoint", l.Addr().String()))
	return s, nil
}

func (s *getServer) shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	<-s.done
	return err
}

// Outcomes of one GET, as counted in fathom_thresholds_served.
const (
	servedFound      = "found"
	servedNotFound   = "not_found"
	servedBadRequest = "bad_request"
)

// serveCohort answers GET /v1/thresholds?cluster=<c>&cohort=<c>[&signal=<metric>] with
// the cohort's lines in the push-back's wire form ("v1." and base64url of a JSON
// array): the very value an answer to the node's export would have carried, read by
// the very same decoder. Only lines that an answer to an export wrote within the TTL
// are served, so a GET says no more than push-back did.
func (p *Publisher) serveCohort(w http.ResponseWriter, r *http.Request) {
	id, signal, err := parseCohortQuery(r.URL.RawQuery)
	if err != nil {
		p.getAnswers.Add(r.Context(), 1, metric.WithAttributes(attribute.String("outcome", servedBadRequest)))
		http.Error(w, err.Error()+"; ask GET "+lines.GETPath+"?cluster=<fathom.cluster.name>&cohort=<fathom.cohort>[&signal=<metric>]", http.StatusBadRequest)
		return
	}
	found := p.served.Cohort(id, time.Now())
	if signal != "" {
		found = slices.DeleteFunc(found, func(t pushback.Threshold) bool { return t.Signal != signal })
	}
	if len(found) == 0 {
		p.getAnswers.Add(r.Context(), 1, metric.WithAttributes(attribute.String("outcome", servedNotFound)))
		what := fmt.Sprintf("cohort %q in cluster %q", id.Cohort, id.Cluster)
		if signal != "" {
			what = fmt.Sprintf("cohort %q in cluster %q, signal %q", id.Cohort, id.Cluster, signal)
		}
		http.Error(w, fmt.Sprintf("%s%s: no answer to an export of its ranks carried one within the last %s (a cohort has a line once the straggler processor has a quorum of its ranks)",
			lines.NoLinesFor, what, p.settings.TTL), http.StatusNotFound)
		return
	}
	v, left := pushback.Encode(found, p.settings.MaxResponseBytes)
	if left > 0 {
		p.leftOut.Add(r.Context(), int64(left))
	}
	if v == "" {
		// Only names hundreds of bytes long get here (max_response_bytes >= 256).
		http.Error(w, fmt.Sprintf("the line of cohort %q does not fit in max_response_bytes (%d)", id.Cohort, p.settings.MaxResponseBytes), http.StatusInternalServerError)
		return
	}
	p.getAnswers.Add(r.Context(), 1, metric.WithAttributes(attribute.String("outcome", servedFound)))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(v + "\n"))
}

// parseCohortQuery reads cluster (optional: cohorts of a node without
// fathom.cluster.name have none), cohort (required) and signal (optional), each at most
// once, and nothing else: a misspelt parameter is an error, not a silent 404.
func parseCohortQuery(raw string) (lines.CohortID, string, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return lines.CohortID{}, "", fmt.Errorf("the query is not URL-encoded: %w", err)
	}
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		switch name {
		case "cluster", "cohort", "signal":
			if n := len(q[name]); n > 1 {
				return lines.CohortID{}, "", fmt.Errorf("%q is given %d times; give it once", name, n)
			}
		default:
			return lines.CohortID{}, "", fmt.Errorf("unknown query parameter %q; the parameters are cluster, cohort and signal", name)
		}
	}
	id := lines.CohortID{Cluster: q.Get("cluster"), Cohort: q.Get("cohort")}
	if id.Cohort == "" {
		return lines.CohortID{}, "", errors.New("`cohort` is required")
	}
	return id, q.Get("signal"), nil
}
