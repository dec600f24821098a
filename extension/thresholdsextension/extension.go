package thresholdsextension

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/extensionmiddleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	componentmetadata "github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/metadata"
	"github.com/fathom-gpu/fathom/internal/pushback"
	"github.com/fathom-gpu/fathom/internal/wallclock"
)

type thresholds struct {
	cfg       *Config
	logger    *zap.Logger
	telemetry component.TelemetrySettings

	// held are the lines the node received, by push-back or by poll.
	held *lineStore
	// served are the lines the gateway wrote into answers, for the GET fallback; nil
	// while it is off.
	served *lineStore
	// wanted are the lines the node's straggler processor asked for; nil unless the
	// node polls.
	wanted *wantedLines
	// rotation takes turns among the lines of requests that do not fit one answer.
	rotation *answerRotation

	getServer *getServer
	poller    *poller

	// clock is the node's offset from the gateway, from the times traded in every
	// export and its answer (see pushback.ClockEstimator).
	clock pushback.ClockEstimator
	// answered is when the gateway last answered (unix nanos; 0: never): a clock
	// answer or lines, pushed or polled.
	answered atomic.Int64

	written, leftOut, received, refused, polls, getAnswers metric.Int64Counter
}

var (
	_ extension.Extension            = (*thresholds)(nil)
	_ extensionmiddleware.HTTPServer = (*thresholds)(nil)
	_ extensionmiddleware.GRPCServer = (*thresholds)(nil)
	_ extensionmiddleware.HTTPClient = (*thresholds)(nil)
	_ extensionmiddleware.GRPCClient = (*thresholds)(nil)
	_ pushback.Source                = (*thresholds)(nil)
	_ pushback.Clock                 = (*thresholds)(nil)
)

func newThresholds(cfg *Config, set extension.Settings) (*thresholds, error) {
	e := &thresholds{cfg: cfg, logger: set.Logger, telemetry: set.TelemetrySettings, held: newLineStore(cfg.MaxHeld, cfg.TTL),
		rotation: newAnswerRotation(cfg.TTL)}
	if cfg.Server.NetAddr.Endpoint != "" {
		e.served = newLineStore(cfg.MaxHeld, cfg.TTL)
	}
	if cfg.Poll.enabled() {
		e.wanted = newWantedLines(cfg.MaxHeld, cfg.TTL)
	}
	tb, err := componentmetadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	e.written, e.leftOut, e.received = tb.FathomThresholdsWritten, tb.FathomThresholdsLeftOut, tb.FathomThresholdsReceived
	e.refused, e.polls, e.getAnswers = tb.FathomThresholdsRefused, tb.FathomThresholdsPolls, tb.FathomThresholdsServed
	return e, err
}

// Start opens the gateway's GET fallback and starts the node's poller, where configured.
func (e *thresholds) Start(ctx context.Context, host component.Host) error {
	if e.served != nil {
		s, err := e.startGETServer(ctx, host)
		if err != nil {
			return err
		}
		e.getServer = s
	}
	if e.wanted != nil {
		client, err := e.cfg.Poll.ClientConfig.ToClient(ctx, host.GetExtensions(), e.telemetry)
		if err != nil {
			return errors.Join(fmt.Errorf("thresholds: `poll`: %w", err), e.Shutdown(ctx))
		}
		pollCtx, cancel := context.WithCancel(context.Background())
		e.poller = &poller{e: e, url: strings.TrimSuffix(e.cfg.Poll.ClientConfig.Endpoint, "/") + thresholdsPath,
			client: client, cancel: cancel, done: make(chan struct{})}
		go e.poller.run(pollCtx)
	}
	return nil
}

func (e *thresholds) Shutdown(ctx context.Context) error {
	if e.poller != nil {
		e.poller.shutdown()
		e.poller = nil
	}
	if e.getServer != nil {
		err := e.getServer.shutdown(ctx)
		e.getServer = nil
		return err
	}
	return nil
}

// ---- gateway side ----

// GetHTTPHandler wraps the otlp receiver's handler: the request's context collects
// thresholds while the pipeline handles it, and they are written as a header just
// before the answer's status line.
func (e *thresholds) GetHTTPHandler(context.Context) (extensionmiddleware.WrapHTTPHandlerFunc, error) {
	return func(_ context.Context, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			received := time.Now()
			ctx, resp := pushback.NewContext(r.Context())
			t1, stamped := pushback.ParseClockRequest(r.Header.Get(pushback.ClockHTTPHeader))
			next.ServeHTTP(&headerWriter{ResponseWriter: w, e: e, resp: resp, ctx: ctx, peer: r.RemoteAddr,
				clockT1: t1, clockStamped: stamped, received: received}, r.WithContext(ctx))
		}), nil
	}, nil
}

