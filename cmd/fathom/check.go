package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fathom-gpu/fathom/internal/nodecheck"
)

// checkCommand is `fathom check`: can this node run the gpuebpf receiver, and if not, why.
func checkCommand() *cobra.Command {
	var asJSON bool
	var procRoot string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check that this node can run the gpuebpf receiver: kernel, BTF, privileges, BPF load, GPU libraries",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			report := nodecheck.Run(procRoot)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(report); err != nil {
					return err
				}
			} else {
				fmt.Fprint(cmd.OutOrStdout(), report.Text())
			}
			if !report.Ready {
				cmd.SilenceUsage = true
				return fmt.Errorf("node is not ready for the gpuebpf receiver")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().StringVar(&procRoot, "proc-root", "/proc", "where the host's /proc is mounted")
	return cmd
}
