package echoextension

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/config/configtls"

	"github.com/fathom-gpu/fathom/internal/echostore"
)

// Config configures the Echo store and its MCP + HTTP listener.
type Config struct {
	// Path is the DuckDB file. One gateway process owns it at a time.
	Path string `mapstructure:"path"`
	// MemoryLimit caps DuckDB's memory (DuckDB syntax, e.g. "2GB").
	MemoryLimit string `mapstructure:"memory_limit"`
	// Threads is DuckDB's thread count; 0 means one per core left after the two
	// writers (at least 1), so that queries do not slow ingest on a small gateway.
	Threads int `mapstructure:"threads"`

	Retention RetentionConfig `mapstructure:"retention"`
	Server    ServerConfig    `mapstructure:"server"`
	SQL       SQLConfig       `mapstructure:"sql"`

	// RatesFile is the operator's GPU-hour price list used by get_cost (YAML, see
	// docs/echo.md). Empty: get_cost answers with GPU-hours only.
	RatesFile string `mapstructure:"rates_file"`
}

// RetentionConfig bounds the store by age and by size. Zero disables a bound.
type RetentionConfig struct {
	// MaxAge: rows older than this are deleted; 0 keeps them.
	MaxAge time.Duration `mapstructure:"max_age"`
	// MaxSizeMiB: the oldest rows are deleted while the store is larger; 0: no bound.
	MaxSizeMiB int64 `mapstructure:"max_size_mib"`
	// CheckInterval: how often retention runs.
	CheckInterval time.Duration `mapstructure:"check_interval"`
}

// ServerConfig is the one listener that serves MCP at /mcp and the HTTP+JSON API.
type ServerConfig struct {
	// Endpoint is host:port; empty turns the listener off (store only).
	Endpoint string `mapstructure:"endpoint"`
	// UnixSocket serves the same API on a Unix socket instead of host:port, for a
	// standalone host where nothing may listen on the network. One of endpoint and
	// unix_socket.
	UnixSocket UnixSocketConfig `mapstructure:"unix_socket"`
	// TLS is required unless InsecureAllowPlaintext is set.
	TLS *configtls.ServerConfig `mapstructure:"tls"`
	// InsecureAllowPlaintext serves plain HTTP, bearer tokens in the clear. Only for a
	// listener on loopback or inside a trusted mesh that terminates TLS itself.
	InsecureAllowPlaintext bool `mapstructure:"insecure_allow_plaintext"`
	// Tokens are the accepted bearer tokens; a request needs one for everything but
	// /api/versions and the liveness form of /api/v1/health.
	Tokens []TokenConfig `mapstructure:"tokens"`
	// AuditLog is a file that gets one JSON line per request, refusals included.
	// Empty: audit lines go to the collector's log.
	AuditLog  string          `mapstructure:"audit_log"`
	RateLimit RateLimitConfig `mapstructure:"rate_limit"`
}

// UnixSocketConfig is the Echo API on a Unix socket. Who can open the socket file can
// call every tool, run_analysis included: its file permissions are the boundary, and
// no bearer token is asked for (tokens, tls and insecure_allow_plaintext do not apply).
type UnixSocketConfig struct {
	// Path of the socket, absolute, in a directory that exists (e.g.
	// /run/fathom/echo.sock); empty: no socket. A socket a dead collector left there is
	// replaced; a live one, or any other file, is an error.
	Path string `mapstructure:"path"`
	// Mode of the socket file, octal and quoted (YAML reads 0660 bare as a number):
	// "0600" (the collector's user only, the default) or "0660" (and its group).
	Mode string `mapstructure:"mode"`
}

// maxUnixSocketPath is what sockaddr_un's sun_path holds, less its terminating NUL.
const maxUnixSocketPath = 107

// socketModes are the modes a socket may have: connecting needs write permission, and
// nobody outside the collector's user and group may have it.
var socketModes = map[string]os.FileMode{"0600": 0o600, "0660": 0o660}

