package inputboundsprocessor

import (
	"context"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/processor/inputboundsprocessor/internal/metadata"
)

// What was cut, as counted and noted.
const (
	reasonAttributeValue        = "attribute_value"
	reasonAttributes            = "attributes"
	reasonHistogramBuckets      = "histogram_buckets"
	reasonHistogramInconsistent = "histogram_inconsistent"
	reasonNotFinite             = "not_finite"
)

// maxDepth bounds how deep the processor follows list and map values: deeper ones are
// emptied (counted as attribute_value). 64 is where the duckdb exporter cuts what it
// stores (docs/reliability.md), so nothing the store keeps goes unchecked.
const maxDepth = 64

type bounds struct {
	cfg       *Config
	telemetry *metadata.TelemetryBuilder
}

func newBounds(cfg *Config, set processor.Settings) (*bounds, error) {
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	return &bounds{cfg: cfg, telemetry: tb}, nil
}

func (b *bounds) shutdown(context.Context) error {
	b.telemetry.Shutdown()
	return nil
}

// cuts counts one request's cuts by reason.
type cuts map[string]int64

func (b *bounds) count(ctx context.Context, c cuts) {
	for reason, n := range c {
		b.telemetry.FathomInputboundsCut.Add(ctx, n, metric.WithAttributes(attribute.String("reason", reason)))
	}
}

// attributes bounds one attribute map and returns the reasons it cut, in a fixed order.
func (b *bounds) attributes(m pcommon.Map, c cuts) []string {
	var why []string
	if n := m.Len() - b.cfg.MaxAttributes; n > 0 {
		kept := 0
		m.RemoveIf(func(string, pcommon.Value) bool {
			kept++
			return kept > b.cfg.MaxAttributes
		})
		c[reasonAttributes] += int64(n)
		why = append(why, reasonAttributes)
	}
	cutValues := int64(0)
	for _, v := range m.All() {
		cutValues += b.value(v, 0)
	}
	if cutValues > 0 {
		c[reasonAttributeValue] += cutValues
		why = append(why, reasonAttributeValue)
	}
	return why
}

// value cuts a value in place and returns how many values it cut.
func (b *bounds) value(v pcommon.Value, depth int) int64 {
	max := b.cfg.MaxAttributeValueBytes
	switch v.Type() {
	case pcommon.ValueTypeStr:
		if s := v.Str(); len(s) > max {
			v.SetStr(cutUTF8(s, max))
			return 1
		}
	case pcommon.ValueTypeBytes:
		if raw := v.Bytes(); raw.Len() > max {
			raw.FromRaw(slices.Clone(raw.AsRaw()[:max]))
			return 1
		}
	case pcommon.ValueTypeSlice:
		if depth >= maxDepth {
			v.SetEmptySlice()
			return 1
		}
		var n int64
		for _, e := range v.Slice().All() {
			n += b.value(e, depth+1)
		}
		return n
	case pcommon.ValueTypeMap:
		if depth >= maxDepth {
			v.SetEmptyMap()
			return 1
		}
		var n int64
		for _, e := range v.Map().All() {
			n += b.value(e, depth+1)
		}
		return n
	}
	return 0
}

