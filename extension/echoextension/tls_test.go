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

	"github.com/fathom-gpu/fathom/internal/collectorconfig"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
)

// The listener speaks TLS only, and a second gateway on the same file fails at start,
// saying why.
func TestGatewayTLSAndSecondWriter(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath, pool := collectortest.LoopbackCert(t, dir)
	db := filepath.Join(dir, "echo.duckdb")
	// The shipped gateway, its Echo API on TLS as shipped; plaintext OTLP, which this
	// test does not use.
	first := collectortest.Gateway(t, collectorconfig.GatewayPlaintext)
	env := []string{"FATHOM_ECHO_DB=" + db, "FATHOM_ECHO_TLS_CERT=" + certPath, "FATHOM_ECHO_TLS_KEY=" + keyPath}
	addr := first.Listen["FATHOM_ECHO_ENDPOINT"]
	p := first.Start(t, env...)

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
	// The same gateway on listeners of its own, so that only the store is shared.
	again := collectortest.Gateway(t, collectorconfig.GatewayPlaintext)
	second := exec.CommandContext(ctx, collectortest.Binary(t), "--config", again.Write(t))
	second.Env = append(append(os.Environ(), again.Env...), env...)
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
