package echotools

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"sort"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/series"
)

// maxGroups bounds how many nodes/ranks one outlier query considers.
const maxGroups = 100_000

// OutlierInput names the signal and the window to compare nodes (or ranks) over.
type OutlierInput struct {
	Signal    string  `json:"signal" jsonschema:"metric or event name whose values are compared, e.g. nccl.allreduce.duration"`
	Cluster   string  `json:"cluster,omitempty" jsonschema:"only this cluster"`
	Since     string  `json:"since,omitempty" jsonschema:"window start: RFC 3339 or a duration (15m); default until minus 1h"`
	Until     string  `json:"until,omitempty" jsonschema:"window end, RFC 3339; default now"`
	By        string  `json:"by,omitempty" jsonschema:"compare nodes (default) or ranks"`
	K         float64 `json:"k,omitempty" jsonschema:"threshold in scaled MADs from the median; default 3"`
	Direction string  `json:"direction,omitempty" jsonschema:"high (default: larger is slower, e.g. durations) or low (smaller is worse, e.g. throughput)"`
}

// Outlier is one node or rank beyond the threshold.
type Outlier struct {
	Node    string  `json:"node"`
	Rank    *int64  `json:"rank,omitempty"`
	Cluster string  `json:"cluster,omitempty"`
	Value   float64 `json:"value"`
	// Lag is how far the value is from the median, in the signal's unit, always
	// positive in the bad direction.
	Lag    float64 `json:"lag"`
	Score  float64 `json:"score"`
	Points int64   `json:"points"`

	// For get_cost; not part of the answer.
	worldSize int64
}

// OutlierOutput ranks outliers by lag, worst first.
type OutlierOutput struct {
	Signal    string    `json:"signal"`
	By        string    `json:"by"`
	Unit      string    `json:"unit,omitempty"`
	Groups    int       `json:"groups"`
	Median    float64   `json:"median"`
	MAD       float64   `json:"mad"`
	Threshold float64   `json:"threshold"`
	Outliers  []Outlier `json:"outliers"`
}

type groupStat struct {
	node, cluster string
	rank          sql.NullInt64
	value         float64
	points        int64
	worldSize     sql.NullInt64
}

func outlierSchema(s *jsonschema.Schema) {
	setEnum(s, "by", "node", "rank")
	setEnum(s, "direction", "high", "low")
	setRange(s, "k", 0.5, 100)
}

func findOutlierNodesTool(env *Env) (*Tool, error) {
	return newTool("find_outlier_nodes", "Find outlier nodes",
		"Nodes (or ranks) whose mean value of a signal in a window lies beyond median + k*1.4826*MAD across their peers, ranked by lag behind the median.",
		ScopeTools,
		func(ctx context.Context, in OutlierInput) (OutlierOutput, error) {
			return findOutliers(ctx, env, in)
		}, outlierSchema)
}

