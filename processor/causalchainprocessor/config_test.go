package causalchainprocessor

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/fathom-gpu/fathom/processor/causalchainprocessor/internal/metadata"
)

func TestConfigLoadsFromYAML(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	load := func(name string) *Config {
		t.Helper()
		cfg := createDefaultConfig()
		sub, err := cm.Sub(component.NewIDWithName(metadata.Type, name).String())
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Unmarshal(cfg); err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if got := load(""); got.Window != 30*time.Second || !got.Rules.NetworkRetransmits.Enabled {
		t.Errorf("defaults: %+v", got)
	}
	got := load("tuned")
	want := createDefaultConfig()
	want.Window, want.ResolveAfter, want.UpdateEvery = 5*time.Second, 5*time.Second, 30*time.Second
	want.Severity = SeverityConfig{High: 0.3, Medium: 0.1}
	want.Rules.CPUContention.MinShare = 0.1
	want.Rules.HiddenSync.MinPerSecond = 50
	want.Rules.NetworkRetransmits.Enabled = false
	want.Limits.MaxProcesses = 64
	if *got != *want {
		t.Errorf("tuned:\n got %+v\nwant %+v", got, want)
	}
}

func TestConfigErrorsSayWhatToFix(t *testing.T) {
	cases := []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Window = 500 * time.Millisecond }, "`window` must be at least 1s"},
		{func(c *Config) { c.ResolveAfter = 0 }, "`resolve_after` must be positive"},
		{func(c *Config) { c.Severity.Medium = 0.5 }, "0 < medium < high <= 1"},
		{func(c *Config) { c.Rules.IOStall.MinShare = 1 }, "`rules.io_stall.min_share` must be in [0, 1)"},
		{func(c *Config) { c.Rules.HiddenSync.MaxBytes = 0 }, "`rules.hidden_sync.max_bytes` must be positive"},
		{func(c *Config) { c.Rules.NetworkRetransmits.CostPerRetransmit = 0 }, "`rules.network_retransmits.cost_per_retransmit` must be positive"},
		{func(c *Config) { c.Limits.MaxProcesses = 0 }, "`limits` need max_processes >= 1"},
	}
	for _, tc := range cases {
		cfg := createDefaultConfig()
		tc.edit(cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one saying %q", err, tc.want)
		}
	}
	if err := createDefaultConfig().Validate(); err != nil {
		t.Errorf("the default config: %v", err)
	}
}
