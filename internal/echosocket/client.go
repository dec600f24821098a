package echosocket

import (
	"context"
	"net"
	"net/http"
)

// MCPEndpoint is the URL of /mcp as an HTTPClient reaches it: the host is only a name,
// the socket is where every request goes.
const MCPEndpoint = "http://fathom-echo/mcp"

// HTTPClient sends every request to the Echo API on the Unix socket at path, whatever
// the URL's host (use MCPEndpoint or http://fathom-echo/api/v1/...).
func HTTPClient(path string) *http.Client {
	dialer := &net.Dialer{}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", path)
		},
		DisableCompression: true,
	}}
}
