// Package echostoreexporter is the `duckdb` exporter: it turns OTLP logs and metrics into
// rows, one per log record or data point, and writes them into the Echo store the echo
// extension owns (DuckDB is the store's; nothing here opens a database). Its type keeps
// the name configs have always used.
package echostoreexporter

//go:generate go tool mdatagen metadata.yaml

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configretry"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"

	"github.com/fathom-gpu/fathom/exporter/echostoreexporter/internal/metadata"
)

// NewFactory returns the factory of the `duckdb` exporter.
func NewFactory() exporter.Factory {
	return exporter.NewFactory(metadata.Type, createDefaultConfig,
		exporter.WithLogs(createLogs, metadata.LogsStability),
		exporter.WithMetrics(createMetrics, metadata.MetricsStability))
}

// createDefaultConfig batches by items in the collector's queue, and waits for the
// write: the OTLP sender is answered only once its data is committed to DuckDB, so an
// acknowledged export survives a crash of the gateway.
func createDefaultConfig() component.Config {
	queue := exporterhelper.NewDefaultQueueConfig()
	queue.WaitForResult = true
	queue.Sizer = exporterhelper.NewDefaultBatchConfig().Sizer // items
	queue.QueueSize = 200_000
	// The store writes with two Appenders in parallel; four consumers keep both busy
	// while the next batches are converted. max_size splits a burst into several
	// batches so that the consumers share it.
	queue.NumConsumers = 4
	batch := exporterhelper.NewDefaultBatchConfig()
	batch.FlushTimeout = 50 * time.Millisecond
	batch.MinSize = 4096
	batch.MaxSize = 16_384
	queue.Batch = configoptional.Some(batch)
	// No retry inside the gateway: the sender is waiting for this write's result and
	// holds the data, so a failed batch goes straight back to it (Unavailable, HTTP
	// 503) and it sends the batch again. Retrying here held the sender past its own
	// timeout, after which it resent the batch while this copy was still being
	// retried, and both were stored once the disk had room again.
	retry := configretry.NewDefaultBackOffConfig()
	retry.Enabled = false
	return &Config{
		TimeoutConfig: exporterhelper.NewDefaultTimeoutConfig(),
		QueueConfig:   configoptional.Some(queue),
		RetryConfig:   retry,
		Store:         component.MustNewID("echo"),
	}
}

func createLogs(ctx context.Context, set exporter.Settings, cfg component.Config) (exporter.Logs, error) {
	c := cfg.(*Config)
	e, err := newDuckDBExporter(c, set)
	if err != nil {
		return nil, err
	}
	return exporterhelper.NewLogs(ctx, set, cfg, e.pushLogs, options(c, e)...)
}

func createMetrics(ctx context.Context, set exporter.Settings, cfg component.Config) (exporter.Metrics, error) {
	c := cfg.(*Config)
	e, err := newDuckDBExporter(c, set)
	if err != nil {
		return nil, err
	}
	return exporterhelper.NewMetrics(ctx, set, cfg, e.pushMetrics, options(c, e)...)
}

func options(c *Config, e *duckdbExporter) []exporterhelper.Option {
	return []exporterhelper.Option{
		exporterhelper.WithStart(e.start),
		exporterhelper.WithTimeout(c.TimeoutConfig),
		exporterhelper.WithQueue(c.QueueConfig),
		exporterhelper.WithRetry(c.RetryConfig),
		exporterhelper.WithCapabilities(consumer.Capabilities{MutatesData: false}),
	}
}
