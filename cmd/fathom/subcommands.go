package main

import "github.com/spf13/cobra"

// fathomSubcommands are the commands Fathom adds to the stock collector command.
func fathomSubcommands() []*cobra.Command {
	return []*cobra.Command{checkCommand(), mcpCommand(), demoCommand(), explainCommand(), timelineCommand()}
}
