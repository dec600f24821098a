package echotools

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/fathom-gpu/fathom/internal/semconv"
)

// checkLookback is how far before the window's end the newest node check record is
// looked for when the window is shorter. The gpuebpf receiver repeats its record at
// least every readiness.report_interval (1h by default), so a running node always has
// one in the last hour; the extra 5 minutes cover the check interval's slack.
const checkLookback = 65 * time.Minute

// Node readiness statuses, worst first in the answer.
const (
	statusNotReady  = "not_ready"       // a check that matters failed: this node cannot trace
	statusNoCheck   = "no_check_record" // data arrived, but no check record
	statusSynthetic = "synthetic"       // the receiver makes its data up: nothing is traced
	statusReady     = "ready"
)

// NodeReadinessInput picks the nodes and the window.
type NodeReadinessInput struct {
	Cluster string `json:"cluster,omitempty" jsonschema:"only this cluster"`
	Node    string `json:"node,omitempty" jsonschema:"only this node (host.name)"`
	Since   string `json:"since,omitempty" jsonschema:"window start: RFC 3339 or a duration before until (15m); default until minus 1h. Check records are looked for over at least the 65 minutes before until"`
	Until   string `json:"until,omitempty" jsonschema:"window end (exclusive), RFC 3339; default now"`
	Limit   int    `json:"limit,omitempty" jsonschema:"nodes, 1 to 10000, worst status first; default 1000"`
}

// NodeCheckResult is one check of `fathom check` as the node reported it.
type NodeCheckResult struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Advisory bool   `json:"advisory,omitempty"`
	Detail   string `json:"detail,omitempty"`
	// Impact says what does not work while the check fails; Fix what to do.
	Impact string `json:"impact,omitempty"`
	Fix    string `json:"fix,omitempty"`
}

// NodeReadiness is one node: its newest check, and whether it sent data in the window.
type NodeReadiness struct {
	Cluster string `json:"cluster,omitempty"`
	Node    string `json:"node"`
	// Status: not_ready (cannot trace here), no_check_record (sent data, never said
	// what it can do), synthetic (its data is made up) or ready.
	Status string `json:"status"`
	// Why says in one line what the status means for this node.
	Why       string            `json:"why"`
	Mode      string            `json:"mode,omitempty"`
	CheckedAt string            `json:"checked_at,omitempty"`
	Kernel    string            `json:"kernel,omitempty"`
	Failed    []string          `json:"failed"`
	Warned    []string          `json:"warned"`
	Checks    []NodeCheckResult `json:"checks"`
	// DataSeen: the node sent metric points or valued records in the window
	// (signal_rollup, minute-aligned); LastDataMinute is the last minute it did.
	DataSeen       bool   `json:"data_seen"`
	LastDataMinute string `json:"last_data_minute,omitempty"`
}

// ReadinessCounts counts all matching nodes by status, past limit too.
type ReadinessCounts struct {
	NotReady      int64 `json:"not_ready"`
	NoCheckRecord int64 `json:"no_check_record"`
	Synthetic     int64 `json:"synthetic"`
	Ready         int64 `json:"ready"`
}

// NodeReadinessOutput lists nodes, worst status first.
type NodeReadinessOutput struct {
	Since       string          `json:"since"`
	Until       string          `json:"until"`
	ChecksSince string          `json:"checks_since"`
	Counts      ReadinessCounts `json:"counts"`
	Nodes       []NodeReadiness `json:"nodes"`
	Truncated   bool            `json:"truncated"`
}

func nodeReadinessTool(env *Env) (*Tool, error) {
	return newTool("node_readiness", "Node readiness",
		"What `fathom check` found on each node (kernel, BTF, privileges, tracefs, BPF load, GPU libraries), from the newest fathom.node.check record "+
			"the node's gpuebpf receiver sent: tells a node that cannot trace (not_ready, with what each failed check stops and its fix) or makes data up (synthetic) "+
			"from one with nothing to trace (ready), and lists nodes that sent data without any check record.",
		ScopeTools,
		func(ctx context.Context, in NodeReadinessInput) (NodeReadinessOutput, error) {
			return nodeReadiness(ctx, env, in)
		},
		func(s *jsonschema.Schema) { setRange(s, "limit", 1, 10000) })
}

