// Package echostdio is MCP on a command's stdin and stdout, for an agent that starts
// its MCP servers as commands (`fathom mcp`): either the Echo tools served over a
// private copy of a store file, or a relay to a running collector's Echo socket.
package echostdio

import (
	"context"
	"io"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/fathom-gpu/fathom/internal/echoapi"
	"github.com/fathom-gpu/fathom/internal/echotools"
)

// ServeStoreCopy serves the Echo tools over MCP on stdin/stdout, on a private copy of a
// store file: `fathom mcp --db FILE` for offline investigation of a file copied off a
// gateway. The copy (file and WAL) is migrated and queried; the original is never
// opened, so it may belong to a running gateway. audit receives the tool-call lines,
// logger the details of internal errors, which the agent is told only as "internal
// error".
func ServeStoreCopy(ctx context.Context, dbPath, ratesFile, version string, audit io.Writer, logger *zap.Logger) error {
	local, err := echotools.OpenLocal(ctx, dbPath, ratesFile)
	if err != nil {
		return err
	}
	defer local.Close()
	srv := echoapi.NewMCPServer(local.Registry(), version, echoapi.AllowLocal, echoapi.NewAuditLog(audit, nil, nil), logger)
	return srv.Run(ctx, &mcp.StdioTransport{})
}
