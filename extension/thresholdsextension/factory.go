// Package thresholdsextension is the `thresholds` extension: the push-back half of the
// straggler loop. As server middleware on the gateway's otlp receiver it writes the
// current straggler thresholds of the cohorts in each export into the answer; as client
// middleware on a node's otlp exporter it reads them from every answer and holds them,
// until their TTL, for the node's straggler processor. Where an answer arrives without
// them, a GET fallback does the same: the gateway serves each cohort's lines over HTTP,
// and the node polls it, with jitter, for the cohorts push-back does not bring. See
// docs/straggler.md.
//
// Each side is its own type in its own package: internal/gateway (server middleware, GET
// fallback) and internal/node (client middleware, clock exchange, poller). This package
// holds what configs name: the `thresholds` type, its config, and the extension that
// hands each side its part of that config.
package thresholdsextension

//go:generate go tool mdatagen metadata.yaml

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"

	"github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/metadata"
)

// NewFactory returns the factory of the `thresholds` extension.
func NewFactory() extension.Factory {
	return extension.NewFactory(metadata.Type, func() component.Config { return createDefaultConfig() },
		func(_ context.Context, set extension.Settings, cfg component.Config) (extension.Extension, error) {
			return newThresholds(cfg.(*Config), set)
		}, metadata.ExtensionStability)
}
