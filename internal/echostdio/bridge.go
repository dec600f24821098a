package echostdio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fathom-gpu/fathom/internal/echosocket"
)

// BridgeToSocket relays MCP between stdin/stdout and the /mcp endpoint of a running
// collector's Echo socket: `fathom mcp --socket PATH`, for an agent that starts its MCP
// servers as commands and should see the live store, not a copy of it. Messages pass
// as they are; the collector audits each tool call. It returns when stdin ends or the
// collector goes away.
func BridgeToSocket(ctx context.Context, socketPath string, stdin io.Reader, stdout io.Writer) error {
	if st, err := os.Stat(socketPath); err != nil {
		return fmt.Errorf("the Echo socket: %w (is the standalone collector running, with echo's server.unix_socket.path set to it?)", err)
	} else if st.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("%s is not a socket", socketPath)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	remote, err := (&mcp.StreamableClientTransport{
		Endpoint: echosocket.MCPEndpoint, HTTPClient: echosocket.HTTPClient(socketPath),
		// The collector's /mcp is stateless: it sends nothing unasked.
		DisableStandaloneSSE: true,
	}).Connect(ctx)
	if err != nil {
		return fmt.Errorf("the Echo socket %s: %w", socketPath, err)
	}
	defer remote.Close()
	local, err := (&mcp.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}}).Connect(ctx)
	if err != nil {
		return err
	}
	defer local.Close()

	errs := make(chan error, 2)
	go func() { errs <- relay(ctx, local, remote, socketPath) }()
	go func() { errs <- relay(ctx, remote, local, socketPath) }()
	err = <-errs
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// relay copies messages from one side to the other until either side ends. A call the
// collector could not be asked is answered with an error, so the agent hears why
// instead of waiting.
func relay(ctx context.Context, from, to mcp.Connection, socketPath string) error {
	for {
		msg, err := from.Read(ctx)
		if err != nil {
			return err
		}
		if err := to.Write(ctx, msg); err != nil {
			if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
				_ = from.Write(ctx, &jsonrpc.Response{ID: req.ID,
					Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("the Echo socket %s: %v", socketPath, err)}})
			}
			return err
		}
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
