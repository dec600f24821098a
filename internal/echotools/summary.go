package echotools

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/fathom-gpu/fathom/internal/echoschema"
	"github.com/fathom-gpu/fathom/internal/echostore"
	"github.com/fathom-gpu/fathom/internal/series"
)

// ClusterSummaryInput picks the clusters and window.
type ClusterSummaryInput struct {
	Cluster string `json:"cluster,omitempty" jsonschema:"only this cluster"`
	Since   string `json:"since,omitempty" jsonschema:"window start: RFC 3339 or a duration (15m); default until minus 1h"`
	Until   string `json:"until,omitempty" jsonschema:"window end, RFC 3339; default now"`
}

// SignalCount is how many rows a signal has.
type SignalCount struct {
	Name string `json:"name"`
	Rows int64  `json:"rows"`
}

// ClusterSummary is one cluster at a glance.
type ClusterSummary struct {
	Cluster      string        `json:"cluster"`
	Nodes        int64         `json:"nodes"`
	Ranks        int64         `json:"ranks"`
	Rows         int64         `json:"rows"`
	First        string        `json:"first"`
	Last         string        `json:"last"`
	LogRecords   int64         `json:"log_records"`
	Errors       int64         `json:"errors"`
	CausalChains int64         `json:"causal_chains"`
	TopSignals   []SignalCount `json:"top_signals"`
}

// ClusterSummaryOutput lists clusters by name.
type ClusterSummaryOutput struct {
	Since    string           `json:"since"`
	Until    string           `json:"until"`
	Clusters []ClusterSummary `json:"clusters"`
}

func clusterSummaryTool(env *Env) (*Tool, error) {
	return newTool("cluster_summary", "Cluster summary",
		"Per cluster in a window: nodes, ranks, rows, first/last time, log records, errors, causal chains and the busiest signals. A first look.",
		ScopeTools,
		func(ctx context.Context, in ClusterSummaryInput) (ClusterSummaryOutput, error) {
			since, until, err := window(env, in.Since, in.Until)
			if err != nil {
				return ClusterSummaryOutput{}, err
			}
			out := ClusterSummaryOutput{Since: since.Format(time.RFC3339Nano), Until: until.Format(time.RFC3339Nano), Clusters: []ClusterSummary{}}
			var f filter
			f.add("ts >= ? AND ts < ?", since, until)
			f.addIf(in.Cluster != "", "cluster = ?", in.Cluster)
			q := fmt.Sprintf(`SELECT coalesce(cluster, ''), count(DISTINCT node), count(DISTINCT rank), count(*), min(ts), max(ts),
					count(*) FILTER (WHERE kind = 'log'),
					count(*) FILTER (WHERE severity_number >= 17),
					count(*) FILTER (WHERE name = '%s')
				FROM events WHERE %s GROUP BY 1 ORDER BY 1 LIMIT 1000`, echoschema.EventCausalChain, f.sql())
			rows, err := env.Store.DB().QueryContext(ctx, q, f.args...)
			if err != nil {
				return out, fmt.Errorf("cluster_summary: %w", err)
			}
			index := map[string]int{}
			for rows.Next() {
				var c ClusterSummary
				var first, last time.Time
				if err := rows.Scan(&c.Cluster, &c.Nodes, &c.Ranks, &c.Rows, &first, &last, &c.LogRecords, &c.Errors, &c.CausalChains); err != nil {
					rows.Close()
					return out, fmt.Errorf("cluster_summary: %w", err)
				}
				c.First, c.Last, c.TopSignals = first.UTC().Format(time.RFC3339Nano), last.UTC().Format(time.RFC3339Nano), []SignalCount{}
				index[c.Cluster] = len(out.Clusters)
				out.Clusters = append(out.Clusters, c)
			}
			rows.Close()
			top, err := env.Store.DB().QueryContext(ctx, fmt.Sprintf(`SELECT coalesce(cluster, ''), name, count(*) AS n FROM events WHERE %s
				GROUP BY 1, 2 QUALIFY row_number() OVER (PARTITION BY 1 ORDER BY n DESC, name) <= 10 ORDER BY 1, n DESC, name`, f.sql()), f.args...)
			if err != nil {
				return out, fmt.Errorf("cluster_summary: %w", err)
			}
			defer top.Close()
			for top.Next() {
				var cluster string
				var s SignalCount
				if err := top.Scan(&cluster, &s.Name, &s.Rows); err != nil {
					return out, err
				}
				if i, ok := index[cluster]; ok {
					out.Clusters[i].TopSignals = append(out.Clusters[i].TopSignals, s)
				}
			}
			return out, top.Err()
		}, nil)
}

// TraceStatsInput filters the API calls.
type TraceStatsInput struct {
	Cluster string `json:"cluster,omitempty" jsonschema:"only this cluster"`
	Node    string `json:"node,omitempty" jsonschema:"only this node"`
	API     string `json:"api,omitempty" jsonschema:"only this CUDA API or NCCL operation (cuda.api.name / nccl.op)"`
	Name    string `json:"name,omitempty" jsonschema:"only this metric or event name; a trailing * matches a prefix"`
	Since   string `json:"since,omitempty" jsonschema:"window start: RFC 3339 or a duration (15m); default until minus 1h"`
	Until   string `json:"until,omitempty" jsonschema:"window end, RFC 3339; default now"`
	Limit   int    `json:"limit,omitempty" jsonschema:"at most this many (api, node) rows, 1 to 10000; default 1000"`
}

