// Program fathom is the Fathom OpenTelemetry Collector distribution: the collector
// command of any otelcol (run with --config, validate, components) built from the
// ocb-generated component list in components.go, plus Fathom's own subcommands.
package main

import (
	"os"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/confmap/provider/httpprovider"
	"go.opentelemetry.io/collector/confmap/provider/httpsprovider"
	"go.opentelemetry.io/collector/confmap/provider/yamlprovider"
	"go.opentelemetry.io/collector/otelcol"

	"github.com/fathom-gpu/fathom/internal/startpages"
)

// version is the distribution version; builder-config.yaml's dist.version must match
// (main_test.go checks), and release builds may override it with -ldflags -X.
var version = "0.1.0"

// providerModules names the module of each config provider for `fathom components`;
// they are the providers listed in builder-config.yaml.
var providerModules = map[string]string{
	"env":   "go.opentelemetry.io/collector/confmap/provider/envprovider v1.68.0",
	"file":  "go.opentelemetry.io/collector/confmap/provider/fileprovider v1.68.0",
	"http":  "go.opentelemetry.io/collector/confmap/provider/httpprovider v1.68.0",
	"https": "go.opentelemetry.io/collector/confmap/provider/httpsprovider v1.68.0",
	"yaml":  "go.opentelemetry.io/collector/confmap/provider/yamlprovider v1.68.0",
}

func collectorSettings() otelcol.CollectorSettings {
	return otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "fathom",
			Description: "Fathom - finds why GPU clusters are slow, from the kernel, as OTLP",
			Version:     version,
		},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{
					envprovider.NewFactory(),
					fileprovider.NewFactory(),
					httpprovider.NewFactory(),
					httpsprovider.NewFactory(),
					yamlprovider.NewFactory(),
				},
			},
		},
		ProviderModules: providerModules,
	}
}

// newRootCommand is the stock collector command with Fathom's subcommands added, so
// `fathom --config`, `fathom validate` and `fathom components` behave as in any otelcol.
func newRootCommand() *cobra.Command {
	root := otelcol.NewCommand(collectorSettings())
	for _, sub := range fathomSubcommands() {
		root.AddCommand(sub)
	}
	return root
}

func main() {
	// Whatever role this process takes, the pages that C++ and Go initialisation
	// touched before main are mostly never used again (startpages says why); a
	// failure only leaves them resident.
	_, _ = startpages.Release()
	if err := newRootCommand().Execute(); err != nil {
		// cobra has already printed the error.
		os.Exit(1)
	}
}
