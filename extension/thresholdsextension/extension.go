package thresholdsextension

import (
	"context"
	"errors"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/extensionmiddleware"

	"github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/gateway"
	"github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/metadata"
	"github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/node"
	"github.com/fathom-gpu/fathom/internal/pushback"
)

// thresholds is the component: the gateway's side and the node's side, each its own
// type, both built here because a config names `thresholds` alike on either end (no key
// says which). Nothing asks which side it is on: the collector calls only the hooks of
// the side a config wires it to, a receiver's `middlewares` the Publisher's server
// middleware, an exporter's `middlewares` the Subscriber's client middleware, the node's
// straggler processor the Subscriber's lines. The side left unwired holds empty maps and
// starts nothing (its fallback needs an endpoint).
type thresholds struct {
	*gateway.Publisher
	*node.Subscriber
}

var (
	_ extension.Extension            = (*thresholds)(nil)
	_ extensionmiddleware.HTTPServer = (*thresholds)(nil)
	_ extensionmiddleware.GRPCServer = (*thresholds)(nil)
	_ extensionmiddleware.HTTPClient = (*thresholds)(nil)
	_ extensionmiddleware.GRPCClient = (*thresholds)(nil)
	_ pushback.Source                = (*thresholds)(nil)
	_ pushback.Clock                 = (*thresholds)(nil)
	_ pushback.Reachability          = (*thresholds)(nil)
)

func newThresholds(cfg *Config, set extension.Settings) (*thresholds, error) {
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	return &thresholds{
		Publisher:  gateway.NewPublisher(cfg.gatewaySettings(), set.TelemetrySettings, tb),
		Subscriber: node.NewSubscriber(cfg.nodeSettings(), set.TelemetrySettings, tb),
	}, nil
}

// Start opens the gateway's GET fallback and starts the node's poller, where configured.
func (e *thresholds) Start(ctx context.Context, host component.Host) error {
	if err := e.Publisher.Start(ctx, host); err != nil {
		return err
	}
	if err := e.Subscriber.Start(ctx, host); err != nil {
		return errors.Join(err, e.Publisher.Shutdown(ctx))
	}
	return nil
}

func (e *thresholds) Shutdown(ctx context.Context) error {
	return errors.Join(e.Subscriber.Shutdown(ctx), e.Publisher.Shutdown(ctx))
}
