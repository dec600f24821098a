package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fathom-gpu/fathom/internal/echotools"
	"github.com/fathom-gpu/fathom/internal/explain"
)

// explainCommand is `fathom explain`: the open causal chains, the stragglers and what
// they cost, and the slowest calls, in the terminal, from a store file or a gateway.
func explainCommand() *cobra.Command {
	var db, gateway, tokenFile, caFile, since, rates string
	var lines int
	var color string
	cmd := &cobra.Command{
		Use:   "explain",
		Short: "Say in the terminal why the cluster is slow: open chains, stragglers, slowest calls",
		Long: "Asks the Echo tools (of a copy of a store file, or of a gateway over HTTPS) for the open causal\n" +
			"chains with their evidence and fix, the ranks flagged as stragglers and what they cost their peers,\n" +
			"and the slowest calls, and writes them in at most --lines lines. The gateway's token is read from\n" +
			"--token-file or FATHOM_ECHO_TOKEN (the tools scope is enough).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (db == "") == (gateway == "") {
				return fmt.Errorf("name one of --db FILE (a store file) or --gateway URL (a gateway's Echo API)")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			caller, closeCaller, err := openCaller(ctx, db, rates, gateway, tokenFile, caFile)
			if err != nil {
				return err
			}
			defer closeCaller()
			useColor := color == "always" || (color == "auto" && isTerminal(os.Stdout))
			return explain.Write(ctx, cmd.OutOrStdout(), caller, explain.Options{Since: since, MaxLines: lines, Color: useColor})
		},
	}
	f := cmd.Flags()
	f.StringVar(&db, "db", "", "Echo store file (DuckDB) to read a copy of")
	f.StringVar(&gateway, "gateway", "", "a gateway's Echo API, e.g. https://fathom-gateway:8765")
	f.StringVar(&tokenFile, "token-file", "", "file holding the gateway's bearer token (else FATHOM_ECHO_TOKEN)")
	f.StringVar(&caFile, "ca", "", "CA certificate (PEM) that signed the gateway's certificate, when not a system one")
	f.StringVar(&since, "since", "5m", "the window: a duration before now (5m, 1h) or an RFC 3339 time")
	f.StringVar(&rates, "rates", "", "GPU-hour rates file for the cost (YAML), with --db")
	f.IntVar(&lines, "lines", 50, "at most this many lines")
	f.StringVar(&color, "color", "auto", "auto (on a terminal), always or never")
	return cmd
}

// openCaller asks the Echo tools of a private copy of the store file db, or of the
// gateway's Echo API; close releases the copy.
func openCaller(ctx context.Context, db, rates, gateway, tokenFile, caFile string) (caller explain.Caller, close func(), err error) {
	if db != "" {
		local, err := echotools.OpenLocal(ctx, db, rates)
		if err != nil {
			return nil, nil, err
		}
		return local, func() { local.Close() }, nil
	}
	g, err := gatewayCaller(gateway, tokenFile, caFile)
	if err != nil {
		return nil, nil, err
	}
	return g, func() {}, nil
}

func gatewayCaller(url, tokenFile, caFile string) (explain.Gateway, error) {
	token := os.Getenv("FATHOM_ECHO_TOKEN")
	if tokenFile != "" {
		raw, err := os.ReadFile(tokenFile)
		if err != nil {
			return explain.Gateway{}, fmt.Errorf("token file: %w", err)
		}
		token = strings.TrimSpace(string(raw))
	}
	if token == "" {
		return explain.Gateway{}, fmt.Errorf("the gateway needs a token: --token-file FILE or FATHOM_ECHO_TOKEN")
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return explain.Gateway{}, fmt.Errorf("CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return explain.Gateway{}, fmt.Errorf("CA file %s holds no PEM certificate", caFile)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return explain.Gateway{URL: url, Token: token, Client: &http.Client{Transport: transport, Timeout: time.Minute}}, nil
}

// isTerminal says whether f is a character device (a terminal), not a pipe or a file.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
