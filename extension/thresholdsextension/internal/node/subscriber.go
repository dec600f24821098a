// Package node is the node's side of the thresholds extension: client middleware on the
// otlp exporter that reads the straggler lines from every answer to the node's exports
// and holds them, until their TTL, for the node's straggler processor; the clock
// exchange that rides on the same answers; and, where configured, the poller that asks
// the gateway's GET fallback for the cohorts push-back does not bring.
package node

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/extension/extensionmiddleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/lines"
	componentmetadata "github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/metadata"
	"github.com/fathom-gpu/fathom/internal/pushback"
	"github.com/fathom-gpu/fathom/internal/wallclock"
)

// Settings are the parts of the extension's config that the node reads.
type Settings struct {
	// TTL is how long a received line is held without a fresh one.
	TTL time.Duration
	// MaxHeld bounds the lines held (one per cohort and signal).
	MaxHeld int
	// Poll is the GET fallback; nil: the node does not poll.
	Poll *Poll
}

// Poll is the node's GET fallback.
type Poll struct {
	// Client's endpoint is the gateway's thresholds server; the node asks
	// <endpoint>/v1/thresholds.
	Client confighttp.ClientConfig
	// Interval is how long push-back may be absent for a cohort before the node asks,
	// and then how often it asks; Jitter spreads each wait over interval·(1±jitter).
	Interval time.Duration
	Jitter   float64
}

// Subscriber reads thresholds from the answers to the node's exports (and polls), and
// hands them to the node's straggler processor.
type Subscriber struct {
	settings  Settings
	telemetry component.TelemetrySettings

	// held are the lines received, by push-back or by poll.
	held *lines.Store
	// wanted are the lines the node's straggler processor asked for; nil unless the
	// node polls.
	wanted *wantedLines
	poller *poller

	// clock is the node's offset from the gateway, from the times traded in every
	// export and its answer (see pushback.ClockEstimator).
	clock pushback.ClockEstimator
	// answered is when the gateway last answered (unix nanos; 0: never): a clock
	// answer or lines, pushed or polled.
	answered atomic.Int64

	received, refused, polls metric.Int64Counter
}

var (
	_ extensionmiddleware.HTTPClient = (*Subscriber)(nil)
	_ extensionmiddleware.GRPCClient = (*Subscriber)(nil)
	_ pushback.Source                = (*Subscriber)(nil)
	_ pushback.Clock                 = (*Subscriber)(nil)
	_ pushback.Reachability          = (*Subscriber)(nil)
)

// NewSubscriber returns the node's side; its counters come from tb, the component's
// telemetry.
func NewSubscriber(s Settings, set component.TelemetrySettings, tb *componentmetadata.TelemetryBuilder) *Subscriber {
	n := &Subscriber{settings: s, telemetry: set, held: lines.NewStore(s.MaxHeld, s.TTL),
		received: tb.FathomThresholdsReceived, refused: tb.FathomThresholdsRefused, polls: tb.FathomThresholdsPolls}
	if s.Poll != nil {
		n.wanted = newWantedLines(s.MaxHeld, s.TTL)
	}
	return n
}

// Start starts the poller, where configured.
func (n *Subscriber) Start(ctx context.Context, host component.Host) error {
	if n.wanted == nil {
		return nil
	}
	client, err := n.settings.Poll.Client.ToClient(ctx, host.GetExtensions(), n.telemetry)
	if err != nil {
		return fmt.Errorf("thresholds: `poll`: %w", err)
	}
	pollCtx, cancel := context.WithCancel(context.Background())
	n.poller = &poller{n: n, url: strings.TrimSuffix(n.settings.Poll.Client.Endpoint, "/") + lines.GETPath,
		client: client, cancel: cancel, done: make(chan struct{})}
	go n.poller.run(pollCtx)
	return nil
}

// Shutdown stops the poller.
func (n *Subscriber) Shutdown(context.Context) error {
	if n.poller != nil {
		n.poller.shutdown()
		n.poller = nil
	}
	return nil
}

// GetHTTPRoundTripper reads thresholds from every answer to the node's OTLP/HTTP
// exports.
func (n *Subscriber) GetHTTPRoundTripper(context.Context) (extensionmiddleware.WrapHTTPRoundTripperFunc, error) {
	return func(_ context.Context, next http.RoundTripper) (http.RoundTripper, error) {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			// A round tripper must not change the request it is given: the stamp goes
			// on a copy (the body is shared, as Clone does).
			r = r.Clone(r.Context())
			sent := wallclock.Now()
			r.Header.Set(pushback.ClockHTTPHeader, pushback.FormatClockRequest(sent))
			resp, err := next.RoundTrip(r)
			if err == nil {
				n.readClock(resp.Header.Get(pushback.ClockHTTPHeader), sent)
				if v := resp.Header.Get(pushback.HTTPHeader); v != "" {
					_ = n.take(r.Context(), v, true)
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
func (n *Subscriber) GetGRPCClientOptions(context.Context) ([]grpc.DialOption, error) {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var md metadata.MD
		sent := wallclock.Now()
		ctx = metadata.AppendToOutgoingContext(ctx, pushback.ClockMetadataKey, pushback.FormatClockRequest(sent))
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&md))...)
		if vs := md.Get(pushback.ClockMetadataKey); len(vs) > 0 {
			n.readClock(vs[len(vs)-1], sent)
		}
		if vs := md.Get(pushback.MetadataKey); len(vs) > 0 {
			_ = n.take(ctx, vs[len(vs)-1], true)
		}
		return err
	})}, nil
}

// readClock takes the gateway's answer to the clock stamp this export carried (sent);
// an answer without one (an older gateway, a proxy that strips it) or to another stamp
// changes nothing.
func (n *Subscriber) readClock(v string, sent time.Time) {
	t4 := wallclock.Now()
	if t1, t2, t3, ok := pushback.ParseClockAnswer(v); ok && t1 == sent.UnixNano() {
		n.clock.Add(t1, t2, t3, t4.UnixNano(), time.Now())
		n.answered.Store(time.Now().UnixNano())
	}
}

// LastAnswer implements pushback.Reachability: when the gateway last answered this node
// (zero: never).
func (n *Subscriber) LastAnswer() time.Time {
	if ns := n.answered.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// ClockOffset implements pushback.Clock: this node's clock minus the gateway's.
func (n *Subscriber) ClockOffset(now time.Time) (offset, uncertainty time.Duration, ok bool) {
	return n.clock.Offset(now)
}

// take keeps what one answer carried (pushed: an answer to an export, else to a poll);
// a malformed value changes nothing.
func (n *Subscriber) take(ctx context.Context, v string, pushed bool) error {
	ts, err := pushback.Decode(v)
	if err != nil {
		n.refused.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", "malformed")))
		n.telemetry.Logger.Debug("thresholds in an answer were not readable", zap.Error(err))
		return err
	}
	n.answered.Store(time.Now().UnixNano())
	refused := n.held.Put(ts, time.Now(), pushed)
	n.received.Add(ctx, int64(len(ts)-refused))
	if refused > 0 {
		n.refused.Add(ctx, int64(refused), metric.WithAttributes(attribute.String("reason", "max_held")))
	}
	return nil
}

// Threshold implements pushback.Source. The node's straggler processor asks for the
// line of every cohort and signal of its ranks at each evaluation: which is how the
// poller learns what to fetch when push-back is absent.
func (n *Subscriber) Threshold(k pushback.Key, now time.Time) (pushback.Threshold, bool) {
	if n.wanted != nil {
		n.wanted.ask(k, now)
	}
	return n.held.Get(k, now)
}