func findOutliers(ctx context.Context, env *Env, in OutlierInput) (OutlierOutput, error) {
	if in.Signal == "" {
		return OutlierOutput{}, invalid("signal must name a metric or event")
	}
	since, until, err := window(env, in.Since, in.Until)
	if err != nil {
		return OutlierOutput{}, err
	}
	by := in.By
	if by == "" {
		by = "node"
	}
	k := in.K
	if k == 0 {
		k = 3
	}
	// Each node's mean comes from the per-minute sums of signal_rollup, written with
	// the rows, rather than from every point: the window is minute-aligned.
	var f filter
	f.add("name = ?", in.Signal)
	f.add("minute >= date_trunc('minute', ?::TIMESTAMP) AND minute < ?", since, until)
	f.addIf(in.Cluster != "", "cluster = ?", in.Cluster)
	groupBy, rankExpr := "node", "NULL::INTEGER"
	if by == "rank" {
		groupBy, rankExpr = "node, rank", "rank"
		f.add("rank IS NOT NULL")
	}
	q := fmt.Sprintf(`SELECT node, %s, sum(sum) / sum(count), sum(count)::BIGINT,
			coalesce(any_value(cluster), ''), max(world_size), coalesce(any_value(unit), '')
		FROM signal_rollup WHERE %s GROUP BY %s LIMIT %d`, rankExpr, f.sql(), groupBy, maxGroups)
	rows, err := env.Store.DB().QueryContext(ctx, q, f.args...)
	if err != nil {
		return OutlierOutput{}, fmt.Errorf("find_outlier_nodes: %w", err)
	}
	defer rows.Close()
	var groups []groupStat
	out := OutlierOutput{Signal: in.Signal, By: by, Outliers: []Outlier{}}
	for rows.Next() {
		var g groupStat
		var unit string
		if err := rows.Scan(&g.node, &g.rank, &g.value, &g.points, &g.cluster, &g.worldSize, &unit); err != nil {
			return out, fmt.Errorf("find_outlier_nodes: %w", err)
		}
		if unit != "" {
			out.Unit = unit
		}
		groups = append(groups, g)
	}
	if err := rows.Err(); err != nil {
		return out, err
	}
	out.Groups = len(groups)
	if len(groups) == 0 {
		return out, nil
	}
	values := make([]float64, len(groups))
	for i, g := range groups {
		values[i] = g.value
	}
	// series' median and MAD, the straggler processor's, so k reads as "standard
	// deviations" in both.
	out.Median = series.Median(values)
	out.MAD = series.MAD(values, out.Median)
	spread := k * series.MADScale * out.MAD
	sign := 1.0
	if in.Direction == "low" {
		sign = -1
	}
	out.Threshold = out.Median + sign*spread
	for _, g := range groups {
		lag := sign * (g.value - out.Median)
		// With MAD 0 (most peers identical) anything on the bad side is an outlier.
		if lag <= spread || lag <= 0 {
			continue
		}
		score := math.Inf(1)
		if out.MAD > 0 {
			score = lag / (series.MADScale * out.MAD)
		}
		o := Outlier{Node: g.node, Cluster: g.cluster, Value: g.value, Lag: lag, Points: g.points, Score: finite(score), worldSize: g.worldSize.Int64}
		if g.rank.Valid {
			r := g.rank.Int64
			o.Rank = &r
		}
		out.Outliers = append(out.Outliers, o)
	}
	sort.SliceStable(out.Outliers, func(i, j int) bool { return out.Outliers[i].Lag > out.Outliers[j].Lag })
	return out, nil
}

// outlierHardware reads each straggler's provider and GPU model from its own rows'
// attributes (only get_cost needs them).
func outlierHardware(ctx context.Context, env *Env, in OutlierInput, outliers []Outlier) (map[string][2]string, error) {
	nodes := make([]string, 0, len(outliers))
	for _, o := range outliers {
		nodes = append(nodes, o.Node)
	}
	return nodeHardware(ctx, env, in, []string{in.Signal}, nodes)
}

