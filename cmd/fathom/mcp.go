package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fathom-gpu/fathom/internal/echostdio"
)

// mcpCommand is `fathom mcp --db FILE`: the Echo tools over MCP on stdio, on a copy of
// a store file, for an agent on a laptop with no gateway in reach; or `fathom mcp
// --socket PATH`: MCP on stdio relayed to a running standalone collector's Echo
// socket, so the agent sees the live store.
func mcpCommand() *cobra.Command {
	var db, rates, socket string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the Echo tools over MCP (stdio): on a copy of a store file, or a live collector's socket",
		Long: "With --db FILE: serves the same tools, prompt and schema resource as the gateway's /mcp,\n" +
			"over stdio, on a private copy of FILE (the original is not opened, so it may be a live\n" +
			"gateway's). Tool calls are audited to stderr.\n" +
			"With --socket PATH: relays MCP between stdio and /mcp on the Unix socket of a running\n" +
			"collector's echo extension (server.unix_socket.path, deploy/configs/standalone.yaml):\n" +
			"the live store; the collector audits the calls.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case db != "" && socket != "":
				return fmt.Errorf("--db and --socket are two ways to reach a store: give one")
			case socket != "":
				if rates != "" {
					return fmt.Errorf("--rates applies to --db only: with --socket the collector's own rates_file prices get_cost")
				}
				return echostdio.BridgeToSocket(cmd.Context(), socket, os.Stdin, os.Stdout)
			case db == "":
				return fmt.Errorf("--db FILE (a store file to investigate) or --socket PATH (a running standalone collector's Echo socket) is required")
			}
			return echostdio.ServeStoreCopy(cmd.Context(), db, rates, version, os.Stderr, stderrLogger())
		},
	}
	cmd.Flags().StringVar(&db, "db", "", "Echo store file (DuckDB) to serve a copy of")
	cmd.Flags().StringVar(&socket, "socket", "", "Unix socket of a running collector's Echo API (e.g. /run/fathom/echo.sock)")
	cmd.Flags().StringVar(&rates, "rates", "", "GPU-hour rates file for get_cost (YAML)")
	return cmd
}

// stderrLogger writes JSON lines to stderr, beside the audit lines: stdout is the MCP
// stream, and stderr is where an agent's MCP host keeps a server's diagnostics.
func stderrLogger() *zap.Logger {
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.Lock(os.Stderr), zapcore.InfoLevel))
}
