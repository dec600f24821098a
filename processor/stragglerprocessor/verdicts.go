package stragglerprocessor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/fathom-gpu/fathom/processor/stragglerprocessor/internal/metadata"
)

// VerdictsConfig is the local remediation hook: every state change, as one JSON line,
// to the programs connected to a Unix socket and, optionally, POSTed to a webhook. A
// node agent that cordons a GPU or restarts a rank reacts to its own node's verdicts
// without asking the gateway.
type VerdictsConfig struct {
	// UnixSocket is the path of a socket the processor listens on; every client
	// connected gets every verdict as an NDJSON line. Empty: off.
	UnixSocket string `mapstructure:"unix_socket"`
	// Webhook, if its endpoint is set, gets each verdict as a JSON POST.
	Webhook WebhookConfig `mapstructure:"webhook"`
	// QueueSize bounds the verdicts waiting for each client and for the webhook; a
	// verdict that does not fit is dropped and counted.
	QueueSize int `mapstructure:"queue_size"`
	// MaxClients bounds the connected socket clients; more are refused (counted).
	MaxClients int `mapstructure:"max_clients"`
}

// WebhookConfig is an HTTP endpoint that receives verdicts.
type WebhookConfig struct {
	// Endpoint: the URL each verdict is POSTed to as JSON; empty: no webhook.
	Endpoint string `mapstructure:"endpoint"`
	// Timeout of each POST.
	Timeout time.Duration `mapstructure:"timeout"`
}

func (c VerdictsConfig) enabled() bool { return c.UnixSocket != "" || c.Webhook.Endpoint != "" }

// Verdict is one NDJSON line (and one webhook body).
type Verdict struct {
	Time      time.Time `json:"time"`
	State     string    `json:"state"`
	Source    string    `json:"source"`
	Cluster   string    `json:"cluster,omitempty"`
	Cohort    string    `json:"cohort"`
	Job       string    `json:"job,omitempty"`
	Rank      *int64    `json:"rank,omitempty"`
	Node      string    `json:"node,omitempty"`
	Signal    string    `json:"signal"`
	Value     float64   `json:"value"`
	Median    float64   `json:"median"`
	Threshold float64   `json:"threshold"`
	Score     float64   `json:"score"`
	Since     time.Time `json:"since"`
	// WindowSeconds is the window whose median flagged the rank (min_duration), 0
	// when its samples did.
	WindowSeconds float64 `json:"window_seconds,omitempty"`
	// Rule is what flagged a straggler: samples, window or evidence.
	Rule    string `json:"rule,omitempty"`
	Message string `json:"message"`
}

// verdictSinks fans verdicts out to the socket's clients and the webhook, never
// blocking the processor: each has its own bounded queue.
type verdictSinks struct {
	cfg     VerdictsConfig
	logger  *zap.Logger
	sent    metric.Int64Counter
	dropped metric.Int64Counter

	listener net.Listener
	mu       sync.Mutex
	clients  map[chan []byte]struct{}
	webhook  chan []byte
	client   *http.Client
	wg       sync.WaitGroup
	stop     chan struct{}
}

func newVerdictSinks(cfg VerdictsConfig, logger *zap.Logger, telemetry *metadata.TelemetryBuilder) (*verdictSinks, error) {
	v := &verdictSinks{cfg: cfg, logger: logger, clients: map[chan []byte]struct{}{}, stop: make(chan struct{}),
		sent: telemetry.FathomStragglerVerdictsSent, dropped: telemetry.FathomStragglerVerdictsDropped}
	return v, nil
}

func (v *verdictSinks) start() error {
	if v.cfg.UnixSocket != "" {
		// A socket file left by a previous run is replaced; any other file is not.
		if fi, err := os.Lstat(v.cfg.UnixSocket); err == nil {
			if fi.Mode()&os.ModeSocket == 0 {
				return fmt.Errorf("straggler: verdicts.unix_socket %s exists and is not a socket", v.cfg.UnixSocket)
			}
			_ = os.Remove(v.cfg.UnixSocket)
		}
		l, err := net.Listen("unix", v.cfg.UnixSocket)
		if err != nil {
			return fmt.Errorf("straggler: verdicts.unix_socket: %w", err)
		}
		_ = os.Chmod(v.cfg.UnixSocket, 0o660)
		v.listener = l
		v.wg.Go(v.accept)
	}
	if v.cfg.Webhook.Endpoint != "" {
		v.webhook = make(chan []byte, v.cfg.QueueSize)
		v.client = &http.Client{Timeout: v.cfg.Webhook.Timeout}
		v.wg.Go(v.postLoop)
	}
	return nil
}

