package echotools

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/fathom-gpu/fathom/internal/echoschema"
	"github.com/fathom-gpu/fathom/internal/series"
)

// maxHistogramRows bounds the histogram points one get_trace_stats call reads (a point
// carries its buckets): 10 s exports of 1,000 series over an hour and its lookback.
const maxHistogramRows = 500_000

// histogramStats adds the (api, node) pairs known only from histogram or summary points.
// A cumulative point holds everything its series counted since it began, so neither
// its count nor its percentiles are the window's: each series' points are followed
// from seriesLookback before the window by series.CumulativeHistogram (the rule of
// series.Next, horizon the window's start, the same windowTotalsCTE writes in SQL), the
// buckets each point inside the window gained are merged per (api, node), and the
// percentiles read from them by series.Quantile. Calls are the counts gained.
//
// Points without buckets (summaries, rows stored before schema v3) still count their
// calls by the rule; their percentiles, where no point of the pair has buckets, are the
// latest such point's own.
func histogramStats(ctx context.Context, env *Env, in TraceStatsInput, since, until time.Time, stats map[apiNode]*TraceStat) error {
	var f filter
	f.add("kind IN ('histogram', 'exp_histogram', 'summary')")
	f.add("ts >= ? AND ts < ?", since.Add(-seriesLookback), until)
	f.add("api IS NOT NULL AND node IS NOT NULL")
	f.addIf(in.Cluster != "", "cluster = ?", in.Cluster)
	f.addIf(in.Node != "", "node = ?", in.Node)
	f.addIf(in.API != "", "api = ?", in.API)
	f.name(in.Name)
	// Points ordered per series, and inside one time as windowTotalsCTE keeps the first.
	rows, err := env.Store.DB().QueryContext(ctx, fmt.Sprintf(`SELECT api, node, concat_ws('|', coalesce(pid::VARCHAR, ''), name, coalesce(thread_id::VARCHAR, ''), coalesce(comm_id, ''), attributes),
			ts, start_ts, kind, coalesce(unit, ''), coalesce(count, 0), coalesce(sum, 0), p50, p95, p99,
			scale, coalesce(bucket_offset, 0), bucket_counts, coalesce(zero_count, 0), explicit_bounds,
			coalesce(json_extract_string(attributes, '$."%s"'), '') = 'delta'
		FROM events WHERE %s
		ORDER BY api, node, pid, name, thread_id, comm_id, attributes, ts, count, start_ts
		LIMIT %d`, echoschema.AttrTemporality, f.sql(), maxHistogramRows+1), f.args...)
	if err != nil {
		return fmt.Errorf("get_trace_stats: %w", err)
	}
	defer rows.Close()
	pairs := map[apiNode]*windowHistogram{}
	var cur []histogramPoint
	var curKey apiNode
	var curSeries string
	flush := func() {
		if len(cur) == 0 {
			return
		}
		h := pairs[curKey]
		if h == nil {
			h = newWindowHistogram()
			pairs[curKey] = h
		}
		h.addSeries(cur, since.UnixNano(), until.UnixNano())
		cur = cur[:0]
	}
	n := 0
	for rows.Next() {
		if n++; n > maxHistogramRows {
			return invalid("the window holds more than %d histogram points: narrow it (since/until) or filter by node or api", maxHistogramRows)
		}
		var (
			k                 apiNode
			key               string
			p                 histogramPoint
			start             sql.NullTime
			p50, p95, p99     sql.NullFloat64
			scale             sql.NullInt32
			counts, boundsRaw any
		)
		if err := rows.Scan(&k.api, &k.node, &key, &p.ts, &start, &p.kind, &p.unit, &p.count, &p.sum, &p50, &p95, &p99,
			&scale, &p.offset, &counts, &p.zero, &boundsRaw, &p.delta); err != nil {
			return fmt.Errorf("get_trace_stats: %w", err)
		}
		if k != curKey || key != curSeries {
			flush()
			curKey, curSeries = k, key
		}
		if start.Valid {
			p.start = start.Time
		}
		p.p50, p.p95, p.p99 = nullNaN(p50), nullNaN(p95), nullNaN(p99)
		p.scale = scale.Int32
		if p.counts, err = listOf[uint64](counts); err != nil {
			return fmt.Errorf("get_trace_stats: bucket_counts: %w", err)
		}
		if p.bounds, err = listOf[float64](boundsRaw); err != nil {
			return fmt.Errorf("get_trace_stats: explicit_bounds: %w", err)
		}
		p.buckets = p.counts != nil && (p.kind == echoschema.KindExpHistogram || (p.kind == echoschema.KindHistogram && len(p.bounds)+1 == len(p.counts)))
		cur = append(cur, p)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("get_trace_stats: %w", err)
	}
	flush()
	for k, h := range pairs {
		if _, ok := stats[k]; ok || h.calls == 0 {
			continue
		}
		s := h.stat()
		s.API, s.Node = k.api, k.node
		stats[k] = &s
	}
	return nil
}

