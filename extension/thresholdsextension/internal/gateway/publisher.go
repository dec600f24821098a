// Package gateway is the gateway's side of the thresholds extension: server middleware
// on the otlp receiver that writes the straggler lines of the cohorts in each export
// into its answer, and, where configured, the GET fallback that serves those lines to
// nodes whose answers arrive without them.
package gateway

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/extension/extensionmiddleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/lines"
	componentmetadata "github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/metadata"
	"github.com/fathom-gpu/fathom/internal/pushback"
)

// Settings are the parts of the extension's config that the gateway reads.
type Settings struct {
	// TTL is how long the GET fallback serves a line no answer has renewed.
	TTL time.Duration
	// MaxResponseBytes bounds the lines written into one answer, to an export or a GET.
	MaxResponseBytes int
	// MaxHeld bounds the lines kept for the GET fallback.
	MaxHeld int
	// Server is the GET fallback's listener; nil: no GET fallback.
	Server *confighttp.ServerConfig
}

// Publisher writes thresholds into the answers to the nodes' exports, and serves them
// over GET where configured.
type Publisher struct {
	settings  Settings
	telemetry component.TelemetrySettings

	// served are the lines written into answers, for the GET fallback; nil while it is
	// off.
	served *lines.Store
	// rotation takes turns among the lines of requests that do not fit one answer.
	rotation *answerRotation

	getServer *getServer

	written, leftOut, refused, getAnswers metric.Int64Counter
}

var (
	_ extensionmiddleware.HTTPServer = (*Publisher)(nil)
	_ extensionmiddleware.GRPCServer = (*Publisher)(nil)
)

// NewPublisher returns the gateway's side; its counters come from tb, the component's
// telemetry.
func NewPublisher(s Settings, set component.TelemetrySettings, tb *componentmetadata.TelemetryBuilder) *Publisher {
	p := &Publisher{settings: s, telemetry: set, rotation: newAnswerRotation(s.TTL),
		written: tb.FathomThresholdsWritten, leftOut: tb.FathomThresholdsLeftOut,
		refused: tb.FathomThresholdsRefused, getAnswers: tb.FathomThresholdsServed}
	if s.Server != nil {
		p.served = lines.NewStore(s.MaxHeld, s.TTL)
	}
	return p
}

// Start opens the GET fallback, where configured.
func (p *Publisher) Start(ctx context.Context, host component.Host) error {
	if p.served == nil {
		return nil
	}
	s, err := p.startGETServer(ctx, host)
	if err != nil {
		return err
	}
	p.getServer = s
	return nil
}

// Shutdown closes the GET fallback.
func (p *Publisher) Shutdown(ctx context.Context) error {
	if p.getServer == nil {
		return nil
	}
	err := p.getServer.shutdown(ctx)
	p.getServer = nil
	return err
}

// GetHTTPHandler wraps the otlp receiver's handler: the request's context collects
// thresholds while the pipeline handles it, and they are written as a header just
// before the answer's status line.
func (p *Publisher) GetHTTPHandler(context.Context) (extensionmiddleware.WrapHTTPHandlerFunc, error) {
	return func(_ context.Context, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			received := time.Now()
			ctx, resp := pushback.NewContext(r.Context())
			t1, stamped := pushback.ParseClockRequest(r.Header.Get(pushback.ClockHTTPHeader))
			next.ServeHTTP(&headerWriter{ResponseWriter: w, p: p, resp: resp, ctx: ctx, peer: r.RemoteAddr,
				clockT1: t1, clockStamped: stamped, received: received}, r.WithContext(ctx))
		}), nil
	}, nil
}

type headerWriter struct {
	http.ResponseWriter
	p       *Publisher
	resp    *pushback.Response
	ctx     context.Context
	peer    string
	written bool
	// The node's clock stamp, and when the request came: answered with the time the
	// answer is written (the clock exchange).
	clockT1      int64
	clockStamped bool
	received     time.Time
}

func (w *headerWriter) WriteHeader(code int) {
	if !w.written {
		w.written = true
		if v := w.p.answer(w.ctx, w.resp, w.peer); v != "" {
			w.Header().Set(pushback.HTTPHeader, v)
		}
		if w.clockStamped {
			w.Header().Set(pushback.ClockHTTPHeader, pushback.FormatClockAnswer(w.clockT1, w.received, time.Now()))
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
func (p *Publisher) GetGRPCServerOptions(context.Context) ([]grpc.ServerOption, error) {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		received := time.Now()
		ctx, resp := pushback.NewContext(ctx)
		out, err := handler(ctx, req)
		var addr string
		if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
			addr = pr.Addr.String()
		}
		var pairs []string
		if v := p.answer(ctx, resp, addr); v != "" {
			pairs = append(pairs, pushback.MetadataKey, v)
		}
		if t1, ok := clockStamp(ctx); ok {
			pairs = append(pairs, pushback.ClockMetadataKey, pushback.FormatClockAnswer(t1, received, time.Now()))
		}
		if len(pairs) > 0 {
			if herr := grpc.SetHeader(ctx, metadata.Pairs(pairs...)); herr != nil {
				p.telemetry.Logger.Debug("thresholds header not set", zap.Error(herr))
			}
		}
		return out, err
	})}, nil
}

// clockStamp reads the node's clock stamp from a gRPC request's metadata.
func clockStamp(ctx context.Context) (int64, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	if vs := md.Get(pushback.ClockMetadataKey); len(vs) > 0 {
		return pushback.ParseClockRequest(vs[0])
	}
	return 0, false
}

// answer encodes what the pipeline collected for one request's answer, and keeps it for
// the GET fallback. peer is the requester's address, for the rotation.
func (p *Publisher) answer(ctx context.Context, resp *pushback.Response, peer string) string {
	ts := resp.Thresholds()
	if len(ts) == 0 {
		return ""
	}
	if p.served != nil {
		// All of them, those that do not fit in this answer too: a GET may ask for
		// any cohort of the request.
		if refused := p.served.Put(withoutCohortVerdicts(ts), time.Now(), false); refused > 0 {
			p.refused.Add(ctx, int64(refused), metric.WithAttributes(attribute.String("reason", "max_held")))
		}
	}
	start := p.rotation.order(peer, len(ts))
	v, left := pushback.Encode(append(ts[start:len(ts):len(ts)], ts[:start]...), p.settings.MaxResponseBytes)
	p.rotation.advance(peer, start, len(ts)-left, len(ts), time.Now())
	if n := len(ts) - left; n > 0 {
		p.written.Add(ctx, int64(n))
	}
	if left > 0 {
		p.leftOut.Add(ctx, int64(left))
	}
	return v
}

// withoutCohortVerdicts is ts for the GET: a cohort's verdict covers only the ranks of
// the node whose export it answered, and read by another node's GET it would say that
// node's ranks are healthy. A node that polls judges its ranks by the lines. A pair's
// verdict covers both its ranks, and stays.
func withoutCohortVerdicts(ts []pushback.Threshold) []pushback.Threshold {
	out := make([]pushback.Threshold, len(ts))
	for i, t := range ts {
		if !t.Pair {
			t.Verdicts, t.Flagged = false, nil
		}
		out[i] = t
	}
	return out
}
