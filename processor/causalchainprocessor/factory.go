// Package causalchainprocessor is the node's `causalchain` processor: per process and
// per CUDA-calling thread, over a sliding window, it joins the CUDA/NCCL call
// distributions with the host evidence of the same threads (preemption and run-queue
// waits and who took the CPU, forks, page allocations, block I/O, TCP retransmits, graph
// captures, allocations, blocking copies) and writes one fathom.causal_chain record per
// finding: severity, symptom, evidence, a short timeline, the root-cause class and a fix.
// See docs/causalchain.md.
package causalchainprocessor

//go:generate go tool mdatagen metadata.yaml

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"

	"github.com/fathom-gpu/fathom/internal/sharedinstance"
	"github.com/fathom-gpu/fathom/processor/causalchainprocessor/internal/metadata"
)

// NewFactory returns the factory of the `causalchain` processor.
func NewFactory() processor.Factory {
	return processor.NewFactory(metadata.Type, func() component.Config { return createDefaultConfig() },
		processor.WithMetrics(createMetrics, metadata.MetricsStability),
		processor.WithLogs(createLogs, metadata.LogsStability))
}

// instances holds one processor per component ID, so that the metrics pipeline (which
// reads the series) and the logs pipeline (which carries the records) share it; the
// last Shutdown removes it.
var instances sharedinstance.Map[*chains]

func acquire(set processor.Settings, cfg *Config) (*chains, error) {
	return instances.Acquire(set.ID, func() (*chains, error) { return newChains(cfg, set) })
}

func release(id component.ID) { instances.Release(id) }

func createMetrics(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Metrics) (processor.Metrics, error) {
	c, err := acquire(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	return processorhelper.NewMetrics(ctx, set, cfg, next, c.processMetrics,
		processorhelper.WithStart(c.start),
		processorhelper.WithShutdown(func(ctx context.Context) error {
			defer release(set.ID)
			return c.shutdown(ctx)
		}),
		processorhelper.WithCapabilities(consumer.Capabilities{MutatesData: true}))
}

func createLogs(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Logs) (processor.Logs, error) {
	c, err := acquire(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.logsNext = next
	c.mu.Unlock()
	// Logs pass through untouched; the records this processor writes join them.
	return processorhelper.NewLogs(ctx, set, cfg, next, c.processLogs,
		processorhelper.WithStart(c.start),
		processorhelper.WithShutdown(func(ctx context.Context) error {
			defer release(set.ID)
			return c.shutdown(ctx)
		}),
		processorhelper.WithCapabilities(consumer.Capabilities{MutatesData: false}))
}
