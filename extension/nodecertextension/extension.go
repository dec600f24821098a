package nodecertextension

import (
	"context"
	"net/http"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension/extensionmiddleware"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/fathom-gpu/fathom/internal/nodeidentity"
)

type nodeCert struct{}

var (
	_ extensionmiddleware.HTTPServer = nodeCert{}
	_ extensionmiddleware.GRPCServer = nodeCert{}
)

func (nodeCert) Start(context.Context, component.Host) error { return nil }
func (nodeCert) Shutdown(context.Context) error              { return nil }

// GetHTTPHandler names the node of an OTLP/HTTP request from its connection's TLS state.
func (nodeCert) GetHTTPHandler(context.Context) (extensionmiddleware.WrapHTTPHandlerFunc, error) {
	return func(_ context.Context, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if node, ok := nodeidentity.FromTLS(r.TLS); ok {
				r = r.WithContext(nodeidentity.NewContext(r.Context(), node))
			}
			next.ServeHTTP(w, r)
		}), nil
	}, nil
}

// GetGRPCServerOptions names the node of an OTLP/gRPC export from its peer's TLS state.
// OTLP's exports are unary calls.
func (nodeCert) GetGRPCServerOptions(context.Context) ([]grpc.ServerOption, error) {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if p, ok := peer.FromContext(ctx); ok {
			if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
				if node, ok := nodeidentity.FromTLS(&info.State); ok {
					ctx = nodeidentity.NewContext(ctx, node)
				}
			}
		}
		return handler(ctx, req)
	})}, nil
}