// histogramPoint is one stored histogram or summary point.
type histogramPoint struct {
	ts, start     time.Time
	kind, unit    string
	count         int64
	sum           float64
	p50, p95, p99 float64
	delta         bool
	// buckets says the point carries buckets: exponential (scale, offset, counts,
	// zero) or explicit (bounds, counts).
	buckets bool
	scale   int32
	offset  int32
	counts  []uint64
	zero    uint64
	bounds  []float64
}

// windowHistogram is what one (api, node)'s series gained inside the window.
type windowHistogram struct {
	calls float64
	unit  string
	// exp holds the exponential buckets gained, per scale, by bucket index; zero the
	// zero bucket; explicit the explicit buckets gained, by value range.
	exp      map[int32]map[int32]uint64
	zero     uint64
	explicit map[[2]float64]uint64
	// latest is the newest point without buckets, whose own percentiles stand in
	// when no point of the pair has buckets.
	latest *histogramPoint
}

func newWindowHistogram() *windowHistogram {
	return &windowHistogram{exp: map[int32]map[int32]uint64{}, explicit: map[[2]float64]uint64{}}
}

// addSeries follows one series' points (in time order) and adds what those inside
// [since, until) gained.
func (h *windowHistogram) addSeries(pts []histogramPoint, since, until int64) {
	// Buckets of one series are compared at one scale: the coarsest it used.
	minScale := int32(math.MaxInt32)
	for _, p := range pts {
		if p.kind == echoschema.KindExpHistogram && p.buckets {
			minScale = min(minScale, p.scale)
		}
	}
	var hist series.CumulativeHistogram
	var cum series.Cumulative
	for i := range pts {
		p := &pts[i]
		if h.unit == "" {
			h.unit = p.unit
		}
		ts := p.ts.UnixNano()
		var start int64
		if !p.start.IsZero() {
			start = p.start.UnixNano()
		}
		inWindow := ts >= since && ts < until
		if !p.buckets {
			// No buckets: the count alone, by the same rule.
			var inc series.Increase
			ok := p.delta
			if p.delta {
				inc.Value = float64(p.count)
			} else {
				inc, ok = cum.Add(series.Mark{Start: start, Time: ts, Total: float64(p.count)}, since)
			}
			if inWindow {
				if ok {
					h.calls += inc.Value
				}
				if !math.IsNaN(p.p50) && (h.latest == nil || !p.ts.Before(h.latest.ts)) {
					latest := *p
					latest.counts, latest.bounds = nil, nil
					h.latest = &latest
				}
			}
			continue
		}
		b := series.Buckets{Offset: p.offset, Counts: p.counts, Zero: p.zero, Sum: p.sum}
		if p.kind == echoschema.KindExpHistogram {
			b = downscale(b, p.scale-minScale)
		}
		gained, inc, ok := b, series.Increase{Value: float64(b.Count())}, true
		if !p.delta {
			gained, inc, ok = hist.Add(start, ts, b, since)
		}
		if !ok || !inWindow {
			continue
		}
		h.calls += inc.Value
		if p.kind == echoschema.KindHistogram {
			for j, n := range gained.Counts {
				lo, hi := math.Inf(-1), math.Inf(1)
				if j > 0 {
					lo = p.bounds[j-1]
				}
				if j < len(p.bounds) {
					hi = p.bounds[j]
				}
				h.explicit[[2]float64{lo, hi}] += n
			}
			continue
		}
		byIndex := h.exp[minScale]
		if byIndex == nil {
			byIndex = map[int32]uint64{}
			h.exp[minScale] = byIndex
		}
		for j, n := range gained.Counts {
			byIndex[gained.Offset+int32(j)] += n
		}
		h.zero += gained.Zero
	}
}

