package inputboundsprocessor

import (
	"errors"
	"fmt"
)

// Config bounds what one OTLP record or point may carry into the gateway. Whatever is
// past a bound is cut (an attribute value, attributes past the count) or dropped (a
// histogram point that cannot be right, a value that must be finite and is not); the
// rest of the request passes on as sent.
type Config struct {
	// MaxAttributeValueBytes: longer string and bytes values are cut to this many bytes
	// (at a UTF-8 character boundary), in resources, scopes, records and points, and
	// inside list and map values.
	MaxAttributeValueBytes int `mapstructure:"max_attribute_value_bytes"`
	// MaxAttributes per resource, scope, record or point; those past it are dropped.
	MaxAttributes int `mapstructure:"max_attributes"`
	// MaxHistogramBuckets per histogram point (explicit buckets, or each range of an
	// exponential one); a point with more is dropped.
	MaxHistogramBuckets int `mapstructure:"max_histogram_buckets"`
	// FinitePrefixes: metrics whose names start with one of these must be finite; a
	// point with NaN or ±Inf is dropped. The straggler loop's signals are fathom.*.
	FinitePrefixes []string `mapstructure:"finite_prefixes"`
}

func createDefaultConfig() *Config {
	return &Config{
		// A path, a command line or a stack frame fits; a 3 MB value does not.
		MaxAttributeValueBytes: 4096,
		// Fathom's own records carry under 40; OTel's semantic conventions rarely 64.
		MaxAttributes: 128,
		// The receiver's exponential histograms use up to 160 buckets a range.
		MaxHistogramBuckets: 1024,
		FinitePrefixes:      []string{"fathom."},
	}
}

// Validate explains what is wrong in the words of the YAML.
func (c *Config) Validate() error {
	var errs []error
	if c.MaxAttributeValueBytes < 64 {
		errs = append(errs, fmt.Errorf("inputbounds: `max_attribute_value_bytes` is %d; want at least 64", c.MaxAttributeValueBytes))
	}
	if c.MaxAttributes < 8 {
		errs = append(errs, fmt.Errorf("inputbounds: `max_attributes` is %d; want at least 8", c.MaxAttributes))
	}
	if c.MaxHistogramBuckets < 16 {
		errs = append(errs, fmt.Errorf("inputbounds: `max_histogram_buckets` is %d; want at least 16", c.MaxHistogramBuckets))
	}
	for i, p := range c.FinitePrefixes {
		if p == "" {
			errs = append(errs, fmt.Errorf("inputbounds: `finite_prefixes[%d]` is empty (it would match every metric; list no prefix for none)", i))
		}
	}
	return errors.Join(errs...)
}
