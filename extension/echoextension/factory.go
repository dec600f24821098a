// Package echoextension is the `echo` extension: it owns the Echo DuckDB store on the
// gateway (schema, migrations, lock, retention) and serves MCP and HTTP+JSON over it.
package echoextension

//go:generate go tool mdatagen metadata.yaml

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"

	"github.com/fathom-gpu/fathom/extension/echoextension/internal/metadata"
)

// NewFactory returns the factory of the `echo` extension.
func NewFactory() extension.Factory {
	return extension.NewFactory(metadata.Type, createDefaultConfig, create, metadata.ExtensionStability)
}

func createDefaultConfig() component.Config {
	return &Config{
		Retention: RetentionConfig{CheckInterval: time.Minute},
		Server: ServerConfig{
			RateLimit: RateLimitConfig{RequestsPerSecond: 20, Burst: 40},
		},
		SQL: SQLConfig{
			MaxRows:       10_000,
			MaxBytes:      8 << 20,
			Timeout:       10 * time.Second,
			MaxConcurrent: 2,
		},
	}
}

func create(_ context.Context, set extension.Settings, cfg component.Config) (extension.Extension, error) {
	return newEchoExtension(set, cfg.(*Config))
}
