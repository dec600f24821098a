//go:build linux

package gpuebpfreceiver_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
)

// nodeConfig is the YAML of a node collector as the end-to-end tests run it: the
// gpuebpf receiver, configured by receiverYAML (its lines, unindented), feeding an OTLP
// exporter to the test's sink (${env:SINK}) with metrics and, if withLogs, logs; a
// health check (${env:HEALTH}) says when it is up.
func nodeConfig(receiverYAML string, withLogs bool) string {
	var receiver strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(receiverYAML), "\n") {
		receiver.WriteString("    " + line + "\n")
	}
	pipelines := `
    metrics:
      receivers: [gpuebpf]
      exporters: [otlp_grpc]`
	if withLogs {
		pipelines += `
    logs:
      receivers: [gpuebpf]
      exporters: [otlp_grpc]`
	}
	return `
extensions:
  health_check:
    endpoint: ${env:HEALTH}
receivers:
  gpuebpf:
` + receiver.String() + `exporters:
  otlp_grpc:
    endpoint: ${env:SINK}
    tls:
      insecure: true
service:
  extensions: [health_check]
  telemetry:
    metrics:
      level: none
  pipelines:` + pipelines + "\n"
}

// startNodeCollector runs the collector binary on config (see nodeConfig), with env
// added to its environment, and waits until its health check answers.
func startNodeCollector(t testing.TB, config string, env ...string) (*collectortest.Sink, *collectortest.Process) {
	t.Helper()
	sink := collectortest.StartSink(t)
	cfg := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	health := collectortest.Addr(t)
	col := collectortest.Start(t, cfg, append([]string{"SINK=" + sink.Addr, "HEALTH=" + health}, env...)...)
	col.WaitHTTP(t, "http://"+health+"/", 60*time.Second)
	return sink, col
}
