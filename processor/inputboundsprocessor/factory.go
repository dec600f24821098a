// Package inputboundsprocessor is the gateway's `inputbounds` processor: it bounds what
// one OTLP record or point may carry (attribute value length, attributes per resource,
// scope, record and point, histogram buckets) and drops the points that cannot be right
// (histograms whose counts do not add up, NaN or ±Inf where a signal must be finite).
// What it cuts is counted by reason and noted on the record or point it cut; everything
// else passes on as sent. See docs/security.md.
package inputboundsprocessor

//go:generate go tool mdatagen metadata.yaml

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"

	"github.com/fathom-gpu/fathom/processor/inputboundsprocessor/internal/metadata"
)

// NewFactory returns the factory of the `inputbounds` processor.
func NewFactory() processor.Factory {
	return processor.NewFactory(metadata.Type, func() component.Config { return createDefaultConfig() },
		processor.WithMetrics(createMetrics, metadata.MetricsStability),
		processor.WithLogs(createLogs, metadata.LogsStability))
}

func createMetrics(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Metrics) (processor.Metrics, error) {
	b, err := newBounds(cfg.(*Config), set)
	if err != nil {
		return nil, err
	}
	return processorhelper.NewMetrics(ctx, set, cfg, next, b.processMetrics,
		processorhelper.WithShutdown(b.shutdown),
		processorhelper.WithCapabilities(consumer.Capabilities{MutatesData: true}))
}

func createLogs(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Logs) (processor.Logs, error) {
	b, err := newBounds(cfg.(*Config), set)
	if err != nil {
		return nil, err
	}
	return processorhelper.NewLogs(ctx, set, cfg, next, b.processLogs,
		processorhelper.WithShutdown(b.shutdown),
		processorhelper.WithCapabilities(consumer.Capabilities{MutatesData: true}))
}
