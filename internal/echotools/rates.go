package echotools

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fathom-gpu/fathom/internal/semconv"
)

// Attribute keys get_cost prices by; the node collector sets them from the cloud
// metadata and the GPU it sees.
const (
	attrProvider = semconv.CloudProvider
	attrGPUModel = semconv.GPUModel
)

// Rates is the operator's price list: USD per GPU-hour by provider and GPU model.
type Rates struct {
	Default float64
	byKey   map[string]float64
}

type ratesFile struct {
	DefaultUSDPerGPUHour float64 `yaml:"default_usd_per_gpu_hour"`
	Rates                []struct {
		Provider      string  `yaml:"provider"`
		GPUModel      string  `yaml:"gpu_model"`
		USDPerGPUHour float64 `yaml:"usd_per_gpu_hour"`
	} `yaml:"rates"`
}

// LoadRates reads a rates file; an empty path gives an empty list (every price 0).
func LoadRates(path string) (*Rates, error) {
	r := &Rates{byKey: map[string]float64{}}
	if path == "" {
		return r, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rates file: %w", err)
	}
	var f ratesFile
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("rates file %s: %w", path, err)
	}
	r.Default = f.DefaultUSDPerGPUHour
	for i, e := range f.Rates {
		if e.Provider == "" || e.GPUModel == "" || e.USDPerGPUHour < 0 {
			return nil, fmt.Errorf("rates file %s: entry %d needs provider, gpu_model and a non-negative usd_per_gpu_hour", path, i)
		}
		r.byKey[rateKey(e.Provider, e.GPUModel)] = e.USDPerGPUHour
	}
	if r.Default < 0 {
		return nil, errors.New("rates file: default_usd_per_gpu_hour must not be negative")
	}
	return r, nil
}

func rateKey(provider, model string) string {
	return strings.ToLower(provider) + "\x00" + strings.ToLower(model)
}

func (r *Rates) lookup(provider, model string) (float64, bool) {
	if r == nil {
		return 0, false
	}
	if v, ok := r.byKey[rateKey(provider, model)]; ok {
		return v, true
	}
	return r.Default, r.Default > 0
}
