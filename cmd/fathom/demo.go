package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fathom-gpu/fathom/internal/bpfhost"
	"github.com/fathom-gpu/fathom/internal/demo"
)

// demoCommand is `fathom demo`: the whole story on one machine (internal/demo).
func demoCommand() *cobra.Command {
	o := demo.Options{Out: os.Stdout}
	var synthetic bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a gateway and node collectors on a fake GPU job, slow one rank, and show what Fathom finds",
		Long: "Starts a gateway (Echo store, MCP and HTTP on loopback with a printed token) and --nodes node\n" +
			"collectors, each tracing its own ranks of a fake GPU job (fakegpu-ddp) with real BPF. After a\n" +
			"healthy warm-up one rank is slowed and its dispatcher thread put under CPU contention; the\n" +
			"demo prints what the nodes and the gateway find, and the answers an agent gets over MCP.\n" +
			"Without root (or BPF) it says so and runs the nodes' receivers on made-up data instead.\n" +
			"Collector logs go to --dir. Ctrl-C stops everything it started.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if why := bpfhost.Missing(); why != "" || synthetic {
				if !synthetic {
					fmt.Fprintf(os.Stdout, "\n!!! This machine cannot run the eBPF receiver here: it needs %s.\n"+
						"!!! Falling back to the SYNTHETIC receiver: made-up ranks, the same pipeline and story.\n\n", why)
				}
				o.Synthetic = true
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			_, err := demo.Run(ctx, o)
			if err != nil && ctx.Err() != nil {
				return nil // Ctrl-C: everything was stopped
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Dir, "dir", "build/demo", "where the configs, the store, the logs and the token go")
	f.StringVar(&o.FakeGPU, "fakegpu", "build/fakegpu", "the fake GPU stack's build directory (make -C internal/fakegpu)")
	f.IntVar(&o.Nodes, "nodes", 4, "node collectors")
	f.IntVar(&o.RanksPerNode, "ranks-per-node", 2, "ranks each node traces")
	f.IntVar(&o.OTLPPort, "otlp-port", 4317, "the gateway's OTLP/gRPC port (loopback)")
	f.IntVar(&o.APIPort, "api-port", 8765, "the gateway's Echo API and MCP port (loopback)")
	f.BoolVar(&o.Short, "short", false, "a shorter warm-up, and stop once the answers are shown")
	f.BoolVar(&synthetic, "synthetic", false, "use the synthetic receiver even where BPF works")
	f.StringVar(&o.RemoteWrite, "prometheus-remote-write", "", "also send every metric to this Prometheus remote-write URL (what the Grafana dashboard reads)")
	return cmd
}
