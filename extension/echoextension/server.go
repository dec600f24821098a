package echoextension

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"

	"github.com/fathom-gpu/fathom/extension/echoextension/internal/store"
)

type apiServer struct{}

func newAPIServer(context.Context, *Config, *store.Store, extension.Settings, component.Host) (*apiServer, error) {
	return &apiServer{}, nil
}

func (*apiServer) shutdown(context.Context) error { return nil }
