package gpuebpfreceiver

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"

	"github.com/fathom-gpu/fathom/receiver/gpuebpfreceiver/internal/metadata"
)

// NewFactory creates the gpuebpf receiver factory.
func NewFactory() receiver.Factory {
	return receiver.NewFactory(
		metadata.Type,
		func() component.Config { return createDefaultConfig() },
		receiver.WithMetrics(createMetrics, metadata.MetricsStability),
		receiver.WithLogs(createLogs, metadata.LogsStability),
	)
}

func createMetrics(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Metrics) (receiver.Metrics, error) {
	c := sharedController(cfg.(*Config), set)
	c.mu.Lock()
	c.metrics = next
	c.mu.Unlock()
	return &signalReceiver{c: c}, nil
}

func createLogs(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Logs) (receiver.Logs, error) {
	c := sharedController(cfg.(*Config), set)
	c.mu.Lock()
	c.logs = next
	c.mu.Unlock()
	return &signalReceiver{c: c}, nil
}
