package echoextension

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fathom-gpu/fathom/extension/echoextension/internal/api"
	"github.com/fathom-gpu/fathom/extension/echoextension/internal/store"
	"github.com/fathom-gpu/fathom/extension/echoextension/internal/tools"
)

// ServeMCPStdio serves the Echo tools over MCP on stdin/stdout, on a private copy of a
// store file: `fathom mcp --db FILE` for offline investigation of a file copied off a
// gateway. The copy (file and WAL) is migrated and queried; the original is never
// opened, so it may belong to a running gateway. audit receives the tool-call lines.
func ServeMCPStdio(ctx context.Context, dbPath, ratesFile, version string, audit io.Writer) error {
	if _, err := os.Stat(dbPath); err != nil {
		return fmt.Errorf("store file: %w", err)
	}
	dir, err := os.MkdirTemp("", "fathom-mcp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	copyPath := filepath.Join(dir, filepath.Base(dbPath))
	if err := copyFile(dbPath, copyPath); err != nil {
		return err
	}
	if _, err := os.Stat(dbPath + ".wal"); err == nil {
		if err := copyFile(dbPath+".wal", copyPath+".wal"); err != nil {
			return err
		}
	}
	st, err := store.Open(ctx, store.Options{Path: copyPath})
	if err != nil {
		return err
	}
	defer st.Close()
	cfg := createDefaultConfig().(*Config)
	cfg.RatesFile = ratesFile
	env, err := newToolsEnv(cfg, st)
	if err != nil {
		return err
	}
	reg, err := tools.NewRegistry(env)
	if err != nil {
		return err
	}
	srv := api.NewMCPServer(reg, version, api.AllowLocal, api.NewAuditLog(audit, nil, nil))
	return srv.Run(ctx, &mcp.StdioTransport{})
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", from, err)
	}
	return out.Close()
}