// nodeHardware reads each node's provider and GPU model from its rows of the named
// signals in the window.
func nodeHardware(ctx context.Context, env *Env, in OutlierInput, names, nodes []string) (map[string][2]string, error) {
	out := map[string][2]string{}
	if len(nodes) == 0 || len(names) == 0 {
		return out, nil
	}
	since, until, _ := window(env, in.Since, in.Until)
	rows, err := env.Store.DB().QueryContext(ctx, fmt.Sprintf(`SELECT node,
			coalesce(any_value(json_extract_string(attributes, '$."%s"')), ''),
			coalesce(any_value(json_extract_string(attributes, '$."%s"')), '')
		FROM events WHERE list_contains(?, name) AND ts >= ? AND ts < ? AND list_contains(?, node) GROUP BY node`, attrProvider, attrGPUModel),
		names, since, until, nodes)
	if err != nil {
		return nil, fmt.Errorf("get_cost: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var node, provider, model string
		if err := rows.Scan(&node, &provider, &model); err != nil {
			return nil, err
		}
		out[node] = [2]string{provider, model}
	}
	return out, rows.Err()
}

// finite keeps JSON encodable: an infinite score (MAD 0) is reported as the largest
// float.
func finite(f float64) float64 {
	if math.IsInf(f, 1) {
		return math.MaxFloat64
	}
	return f
}

// CostInput is an outlier query plus nothing else: the cost of the stragglers it finds.
// With signal fathom.straggler.time_lost it prices what the straggler processor
// measured instead of comparing nodes itself.
type CostInput = OutlierInput

// StragglerCost is what one straggling node cost.
type StragglerCost struct {
	Node          string  `json:"node"`
	Rank          *int64  `json:"rank,omitempty"`
	Cluster       string  `json:"cluster,omitempty"`
	Provider      string  `json:"provider"`
	GPUModel      string  `json:"gpu_model"`
	LagSeconds    float64 `json:"lag_seconds"`
	Steps         int64   `json:"steps"`
	AffectedRanks int64   `json:"affected_ranks"`
	GPUHours      float64 `json:"gpu_hours"`
	USDPerGPUHour float64 `json:"usd_per_gpu_hour"`
	USD           float64 `json:"usd"`
}

// CostGroup totals stragglers by provider and GPU model.
type CostGroup struct {
	Provider   string  `json:"provider"`
	GPUModel   string  `json:"gpu_model"`
	Stragglers int     `json:"stragglers"`
	GPUHours   float64 `json:"gpu_hours"`
	USD        float64 `json:"usd"`
}

// CostOutput: GPU-hours lost waiting for stragglers and what they cost.
type CostOutput struct {
	Signal     string          `json:"signal"`
	Unit       string          `json:"unit"`
	TotalHours float64         `json:"total_gpu_hours"`
	TotalUSD   float64         `json:"total_usd"`
	ByGroup    []CostGroup     `json:"by_provider_and_gpu"`
	Stragglers []StragglerCost `json:"stragglers"`
	Notes      []string        `json:"notes"`
}

// secondsPer converts a signal's unit to seconds; UCUM units as OTel uses them.
var secondsPer = map[string]float64{"s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60, "h": 3600}

func costTool(env *Env) (*Tool, error) {
	return newTool("get_cost", "Cost of stragglers",
		"Dollar cost of stragglers in a window, priced per provider and GPU model from the operator's rates file. With signal fathom.straggler.time_lost: the GPU time each rank's peers waited while the straggler processor flagged it, as it measured it. With any other signal: each outlier node's lag behind the median x its steps x the ranks that wait for it (world size) = GPU-hours.",
		ScopeTools,
		func(ctx context.Context, in CostInput) (CostOutput, error) {
			if in.Signal == semconv.MetricStragglerTimeLost {
				return stragglerCost(ctx, env, in)
			}
			outliers, err := findOutliers(ctx, env, in)
			if err != nil {
				return CostOutput{}, err
			}
			out := CostOutput{Signal: in.Signal, Unit: outliers.Unit, ByGroup: []CostGroup{}, Stragglers: []StragglerCost{}, Notes: []string{}}
			perSecond, ok := secondsPer[outliers.Unit]
			if !ok {
				perSecond = 1
				out.Notes = append(out.Notes, fmt.Sprintf("unit %q is not a time unit; lag taken as seconds", outliers.Unit))
			}
			hardware, err := outlierHardware(ctx, env, in, outliers.Outliers)
			if err != nil {
				return out, err
			}
			var ranksSeen map[string]int64
			byGroup := map[[2]string]*CostGroup{}
			for _, o := range outliers.Outliers {
				// Ranks that wait on a straggler: its job's world size, else the ranks
				// seen reporting the signal in its cluster.
				affected := o.worldSize
				if affected <= 0 {
					if ranksSeen == nil {
						if ranksSeen, err = distinctRanks(ctx, env, in); err != nil {
							return out, err
						}
					}
					affected = max(ranksSeen[o.Cluster], 1)
				}
				lagSeconds := o.Lag * perSecond
				out.add(env.Rates, hardware[o.Node], StragglerCost{Node: o.Node, Rank: o.Rank, Cluster: o.Cluster, LagSeconds: lagSeconds,
					Steps: o.Points, AffectedRanks: affected, GPUHours: lagSeconds * float64(o.Points) * float64(affected) / 3600}, byGroup)
			}
			out.groups(byGroup)
			return out, nil
		}, outlierSchema)
}

// add prices one straggler's GPU-hours at its node's rate and counts it in its
// provider and GPU model's group.
func (out *CostOutput) add(rates *Rates, hw [2]string, sc StragglerCost, byGroup map[[2]string]*CostGroup) {
	rate, ok := rates.lookup(hw[0], hw[1])
	if !ok {
		out.Notes = append(out.Notes, fmt.Sprintf("no rate for provider %q GPU %q (node %s); priced at 0", hw[0], hw[1], sc.Node))
	}
	sc.Provider, sc.GPUModel, sc.USDPerGPUHour, sc.USD = hw[0], hw[1], rate, sc.GPUHours*rate
	out.Stragglers = append(out.Stragglers, sc)
	out.TotalHours += sc.GPUHours
	out.TotalUSD += sc.USD
	g := byGroup[hw]
	if g == nil {
		g = &CostGroup{Provider: hw[0], GPUModel: hw[1]}
		byGroup[hw] = g
	}
	g.Stragglers++
	g.GPUHours += sc.GPUHours
	g.USD += sc.USD
}

func (out *CostOutput) groups(byGroup map[[2]string]*CostGroup) {
	for _, g := range byGroup {
		out.ByGroup = append(out.ByGroup, *g)
	}
	sort.Slice(out.ByGroup, func(i, j int) bool { return out.ByGroup[i].USD > out.ByGroup[j].USD })
}

// stragglerCost prices the straggler processor's own measure: per rank, the GPU time
// its peers waited while it was flagged (fathom.straggler.time_lost, summed per
// minute in signal_rollup). Steps are the intervals it was flagged; lag_seconds is the
// mean wait per peer and interval, so that lag x steps x affected ranks is the total as
// for any other signal. Provider and GPU model come from the node's rows of the rank
// signals that flagged it.
func stragglerCost(ctx context.Context, env *Env, in CostInput) (CostOutput, error) {
	out := CostOutput{Signal: in.Signal, Unit: "s", ByGroup: []CostGroup{}, Stragglers: []StragglerCost{}, Notes: []string{}}
	since, until, err := window(env, in.Since, in.Until)
	if err != nil {
		return out, err
	}
	var f filter
	f.add("name = ?", in.Signal)
	f.add("minute >= date_trunc('minute', ?::TIMESTAMP) AND minute < ?", since, until)
	f.addIf(in.Cluster != "", "cluster = ?", in.Cluster)
	rows, err := env.Store.DB().QueryContext(ctx, fmt.Sprintf(`SELECT node, rank, coalesce(any_value(cluster), ''), sum(sum), sum(count)::BIGINT,
			coalesce(max(world_size), 0)
		FROM signal_rollup WHERE %s GROUP BY node, rank ORDER BY 4 DESC, node, rank LIMIT %d`, f.sql(), maxGroups), f.args...)
	if err != nil {
		return out, fmt.Errorf("get_cost: %w", err)
	}
	var found []StragglerCost
	var nodes []string
	for rows.Next() {
		var sc StragglerCost
		var rank sql.NullInt64
		var gpuSeconds float64
		var worldSize int64
		if err := rows.Scan(&sc.Node, &rank, &sc.Cluster, &gpuSeconds, &sc.Steps, &worldSize); err != nil {
			rows.Close()
			return out, fmt.Errorf("get_cost: %w", err)
		}
		if rank.Valid {
			r := rank.Int64
			sc.Rank = &r
		}
		sc.AffectedRanks = max(worldSize-1, 1)
		sc.GPUHours = gpuSeconds / 3600
		if sc.Steps > 0 {
			sc.LagSeconds = gpuSeconds / float64(sc.Steps) / float64(sc.AffectedRanks)
		}
		found = append(found, sc)
		nodes = append(nodes, sc.Node)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, err
	}
	if len(found) == 0 {
		out.Notes = append(out.Notes, "no fathom.straggler.time_lost in the window: no rank was flagged on a time signal, or no straggler processor (gateway mode) writes here")
		return out, nil
	}
	hardware, err := nodeHardware(ctx, env, in, []string{semconv.MetricRankDeviceWait, semconv.MetricRankHostLead}, nodes)
	if err != nil {
		return out, err
	}
	byGroup := map[[2]string]*CostGroup{}
	for _, sc := range found {
		out.add(env.Rates, hardware[sc.Node], sc, byGroup)
	}
	out.groups(byGroup)
	return out, nil
}

func distinctRanks(ctx context.Context, env *Env, in OutlierInput) (map[string]int64, error) {
	since, until, _ := window(env, in.Since, in.Until)
	rows, err := env.Store.DB().QueryContext(ctx, `SELECT coalesce(cluster, ''), count(DISTINCT rank) FROM signal_rollup
		WHERE name = ? AND minute >= date_trunc('minute', ?::TIMESTAMP) AND minute < ? GROUP BY 1`, in.Signal, since, until)
	if err != nil {
		return nil, fmt.Errorf("get_cost: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var c string
		var n int64
		if err := rows.Scan(&c, &n); err != nil {
			return nil, err
		}
		out[c] = n
	}
	return out, rows.Err()
}
