package thresholdsextension

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

	"github.com/fathom-gpu/fathom/internal/pushback"
)

// thresholdsPath is where the gateway serves a cohort's lines and where the node asks,
// below the endpoint (as otlp_http appends /v1/metrics).
const thresholdsPath = "/v1/thresholds"

// noThresholdsFor opens every 404 the thresholds server writes for a cohort it has no
// line of, so that the node tells "no line yet" from a wrong endpoint's 404.
const noThresholdsFor = "no thresholds for "

// getServer is the gateway's GET fallback.
type getServer struct {
	http *http.Server
	done chan struct{}
}

func (e *thresholds) startGETServer(ctx context.Context, host component.Host) (*getServer, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+thresholdsPath, e.serveCohort)
	l, err := e.cfg.Server.ToListener(ctx)
	if err != nil {
		return nil, fmt.Errorf("thresholds: `server.endpoint` %s: %w", e.cfg.Server.NetAddr.Endpoint, err)
	}
	srv, err := e.cfg.Server.ToServer(ctx, host.GetExtensions(), e.telemetry, mux)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("thresholds: `server`: %w", err)
	}
	s := &getServer{http: srv, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.logger.Error("thresholds server stopped; nodes that poll it keep their lines until their ttl", zap.String("endpoint", e.cfg.Server.NetAddr.Endpoint), zap.Error(err))
		}
	}()
	e.logger.Info("thresholds server answers GET "+thresholdsPath, zap.String("endpoint", l.Addr().String()))
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
func (e *thresholds) serveCohort(w http.ResponseWriter, r *http.Request) {
	id, signal, err := parseCohortQuery(r.URL.RawQuery)
	if err != nil {
		e.getAnswers.Add(r.Context(), 1, metric.WithAttributes(attribute.String("outcome", servedBadRequest)))
		http.Error(w, err.Error()+"; ask GET "+thresholdsPath+"?cluster=<fathom.cluster.name>&cohort=<fathom.cohort>[&signal=<metric>]", http.StatusBadRequest)
		return
	}
	lines := e.served.cohort(id, time.Now())
	if signal != "" {
		lines = slices.DeleteFunc(lines, func(t pushback.Threshold) bool { return t.Signal != signal })
	}
	if len(lines) == 0 {
		e.getAnswers.Add(r.Context(), 1, metric.WithAttributes(attribute.String("outcome", servedNotFound)))
		what := fmt.Sprintf("cohort %q in cluster %q", id.cohort, id.cluster)
		if signal != "" {
			what = fmt.Sprintf("cohort %q in cluster %q, signal %q", id.cohort, id.cluster, signal)
		}
		http.Error(w, fmt.Sprintf("%s%s: no answer to an export of its ranks carried one within the last %s (a cohort has a line once the straggler processor has a quorum of its ranks)",
			noThresholdsFor, what, e.cfg.TTL), http.StatusNotFound)
		return
	}
	v, left := pushback.Encode(lines, e.cfg.MaxResponseBytes)
	if left > 0 {
		e.leftOut.Add(r.Context(), int64(left))
	}
	if v == "" {
		// Only names hundreds of bytes long get here (max_response_bytes >= 256).
		http.Error(w, fmt.Sprintf("the line of cohort %q does not fit in max_response_bytes (%d)", id.cohort, e.cfg.MaxResponseBytes), http.StatusInternalServerError)
		return
	}
	e.getAnswers.Add(r.Context(), 1, metric.WithAttributes(attribute.String("outcome", servedFound)))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(v + "\n"))
}

// parseCohortQuery reads cluster (optional: cohorts of a node without
// fathom.cluster.name have none), cohort (required) and signal (optional), each at most
// once, and nothing else: a misspelt parameter is an error, not a silent 404.
func parseCohortQuery(raw string) (cohortID, string, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return cohortID{}, "", fmt.Errorf("the query is not URL-encoded: %w", err)
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
				return cohortID{}, "", fmt.Errorf("%q is given %d times; give it once", name, n)
			}
		default:
			return cohortID{}, "", fmt.Errorf("unknown query parameter %q; the parameters are cluster, cohort and signal", name)
		}
	}
	id := cohortID{cluster: q.Get("cluster"), cohort: q.Get("cohort")}
	if id.cohort == "" {
		return cohortID{}, "", errors.New("`cohort` is required")
	}
	return id, q.Get("signal"), nil
}
