package inputboundsprocessor

import (
	"slices"
	"strings"
	"testing"

	"github.com/fathom-gpu/fathom/internal/testsupport/configtest"
)

func load(t *testing.T, name string) (*Config, error) {
	t.Helper()
	return configtest.Load[*Config](t, NewFactory(), name)
}

// The defaults, a custom config, and a bad one refused in the YAML's own words.
func TestLoadConfig(t *testing.T) {
	def, err := load(t, "")
	if err != nil || def.MaxAttributeValueBytes != 4096 || def.MaxAttributes != 128 || def.MaxHistogramBuckets != 1024 || !slices.Equal(def.FinitePrefixes, []string{"fathom."}) {
		t.Errorf("defaults %+v (%v)", def, err)
	}
	custom, err := load(t, "custom")
	if err != nil || custom.MaxAttributeValueBytes != 1024 || custom.MaxAttributes != 64 || custom.MaxHistogramBuckets != 256 || !slices.Equal(custom.FinitePrefixes, []string{"fathom.", "app."}) {
		t.Errorf("custom %+v (%v)", custom, err)
	}
	_, err = load(t, "bad")
	for _, want := range []string{"`max_attribute_value_bytes` is 10; want at least 64", "`max_attributes` is 2; want at least 8",
		"`max_histogram_buckets` is 4; want at least 16", "`finite_prefixes[0]` is empty"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad config: %v; want it to say %q", err, want)
		}
	}
}
