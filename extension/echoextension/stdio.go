package echoextension

import (
	"context"
	"encoding/json"
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
	lt, err := OpenLocalTools(ctx, dbPath, ratesFile)
	if err != nil {
		return err
	}
	defer lt.Close()
	srv := api.NewMCPServer(lt.reg, version, api.AllowLocal, api.NewAuditLog(audit, nil, nil))
	return srv.Run(ctx, &mcp.StdioTransport{})
}

// LocalTools are the Echo tools over a private copy of a store file: what `fathom mcp`
// serves and `fathom explain --db` asks.
type LocalTools struct {
	dir string
	st  *store.Store
	reg *tools.Registry
}

// OpenLocalTools copies the store file (and its WAL) aside, opens and migrates the
// copy, and builds the tools over it. The original is never opened, so it may belong to
// a running gateway.
func OpenLocalTools(ctx context.Context, dbPath, ratesFile string) (*LocalTools, error) {
	if _, err := os.Stat(dbPath); err != nil {
		return nil, fmt.Errorf("store file: %w", err)
	}
	dir, err := os.MkdirTemp("", "fathom-tools-")
	if err != nil {
		return nil, err
	}
	lt := &LocalTools{dir: dir}
	fail := func(err error) (*LocalTools, error) { lt.Close(); return nil, err }
	copyPath := filepath.Join(dir, filepath.Base(dbPath))
	if err := copyFile(dbPath, copyPath); err != nil {
		return fail(err)
	}
	if _, err := os.Stat(dbPath + ".wal"); err == nil {
		if err := copyFile(dbPath+".wal", copyPath+".wal"); err != nil {
			return fail(err)
		}
	}
	if lt.st, err = store.Open(ctx, store.Options{Path: copyPath}); err != nil {
		return fail(err)
	}
	cfg := createDefaultConfig().(*Config)
	cfg.RatesFile = ratesFile
	env, err := newToolsEnv(cfg, lt.st)
	if err != nil {
		return fail(err)
	}
	if lt.reg, err = tools.NewRegistry(env); err != nil {
		return fail(err)
	}
	return lt, nil
}

// Call runs one tool with its JSON arguments and answers its JSON result.
func (lt *LocalTools) Call(ctx context.Context, tool string, args map[string]any) (json.RawMessage, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	out, err := lt.reg.Call(ctx, tool, raw)
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

// Close closes the copy and removes it.
func (lt *LocalTools) Close() {
	if lt.st != nil {
		lt.st.Close()
	}
	os.RemoveAll(lt.dir)
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