type headerWriter struct {
	http.ResponseWriter
	e       *thresholds
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
		if v := w.e.answer(w.ctx, w.resp, w.peer); v != "" {
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
func (e *thresholds) GetGRPCServerOptions(context.Context) ([]grpc.ServerOption, error) {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		received := time.Now()
		ctx, resp := pushback.NewContext(ctx)
		out, err := handler(ctx, req)
		var addr string
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			addr = p.Addr.String()
		}
		var pairs []string
		if v := e.answer(ctx, resp, addr); v != "" {
			pairs = append(pairs, pushback.MetadataKey, v)
		}
		if t1, ok := clockStamp(ctx); ok {
			pairs = append(pairs, pushback.ClockMetadataKey, pushback.FormatClockAnswer(t1, received, time.Now()))
		}
		if len(pairs) > 0 {
			if herr := grpc.SetHeader(ctx, metadata.Pairs(pairs...)); herr != nil {
				e.logger.Debug("thresholds header not set", zap.Error(herr))
			}
		}
		return out, err
	})}, nil
}

// answer encodes what the pipeline collected for one request's answer, and keeps it for
// the GET fallback. peer is the requester's address, for the rotation.
func (e *thresholds) answer(ctx context.Context, resp *pushback.Response, peer string) string {
	ts := resp.Thresholds()
	if len(ts) == 0 {
		return ""
	}
	if e.served != nil {
		// All of them, those that do not fit in this answer too: a GET may ask for
		// any cohort of the request.
		if refused := e.served.put(ts, time.Now(), false); refused > 0 {
			e.refused.Add(ctx, int64(refused), metric.WithAttributes(attribute.String("reason", "max_held")))
		}
	}
	start := e.rotation.order(peer, len(ts))
	v, left := pushback.Encode(append(ts[start:len(ts):len(ts)], ts[:start]...), e.cfg.MaxResponseBytes)
	e.rotation.advance(peer, start, len(ts)-left, len(ts), time.Now())
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
			// A round tripper must not change the request it is given: the stamp goes
			// on a copy (the body is shared, as Clone does).
			r = r.Clone(r.Context())
			sent := wallclock.Now()
			r.Header.Set(pushback.ClockHTTPHeader, pushback.FormatClockRequest(sent))
			resp, err := next.RoundTrip(r)
			if err == nil {
				e.readClock(resp.Header.Get(pushback.ClockHTTPHeader), sent)
				if v := resp.Header.Get(pushback.HTTPHeader); v != "" {
					_ = e.take(r.Context(), v, true)
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
		sent := wallclock.Now()
		ctx = metadata.AppendToOutgoingContext(ctx, pushback.ClockMetadataKey, pushback.FormatClockRequest(sent))
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&md))...)
		if vs := md.Get(pushback.ClockMetadataKey); len(vs) > 0 {
			e.readClock(vs[len(vs)-1], sent)
		}
		if vs := md.Get(pushback.MetadataKey); len(vs) > 0 {
			_ = e.take(ctx, vs[len(vs)-1], true)
		}
		return err
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

// readClock takes the gateway's answer to the clock stamp this export carried (sent);
// an answer without one (an older gateway, a proxy that strips it) or to another stamp
// changes nothing.
func (e *thresholds) readClock(v string, sent time.Time) {
	t4 := wallclock.Now()
	if t1, t2, t3, ok := pushback.ParseClockAnswer(v); ok && t1 == sent.UnixNano() {
		e.clock.Add(t1, t2, t3, t4.UnixNano(), time.Now())
		e.answered.Store(time.Now().UnixNano())
	}
}

// LastAnswer implements pushback.Reachability: when the gateway last answered this node
// (zero: never).
func (e *thresholds) LastAnswer() time.Time {
	if n := e.answered.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// ClockOffset implements pushback.Clock: this node's clock minus the gateway's.
func (e *thresholds) ClockOffset(now time.Time) (offset, uncertainty time.Duration, ok bool) {
	return e.clock.Offset(now)
}

// take keeps what one answer carried (pushed: an answer to an export, else to a poll);
// a malformed value changes nothing.
func (e *thresholds) take(ctx context.Context, v string, pushed bool) error {
	ts, err := pushback.Decode(v)
	if err != nil {
		e.refused.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", "malformed")))
		e.logger.Debug("thresholds in an answer were not readable", zap.Error(err))
		return err
	}
	e.answered.Store(time.Now().UnixNano())
	refused := e.held.put(ts, time.Now(), pushed)
	e.received.Add(ctx, int64(len(ts)-refused))
	if refused > 0 {
		e.refused.Add(ctx, int64(refused), metric.WithAttributes(attribute.String("reason", "max_held")))
	}
	return nil
}

// Threshold implements pushback.Source. The node's straggler processor asks for the
// line of every cohort and signal of its ranks at each evaluation: which is how the
// poller learns what to fetch when push-back is absent.
func (e *thresholds) Threshold(k pushback.Key, now time.Time) (pushback.Threshold, bool) {
	if e.wanted != nil {
		e.wanted.ask(k, now)
	}
	return e.held.get(k, now)
}
