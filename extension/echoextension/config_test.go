package echoextension

import (
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/testsupport/configtest"
)

func loadConfig(t *testing.T, name string) (*Config, error) {
	t.Helper()
	return configtest.Load[*Config](t, NewFactory(), name)
}

func TestLoadConfig(t *testing.T) {
	def, err := loadConfig(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if def.Server.Endpoint != "" || def.SQL.MaxRows != 10_000 || def.SQL.Timeout != 10*time.Second {
		t.Fatalf("default: %+v", def)
	}
	full, err := loadConfig(t, "full")
	if err != nil {
		t.Fatal(err)
	}
	if full.Retention.MaxAge != 168*time.Hour || full.Server.TLS.CertFile != "/etc/fathom/tls/tls.crt" ||
		len(full.Server.Tokens) != 2 || full.Server.Tokens[1].Env != "FATHOM_GRAFANA_TOKEN" || full.SQL.MaxConcurrent != 4 {
		t.Fatalf("full: %+v", full)
	}
	for name, want := range map[string][]string{
		"no_tls":     {"`server.tls` (cert_file, key_file) is required", "insecure_allow_plaintext"},
		"bad_tokens": {"exactly one of `file` or `env`", `unknown scope "admin"`},
		"no_path":    {"`path` must name the DuckDB file"},
	} {
		_, err := loadConfig(t, name)
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: got %v, want it to mention %q", name, err, w)
			}
		}
	}
}
