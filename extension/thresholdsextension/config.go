package thresholdsextension

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"go.opentelemetry.io/collector/config/confighttp"

	"github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/gateway"
	"github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/node"
)

// Config of the thresholds extension. One config for both ends, as the YAML has always
// had it: named in the gateway's otlp receiver `middlewares`, the extension answers each
// export with the thresholds of the cohorts in it (internal/gateway); named in the
// node's otlp exporter `middlewares`, it reads them from every answer and holds them for
// the node's straggler processor (internal/node). `server` is the gateway's alone,
// `poll` the node's.
type Config struct {
	// TTL is how long the node keeps thresholds it received; past it, with no fresh
	// answer (the gateway unreachable), it says it has none. On the gateway it is how
	// long the GET fallback serves a line that no answer to an export has renewed.
	TTL time.Duration `mapstructure:"ttl"`
	// MaxResponseBytes bounds the thresholds written into one answer, and into one
	// answer to the GET fallback; lines past it are left out (counted).
	MaxResponseBytes int `mapstructure:"max_response_bytes"`
	// MaxHeld bounds the lines the extension keeps (one per cohort and signal): on the
	// node those received, on the gateway those kept for the GET fallback.
	MaxHeld int `mapstructure:"max_held"`
	// Server (gateway) answers GET /v1/thresholds?cluster=..&cohort=.. with the lines
	// the otlp answers carry for that cohort, for nodes whose answers arrive without
	// them (a proxy that drops the header). Off without an endpoint.
	Server confighttp.ServerConfig `mapstructure:"server"`
	// Poll (node) fetches those lines from the gateway's Server for the cohorts whose
	// lines no export's answer carried within the interval. Off without an endpoint.
	Poll PollConfig `mapstructure:"poll"`
}

// PollConfig is the node's GET fallback.
type PollConfig struct {
	// ClientConfig's endpoint is the gateway's thresholds server, e.g.
	// http://gateway:4319; the node asks <endpoint>/v1/thresholds.
	ClientConfig confighttp.ClientConfig `mapstructure:",squash"` // squash: endpoint, tls, timeout... sit beside interval
	// Interval is how long push-back may be absent for a cohort before the node asks,
	// and then how often it asks. Make it longer than the node's export cadence.
	Interval time.Duration `mapstructure:"interval"`
	// Jitter spreads each wait uniformly over interval·(1±jitter), so that the nodes
	// of a cluster, started together, do not poll the gateway in step.
	Jitter float64 `mapstructure:"jitter"`
}

func (p *PollConfig) enabled() bool { return p.ClientConfig.Endpoint != "" }

// gatewaySettings are the keys the gateway's side reads; server without an endpoint
// leaves its GET fallback off.
func (c *Config) gatewaySettings() gateway.Settings {
	s := gateway.Settings{TTL: c.TTL, MaxResponseBytes: c.MaxResponseBytes, MaxHeld: c.MaxHeld}
	if c.Server.NetAddr.Endpoint != "" {
		s.Server = &c.Server
	}
	return s
}

// nodeSettings are the keys the node's side reads; poll without an endpoint leaves its
// poller off.
func (c *Config) nodeSettings() node.Settings {
	s := node.Settings{TTL: c.TTL, MaxHeld: c.MaxHeld}
	if c.Poll.enabled() {
		s.Poll = &node.Poll{Client: c.Poll.ClientConfig, Interval: c.Poll.Interval, Jitter: c.Poll.Jitter}
	}
	return s
}

func createDefaultConfig() *Config {
	poll := confighttp.NewDefaultClientConfig()
	// A gateway that accepts the connection and never answers would otherwise hold the
	// poller (and every cohort after the one asked) forever.
	poll.Timeout = 5 * time.Second
	return &Config{
		// Two kilobytes hold the six lines of one cohort's default signals, or two
		// cohorts' host-side ones, and stay well under the 4 KiB a proxy's response
		// header buffer commonly allows.
		TTL: 2 * time.Minute, MaxResponseBytes: 1024, MaxHeld: 256,
		Server: confighttp.NewDefaultServerConfig(),
		// Four polls within the default TTL, and three times the node's default export
		// cadence (10 s collection interval), so that push-back on time never polls.
		Poll: PollConfig{ClientConfig: poll, Interval: 30 * time.Second, Jitter: 0.2},
	}
}

// Validate explains what is wrong in the words of the YAML.
func (c *Config) Validate() error {
	var errs []error
	if c.TTL <= 0 {
		errs = append(errs, errors.New("thresholds: `ttl` must be > 0"))
	}
	if c.MaxResponseBytes < 256 || c.MaxResponseBytes > 8192 {
		errs = append(errs, errors.New("thresholds: `max_response_bytes` must be between 256 and 8192 (one threshold takes about 200 bytes; proxies limit header sizes)"))
	}
	if c.MaxHeld < 1 {
		errs = append(errs, errors.New("thresholds: `max_held` must be >= 1"))
	}
	if ep := c.Server.NetAddr.Endpoint; ep != "" {
		if _, _, err := net.SplitHostPort(ep); err != nil {
			errs = append(errs, fmt.Errorf("thresholds: `server.endpoint` %q is not host:port (e.g. 0.0.0.0:4319): %w", ep, err))
		}
	}
	if c.Poll.enabled() {
		errs = append(errs, c.Poll.validate(c.TTL)...)
	}
	return errors.Join(errs...)
}

func (p *PollConfig) validate(ttl time.Duration) []error {
	var errs []error
	if u, err := url.Parse(p.ClientConfig.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		errs = append(errs, fmt.Errorf("thresholds: `poll.endpoint` %q must be the http:// or https:// URL of the gateway's thresholds `server` (e.g. http://gateway:4319), without a query", p.ClientConfig.Endpoint))
	}
	if p.Interval <= 0 || (ttl > 0 && p.Interval >= ttl) {
		errs = append(errs, fmt.Errorf("thresholds: `poll.interval` must be > 0 and shorter than `ttl` (%s), or the lines it fetches expire between polls", ttl))
	}
	if !(p.Jitter >= 0 && p.Jitter < 1) {
		errs = append(errs, errors.New("thresholds: `poll.jitter` must be at least 0 and below 1 (a fraction of `poll.interval`)"))
	}
	if p.ClientConfig.Timeout <= 0 {
		errs = append(errs, errors.New("thresholds: `poll.timeout` must be > 0: a gateway that never answers would stall every poll after it"))
	}
	return errs
}