// fileMode is the socket's mode; Validate has checked it.
func (u UnixSocketConfig) fileMode() os.FileMode {
	if m, ok := socketModes[u.Mode]; ok {
		return m
	}
	return 0o600
}

// TokenConfig is one bearer token, read from a file or an environment variable so it
// never sits in the YAML.
type TokenConfig struct {
	// Name identifies the caller in the audit log.
	Name string `mapstructure:"name"`
	// File holds the token (one line); one of file and env.
	File string `mapstructure:"file"`
	// Env names the environment variable that holds the token.
	Env string `mapstructure:"env"`
	// Scopes: "tools" (every tool but run_analysis) and "sql" (run_analysis and
	// POST /api/v1/sql).
	Scopes []string `mapstructure:"scopes"`
	// RateLimit overrides server.rate_limit for this caller (e.g. a CI job that
	// queries in bursts, or an agent held to less).
	RateLimit *RateLimitConfig `mapstructure:"rate_limit"`
}

// RateLimitConfig is a token bucket per caller.
type RateLimitConfig struct {
	// RequestsPerSecond allowed per token, sustained.
	RequestsPerSecond float64 `mapstructure:"requests_per_second"`
	// Burst: requests allowed at once above the sustained rate.
	Burst int `mapstructure:"burst"`
}

// SQLConfig bounds run_analysis and POST /api/v1/sql.
type SQLConfig struct {
	// MaxRows a query answers with; more are cut (and the answer says so).
	MaxRows int `mapstructure:"max_rows"`
	// MaxBytes of an answer; more are cut.
	MaxBytes int `mapstructure:"max_bytes"`
	// Timeout: a query running longer is cancelled.
	Timeout time.Duration `mapstructure:"timeout"`
	// MaxConcurrent queries; more wait their turn or are refused.
	MaxConcurrent int `mapstructure:"max_concurrent"`
}

func (s SQLConfig) queryLimits() echostore.QueryLimits {
	return echostore.QueryLimits{MaxRows: s.MaxRows, MaxBytes: s.MaxBytes, Timeout: s.Timeout}
}

var validScopes = map[string]bool{"tools": true, "sql": true}

// Validate explains what is wrong in the words of the YAML.
func (c *Config) Validate() error {
	var errs []error
	if c.Path == "" {
		errs = append(errs, errors.New("echo: `path` must name the DuckDB file (e.g. /var/lib/fathom/echo.duckdb)"))
	}
	if c.Threads < 0 {
		errs = append(errs, errors.New("echo: `threads` must be 0 (the cores the writers leave) or positive"))
	}
	if c.Retention.MaxAge < 0 || c.Retention.MaxSizeMiB < 0 {
		errs = append(errs, errors.New("echo: `retention.max_age` and `retention.max_size_mib` must be positive, or 0 to keep everything"))
	}
	if (c.Retention.MaxAge > 0 || c.Retention.MaxSizeMiB > 0) && c.Retention.CheckInterval <= 0 {
		errs = append(errs, errors.New("echo: `retention.check_interval` must be positive when a retention bound is set"))
	}
	if c.SQL.MaxRows <= 0 || c.SQL.MaxBytes <= 0 || c.SQL.Timeout <= 0 || c.SQL.MaxConcurrent <= 0 {
		errs = append(errs, errors.New("echo: `sql.max_rows`, `sql.max_bytes`, `sql.timeout` and `sql.max_concurrent` must all be positive"))
	}
	errs = append(errs, c.Server.validate()...)
	return errors.Join(errs...)
}

