package echostoreexporter

import (
	"errors"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configretry"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
)

// Config of the duckdb exporter: where to write (the echo extension) and the
// collector's own queue, retry and timeout settings.
type Config struct {
	exporterhelper.TimeoutConfig `mapstructure:",squash"`
	// QueueConfig is the collector's sending queue (exporterhelper): batches wait
	// here while the store writes.
	QueueConfig configoptional.Optional[exporterhelper.QueueBatchConfig] `mapstructure:"sending_queue"`
	// RetryConfig is the collector's retry of a refused write (exporterhelper).
	RetryConfig configretry.BackOffConfig `mapstructure:"retry_on_failure"`

	// Store is the component ID of the echo extension that owns the DuckDB file.
	Store component.ID `mapstructure:"store"`
}

// Validate explains what is wrong in the words of the YAML.
func (c *Config) Validate() error {
	var errs []error
	if c.Store.Type().String() == "" {
		errs = append(errs, errors.New("duckdb: `store` must name the echo extension that owns the file (e.g. `store: echo`)"))
	}
	if c.QueueConfig.HasValue() {
		q := c.QueueConfig.Get()
		if !q.WaitForResult && q.StorageID == nil {
			errs = append(errs, errors.New("duckdb: `sending_queue.wait_for_result: false` with an in-memory queue acknowledges data before it is in the store, so a crash loses it; keep it true or configure `sending_queue.storage`"))
		}
	}
	return errors.Join(errs...)
}
