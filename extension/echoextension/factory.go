// Package echoextension is the `echo` extension: the collector component that opens
// the Echo store (internal/echostore: schema, migrations, lock, ingest), runs its
// retention, and serves the Echo API over it (internal/echoapi and internal/echotools,
// on TCP with TLS and tokens, or on internal/echosocket). It turns the YAML into calls
// on those packages; what they do is theirs, so that `fathom mcp` and `fathom explain`
// use the same store and tools without the component.
package echoextension

//go:generate go tool mdatagen metadata.yaml

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"

	"github.com/fathom-gpu/fathom/extension/echoextension/internal/metadata"
	"github.com/fathom-gpu/fathom/internal/echotools"
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
			MaxRows:       echotools.DefaultSQLLimits.MaxRows,
			MaxBytes:      echotools.DefaultSQLLimits.MaxBytes,
			Timeout:       echotools.DefaultSQLLimits.Timeout,
			MaxConcurrent: echotools.DefaultSQLConcurrency,
		},
	}
}

func create(_ context.Context, set extension.Settings, cfg component.Config) (extension.Extension, error) {
	return newEchoExtension(set, cfg.(*Config))
}
