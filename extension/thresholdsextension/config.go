package thresholdsextension

import (
	"errors"
	"time"
)

// Config of the thresholds extension. The same extension serves both ends: named in the
// gateway's otlp receiver `middlewares`, it answers each export with the thresholds of
// the cohorts in it; named in the node's otlp exporter `middlewares`, it reads them from
// every answer and holds them for the node's straggler processor.
type Config struct {
	// TTL is how long the node keeps thresholds it received; past it, with no fresh
	// answer (the gateway unreachable), it says it has none.
	TTL time.Duration `mapstructure:"ttl"`
	// MaxResponseBytes bounds the thresholds written into one answer; cohorts past it
	// are left out (counted).
	MaxResponseBytes int `mapstructure:"max_response_bytes"`
	// MaxHeld bounds the thresholds the node keeps (one per cohort and signal).
	MaxHeld int `mapstructure:"max_held"`
}

func createDefaultConfig() *Config {
	return &Config{TTL: 2 * time.Minute, MaxResponseBytes: 1024, MaxHeld: 256}
}

// Validate explains what is wrong in the words of the YAML.
func (c *Config) Validate() error {
	var errs []error
	if c.TTL <= 0 {
		errs = append(errs, errors.New("thresholds: `ttl` must be > 0"))
	}
	if c.MaxResponseBytes < 256 || c.MaxResponseBytes > 8192 {
		errs = append(errs, errors.New("thresholds: `max_response_bytes` must be between 256 and 8192 (one threshold takes about 200 bytes; proxies limit header sizes)"))
	}
	if c.MaxHeld < 1 {
		errs = append(errs, errors.New("thresholds: `max_held` must be >= 1"))
	}
	return errors.Join(errs...)
}
