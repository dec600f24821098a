package echostoreexporter

import (
	"cmp"
	"encoding/base64"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/echoschema"
	"github.com/fathom-gpu/fathom/internal/series"
)

// MaxValueDepth bounds how deep the maps and arrays of a body or attribute are written
// out. OTLP lets a sender nest kvlists and arrays without end: a 4 MiB request holds a
// value ~350,000 levels deep, and writing it level by level took ~1.3 KB of goroutine
// stack per level (Go's 1 GB stack limit is a fatal error, not a recoverable panic).
// No real attribute comes near this depth; a deeper value is written as TruncatedValue
// and counted.
const MaxValueDepth = 64

// TruncatedValue stands, as a JSON string, for a map or array deeper than MaxValueDepth.
const TruncatedValue = "[fathom: value nested deeper than 64 levels, truncated]"

// rowContext is what a resource (and its scope) contributes to every row under it:
// the lifted columns and the JSON members of the remaining attributes.
type rowContext struct {
	base echoschema.Row
	json []byte // `"k":v,"k2":v2` without braces; empty when none
	// truncated counts values cut at MaxValueDepth, in the resource and every row.
	truncated *int
}

func newRowContext(res pcommon.Resource, truncated *int) rowContext {
	rc := rowContext{base: echoschema.NewRow(), truncated: truncated}
	rc.json = liftAttributes(res.Attributes(), &rc.base, nil, truncated)
	return rc
}

// rowFor starts a row from the resource context and lifts the record's attributes over
// it (a record attribute wins over the resource's), closing the JSON object. member is
// a JSON member the exporter itself adds (with its trailing comma), or empty; it goes
// first, so that what the exporter knows wins over an attribute of the same name.
func (rc *rowContext) rowFor(attrs pcommon.Map, buf []byte, member string) (echoschema.Row, []byte) {
	r := rc.base
	buf = append(buf[:0], '{')
	buf = append(buf, member...)
	buf = append(buf, rc.json...)
	buf = liftAttributes(attrs, &r, buf, rc.truncated)
	if len(buf) > 1 && buf[len(buf)-1] == ',' {
		buf = buf[:len(buf)-1]
	}
	buf = append(buf, '}')
	r.Attributes = string(buf)
	return r, buf
}

// liftAttributes moves the attributes with dedicated columns into r and appends the
// others to out as JSON members, each followed by a comma.
func liftAttributes(attrs pcommon.Map, r *echoschema.Row, out []byte, truncated *int) []byte {
	attrs.Range(func(k string, v pcommon.Value) bool {
		switch k {
		case echoschema.AttrCluster:
			r.Cluster = v.AsString()
		case echoschema.AttrNode:
			r.Node = v.AsString()
		case echoschema.AttrJob:
			r.Job = v.AsString()
		case echoschema.AttrCohort:
			r.Cohort = v.AsString()
		case echoschema.AttrRank:
			r.Rank = int32(intOf(v))
		case echoschema.AttrLocalRank:
			r.LocalRank = int32(intOf(v))
		case echoschema.AttrWorldSize:
			r.WorldSize = int32(intOf(v))
		case echoschema.AttrPID:
			r.PID = intOf(v)
		case echoschema.AttrProcess:
			r.Process = v.AsString()
		case echoschema.AttrThreadID:
			r.ThreadID = intOf(v)
		case echoschema.AttrCUDAAPI, echoschema.AttrNCCLOp:
			r.API = v.AsString()
		case echoschema.AttrNCCLCommID:
			r.CommID = v.AsString()
		default:
			out = appendJSONString(out, k)
			out = append(out, ':')
			out = appendJSONValue(out, v, 1, truncated)
			out = append(out, ',')
		}
		return true
	})
	return out
}

// intOf reads an integer attribute that a sender may have typed as int, double or
// string; anything unreadable is Absent rather than a wrong number.
func intOf(v pcommon.Value) int64 {
	switch v.Type() {
	case pcommon.ValueTypeInt:
		if v.Int() < 0 {
			return echoschema.Absent
		}
		return v.Int()
	case pcommon.ValueTypeDouble:
		if v.Double() < 0 || math.IsNaN(v.Double()) {
			return echoschema.Absent
		}
		return int64(v.Double())
	case pcommon.ValueTypeStr:
		if n, err := strconv.ParseInt(v.Str(), 10, 64); err == nil && n >= 0 {
			return n
		}
	}
	return echoschema.Absent
}