// downscale merges an exponential histogram's buckets by 2^by: bucket i at scale s is
// bucket i>>by at scale s-by.
func downscale(b series.Buckets, by int32) series.Buckets {
	if by <= 0 || len(b.Counts) == 0 {
		return b
	}
	first, last := b.Offset>>by, (b.Offset+int32(len(b.Counts))-1)>>by
	out := series.Buckets{Offset: first, Counts: make([]uint64, last-first+1), Zero: b.Zero, Sum: b.Sum}
	for i, n := range b.Counts {
		out.Counts[(b.Offset+int32(i))>>by-first] += n
	}
	return out
}

// stat is the pair's calls and percentiles.
func (h *windowHistogram) stat() TraceStat {
	s := TraceStat{Calls: int64(math.Round(h.calls)), Unit: h.unit}
	buckets := h.bucketList()
	if len(buckets) == 0 {
		if h.latest != nil {
			s.P50, s.P95, s.P99 = h.latest.p50, finiteOr(h.latest.p95, h.latest.p50), finiteOr(h.latest.p99, finiteOr(h.latest.p95, h.latest.p50))
		}
		return s
	}
	q := func(p float64) float64 { return finiteOr(series.Quantile(p, buckets, math.NaN(), math.NaN()), 0) }
	s.P50, s.P95, s.P99 = q(0.50), q(0.95), q(0.99)
	return s
}

// bucketList lays the gained buckets out in ascending order for series.Quantile:
// exponential ones at the coarsest scale any series used, explicit ones by range.
func (h *windowHistogram) bucketList() []series.Bucket {
	var out []series.Bucket
	if len(h.exp) > 0 || h.zero > 0 {
		scale := int32(math.MaxInt32)
		for sc := range h.exp {
			scale = min(scale, sc)
		}
		merged := map[int32]uint64{}
		for sc, byIndex := range h.exp {
			for i, n := range byIndex {
				merged[i>>(sc-scale)] += n
			}
		}
		if len(merged) > 0 {
			lo, hi := int32(math.MaxInt32), int32(math.MinInt32)
			for i := range merged {
				lo, hi = min(lo, i), max(hi, i)
			}
			counts := make([]uint64, hi-lo+1)
			for i, n := range merged {
				counts[i-lo] = n
			}
			out = series.ExponentialBuckets(scale, h.zero, lo, counts)
		} else {
			out = []series.Bucket{{Lower: 0, Upper: 0, Count: h.zero}}
		}
	}
	for r, n := range h.explicit {
		out = append(out, series.Bucket{Lower: r[0], Upper: r[1], Count: n})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Lower != out[j].Lower {
			return out[i].Lower < out[j].Lower
		}
		return out[i].Upper < out[j].Upper
	})
	var total uint64
	for _, b := range out {
		total += b.Count
	}
	if total == 0 {
		return nil
	}
	return out
}

func nullNaN(f sql.NullFloat64) float64 {
	if !f.Valid {
		return math.NaN()
	}
	return f.Float64
}

func finiteOr(f, otherwise float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return otherwise
	}
	return f
}

// listOf reads a DuckDB list column (nil when NULL).
func listOf[T uint64 | float64](v any) ([]T, error) {
	if v == nil {
		return nil, nil
	}
	items, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("a list scanned as %T", v)
	}
	out := make([]T, len(items))
	for i, item := range items {
		x, ok := item.(T)
		if !ok {
			return nil, fmt.Errorf("a list item scanned as %T", item)
		}
		out[i] = x
	}
	return out, nil
}
