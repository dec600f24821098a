package echoextension

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
)

const tlsGatewayYAML = `
extensions:
  echo:
    path: ${env:ECHO_DB}
    server:
      endpoint: ${env:ECHO_ADDR}
      tls:
        cert_file: ${env:ECHO_CERT}
        key_file: ${env:ECHO_KEY}
      tokens:
        - {name: agent, env: AGENT_TOKEN, scopes: [tools]}
receivers:
  otlp:
    protocols:
      http:
        endpoint: ${env:OTLP_HTTP}
exporters:
  duckdb:
    store: echo
service:
  extensions: [echo]
  telemetry:
    metrics:
      level: none
  pipelines:
    logs:
      receivers: [otlp]
      exporters: [duckdb]
`

// The listener speaks TLS only, and a second gateway on the same file fails at start,
// saying why.
func TestGatewayTLSAndSecondWriter(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath, pool := collectortest.LoopbackCert(t, dir)
	cfg := filepath.Join(dir, "gateway.yaml")
	must(t, os.WriteFile(cfg, []byte(tlsGatewayYAML), 0o600))
	db := filepath.Join(dir, "echo.duckdb")
	addr := collectortest.Addr(t)
	env := []string{"ECHO_DB=" + db, "ECHO_CERT=" + certPath, "ECHO_KEY=" + keyPath, "AGENT_TOKEN=" + agentToken}
	p := collectortest.Start(t, cfg, append(env, "ECHO_ADDR="+addr, "OTLP_HTTP="+collectortest.Addr(t))...)

	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get("https://" + addr + "/api/versions")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("HTTPS versions: %d", resp.StatusCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("HTTPS listener never answered: %v\n%s", err, p.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if resp, err := http.Get("http://" + addr + "/api/versions"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("the TLS listener answered plain HTTP with 200")
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, collectortest.Binary(t), "--config", cfg)
	second.Env = append(os.Environ(), append(env, "ECHO_ADDR="+collectortest.Addr(t), "OTLP_HTTP="+collectortest.Addr(t))...)
	out, err := second.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("a second gateway on the same store started (err %v):\n%s", err, out)
	}
	if !strings.Contains(string(out), "echo store is locked by another writer") || !strings.Contains(string(out), db+".lock") {
		t.Fatalf("second gateway failed without saying the store is locked:\n%s", out)
	}
	if code := p.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("first gateway exit %d", code)
	}
}