// TraceStat is the latency distribution of one API on one node.
type TraceStat struct {
	API   string  `json:"api"`
	Node  string  `json:"node"`
	Calls int64   `json:"calls"`
	P50   float64 `json:"p50"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
	Unit  string  `json:"unit,omitempty"`
}

// TraceStatsOutput is sorted by p99, slowest first.
type TraceStatsOutput struct {
	Stats []TraceStat `json:"stats"`
}

func traceStatsTool(env *Env) (*Tool, error) {
	return newTool("get_trace_stats", "API latency percentiles",
		"p50/p95/p99 latency and calls per CUDA API / NCCL operation and node in a window, slowest p99 first. Per-call events are read from a per-minute rollup of log buckets (percentiles within about 1% and minute-aligned windows). Where no per-call events exist, the calls and percentiles are those of the histogram points: the buckets each series gained inside the window (a cumulative point holds its whole history), merged per API and node.",
		ScopeTools,
		func(ctx context.Context, in TraceStatsInput) (TraceStatsOutput, error) {
			since, until, err := window(env, in.Since, in.Until)
			if err != nil {
				return TraceStatsOutput{}, err
			}
			limit := in.Limit
			if limit == 0 {
				limit = 1000
			}
			stats, err := callStats(ctx, env, in, since, until)
			if err != nil {
				return TraceStatsOutput{}, err
			}
			if err := histogramStats(ctx, env, in, since, until, stats); err != nil {
				return TraceStatsOutput{}, err
			}
			out := TraceStatsOutput{Stats: make([]TraceStat, 0, len(stats))}
			for _, s := range stats {
				out.Stats = append(out.Stats, *s)
			}
			sort.Slice(out.Stats, func(i, j int) bool {
				a, b := out.Stats[i], out.Stats[j]
				if a.P99 != b.P99 {
					return a.P99 > b.P99
				}
				if a.API != b.API {
					return a.API < b.API
				}
				return a.Node < b.Node
			})
			if len(out.Stats) > limit {
				out.Stats = out.Stats[:limit]
			}
			return out, nil
		},
		func(s *jsonschema.Schema) { setRange(s, "limit", 1, 10000) })
}

type apiNode struct{ api, node string }

// maxBucketRows bounds what one get_trace_stats call reads into memory: about 4,000
// (api, node) pairs at their widest spread of 250 buckets.
const maxBucketRows = 1_000_000

// callStats reads the per-minute bucket counts of per-call events and turns each (api,
// node)'s buckets into percentiles.
func callStats(ctx context.Context, env *Env, in TraceStatsInput, since, until time.Time) (map[apiNode]*TraceStat, error) {
	var f filter
	f.add("minute >= date_trunc('minute', ?::TIMESTAMP) AND minute < ?", since, until)
	f.addIf(in.Cluster != "", "cluster = ?", in.Cluster)
	f.addIf(in.Node != "", "node = ?", in.Node)
	f.addIf(in.API != "", "api = ?", in.API)
	f.name(in.Name)
	rows, err := env.Store.DB().QueryContext(ctx, fmt.Sprintf(`SELECT api, node, bucket, sum(count)::BIGINT, any_value(unit)
		FROM trace_rollup WHERE %s GROUP BY api, node, bucket ORDER BY api, node, bucket LIMIT %d`, f.sql(), maxBucketRows), f.args...)
	if err != nil {
		return nil, fmt.Errorf("get_trace_stats: %w", err)
	}
	defer rows.Close()
	type histogram struct {
		unit    string
		buckets []int32
		counts  []int64
		total   int64
	}
	hists := map[apiNode]*histogram{}
	for rows.Next() {
		var k apiNode
		var bucket int32
		var n int64
		var unit sql.NullString
		if err := rows.Scan(&k.api, &k.node, &bucket, &n, &unit); err != nil {
			return nil, fmt.Errorf("get_trace_stats: %w", err)
		}
		h := hists[k]
		if h == nil {
			h = &histogram{unit: unit.String}
			hists[k] = h
		}
		h.buckets, h.counts, h.total = append(h.buckets, bucket), append(h.counts, n), h.total+n
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make(map[apiNode]*TraceStat, len(hists))
	for k, h := range hists {
		buckets := make([]series.Bucket, len(h.buckets))
		for i, b := range h.buckets {
			lo, hi := echostore.BucketBounds(b)
			buckets[i] = series.Bucket{Lower: lo, Upper: hi, Count: uint64(h.counts[i])}
		}
		q := func(p float64) float64 { return series.Quantile(p, buckets, math.NaN(), math.NaN()) }
		out[k] = &TraceStat{API: k.api, Node: k.node, Calls: h.total, P50: q(0.50), P95: q(0.95), P99: q(0.99), Unit: h.unit}
	}
	return out, nil
}
