// Package nodeidentityprocessor is the gateway's `nodeidentity` processor: a node speaks
// only for itself. A request that came with a node's client certificate (named by the
// nodecert extension on the OTLP listener) may carry data for the host the
// certificate's Common Name names and no other: a resource naming another host.name
// refuses the whole request (PermissionDenied, counted), and a resource that names no
// host is stamped with the certificate's. Requests without a client certificate
// (plaintext) and certificates shared by every node pass as sent. See docs/security.md.
package nodeidentityprocessor

//go:generate go tool mdatagen metadata.yaml

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"

	"github.com/fathom-gpu/fathom/processor/nodeidentityprocessor/internal/metadata"
)

// NewFactory returns the factory of the `nodeidentity` processor.
func NewFactory() processor.Factory {
	return processor.NewFactory(metadata.Type, func() component.Config { return createDefaultConfig() },
		processor.WithMetrics(createMetrics, metadata.MetricsStability),
		processor.WithLogs(createLogs, metadata.LogsStability))
}

func createMetrics(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Metrics) (processor.Metrics, error) {
	c, err := newChecker(cfg.(*Config), set)
	if err != nil {
		return nil, err
	}
	return processorhelper.NewMetrics(ctx, set, cfg, next, c.processMetrics,
		processorhelper.WithShutdown(c.shutdown),
		processorhelper.WithCapabilities(consumer.Capabilities{MutatesData: true}))
}

func createLogs(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Logs) (processor.Logs, error) {
	c, err := newChecker(cfg.(*Config), set)
	if err != nil {
		return nil, err
	}
	return processorhelper.NewLogs(ctx, set, cfg, next, c.processLogs,
		processorhelper.WithShutdown(c.shutdown),
		processorhelper.WithCapabilities(consumer.Capabilities{MutatesData: true}))
}