func (v *verdictSinks) shutdown() {
	close(v.stop)
	if v.listener != nil {
		_ = v.listener.Close()
	}
	v.wg.Wait()
}

func (v *verdictSinks) accept() {
	for {
		conn, err := v.listener.Accept()
		if err != nil {
			return // closed at shutdown
		}
		v.mu.Lock()
		if len(v.clients) >= v.cfg.MaxClients {
			v.mu.Unlock()
			_ = conn.Close()
			v.dropped.Add(context.Background(), 1, metric.WithAttributes(attribute.String("sink", "unix_socket"), attribute.String("reason", "client_refused")))
			continue
		}
		queue := make(chan []byte, v.cfg.QueueSize)
		v.clients[queue] = struct{}{}
		v.mu.Unlock()
		v.wg.Go(func() { v.serve(conn, queue) })
	}
}

// serve writes the client's queue to it until it goes away or the processor stops;
// what the client sends is read and discarded, so that its going away is noticed.
func (v *verdictSinks) serve(conn net.Conn, queue chan []byte) {
	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, conn)
		close(gone)
	}()
	defer func() {
		v.mu.Lock()
		delete(v.clients, queue)
		v.mu.Unlock()
		_ = conn.Close()
	}()
	for {
		select {
		case <-v.stop:
			return
		case <-gone:
			return
		case line := <-queue:
			_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := conn.Write(line); err != nil {
				return
			}
			v.sent.Add(context.Background(), 1, metric.WithAttributes(attribute.String("sink", "unix_socket")))
		}
	}
}

func (v *verdictSinks) postLoop() {
	for {
		select {
		case <-v.stop:
			return
		case body := <-v.webhook:
			ctx := context.Background()
			if err := v.post(ctx, body); err != nil {
				v.dropped.Add(ctx, 1, metric.WithAttributes(attribute.String("sink", "webhook"), attribute.String("reason", "webhook_failed")))
				v.logger.Warn("straggler verdict not delivered to the webhook", zap.String("endpoint", v.cfg.Webhook.Endpoint), zap.Error(err))
				continue
			}
			v.sent.Add(ctx, 1, metric.WithAttributes(attribute.String("sink", "webhook")))
		}
	}
}

func (v *verdictSinks) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.cfg.Webhook.Endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := v.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}

// publish queues each verdict for every sink without waiting.
func (v *verdictSinks) publish(verdicts []Verdict) {
	ctx := context.Background()
	for _, verdict := range verdicts {
		line, err := json.Marshal(verdict)
		if err != nil {
			continue
		}
		line = append(line, '\n')
		v.mu.Lock()
		for queue := range v.clients {
			select {
			case queue <- line:
			default:
				v.dropped.Add(ctx, 1, metric.WithAttributes(attribute.String("sink", "unix_socket"), attribute.String("reason", "queue_full")))
			}
		}
		v.mu.Unlock()
		if v.webhook != nil {
			select {
			case v.webhook <- line:
			default:
				v.dropped.Add(ctx, 1, metric.WithAttributes(attribute.String("sink", "webhook"), attribute.String("reason", "queue_full")))
			}
		}
	}
}

func (c VerdictsConfig) validate() error {
	if !c.enabled() {
		return nil
	}
	var errs []error
	if c.QueueSize < 1 || c.QueueSize > 1<<16 {
		errs = append(errs, errors.New("straggler: `verdicts.queue_size` must be between 1 and 65536"))
	}
	if c.MaxClients < 1 {
		errs = append(errs, errors.New("straggler: `verdicts.max_clients` must be >= 1"))
	}
	if c.Webhook.Endpoint != "" {
		if u, err := url.Parse(c.Webhook.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("straggler: `verdicts.webhook.endpoint` %q is not an http(s) URL", c.Webhook.Endpoint))
		}
		if c.Webhook.Timeout <= 0 {
			errs = append(errs, errors.New("straggler: `verdicts.webhook.timeout` must be > 0"))
		}
	}
	return errors.Join(errs...)
}
