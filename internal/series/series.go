// Package series is Fathom's one implementation of the arithmetic that turns OTLP points
// into answers: a point's value, what a cumulative point adds to its series (one rule
// for a series' first point and for resets), the buckets a cumulative histogram gained,
// quantiles from buckets, and median and MAD across peers. The straggler detector, the
// causal-chain processor, the receiver, the duckdb exporter's rows and the Echo tools all
// call it, so Fathom gives one answer to one question (docs/series.md says why each rule
// is the one chosen).
package series

import "go.opentelemetry.io/collector/pdata/pmetric"

// Value is a number point's value as a float64, whether it was sent as an int or a double.
func Value(dp pmetric.NumberDataPoint) float64 {
	if dp.ValueType() == pmetric.NumberDataPointValueTypeInt {
		return float64(dp.IntValue())
	}
	return dp.DoubleValue()
}