// cutUTF8 cuts s to at most n bytes, not inside a character.
func cutUTF8(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// note records on m why it was cut (fathom.input.cut), after what it already says.
func note(m pcommon.Map, why []string) {
	if len(why) == 0 {
		return
	}
	if prev, ok := m.Get(semconv.InputCut); ok && prev.Str() != "" {
		why = append(strings.Split(prev.Str(), ","), why...)
		slices.Sort(why)
		why = slices.Compact(why)
	}
	m.PutStr(semconv.InputCut, strings.Join(why, ","))
}

func (b *bounds) processLogs(ctx context.Context, ld plog.Logs) (plog.Logs, error) {
	c := cuts{}
	for _, rl := range ld.ResourceLogs().All() {
		note(rl.Resource().Attributes(), b.attributes(rl.Resource().Attributes(), c))
		for _, sl := range rl.ScopeLogs().All() {
			note(sl.Scope().Attributes(), b.attributes(sl.Scope().Attributes(), c))
			for _, lr := range sl.LogRecords().All() {
				why := b.attributes(lr.Attributes(), c)
				if n := b.value(lr.Body(), 0); n > 0 {
					c[reasonAttributeValue] += n
					why = append(why, reasonAttributeValue)
				}
				slices.Sort(why)
				note(lr.Attributes(), slices.Compact(why))
			}
		}
	}
	b.count(ctx, c)
	return ld, nil
}

func (b *bounds) processMetrics(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	c := cuts{}
	for _, rm := range md.ResourceMetrics().All() {
		note(rm.Resource().Attributes(), b.attributes(rm.Resource().Attributes(), c))
		for _, sm := range rm.ScopeMetrics().All() {
			note(sm.Scope().Attributes(), b.attributes(sm.Scope().Attributes(), c))
			sm.Metrics().RemoveIf(func(m pmetric.Metric) bool {
				return b.metric(m, c)
			})
		}
	}
	b.count(ctx, c)
	return md, nil
}

// metric bounds one metric's points, drops those that cannot be right, and says
// whether the metric has no point left (and had some).
func (b *bounds) metric(m pmetric.Metric, c cuts) bool {
	finite := slices.ContainsFunc(b.cfg.FinitePrefixes, func(p string) bool { return strings.HasPrefix(m.Name(), p) })
	var had, left int
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		had, left = b.numbers(m.Gauge().DataPoints(), finite, c)
	case pmetric.MetricTypeSum:
		had, left = b.numbers(m.Sum().DataPoints(), finite, c)
	case pmetric.MetricTypeHistogram:
		dps := m.Histogram().DataPoints()
		had = dps.Len()
		dps.RemoveIf(func(dp pmetric.HistogramDataPoint) bool {
			if reason := b.histogram(dp, finite); reason != "" {
				c[reason]++
				return true
			}
			note(dp.Attributes(), b.attributes(dp.Attributes(), c))
			return false
		})
		left = dps.Len()
	case pmetric.MetricTypeExponentialHistogram:
		dps := m.ExponentialHistogram().DataPoints()
		had = dps.Len()
		dps.RemoveIf(func(dp pmetric.ExponentialHistogramDataPoint) bool {
			if reason := b.exponential(dp, finite); reason != "" {
				c[reason]++
				return true
			}
			note(dp.Attributes(), b.attributes(dp.Attributes(), c))
			return false
		})
		left = dps.Len()
	case pmetric.MetricTypeSummary:
		for _, dp := range m.Summary().DataPoints().All() {
			note(dp.Attributes(), b.attributes(dp.Attributes(), c))
		}
	}
	return had > 0 && left == 0
}

func (b *bounds) numbers(dps pmetric.NumberDataPointSlice, finite bool, c cuts) (had, left int) {
	had = dps.Len()
	dps.RemoveIf(func(dp pmetric.NumberDataPoint) bool {
		if finite && dp.ValueType() == pmetric.NumberDataPointValueTypeDouble && !isFinite(dp.DoubleValue()) {
			c[reasonNotFinite]++
			return true
		}
		note(dp.Attributes(), b.attributes(dp.Attributes(), c))
		return false
	})
	return had, dps.Len()
}

// histogram says why an explicit-bucket point must be dropped, or "".
func (b *bounds) histogram(dp pmetric.HistogramDataPoint, finite bool) string {
	counts, bounds := dp.BucketCounts(), dp.ExplicitBounds()
	if counts.Len() > b.cfg.MaxHistogramBuckets || bounds.Len() > b.cfg.MaxHistogramBuckets {
		return reasonHistogramBuckets
	}
	if counts.Len() > 0 {
		if counts.Len() != bounds.Len()+1 || sum(counts.All()) != dp.Count() {
			return reasonHistogramInconsistent
		}
		for i, bound := range bounds.All() {
			if !isFinite(bound) || (i > 0 && bound <= bounds.At(i-1)) {
				return reasonHistogramInconsistent
			}
		}
	}
	if finite && ((dp.HasSum() && !isFinite(dp.Sum())) || (dp.HasMin() && !isFinite(dp.Min())) || (dp.HasMax() && !isFinite(dp.Max()))) {
		return reasonNotFinite
	}
	return ""
}

// exponential says why an exponential-histogram point must be dropped, or "".
func (b *bounds) exponential(dp pmetric.ExponentialHistogramDataPoint, finite bool) string {
	pos, neg := dp.Positive().BucketCounts(), dp.Negative().BucketCounts()
	if pos.Len() > b.cfg.MaxHistogramBuckets || neg.Len() > b.cfg.MaxHistogramBuckets {
		return reasonHistogramBuckets
	}
	if sum(pos.All())+sum(neg.All())+dp.ZeroCount() != dp.Count() {
		return reasonHistogramInconsistent
	}
	if finite && ((dp.HasSum() && !isFinite(dp.Sum())) || (dp.HasMin() && !isFinite(dp.Min())) || (dp.HasMax() && !isFinite(dp.Max()))) {
		return reasonNotFinite
	}
	return ""
}

func sum(counts func(func(int, uint64) bool)) uint64 {
	var total uint64
	for _, n := range counts {
		total += n
	}
	return total
}

func isFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
