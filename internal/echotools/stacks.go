package echotools

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/fathom-gpu/fathom/internal/echoschema"
)

// StacksInput filters the stacks.
type StacksInput struct {
	Cluster string `json:"cluster,omitempty" jsonschema:"only this cluster (fathom.cluster.name)"`
	Node    string `json:"node,omitempty" jsonschema:"only this node (host.name)"`
	Rank    *int   `json:"rank,omitempty" jsonschema:"only this rank (fathom.rank)"`
	PID     *int64 `json:"pid,omitempty" jsonschema:"only this process (process.pid)"`
	API     string `json:"api,omitempty" jsonschema:"only calls of this CUDA API (cudaStreamSynchronize)"`
	By      string `json:"by,omitempty" jsonschema:"rank stacks by time (default: the seconds their recorded calls took) or count (how many)"`
	Since   string `json:"since,omitempty" jsonschema:"window start: RFC 3339 time or a duration before until (15m); default until minus 1h"`
	Until   string `json:"until,omitempty" jsonschema:"window end (exclusive), RFC 3339; default now"`
	Limit   int    `json:"limit,omitempty" jsonschema:"stacks to return, 1 to 100; default 10"`
}

// Stack is one Python stack of one process and API, with what its recorded calls took.
type Stack struct {
	StackID string `json:"stack_id"`
	Cluster string `json:"cluster,omitempty"`
	Node    string `json:"node,omitempty"`
	Rank    *int64 `json:"rank,omitempty"`
	PID     *int64 `json:"pid,omitempty"`
	Process string `json:"process,omitempty"`
	API     string `json:"api"`
	// The innermost Python frame, and the whole stack innermost first: the Python
	// one, or the native one of a process without Python frames.
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int64  `json:"line"`
	Frames   string `json:"frames"`
	// The calls recorded from this stack in the window and their durations.
	Calls        int64   `json:"calls"`
	TotalSeconds float64 `json:"total_seconds"`
	P50Seconds   float64 `json:"p50_seconds"`
	P99Seconds   float64 `json:"p99_seconds"`
}

// StacksOutput lists the top stacks, first by the chosen order.
type StacksOutput struct {
	By     string  `json:"by"`
	Stacks []Stack `json:"stacks"`
}

func stacksTool(env *Env) (*Tool, error) {
	return newTool("get_stacks", "Python stacks of CUDA calls",
		"The Python stacks (file, function, line, innermost first) that recorded CUDA calls were made from, per process, rank and API, over a window (the native stack for a process without Python frames): "+
			"the top stacks by the time their calls took (or by count), with calls, total, p50 and p99 seconds. "+
			"Only recorded calls count: notable ones (outliers, errors, graph captures) under the node's default log policy, every call under policy all. "+
			"Answers which line of the training loop a slow sync or launch came from.",
		ScopeTools,
		func(ctx context.Context, in StacksInput) (StacksOutput, error) {
			since, until, err := window(env, in.Since, in.Until)
			if err != nil {
				return StacksOutput{}, err
			}
			by := in.By
			switch by {
			case "":
				by = "time"
			case "time", "count":
			default:
				return StacksOutput{}, invalid("by %q is neither time nor count", in.By)
			}
			limit := in.Limit
			if limit == 0 {
				limit = 10
			}
			var f filter
			f.add("kind = ? AND name = ?", echoschema.KindLog, echoschema.EventCUDACall)
			f.add("ts >= ? AND ts < ?", since, until)
			f.addIf(in.Cluster != "", "cluster = ?", in.Cluster)
			f.addIf(in.Node != "", "node = ?", in.Node)
			f.addIf(in.Rank != nil, "rank = ?", derefInt(in.Rank))
			if in.PID != nil {
				f.add("pid = ?", *in.PID)
			}
			f.addIf(in.API != "", "api = ?", in.API)
			order := "total DESC, calls DESC"
			if by == "count" {
				order = "calls DESC, total DESC"
			}
			attr := func(key string) string { return fmt.Sprintf(`json_extract_string(attributes, '$."%s"')`, key) }
			q := fmt.Sprintf(`SELECT sid, cluster, node, rank, pid, any_value(process), api, any_value(fn), any_value(file),
					any_value(line), any_value(frames), count(*) AS calls, coalesce(sum(d), 0) AS total,
					coalesce(quantile_cont(d, 0.5), 0), coalesce(quantile_cont(d, 0.99), 0)
				FROM (SELECT cluster, node, rank, pid, process, coalesce(api, '') AS api,
						%s AS sid, %s AS fn, %s AS file, TRY_CAST(%s AS BIGINT) AS line, coalesce(%s, %s) AS frames,
						TRY_CAST(%s AS DOUBLE) AS d
					FROM events WHERE %s)
				WHERE sid IS NOT NULL
				GROUP BY sid, cluster, node, rank, pid, api
				ORDER BY %s, sid LIMIT %d`,
				attr(echoschema.AttrStackID), attr(echoschema.AttrCodeFunction), attr(echoschema.AttrCodeFilepath),
				attr(echoschema.AttrCodeLineno), attr(echoschema.AttrPythonStack), attr(echoschema.AttrNativeStack), attr(echoschema.AttrDurationSeconds),
				f.sql(), order, limit)
			rows, err := env.Store.DB().QueryContext(ctx, q, f.args...)
			if err != nil {
				return StacksOutput{}, fmt.Errorf("get_stacks: %w", err)
			}
			defer rows.Close()
			out := StacksOutput{By: by, Stacks: []Stack{}}
			for rows.Next() {
				var s Stack
				var cluster, node, process, fn, file, frames sql.NullString
				var rank, pid, line sql.NullInt64
				if err := rows.Scan(&s.StackID, &cluster, &node, &rank, &pid, &process, &s.API, &fn, &file, &line, &frames,
					&s.Calls, &s.TotalSeconds, &s.P50Seconds, &s.P99Seconds); err != nil {
					return out, fmt.Errorf("get_stacks: %w", err)
				}
				s.Cluster, s.Node, s.Process = cluster.String, node.String, process.String
				s.Function, s.File, s.Line, s.Frames = fn.String, file.String, line.Int64, frames.String
				s.Rank, s.PID = ip(rank), ip(pid)
				out.Stacks = append(out.Stacks, s)
			}
			if err := rows.Err(); err != nil {
				return out, fmt.Errorf("get_stacks: %w", err)
			}
			return out, nil
		},
		func(s *jsonschema.Schema) {
			setRange(s, "limit", 1, 100)
			setEnum(s, "by", "time", "count")
		})
}
