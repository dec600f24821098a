// Package nodeidentity carries the node that a request's client certificate names, from
// the gateway's OTLP listeners (the nodecert extension) to what checks the request's
// data against it (the nodeidentity processor). It rides in the collector's own
// client.Info, as the auth data of the request, so other components can read it too
// (`auth.fathom.node`).
package nodeidentity

import (
	"context"
	"crypto/tls"

	"go.opentelemetry.io/collector/client"
)

// AuthAttribute is the name of the node in the request's client.Info auth data.
const AuthAttribute = "fathom.node"

// FromTLS is the node that a verified client certificate names: the Common Name of the
// leaf of its first verified chain. A connection without a verified client certificate
// (plaintext, or TLS that did not ask for one) names none.
func FromTLS(state *tls.ConnectionState) (string, bool) {
	if state == nil || len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return "", false
	}
	cn := state.VerifiedChains[0][0].Subject.CommonName
	return cn, cn != ""
}

// NewContext records node as the request's authenticated node, keeping the rest of the
// request's client.Info.
func NewContext(ctx context.Context, node string) context.Context {
	info := client.FromContext(ctx)
	info.Auth = authData(node)
	return client.NewContext(ctx, info)
}

// FromContext is the node the request's certificate named, if it named one.
func FromContext(ctx context.Context) (string, bool) {
	auth := client.FromContext(ctx).Auth
	if auth == nil {
		return "", false
	}
	node, ok := auth.GetAttribute(AuthAttribute).(string)
	return node, ok && node != ""
}

type authData string

func (a authData) GetAttribute(name string) any {
	if name == AuthAttribute {
		return string(a)
	}
	return nil
}

func (authData) GetAttributeNames() []string { return []string{AuthAttribute} }
