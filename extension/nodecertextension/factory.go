// Package nodecertextension is the `nodecert` extension: server middleware for the
// gateway's OTLP receiver that names the node whose verified client certificate made
// each request (its Common Name), in the request's client.Info auth data, for the
// nodeidentity processor to check the request's host.name against. It decides nothing
// itself: the TLS listener has already verified the certificate (client_ca_file), and a
// request without one passes unnamed. See docs/security.md.
package nodecertextension

//go:generate go tool mdatagen metadata.yaml

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"

	"github.com/fathom-gpu/fathom/extension/nodecertextension/internal/metadata"
)

// Config of the nodecert extension: it has no settings; what it trusts is the
// listener's TLS configuration.
type Config struct{}

// NewFactory returns the factory of the `nodecert` extension.
func NewFactory() extension.Factory {
	return extension.NewFactory(metadata.Type, func() component.Config { return &Config{} },
		func(context.Context, extension.Settings, component.Config) (extension.Extension, error) {
			return nodeCert{}, nil
		}, metadata.ExtensionStability)
}
