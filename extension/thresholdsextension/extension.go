package thresholdsextension

import (
	"context"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/extensionmiddleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/fathom-gpu/fathom/internal/pushback"
)

type thresholds struct {
	cfg    *Config
	logger *zap.Logger

	mu   sync.Mutex
	held map[pushback.Key]held

	written, leftOut, received, refused metric.Int64Counter
}

type held struct {
	t        pushback.Threshold
	received time.Time
}

var (
	_ extension.Extension            = (*thresholds)(nil)
	_ extensionmiddleware.HTTPServer = (*thresholds)(nil)
	_ extensionmiddleware.GRPCServer = (*thresholds)(nil)
	_ extensionmiddleware.HTTPClient = (*thresholds)(nil)
	_ extensionmiddleware.GRPCClient = (*thresholds)(nil)
	_ pushback.Source                = (*thresholds)(nil)
)

func newThresholds(cfg *Config, set extension.Settings) (*thresholds, error) {
	meter := set.MeterProvider.Meter("github.com/fathom-gpu/fathom/extension/thresholdsextension")
	e := &thresholds{cfg: cfg, logger: set.Logger, held: map[pushback.Key]held{}}
	var err error
	counter := func(name, desc, unit string) metric.Int64Counter {
		if err != nil {
			return nil
		}
		var c metric.Int64Counter
		c, err = meter.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		return c
	}
	e.written = counter("fathom_thresholds_written", "Thresholds written into answers to OTLP exports (gateway).", "{threshold}")
	e.leftOut = counter("fathom_thresholds_left_out", "Thresholds left out of an answer because max_response_bytes was reached (gateway).", "{threshold}")
	e.received = counter("fathom_thresholds_received", "Thresholds read from answers to this collector's exports (node).", "{threshold}")
	e.refused = counter("fathom_thresholds_refused", "Thresholds in answers the node could not use, by reason: malformed, max_held.", "{threshold}")
	return e, err
}

func (e *thresholds) Start(context.Context, component.Host) error { return nil }
func (e *thresholds) Shutdown(context.Context) error              { return nil }

// ---- gateway side ----

// GetHTTPHandler wraps the otlp receiver's handler: the request's context collects
// thresholds while the pipeline handles it, and they are written as a header just
// before the answer's status line.
func (e *thresholds) GetHTTPHandler(context.Context) (extensionmiddleware.WrapHTTPHandlerFunc, error) {
	return func(_ context.Context, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, resp := pushback.NewContext(r.Context())
			next.ServeHTTP(&headerWriter{ResponseWriter: w, e: e, resp: resp, ctx: ctx}, r.WithContext(ctx))
		}), nil
	}, nil
}

type headerWriter struct {
	http.ResponseWriter
	e       *thresholds
	resp    *pushback.Response
	ctx     context.Context
	written bool
}

func (w *headerWriter) WriteHeader(code int) {
	if !w.written {
		w.written = true
		if v := w.e.encode(w.ctx, w.resp); v != "" {
			w.Header().Set(pushback.HTTPHeader, v)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *headerWriter) Write(b []byte) (int, error) {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *headerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// GetGRPCServerOptions adds a unary interceptor that does the same for gRPC: the
// thresholds go out as header metadata with the answer.
func (e *thresholds) GetGRPCServerOptions(context.Context) ([]grpc.ServerOption, error) {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, resp := pushback.NewContext(ctx)
		out, err := handler(ctx, req)
		if v := e.encode(ctx, resp); v != "" {
			if herr := grpc.SetHeader(ctx, metadata.Pairs(pushback.MetadataKey, v)); herr != nil {
				e.logger.Debug("thresholds header not set", zap.Error(herr))
			}
		}
		return out, err
	})}, nil
}

func (e *thresholds) encode(ctx context.Context, resp *pushback.Response) string {
	ts := resp.Thresholds()
	if len(ts) == 0 {
		return ""
	}
	v, left := pushback.Encode(ts, e.cfg.MaxResponseBytes)
	if n := len(ts) - left; n > 0 {
		e.written.Add(ctx, int64(n))
	}
	if left > 0 {
		e.leftOut.Add(ctx, int64(left))
	}
	return v
}

// ---- node side ----

// GetHTTPRoundTripper reads thresholds from every answer to the node's OTLP/HTTP
// exports.
func (e *thresholds) GetHTTPRoundTripper(context.Context) (extensionmiddleware.WrapHTTPRoundTripperFunc, error) {
	return func(_ context.Context, next http.RoundTripper) (http.RoundTripper, error) {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(r)
			if err == nil {
				if v := resp.Header.Get(pushback.HTTPHeader); v != "" {
					e.take(r.Context(), v)
				}
			}
			return resp, err
		}), nil
	}, nil
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// GetGRPCClientOptions reads thresholds from the header metadata of every answer to the
// node's OTLP/gRPC exports, refused ones included (a gateway under pressure still
// tells the node where the line is).
func (e *thresholds) GetGRPCClientOptions(context.Context) ([]grpc.DialOption, error) {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var md metadata.MD
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&md))...)
		if vs := md.Get(pushback.MetadataKey); len(vs) > 0 {
			e.take(ctx, vs[len(vs)-1])
		}
		return err
	})}, nil
}

// take stores what one answer carried; a malformed value changes nothing.
func (e *thresholds) take(ctx context.Context, v string) {
	ts, err := pushback.Decode(v)
	if err != nil {
		e.refused.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", "malformed")))
		e.logger.Debug("thresholds in an answer were not readable", zap.Error(err))
		return
	}
	now := time.Now()
	refused := 0
	e.mu.Lock()
	for _, t := range ts {
		k := t.Key()
		if _, ok := e.held[k]; !ok && len(e.held) >= e.cfg.MaxHeld {
			e.evictExpired(now)
			if len(e.held) >= e.cfg.MaxHeld {
				refused++
				continue
			}
		}
		e.held[k] = held{t: t, received: now}
	}
	e.mu.Unlock()
	e.received.Add(ctx, int64(len(ts)-refused))
	if refused > 0 {
		e.refused.Add(ctx, int64(refused), metric.WithAttributes(attribute.String("reason", "max_held")))
	}
}

func (e *thresholds) evictExpired(now time.Time) {
	for k, h := range e.held {
		if now.Sub(h.received) > e.cfg.TTL {
			delete(e.held, k)
		}
	}
}

// Threshold implements pushback.Source.
func (e *thresholds) Threshold(k pushback.Key, now time.Time) (pushback.Threshold, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	h, ok := e.held[k]
	if !ok || now.Sub(h.received) > e.cfg.TTL {
		return pushback.Threshold{}, false
	}
	return h.t, true
}
