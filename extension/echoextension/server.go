package echoextension

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/fathom-gpu/fathom/extension/echoextension/internal/metadata"
	"github.com/fathom-gpu/fathom/internal/echoapi"
	"github.com/fathom-gpu/fathom/internal/echosocket"
	"github.com/fathom-gpu/fathom/internal/echostore"
	"github.com/fathom-gpu/fathom/internal/echotools"
)

// apiServer is the Echo API as this extension's YAML asks for it: the echoapi handler
// over the echotools registry, on a TCP listener (TLS, tokens) or on the Unix socket,
// and the audit file it holds open until shutdown.
type apiServer struct {
	http      *http.Server
	auditFile *os.File
}

// readTokens reads each secret from its file or variable at start, so a missing one
// fails the start with its name rather than every request later.
func readTokens(cfg []TokenConfig) ([]echoapi.TokenSpec, error) {
	var specs []echoapi.TokenSpec
	for _, t := range cfg {
		var secret string
		switch {
		case t.File != "":
			raw, err := os.ReadFile(t.File)
			if err != nil {
				return nil, fmt.Errorf("token %q: %w", t.Name, err)
			}
			secret = strings.TrimSpace(string(raw))
		default:
			secret = strings.TrimSpace(os.Getenv(t.Env))
			if secret == "" {
				return nil, fmt.Errorf("token %q: environment variable %s is empty or unset", t.Name, t.Env)
			}
		}
		spec := echoapi.TokenSpec{Name: t.Name, Secret: secret, Scopes: t.Scopes}
		if t.RateLimit != nil {
			spec.RatePerSecond, spec.Burst = t.RateLimit.RequestsPerSecond, t.RateLimit.Burst
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

func newAPIServer(ctx context.Context, cfg *Config, st *echostore.Store, set extension.Settings, telemetry *metadata.TelemetryBuilder, _ component.Host) (*apiServer, error) {
	env, err := echotools.NewEnv(st, cfg.SQL.queryLimits(), cfg.SQL.MaxConcurrent, cfg.RatesFile)
	if err != nil {
		return nil, err
	}
	reg, err := echotools.NewRegistry(env)
	if err != nil {
		return nil, err
	}
	var auth *echoapi.Authenticator
	if cfg.Server.UnixSocket.Path == "" {
		specs, err := readTokens(cfg.Server.Tokens)
		if err != nil {
			return nil, err
		}
		if auth, err = echoapi.NewAuthenticator(specs); err != nil {
			return nil, err
		}
	} else if auth, err = echoapi.NewAuthenticator(nil); err != nil {
		return nil, err
	}
	s := &apiServer{}
	var sink io.Writer = zapWriter{set.Logger.With(zap.String("log", "echo.audit"))}
	if cfg.Server.AuditLog != "" {
		f, err := os.OpenFile(cfg.Server.AuditLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return nil, fmt.Errorf("audit log: %w", err)
		}
		s.auditFile, sink = f, f
	}
	audit := echoapi.NewAuditLog(sink, func() { telemetry.FathomEchoAuditDroppedEntries.Add(context.Background(), 1) }, func(e echoapi.AuditEntry) {
		code := e.Code
		if code == "" {
			code = "ok"
		}
		telemetry.FathomEchoAPIRequests.Add(context.Background(), 1, metric.WithAttributes(
			attribute.String("transport", e.Transport), attribute.String("code", code)))
	})
	opts := echoapi.Options{
		Registry: reg, Auth: auth, Audit: audit,
		RatePerSecond: cfg.Server.RateLimit.RequestsPerSecond, Burst: cfg.Server.RateLimit.Burst,
		Version: set.BuildInfo.Version, SchemaVersion: echostore.SchemaVersion,
		Logger: set.Logger,
	}
	if path := cfg.Server.UnixSocket.Path; path != "" {
		opts.LocalCaller = "local"
		l, err := echosocket.Listen(path, cfg.Server.UnixSocket.fileMode())
		if err != nil {
			s.close()
			return nil, err
		}
		set.Logger.Info("Echo API serving on a Unix socket: its file permissions decide who may call",
			zap.String("path", path), zap.Stringer("mode", cfg.Server.UnixSocket.fileMode()))
		s.http = echoapi.Serve(l, echoapi.NewHandler(opts), func(err error) {
			set.Logger.Error("Echo API socket stopped", zap.String("path", path), zap.Error(err))
		})
		return s, nil
	}
	handler := echoapi.NewHandler(opts)

	l, err := net.Listen("tcp", cfg.Server.Endpoint)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("listen on %s: %w", cfg.Server.Endpoint, err)
	}
	if cfg.Server.TLS != nil {
		tlsCfg, err := cfg.Server.TLS.LoadTLSConfig(ctx)
		if err != nil {
			l.Close()
			s.close()
			return nil, fmt.Errorf("server.tls: %w", err)
		}
		l = tls.NewListener(l, tlsCfg)
	} else {
		set.Logger.Warn("Echo API is serving plain HTTP (insecure_allow_plaintext): bearer tokens cross the network in the clear",
			zap.String("endpoint", cfg.Server.Endpoint))
	}
	s.http = echoapi.Serve(l, handler, func(err error) {
		set.Logger.Error("Echo API listener stopped", zap.String("endpoint", cfg.Server.Endpoint), zap.Error(err))
	})
	return s, nil
}

func (s *apiServer) close() {
	if s.auditFile != nil {
		s.auditFile.Close()
	}
}

func (s *apiServer) shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	s.close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// zapWriter sends audit lines to the collector's log when no audit file is set.
type zapWriter struct{ logger *zap.Logger }

func (z zapWriter) Write(p []byte) (int, error) {
	z.logger.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}