func (s *ServerConfig) validate() []error {
	if s.UnixSocket.Path != "" {
		return s.validateUnixSocket()
	}
	if s.UnixSocket.Mode != "" {
		return []error{errors.New("echo: `server.unix_socket.mode` is set but `server.unix_socket.path` is not")}
	}
	if s.Endpoint == "" {
		return nil
	}
	var errs []error
	if _, _, err := net.SplitHostPort(s.Endpoint); err != nil {
		errs = append(errs, fmt.Errorf("echo: `server.endpoint` %q is not host:port: %w", s.Endpoint, err))
	}
	if s.TLS == nil && !s.InsecureAllowPlaintext {
		errs = append(errs, errors.New("echo: `server.tls` (cert_file, key_file) is required; set `server.insecure_allow_plaintext: true` only for a loopback or mesh-terminated listener"))
	}
	if s.TLS != nil && s.InsecureAllowPlaintext {
		errs = append(errs, errors.New("echo: set either `server.tls` or `server.insecure_allow_plaintext`, not both"))
	}
	if s.TLS != nil {
		if err := s.TLS.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("echo: `server.tls`: %w", err))
		}
	}
	if len(s.Tokens) == 0 {
		errs = append(errs, errors.New("echo: `server.tokens` must list at least one bearer token (file or env) when the listener is on"))
	}
	names := map[string]bool{}
	for i, t := range s.Tokens {
		if t.Name == "" || names[t.Name] {
			errs = append(errs, fmt.Errorf("echo: `server.tokens[%d].name` must be set and unique", i))
		}
		names[t.Name] = true
		if (t.File == "") == (t.Env == "") {
			errs = append(errs, fmt.Errorf("echo: token %q needs exactly one of `file` or `env`", t.Name))
		}
		if len(t.Scopes) == 0 {
			errs = append(errs, fmt.Errorf("echo: token %q needs `scopes` (tools, sql)", t.Name))
		}
		if t.RateLimit != nil && (t.RateLimit.RequestsPerSecond <= 0 || t.RateLimit.Burst <= 0) {
			errs = append(errs, fmt.Errorf("echo: token %q: `rate_limit.requests_per_second` and `burst` must be positive", t.Name))
		}
		for _, sc := range t.Scopes {
			if !validScopes[sc] {
				errs = append(errs, fmt.Errorf("echo: token %q has unknown scope %q (known: tools, sql)", t.Name, sc))
			}
		}
	}
	return append(errs, s.validateRateLimit()...)
}

func (s *ServerConfig) validateRateLimit() []error {
	if s.RateLimit.RequestsPerSecond <= 0 || s.RateLimit.Burst <= 0 {
		return []error{errors.New("echo: `server.rate_limit.requests_per_second` and `burst` must be positive")}
	}
	return nil
}

// validateUnixSocket: on a socket the file's permissions decide who may call, so the
// settings of a network listener are refused rather than silently ignored.
func (s *ServerConfig) validateUnixSocket() []error {
	var errs []error
	path := s.UnixSocket.Path
	if s.Endpoint != "" {
		errs = append(errs, fmt.Errorf("echo: set either `server.endpoint` (%s, a TCP listener with tokens) or `server.unix_socket.path` (%s), not both", s.Endpoint, path))
	}
	if !filepath.IsAbs(path) {
		errs = append(errs, fmt.Errorf("echo: `server.unix_socket.path` %q must be an absolute path (e.g. /run/fathom/echo.sock)", path))
	}
	if len(path) > maxUnixSocketPath {
		errs = append(errs, fmt.Errorf("echo: `server.unix_socket.path` is %d bytes; a Unix socket's path holds at most %d", len(path), maxUnixSocketPath))
	}
	if _, ok := socketModes[s.UnixSocket.Mode]; !ok && s.UnixSocket.Mode != "" {
		errs = append(errs, fmt.Errorf("echo: `server.unix_socket.mode` is %s; want \"0600\" (the collector's user) or \"0660\" (and its group): whoever may open the socket may call every tool", strconv.Quote(s.UnixSocket.Mode)))
	}
	if s.TLS != nil || s.InsecureAllowPlaintext || len(s.Tokens) > 0 {
		errs = append(errs, errors.New("echo: `server.tls`, `server.insecure_allow_plaintext` and `server.tokens` do not apply to `server.unix_socket`: the socket file's permissions decide who may call (unix_socket.mode); remove them"))
	}
	return append(errs, s.validateRateLimit()...)
}
