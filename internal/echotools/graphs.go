package echotools

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/fathom-gpu/fathom/internal/semconv"
)

// maxGraphBuckets bounds the time buckets of one answer; with at most maxGraphProcesses
// processes, an answer has at most their product of bucket entries.
const (
	maxGraphBuckets   = 240
	maxGraphProcesses = 500
	defaultGraphSplit = 12
)

// The CUDA calls that make and run graphs, runtime and driver API. The receiver probes
// cudaStreamBeginCapture, cudaStreamEndCapture, cudaGraphInstantiate, cudaGraphLaunch
// and cuGraphLaunch; the others are counted when another sender reports them.
var (
	graphLaunchAPIs      = semconv.GraphLaunchAPIs
	graphBeginCaptureAPI = []string{"cudaStreamBeginCapture", "cuStreamBeginCapture", "cuStreamBeginCapture_v2"}
	graphEndCaptureAPIs  = []string{"cudaStreamEndCapture", "cuStreamEndCapture"}
	graphInstantiateAPIs = []string{"cudaGraphInstantiate", "cudaGraphInstantiateWithFlags", "cuGraphInstantiate", "cuGraphInstantiateWithFlags", "cuGraphInstantiate_v2"}
)

// recaptureExplained is the definition returned with every answer.
const recaptureExplained = "recaptures = graph instantiations made after the process was already replaying graphs: " +
	"after the first export in the window that counted a graph launch, or anywhere in the window when its cumulative " +
	"launch count was already above zero before it. Capturing all graphs at warm-up and then replaying them is the " +
	"intended use; a graph instantiated while others already replay means a new shape or an invalidated graph, each " +
	"costing a capture and an instantiation on the launch path. Instantiations counted in the same export as the first " +
	"launch are taken as warm-up. recapture_share = recaptures / instantiations."

// GraphActivityInput picks the processes, window and bucket width.
type GraphActivityInput struct {
	Cluster string `json:"cluster,omitempty" jsonschema:"only this cluster"`
	Node    string `json:"node,omitempty" jsonschema:"only this node (host.name)"`
	Rank    *int   `json:"rank,omitempty" jsonschema:"only the process of this rank (fathom.rank)"`
	Since   string `json:"since,omitempty" jsonschema:"window start: RFC 3339 or a duration before until (15m); default until minus 1h"`
	Until   string `json:"until,omitempty" jsonschema:"window end (exclusive), RFC 3339; default now"`
	Bucket  string `json:"bucket,omitempty" jsonschema:"bucket width as a duration (1m, 30s); at most 240 buckets per window; default the window split in 12"`
	Limit   int    `json:"limit,omitempty" jsonschema:"processes, 1 to 500, most re-captures first; default 50"`
}

// GraphCounts is what a process did with CUDA graphs in a span of time.
type GraphCounts struct {
	Launches       int64 `json:"launches"`
	CapturesBegun  int64 `json:"captures_begun"`
	CapturesEnded  int64 `json:"captures_ended"`
	Instantiations int64 `json:"instantiations"`
	Recaptures     int64 `json:"recaptures"`
}

// GraphBucket is one time bucket with any graph activity.
type GraphBucket struct {
	Start string `json:"start"`
	GraphCounts
}

// GraphProcess is one process's graph activity in the window.
type GraphProcess struct {
	Cluster string `json:"cluster,omitempty"`
	Node    string `json:"node"`
	PID     int64  `json:"pid"`
	Process string `json:"process,omitempty"`
	Rank    *int64 `json:"rank,omitempty"`
	GraphCounts
	// RecaptureShare is Recaptures / Instantiations; absent without instantiations.
	RecaptureShare *float64 `json:"recapture_share,omitempty"`
	// LaunchSource is the metric launches were counted from: cuda.graph.launches when
	// the process reports it, else cuda.api.calls of cudaGraphLaunch and cuGraphLaunch.
	LaunchSource string `json:"launch_source"`
	// Buckets lists, oldest first, the buckets in which the process did anything with
	// graphs; empty buckets are left out.
	Buckets []GraphBucket `json:"buckets"`
}

