package echostoreexporter

import (
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"

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
	if def.Store != component.MustNewID("echo") || !def.QueueConfig.Get().WaitForResult || !def.QueueConfig.Get().Batch.HasValue() {
		t.Fatalf("default config: %+v", def)
	}
	custom, err := loadConfig(t, "custom")
	if err != nil {
		t.Fatal(err)
	}
	if custom.Store != component.MustNewIDWithName("echo", "gateway") || custom.Timeout != 10*time.Second ||
		custom.QueueConfig.Get().NumConsumers != 4 || custom.RetryConfig.MaxElapsedTime != time.Minute {
		t.Fatalf("custom config: %+v", custom)
	}
	if _, err := loadConfig(t, "unsafe_queue"); err == nil || !strings.Contains(err.Error(), "wait_for_result") {
		t.Fatalf("an acknowledge-before-write queue must be refused, got %v", err)
	}
}