// appendJSONValue writes v as JSON; depth is the nesting level of v (1 for an
// attribute's own value). Maps and arrays are written here rather than by AsString,
// which recurses without a bound and writes nothing at all for a map holding a NaN
// (encoding/json refuses NaN), leaving the attributes object unparseable.
func appendJSONValue(out []byte, v pcommon.Value, depth int, truncated *int) []byte {
	switch v.Type() {
	case pcommon.ValueTypeInt:
		return strconv.AppendInt(out, v.Int(), 10)
	case pcommon.ValueTypeDouble:
		d := v.Double()
		if math.IsNaN(d) || math.IsInf(d, 0) {
			return append(out, "null"...)
		}
		return strconv.AppendFloat(out, d, 'g', -1, 64)
	case pcommon.ValueTypeBool:
		return strconv.AppendBool(out, v.Bool())
	case pcommon.ValueTypeEmpty:
		return append(out, "null"...)
	case pcommon.ValueTypeMap, pcommon.ValueTypeSlice:
		if depth > MaxValueDepth {
			*truncated++
			return appendJSONString(out, TruncatedValue)
		}
		if v.Type() == pcommon.ValueTypeSlice {
			return appendJSONArray(out, v.Slice(), depth, truncated)
		}
		return appendJSONObject(out, v.Map(), depth, truncated)
	case pcommon.ValueTypeBytes:
		out = append(out, '"')
		out = base64.StdEncoding.AppendEncode(out, v.Bytes().AsRaw())
		return append(out, '"')
	default:
		return appendJSONString(out, v.AsString())
	}
}

func appendJSONArray(out []byte, s pcommon.Slice, depth int, truncated *int) []byte {
	out = append(out, '[')
	for i := 0; i < s.Len(); i++ {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendJSONValue(out, s.At(i), depth+1, truncated)
	}
	return append(out, ']')
}

