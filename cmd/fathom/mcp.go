package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/fathom-gpu/fathom/extension/echoextension"
)

// mcpCommand is `fathom mcp --db FILE`: the Echo tools over MCP on stdio, on a copy of
// a store file, for an agent on a laptop with no gateway in reach.
func mcpCommand() *cobra.Command {
	var db, rates string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the Echo tools over MCP (stdio) on a copy of a store file",
		Long: "Serves the same tools, prompt and schema resource as the gateway's /mcp, over stdio,\n" +
			"on a private copy of FILE (the original is not opened, so it may be a live gateway's).\n" +
			"Tool calls are audited to stderr.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if db == "" {
				return fmt.Errorf("--db FILE is required: the Echo store file to investigate")
			}
			return echoextension.ServeMCPStdio(cmd.Context(), db, rates, version, os.Stderr)
		},
	}
	cmd.Flags().StringVar(&db, "db", "", "Echo store file (DuckDB) to serve a copy of")
	cmd.Flags().StringVar(&rates, "rates", "", "GPU-hour rates file for get_cost (YAML)")
	return cmd
}