func nodeReadiness(ctx context.Context, env *Env, in NodeReadinessInput) (NodeReadinessOutput, error) {
	since, until, err := window(env, in.Since, in.Until)
	if err != nil {
		return NodeReadinessOutput{}, err
	}
	checksSince := since
	if until.Sub(since) < checkLookback {
		checksSince = until.Add(-checkLookback)
	}
	limit := in.Limit
	if limit == 0 {
		limit = 1000
	}
	var f filter
	f.addIf(in.Cluster != "", "cluster = ?", in.Cluster)
	f.addIf(in.Node != "", "node = ?", in.Node)
	args := []any{semconv.EventNodeCheck, checksSince, until}
	args = append(args, f.args...)
	args = append(args, since, until)
	args = append(args, f.args...)
	q := fmt.Sprintf(`WITH checks AS (
			SELECT node, arg_max(cluster, ts) AS cluster, max(ts) AS checked_at,
				arg_max(attributes, ts) AS attributes, arg_max(body, ts) AS body
			FROM events
			WHERE name = ? AND ts >= ? AND ts < ? AND node IS NOT NULL AND %[1]s
			GROUP BY node
		),
		seen AS (
			SELECT node, any_value(cluster) AS cluster, max(minute) AS last_minute
			FROM signal_rollup
			WHERE minute >= date_trunc('minute', ?::TIMESTAMP) AND minute < ? AND %[1]s
			GROUP BY node
		),
		nodes AS (
			SELECT coalesce(c.node, s.node) AS node, coalesce(c.cluster, s.cluster, '') AS cluster,
				c.checked_at, c.attributes, c.body, s.last_minute,
				CASE
					WHEN c.node IS NULL THEN '%[2]s'
					WHEN json_extract_string(c.attributes, '$."%[6]s"') = 'synthetic' THEN '%[4]s'
					WHEN json_extract_string(c.attributes, '$."%[7]s"') = 'false' THEN '%[3]s'
					ELSE '%[5]s'
				END AS status
			FROM checks c FULL OUTER JOIN seen s ON c.node = s.node
		)
		SELECT node, cluster, checked_at, attributes, body, last_minute, status,
			sum(CASE WHEN status = '%[3]s' THEN 1 ELSE 0 END) OVER (),
			sum(CASE WHEN status = '%[2]s' THEN 1 ELSE 0 END) OVER (),
			sum(CASE WHEN status = '%[4]s' THEN 1 ELSE 0 END) OVER (),
			sum(CASE WHEN status = '%[5]s' THEN 1 ELSE 0 END) OVER ()
		FROM nodes
		ORDER BY CASE status WHEN '%[3]s' THEN 0 WHEN '%[2]s' THEN 1 WHEN '%[4]s' THEN 2 ELSE 3 END, node
		LIMIT %[8]d`,
		f.sql(), statusNoCheck, statusNotReady, statusSynthetic, statusReady,
		semconv.ReceiverMode, semconv.NodeReady, limit+1)
	rows, err := env.Store.DB().QueryContext(ctx, q, args...)
	if err != nil {
		return NodeReadinessOutput{}, fmt.Errorf("node_readiness: %w", err)
	}
	defer rows.Close()
	out := NodeReadinessOutput{
		Since: since.Format(time.RFC3339Nano), Until: until.Format(time.RFC3339Nano),
		ChecksSince: checksSince.Format(time.RFC3339Nano), Nodes: []NodeReadiness{},
	}
	for rows.Next() {
		var (
			n                NodeReadiness
			checkedAt, last  sql.NullTime
			attributes, body sql.NullString
		)
		if err := rows.Scan(&n.Node, &n.Cluster, &checkedAt, &attributes, &body, &last, &n.Status,
			&out.Counts.NotReady, &out.Counts.NoCheckRecord, &out.Counts.Synthetic, &out.Counts.Ready); err != nil {
			return out, fmt.Errorf("node_readiness: %w", err)
		}
		if len(out.Nodes) == limit {
			out.Truncated = true
			break
		}
		n.Failed, n.Warned, n.Checks = []string{}, []string{}, []NodeCheckResult{}
		if checkedAt.Valid {
			n.CheckedAt = checkedAt.Time.UTC().Format(time.RFC3339Nano)
			readCheckRecord(&n, attributes.String, body.String)
		}
		if last.Valid {
			n.DataSeen, n.LastDataMinute = true, last.Time.UTC().Format(time.RFC3339)
		}
		n.Why = readinessWhy(n)
		out.Nodes = append(out.Nodes, n)
	}
	return out, rows.Err()
}

// readCheckRecord fills n from a fathom.node.check row: the mode and the lists of failed
// checks from its attributes, every check from its body. An unreadable body leaves the
// checks empty rather than failing the whole answer.
func readCheckRecord(n *NodeReadiness, attributes, body string) {
	var attrs map[string]any
	_ = json.Unmarshal([]byte(attributes), &attrs)
	n.Mode, _ = attrs[semconv.ReceiverMode].(string)
	for key, dst := range map[string]*[]string{semconv.NodeChecksFailed: &n.Failed, semconv.NodeChecksWarned: &n.Warned} {
		list, _ := attrs[key].([]any)
		for _, v := range list {
			if s, ok := v.(string); ok {
				*dst = append(*dst, s)
			}
		}
	}
	var report struct {
		Kernel string            `json:"kernel"`
		Checks []NodeCheckResult `json:"checks"`
	}
	if json.Unmarshal([]byte(body), &report) == nil {
		n.Kernel = report.Kernel
		if report.Checks != nil {
			n.Checks = report.Checks
		}
	}
}

// readinessWhy is the status in one line an agent can repeat.
func readinessWhy(n NodeReadiness) string {
	switch n.Status {
	case statusNoCheck:
		return "the node sent data but no fathom.node.check record since checks_since: its collector predates node checks, has readiness disabled, or sends no logs"
	case statusSynthetic:
		return "the gpuebpf receiver runs in synthetic mode: every event from this node is made up, nothing is traced"
	case statusReady:
		if !n.DataSeen {
			return "the node can trace but sent no data in the window: no CUDA process ran, or its pipeline is down"
		}
		return "the node can trace, and sent data in the window"
	}
	var stops []string
	for _, c := range n.Checks {
		if !c.OK && !c.Advisory {
			stops = append(stops, c.Name+": "+c.Impact)
		}
	}
	if len(stops) == 0 {
		stops = n.Failed
	}
	return "the node cannot trace: " + strings.Join(stops, "; ")
}