// GraphActivityOutput lists processes, most re-captures first.
type GraphActivityOutput struct {
	Since     string         `json:"since"`
	Until     string         `json:"until"`
	BucketS   float64        `json:"bucket_s"`
	Recapture string         `json:"recapture"`
	Processes []GraphProcess `json:"processes"`
	// Total counts the processes with graph activity in the window; more than
	// len(processes) when limit cut the list.
	Total int64 `json:"total"`
}

func cudaGraphActivityTool(env *Env) (*Tool, error) {
	return newTool("cuda_graph_activity", "CUDA graph activity",
		"Per process, CUDA graph launches, stream captures begun and ended, instantiations and re-captures (instantiations while graphs were already replaying), "+
			"with the share of instantiations that were re-captures, totalled over the window and per time bucket. Most re-captures first.",
		ScopeTools,
		func(ctx context.Context, in GraphActivityInput) (GraphActivityOutput, error) {
			return cudaGraphActivity(ctx, env, in)
		},
		func(s *jsonschema.Schema) { setRange(s, "limit", 1, maxGraphProcesses); setRange(s, "rank", 0, 1<<30) })
}

func cudaGraphActivity(ctx context.Context, env *Env, in GraphActivityInput) (GraphActivityOutput, error) {
	since, until, err := window(env, in.Since, in.Until)
	if err != nil {
		return GraphActivityOutput{}, err
	}
	span := until.Sub(since)
	bucket := (span + defaultGraphSplit - 1) / defaultGraphSplit
	if in.Bucket != "" {
		if bucket, err = time.ParseDuration(in.Bucket); err != nil || bucket < time.Second {
			return GraphActivityOutput{}, invalid("bucket %q is not a duration of at least 1s, such as 30s or 5m", in.Bucket)
		}
		if n := (span + bucket - 1) / bucket; n > maxGraphBuckets {
			return GraphActivityOutput{}, invalid("bucket %s cuts the %s window into %d buckets, more than %d: widen it", in.Bucket, span, n, maxGraphBuckets)
		}
	}
	bucket = max(bucket.Truncate(time.Microsecond), time.Microsecond)
	limit := in.Limit
	if limit == 0 {
		limit = 50
	}
	var f filter
	f.addIf(in.Cluster != "", "cluster = ?", in.Cluster)
	f.addIf(in.Node != "", "node = ?", in.Node)
	f.addIf(in.Rank != nil, "rank = ?", derefInt(in.Rank))
	apis := append(append(append(append([]string{}, graphLaunchAPIs...), graphBeginCaptureAPI...), graphEndCaptureAPIs...), graphInstantiateAPIs...)
	f.add("(name = ? OR api IN ("+strings.TrimSuffix(strings.Repeat("?,", len(apis)), ",")+"))", append([]any{semconv.MetricCUDAGraphLaunches}, stringsToArgs(apis)...)...)
	ctes, args := windowTotalsCTE(since, until, []string{semconv.MetricCUDAGraphLaunches, semconv.MetricCUDAAPICalls}, f)
	q := fmt.Sprintf(`WITH %s,
		calls AS (
			SELECT node, pid, cluster, process, rank, ts, counted_before,
				(epoch_us(ts) - ?) // ? AS bucket,
				CASE WHEN name = '%s' THEN d_value END AS launch_metric,
				CASE WHEN name = '%s' AND api IN (%s) THEN d_value END AS launch_calls,
				CASE WHEN name = '%s' AND api IN (%s) THEN d_value END AS begun,
				CASE WHEN name = '%s' AND api IN (%s) THEN d_value END AS ended,
				CASE WHEN name = '%s' AND api IN (%s) THEN d_value END AS instantiated
			FROM w
		),
		source AS (
			SELECT node, pid, bool_or(launch_metric IS NOT NULL) AS from_metric FROM calls GROUP BY node, pid
		),
		launches AS (
			SELECT calls.*, from_metric, CASE WHEN from_metric THEN launch_metric ELSE launch_calls END AS launched
			FROM calls JOIN source USING (node, pid)
		),
		replaying AS (
			SELECT node, pid,
				bool_or(launched IS NOT NULL AND counted_before) AS before_window,
				min(ts) FILTER (WHERE launched > 0) AS first_launch
			FROM launches GROUP BY node, pid
		),
		buckets AS (
			SELECT node, pid, bucket, any_value(cluster) AS cluster, any_value(process) AS process, max(rank) AS rank,
				any_value(from_metric) AS from_metric,
				coalesce(sum(launched), 0)::BIGINT AS launched, coalesce(sum(begun), 0)::BIGINT AS begun,
				coalesce(sum(ended), 0)::BIGINT AS ended, coalesce(sum(instantiated), 0)::BIGINT AS instantiated,
				coalesce(sum(instantiated) FILTER (WHERE before_window OR ts > first_launch), 0)::BIGINT AS recaptured
			FROM launches JOIN replaying USING (node, pid)
			GROUP BY node, pid, bucket
		),
		totals AS (
			SELECT node, pid, sum(recaptured) AS recaptured, sum(instantiated) AS instantiated, sum(launched) AS launched
			FROM buckets GROUP BY node, pid
			HAVING sum(launched) + sum(begun) + sum(ended) + sum(instantiated) > 0
		),
		top AS (
			SELECT node, pid, count(*) OVER () AS total,
				row_number() OVER (ORDER BY recaptured DESC, instantiated DESC, launched DESC, node, pid) AS place
			FROM totals QUALIFY place <= %d
		)
		SELECT place, total, node, pid, coalesce(cluster, ''), coalesce(process, ''), rank, from_metric, bucket,
			launched, begun, ended, instantiated, recaptured
		FROM buckets JOIN top USING (node, pid)
		WHERE launched + begun + ended + instantiated > 0
		ORDER BY place, bucket`,
		ctes,
		semconv.MetricCUDAGraphLaunches,
		semconv.MetricCUDAAPICalls, quoteList(graphLaunchAPIs),
		semconv.MetricCUDAAPICalls, quoteList(graphBeginCaptureAPI),
		semconv.MetricCUDAAPICalls, quoteList(graphEndCaptureAPIs),
		semconv.MetricCUDAAPICalls, quoteList(graphInstantiateAPIs),
		limit)
	rows, err := env.Store.DB().QueryContext(ctx, q, append(args, since.UnixMicro(), bucket.Microseconds())...)
	if err != nil {
		return GraphActivityOutput{}, fmt.Errorf("cuda_graph_activity: %w", err)
	}
	defer rows.Close()
	out := GraphActivityOutput{
		Since: since.Format(time.RFC3339Nano), Until: until.Format(time.RFC3339Nano), BucketS: bucket.Seconds(),
		Recapture: recaptureExplained, Processes: []GraphProcess{},
	}
	lastPlace := int64(0)
	for rows.Next() {
		var (
			place, index int64
			p            GraphProcess
			rank         sql.NullInt64
			fromMetric   bool
			b            GraphBucket
		)
		if err := rows.Scan(&place, &out.Total, &p.Node, &p.PID, &p.Cluster, &p.Process, &rank, &fromMetric, &index,
			&b.Launches, &b.CapturesBegun, &b.CapturesEnded, &b.Instantiations, &b.Recaptures); err != nil {
			return out, fmt.Errorf("cuda_graph_activity: %w", err)
		}
		if place != lastPlace {
			lastPlace = place
			p.Rank = ip(rank)
			p.LaunchSource = semconv.MetricCUDAAPICalls
			if fromMetric {
				p.LaunchSource = semconv.MetricCUDAGraphLaunches
			}
			p.Buckets = []GraphBucket{}
			out.Processes = append(out.Processes, p)
		}
		cur := &out.Processes[len(out.Processes)-1]
		b.Start = since.Add(time.Duration(index) * bucket).Format(time.RFC3339Nano)
		cur.Buckets = append(cur.Buckets, b)
		cur.Launches += b.Launches
		cur.CapturesBegun += b.CapturesBegun
		cur.CapturesEnded += b.CapturesEnded
		cur.Instantiations += b.Instantiations
		cur.Recaptures += b.Recaptures
	}
	for i := range out.Processes {
		if p := &out.Processes[i]; p.Instantiations > 0 {
			p.RecaptureShare = f64p(float64(p.Recaptures) / float64(p.Instantiations))
		}
	}
	return out, rows.Err()
}

func stringsToArgs(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// quoteList renders constant API names (never user input) as a SQL list.
func quoteList(names []string) string {
	return "'" + strings.Join(names, "', '") + "'"
}
