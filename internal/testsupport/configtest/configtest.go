// Package configtest loads a component's config from its testdata/config.yaml the way
// the collector does: the factory's defaults, overlaid with the YAML, then validated.
package configtest

import (
	"path/filepath"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
)

// Load reads the entry "type" (name "") or "type/name" of testdata/config.yaml into a
// config of factory's type. A file that cannot be read or decoded fails the test; the
// error returned is Validate's, which is what the tests look at.
func Load[T component.Config](t *testing.T, factory component.Factory, name string) (T, error) {
	t.Helper()
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := cm.Sub(component.NewIDWithName(factory.Type(), name).String())
	if err != nil {
		t.Fatal(err)
	}
	cfg := factory.CreateDefaultConfig().(T)
	if err := sub.Unmarshal(cfg); err != nil {
		t.Fatal(err)
	}
	return cfg, confmap.Validate(cfg)
}
