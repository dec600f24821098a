// Package stragglerprocessor is the gateway's `straggler` processor: it compares the
// ranks of each cohort (a communicator, or a job) on per-rank signals the nodes send,
// with a median and MAD line, a warm-up and persistence, and writes per-rank gauges and
// a fathom.straggler record whenever a rank becomes a straggler, falls silent, or is
// back within its cohort. See docs/straggler.md.
package stragglerprocessor

//go:generate go tool mdatagen metadata.yaml

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"

	"github.com/fathom-gpu/fathom/internal/sharedinstance"
	"github.com/fathom-gpu/fathom/processor/stragglerprocessor/internal/metadata"
)

// NewFactory returns the factory of the `straggler` processor.
func NewFactory() processor.Factory {
	return processor.NewFactory(metadata.Type, func() component.Config { return createDefaultConfig() },
		processor.WithMetrics(createMetrics, metadata.MetricsStability),
		processor.WithLogs(createLogs, metadata.LogsStability))
}

// instances holds one straggler per component ID, so that the metrics and logs
// pipelines naming `straggler` share its cohorts; the last Shutdown removes it.
var instances sharedinstance.Map[*straggler]

func acquire(set processor.Settings, cfg *Config) (*straggler, error) {
	return instances.Acquire(set.ID, func() (*straggler, error) { return newStraggler(cfg, set) })
}

func release(id component.ID) { instances.Release(id) }

func createMetrics(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Metrics) (processor.Metrics, error) {
	s, err := acquire(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.metricsNext = next
	s.mu.Unlock()
	return processorhelper.NewMetrics(ctx, set, cfg, next, s.processMetrics,
		processorhelper.WithStart(s.start),
		processorhelper.WithShutdown(func(ctx context.Context) error {
			defer release(set.ID)
			return s.shutdown(ctx)
		}),
		processorhelper.WithCapabilities(consumer.Capabilities{MutatesData: false}))
}

func createLogs(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Logs) (processor.Logs, error) {
	s, err := acquire(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.logsNext = next
	s.mu.Unlock()
	// Logs pass through untouched; the records this processor writes join them.
	return processorhelper.NewLogs(ctx, set, cfg, next, s.processLogs,
		processorhelper.WithStart(s.start),
		processorhelper.WithShutdown(func(ctx context.Context) error {
			defer release(set.ID)
			return s.shutdown(ctx)
		}),
		processorhelper.WithCapabilities(consumer.Capabilities{MutatesData: false}))
}
