package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/fathom-gpu/fathom/internal/timeline"
)

// timelineCommand is `fathom timeline`: a window of the Echo store as a Chrome/Perfetto
// trace file, asked of the get_timeline tool of a store file's copy or of a gateway.
func timelineCommand() *cobra.Command {
	var db, gateway, tokenFile, caFile, since, until, out, cluster, node string
	var maxEvents int
	cmd := &cobra.Command{
		Use:   "timeline",
		Short: "Write a window of the Echo store as a Perfetto/Chrome trace (trace.json)",
		Long: "Asks the get_timeline Echo tool (of a copy of a store file, or of a gateway over HTTPS) for the window\n" +
			"as a Chrome trace-event JSON file: a process per node, a track per rank (straggler flags) and per\n" +
			"CUDA-calling thread (recorded calls and collectives as slices, causal chains as instants), collectives\n" +
			"tied across ranks by flows, off-CPU share as counters. Open it in ui.perfetto.dev or chrome://tracing.\n" +
			"At most --max-events events; what was left out is counted on stderr and in the trace's metadata.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (db == "") == (gateway == "") {
				return fmt.Errorf("name one of --db FILE (a store file) or --gateway URL (a gateway's Echo API)")
			}
			if out == "" {
				return fmt.Errorf("name the trace file: -o trace.json (or -o - for stdout)")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			caller, closeCaller, err := openCaller(ctx, db, "", gateway, tokenFile, caFile)
			if err != nil {
				return err
			}
			defer closeCaller()
			args := map[string]any{"since": since, "max_events": maxEvents}
			for k, v := range map[string]string{"until": until, "cluster": cluster, "node": node} {
				if v != "" {
					args[k] = v
				}
			}
			raw, err := caller.Call(ctx, "get_timeline", args)
			if err != nil {
				return fmt.Errorf("get_timeline: %w", err)
			}
			var trace struct {
				Events   []json.RawMessage `json:"traceEvents"`
				Metadata timeline.Metadata `json:"metadata"`
			}
			if err := json.Unmarshal(raw, &trace); err != nil {
				return fmt.Errorf("get_timeline answered what this fathom cannot read: %w", err)
			}
			if err := writeTrace(out, raw, cmd.OutOrStdout()); err != nil {
				return err
			}
			summarizeTrace(cmd.ErrOrStderr(), out, len(trace.Events), trace.Metadata)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&db, "db", "", "Echo store file (DuckDB) to read a copy of")
	f.StringVar(&gateway, "gateway", "", "a gateway's Echo API, e.g. https://fathom-gateway:8765")
	f.StringVar(&tokenFile, "token-file", "", "file holding the gateway's bearer token (else FATHOM_ECHO_TOKEN)")
	f.StringVar(&caFile, "ca", "", "CA certificate (PEM) that signed the gateway's certificate, when not a system one")
	f.StringVar(&since, "since", "5m", "window start: a duration before --until (5m, 1h) or an RFC 3339 time")
	f.StringVar(&until, "until", "", "window end (exclusive), RFC 3339; default now")
	f.StringVarP(&out, "output", "o", "", "trace file to write (- for stdout)")
	f.StringVar(&cluster, "cluster", "", "only this cluster")
	f.StringVar(&node, "node", "", "only this node")
	f.IntVar(&maxEvents, "max-events", timeline.DefaultMaxEvents, "at most this many slices, instants, counter samples and flow events (1 to 50000)")
	return cmd
}

// writeTrace writes the tool's answer as it came: it is the trace file. A file is
// written beside its final name and renamed, so a reader never opens half a trace.
func writeTrace(path string, raw []byte, stdout io.Writer) error {
	if path == "-" {
		_, err := stdout.Write(append(raw, '\n'))
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".fathom-timeline-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// summarizeTrace says on stderr what the trace holds and what the bound left out.
func summarizeTrace(w io.Writer, path string, events int, m timeline.Metadata) {
	k := m.Kept
	fmt.Fprintf(w, "fathom timeline: %s to %s: %d nodes, %d tracks, %d events -> %s\n", m.Since, m.Until, m.Nodes, m.Tracks, events, path)
	fmt.Fprintf(w, "  %d CUDA calls, %d NCCL calls, %d collective slices (%d flow events), %d straggler flags, %d stalls, %d causal chains, %d off-CPU samples\n",
		k.CUDACalls, k.NCCLCalls, k.Collectives, k.CollectiveFlows, k.StragglerFlags, k.Stalls, k.Chains, k.OffCPUSamples)
	if m.LeftOutTotal > 0 {
		l := m.LeftOut
		fmt.Fprintf(w, "  left out %d past max_events %d: %d CUDA calls, %d NCCL calls, %d collective slices, %d flow events, %d straggler flags, %d stalls, %d causal chains, %d off-CPU samples\n",
			m.LeftOutTotal, m.MaxEvents, l.CUDACalls, l.NCCLCalls, l.Collectives, l.CollectiveFlows, l.StragglerFlags, l.Stalls, l.Chains, l.OffCPUSamples)
	}
	if path != "-" {
		fmt.Fprintf(w, "  open it in https://ui.perfetto.dev (Open trace file) or chrome://tracing\n")
	}
}