// appendJSONObject writes a nested map with its keys sorted and, where the wire
// repeated a key, only its last value: what encoding/json made of Map.AsRaw before,
// so stored bodies and attributes keep their form.
func appendJSONObject(out []byte, m pcommon.Map, depth int, truncated *int) []byte {
	type member struct {
		key   string
		value pcommon.Value
	}
	members := make([]member, 0, m.Len())
	for k, v := range m.All() {
		members = append(members, member{k, v})
	}
	slices.SortStableFunc(members, func(a, b member) int { return cmp.Compare(a.key, b.key) })
	out = append(out, '{')
	first := true
	for i, mb := range members {
		if i+1 < len(members) && members[i+1].key == mb.key {
			continue // a later value of the same key wins
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = appendJSONString(out, mb.key)
		out = append(out, ':')
		out = appendJSONValue(out, mb.value, depth+1, truncated)
	}
	return append(out, '}')
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as a JSON string; invalid UTF-8 becomes U+FFFD so that the
// stored object always parses.
func appendJSONString(out []byte, s string) []byte {
	out = append(out, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				out = append(out, '\\', c)
			case c < 0x20:
				out = append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				out = append(out, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			out = append(out, "\ufffd"...)
		} else {
			out = append(out, s[i:i+size]...)
		}
		i += size
	}
	return append(out, '"')
}

// logRows converts ld into rows, one per log record; truncated counts the maps and
// arrays cut at MaxValueDepth.
func logRows(rows []echoschema.Row, ld plog.Logs) (_ []echoschema.Row, truncated int) {
	rows = slices.Grow(rows[:0], ld.LogRecordCount())
	var buf []byte
	for _, rl := range ld.ResourceLogs().All() {
		rc := newRowContext(rl.Resource(), &truncated)
		for _, sl := range rl.ScopeLogs().All() {
			for _, lr := range sl.LogRecords().All() {
				var r echoschema.Row
				r, buf = rc.rowFor(lr.Attributes(), buf, "")
				r.Kind = echoschema.KindLog
				r.Time = timeOf(lr.Timestamp(), lr.ObservedTimestamp())
				r.Name = lr.EventName()
				if r.Name == "" {
					if v, ok := lr.Attributes().Get(echoschema.AttrEventName); ok {
						r.Name = v.AsString()
					} else {
						r.Name = "log"
					}
				}
				r.Severity = lr.SeverityText()
				if r.Severity == "" && lr.SeverityNumber() != plog.SeverityNumberUnspecified {
					r.Severity = lr.SeverityNumber().String()
				}
				r.SeverityNumber = int32(lr.SeverityNumber())
				switch lr.Body().Type() {
				case pcommon.ValueTypeDouble:
					r.Value = lr.Body().Double()
				case pcommon.ValueTypeInt:
					r.Value = float64(lr.Body().Int())
				case pcommon.ValueTypeEmpty:
				case pcommon.ValueTypeMap, pcommon.ValueTypeSlice:
					r.Body = string(appendJSONValue(nil, lr.Body(), 1, &truncated))
				default:
					r.Body = lr.Body().AsString()
				}
				if tid := lr.TraceID(); !tid.IsEmpty() {
					r.TraceID = tid.String()
				}
				rows = append(rows, r)
			}
		}
	}
	return rows, truncated
}

func timeOf(ts, fallback pcommon.Timestamp) time.Time {
	if ts == 0 {
		ts = fallback
	}
	return ts.AsTime()
}

// metricRows converts md into rows, one per data point; truncated counts the maps and
// arrays cut at MaxValueDepth.
func metricRows(rows []echoschema.Row, md pmetric.Metrics) (_ []echoschema.Row, truncated int) {
	rows = slices.Grow(rows[:0], md.DataPointCount())
	var buf []byte
	for _, rm := range md.ResourceMetrics().All() {
		rc := newRowContext(rm.Resource(), &truncated)
		for _, sm := range rm.ScopeMetrics().All() {
			for _, m := range sm.Metrics().All() {
				member := temporalityMember(m)
				start := func(attrs pcommon.Map, ts pcommon.Timestamp, kind string) echoschema.Row {
					var r echoschema.Row
					r, buf = rc.rowFor(attrs, buf, member)
					r.Kind, r.Name, r.Unit, r.Time = kind, m.Name(), m.Unit(), ts.AsTime()
					return r
				}
				switch m.Type() {
				case pmetric.MetricTypeGauge:
					for _, dp := range m.Gauge().DataPoints().All() {
						r := start(dp.Attributes(), dp.Timestamp(), echoschema.KindGauge)
						r.Value = series.Value(dp)
						rows = append(rows, r)
					}
				case pmetric.MetricTypeSum:
					for _, dp := range m.Sum().DataPoints().All() {
						r := start(dp.Attributes(), dp.Timestamp(), echoschema.KindSum)
						r.Value, r.Start = series.Value(dp), startOf(dp.StartTimestamp())
						rows = append(rows, r)
					}
				case pmetric.MetricTypeHistogram:
					for _, dp := range m.Histogram().DataPoints().All() {
						r := start(dp.Attributes(), dp.Timestamp(), echoschema.KindHistogram)
						summariseHistogram(&r, dp)
						rows = append(rows, r)
					}
				case pmetric.MetricTypeExponentialHistogram:
					for _, dp := range m.ExponentialHistogram().DataPoints().All() {
						r := start(dp.Attributes(), dp.Timestamp(), echoschema.KindExpHistogram)
						summariseExpHistogram(&r, dp)
						rows = append(rows, r)
					}
				case pmetric.MetricTypeSummary:
					for _, dp := range m.Summary().DataPoints().All() {
						r := start(dp.Attributes(), dp.Timestamp(), echoschema.KindSummary)
						r.Count, r.Sum, r.Start = int64(dp.Count()), dp.Sum(), startOf(dp.StartTimestamp())
						if dp.Count() > 0 {
							r.Value = dp.Sum() / float64(dp.Count())
						}
						for _, q := range dp.QuantileValues().All() {
							switch q.Quantile() {
							case 0:
								r.Min = q.Value()
							case 0.5:
								r.P50 = q.Value()
							case 0.95:
								r.P95 = q.Value()
							case 0.99:
								r.P99 = q.Value()
							case 1:
								r.Max = q.Value()
							}
						}
						rows = append(rows, r)
					}
				}
			}
		}
	}
	return rows, truncated
}

// Temporality members of stored sum and histogram rows. A cumulative point holds the
// total since its series began and a delta point only its interval's share, so a tool
// that totals a window must know which one a row is; the row has no column for it.
var (
	cumulativeMember = `"` + echoschema.AttrTemporality + `":"cumulative",`
	deltaMember      = `"` + echoschema.AttrTemporality + `":"delta",`
)

func temporalityMember(m pmetric.Metric) string {
	var t pmetric.AggregationTemporality
	switch m.Type() {
	case pmetric.MetricTypeSum:
		t = m.Sum().AggregationTemporality()
	case pmetric.MetricTypeHistogram:
		t = m.Histogram().AggregationTemporality()
	case pmetric.MetricTypeExponentialHistogram:
		t = m.ExponentialHistogram().AggregationTemporality()
	}
	switch t {
	case pmetric.AggregationTemporalityCumulative:
		return cumulativeMember
	case pmetric.AggregationTemporalityDelta:
		return deltaMember
	}
	return ""
}

// histogramPoint is what explicit and exponential histogram points have in common.
type histogramPoint interface {
	StartTimestamp() pcommon.Timestamp
	Count() uint64
	HasSum() bool
	Sum() float64
	HasMin() bool
	Min() float64
	HasMax() bool
	Max() float64
}

// startOf is a point's start time, zero when the sender gave none.
func startOf(ts pcommon.Timestamp) time.Time {
	if ts == 0 {
		return time.Time{}
	}
	return ts.AsTime()
}

// summariseMoments stores start time, count, sum, mean, min and max; quantiles come
// from buckets.
func summariseMoments(r *echoschema.Row, dp histogramPoint) {
	r.Start = startOf(dp.StartTimestamp())
	r.Count = int64(dp.Count())
	if dp.HasSum() {
		r.Sum = dp.Sum()
		if dp.Count() > 0 {
			r.Value = dp.Sum() / float64(dp.Count())
		}
	}
	if dp.HasMin() {
		r.Min = dp.Min()
	}
	if dp.HasMax() {
		r.Max = dp.Max()
	}
}

// A histogram is stored as its buckets (what a window's totals and percentiles are
// computed from, see internal/series) and, for SQL that ranks points without unpacking
// buckets, count, sum, min, max, mean and p50/p95/p99 of the point itself, estimated
// by series.Quantile, the one method every Fathom percentile uses.
func summariseHistogram(r *echoschema.Row, dp pmetric.HistogramDataPoint) {
	summariseMoments(r, dp)
	bounds, counts := dp.ExplicitBounds(), dp.BucketCounts()
	r.Bounds, r.BucketCounts = bounds.AsRaw(), counts.AsRaw()
	if r.BucketCounts == nil {
		r.BucketCounts = []uint64{}
	}
	buckets := make([]series.Bucket, 0, counts.Len())
	for i := 0; i < counts.Len(); i++ {
		lo, hi := math.Inf(-1), math.Inf(1)
		if i > 0 && i-1 < bounds.Len() {
			lo = bounds.At(i - 1)
		}
		if i < bounds.Len() {
			hi = bounds.At(i)
		}
		buckets = append(buckets, series.Bucket{Lower: lo, Upper: hi, Count: counts.At(i)})
	}
	setQuantiles(r, buckets)
}

func summariseExpHistogram(r *echoschema.Row, dp pmetric.ExponentialHistogramDataPoint) {
	summariseMoments(r, dp)
	pos := dp.Positive()
	r.Scale, r.BucketOffset, r.ZeroCount = dp.Scale(), pos.Offset(), dp.ZeroCount()
	r.BucketCounts = pos.BucketCounts().AsRaw()
	if r.BucketCounts == nil {
		r.BucketCounts = []uint64{}
	}
	// Negative buckets are not stored (no duration is negative), but the point's own
	// quantiles count them: bucket i of the negative side is [-base^(i+1), -base^i).
	neg := dp.Negative()
	var buckets []series.Bucket
	if n := neg.BucketCounts().Len(); n > 0 {
		base := math.Exp2(math.Exp2(-float64(dp.Scale())))
		for i := n - 1; i >= 0; i-- {
			idx := float64(neg.Offset() + int32(i))
			buckets = append(buckets, series.Bucket{Lower: -math.Pow(base, idx+1), Upper: -math.Pow(base, idx), Count: neg.BucketCounts().At(i)})
		}
	}
	buckets = append(buckets, series.ExponentialBuckets(dp.Scale(), dp.ZeroCount(), pos.Offset(), r.BucketCounts)...)
	setQuantiles(r, buckets)
}

func setQuantiles(r *echoschema.Row, buckets []series.Bucket) {
	if r.P50 = series.Quantile(0.50, buckets, r.Min, r.Max); math.IsNaN(r.P50) {
		return // an empty histogram has no quantiles
	}
	r.P95 = series.Quantile(0.95, buckets, r.Min, r.Max)
	r.P99 = series.Quantile(0.99, buckets, r.Min, r.Max)
}
