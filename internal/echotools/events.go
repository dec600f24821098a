package echotools

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/fathom-gpu/fathom/internal/echoschema"
)

// EventHistoryInput filters the stored rows.
type EventHistoryInput struct {
	Cluster   string `json:"cluster,omitempty" jsonschema:"only this cluster (fathom.cluster.name)"`
	Node      string `json:"node,omitempty" jsonschema:"only this node (host.name)"`
	Rank      *int   `json:"rank,omitempty" jsonschema:"only this rank (fathom.rank)"`
	Name      string `json:"name,omitempty" jsonschema:"metric or event name; a trailing * matches a prefix (nccl.*)"`
	Since     string `json:"since,omitempty" jsonschema:"window start: RFC 3339 time or a duration before until (15m); default until minus 1h"`
	Until     string `json:"until,omitempty" jsonschema:"window end (exclusive), RFC 3339; default now"`
	Limit     int    `json:"limit,omitempty" jsonschema:"rows per page, 1 to 1000; default 100"`
	PageToken string `json:"page_token,omitempty" jsonschema:"next_page_token of the previous page"`
}

// Event is one stored row as tools return it.
type Event struct {
	Time       string         `json:"time"`
	Kind       string         `json:"kind"`
	Cluster    string         `json:"cluster,omitempty"`
	Node       string         `json:"node,omitempty"`
	Job        string         `json:"job,omitempty"`
	Rank       *int64         `json:"rank,omitempty"`
	WorldSize  *int64         `json:"world_size,omitempty"`
	Process    string         `json:"process,omitempty"`
	PID        *int64         `json:"pid,omitempty"`
	Name       string         `json:"name"`
	API        string         `json:"api,omitempty"`
	Value      *float64       `json:"value,omitempty"`
	Count      *int64         `json:"count,omitempty"`
	P99        *float64       `json:"p99,omitempty"`
	Unit       string         `json:"unit,omitempty"`
	Severity   string         `json:"severity,omitempty"`
	Body       string         `json:"body,omitempty"`
	Attributes map[string]any `json:"attributes"`
}

// EventHistoryOutput is one page, newest first.
type EventHistoryOutput struct {
	Events        []Event `json:"events"`
	NextPageToken string  `json:"next_page_token,omitempty"`
}

const eventColumns = `ts, rowid, kind, cluster, node, job, rank, world_size, process, pid, name, api, value, count, p99, unit, severity, body, attributes`

func scanEvent(rows *sql.Rows) (Event, time.Time, int64, error) {
	var (
		e                                                      Event
		ts                                                     time.Time
		rowid                                                  int64
		cluster, node, job, process, api, unit, severity, body sql.NullString
		rank, worldSize, pid, count                            sql.NullInt64
		value, p99                                             sql.NullFloat64
		attrs                                                  string
	)
	if err := rows.Scan(&ts, &rowid, &e.Kind, &cluster, &node, &job, &rank, &worldSize, &process, &pid,
		&e.Name, &api, &value, &count, &p99, &unit, &severity, &body, &attrs); err != nil {
		return e, ts, 0, err
	}
	e.Time = ts.UTC().Format(time.RFC3339Nano)
	e.Cluster, e.Node, e.Job, e.Process = cluster.String, node.String, job.String, process.String
	e.API, e.Unit, e.Severity, e.Body = api.String, unit.String, severity.String, body.String
	e.Rank, e.WorldSize, e.PID, e.Count = ip(rank), ip(worldSize), ip(pid), ip(count)
	e.Value, e.P99 = fp(value), fp(p99)
	e.Attributes = map[string]any{}
	_ = json.Unmarshal([]byte(attrs), &e.Attributes)
	return e, ts, rowid, nil
}

func ip(n sql.NullInt64) *int64 {
	if !n.Valid {
		return nil
	}
	return &n.Int64
}

func fp(f sql.NullFloat64) *float64 {
	if !f.Valid {
		return nil
	}
	return &f.Float64
}

func eventHistoryTool(env *Env) (*Tool, error) {
	return newTool("event_history", "Event history",
		"Stored events and metric points, newest first, filtered by cluster, node, rank, name and time window; paged.",
		ScopeTools,
		func(ctx context.Context, in EventHistoryInput) (EventHistoryOutput, error) {
			since, until, err := window(env, in.Since, in.Until)
			if err != nil {
				return EventHistoryOutput{}, err
			}
			limit := in.Limit
			if limit == 0 {
				limit = 100
			}
			var f filter
			f.add("ts >= ? AND ts < ?", since, until)
			f.addIf(in.Cluster != "", "cluster = ?", in.Cluster)
			f.addIf(in.Node != "", "node = ?", in.Node)
			f.addIf(in.Rank != nil, "rank = ?", derefInt(in.Rank))
			f.name(in.Name)
			if in.PageToken != "" {
				// Keyset paging on (ts, rowid): stable while new rows arrive, and no
				// OFFSET that grows with the page number.
				micros, rowid, err := parsePageToken(in.PageToken)
				if err != nil {
					return EventHistoryOutput{}, err
				}
				pt := time.UnixMicro(micros).UTC()
				f.add("(ts < ? OR (ts = ? AND rowid < ?))", pt, pt, rowid)
			}
			q := fmt.Sprintf(`SELECT %s FROM events WHERE %s ORDER BY ts DESC, rowid DESC LIMIT %d`, eventColumns, f.sql(), limit+1)
			rows, err := env.Store.DB().QueryContext(ctx, q, f.args...)
			if err != nil {
				return EventHistoryOutput{}, fmt.Errorf("event_history: %w", err)
			}
			defer rows.Close()
			out := EventHistoryOutput{Events: []Event{}}
			var lastTS time.Time
			var lastRowid int64
			for rows.Next() {
				e, ts, rowid, err := scanEvent(rows)
				if err != nil {
					return out, fmt.Errorf("event_history: %w", err)
				}
				if len(out.Events) == limit {
					out.NextPageToken = fmt.Sprintf("%d.%d", lastTS.UnixMicro(), lastRowid)
					break
				}
				out.Events = append(out.Events, e)
				lastTS, lastRowid = ts, rowid
			}
			return out, rows.Err()
		},
		func(s *jsonschema.Schema) { setRange(s, "limit", 1, 1000); setRange(s, "rank", 0, 1<<30) })
}

func derefInt(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func parsePageToken(tok string) (int64, int64, error) {
	a, b, ok := strings.Cut(tok, ".")
	micros, err1 := strconv.ParseInt(a, 10, 64)
	rowid, err2 := strconv.ParseInt(b, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, invalid("page_token %q was not issued by event_history", tok)
	}
	return micros, rowid, nil
}

// CausalChainsInput filters causal chain records.
type CausalChainsInput struct {
	Cluster   string `json:"cluster,omitempty" jsonschema:"only this cluster"`
	Node      string `json:"node,omitempty" jsonschema:"only this node"`
	RootCause string `json:"root_cause,omitempty" jsonschema:"only chains with this root cause: cpu_contention, lock_contention, dataloader_oversubscription, hidden_sync, memcpy_bound, io_stall, network_retransmits, graph_recapture or allocator_churn"`
	// A chain is written again while its cause persists (same fathom.chain.id); the
	// tool answers with each chain's latest record.
	IncludeResolved bool   `json:"include_resolved,omitempty" jsonschema:"also chains whose cause went away (latest state resolved); default only open ones"`
	Since           string `json:"since,omitempty" jsonschema:"window start: RFC 3339 or a duration (15m); default until minus 1h"`
	Until           string `json:"until,omitempty" jsonschema:"window end, RFC 3339; default now"`
	Limit           int    `json:"limit,omitempty" jsonschema:"at most this many chains, 1 to 1000; default 100"`
}

// CausalChain is one chain: its latest fathom.causal_chain record.
type CausalChain struct {
	Time       string         `json:"time"`
	ID         string         `json:"id,omitempty"`
	State      string         `json:"state,omitempty"`
	Cluster    string         `json:"cluster,omitempty"`
	Node       string         `json:"node,omitempty"`
	Rank       *int64         `json:"rank,omitempty"`
	PID        *int64         `json:"pid,omitempty"`
	Process    string         `json:"process,omitempty"`
	Thread     *int64         `json:"thread,omitempty"`
	RootCause  string         `json:"root_cause"`
	Severity   string         `json:"severity"`
	Fix        string         `json:"fix"`
	Attributes map[string]any `json:"attributes"`
}

// CausalChainsOutput lists chains newest first, with counts by root cause.
type CausalChainsOutput struct {
	Chains      []CausalChain  `json:"chains"`
	ByRootCause map[string]int `json:"by_root_cause"`
}

func causalChainsTool(env *Env) (*Tool, error) {
	return newTool("get_causal_chains", "Causal chains",
		"Causal chains the node collectors found (host event -> CUDA/NCCL tail latency), with severity, root cause, evidence and fix: each chain's latest record, open chains only unless include_resolved; newest first. "+
			"Root causes: cpu_contention (the GPU thread waited for a CPU; evidence names who took it, heaviest first), lock_contention (it was blocked on a lock of its own process, a mutex or Python's GIL; evidence names the threads that woke it, which held the lock, and how much of the wait each accounts for), "+
			"dataloader_oversubscription, hidden_sync, memcpy_bound, io_stall, network_retransmits, graph_recapture, allocator_churn. The fix follows the cause: pinning helps CPU contention, never a lock.",
		ScopeTools,
		func(ctx context.Context, in CausalChainsInput) (CausalChainsOutput, error) {
			since, until, err := window(env, in.Since, in.Until)
			if err != nil {
				return CausalChainsOutput{}, err
			}
			limit := in.Limit
			if limit == 0 {
				limit = 100
			}
			var f filter
			f.add("name = ?", echoschema.EventCausalChain)
			f.add("ts >= ? AND ts < ?", since, until)
			f.addIf(in.Cluster != "", "cluster = ?", in.Cluster)
			f.addIf(in.Node != "", "node = ?", in.Node)
			f.addIf(in.RootCause != "", `json_extract_string(attributes, '$."`+echoschema.AttrChainRoot+`"') = ?`, in.RootCause)
			resolved := ""
			if !in.IncludeResolved {
				resolved = fmt.Sprintf(`WHERE state <> '%s'`, echoschema.ChainResolved)
			}
			// Each chain's latest record in the window; a record without an id (older
			// writers) is a chain of its own.
			q := fmt.Sprintf(`SELECT ts, cluster, node, rank, pid, process, thread_id, root, severity, fix, id, state, attributes FROM (
					SELECT * FROM (
						SELECT ts, cluster, node, rank, pid, process, thread_id, rowid AS rid,
							coalesce(json_extract_string(attributes, '$."%s"'), '') AS root,
							coalesce(json_extract_string(attributes, '$."%s"'), '') AS severity,
							coalesce(json_extract_string(attributes, '$."%s"'), '') AS fix,
							coalesce(json_extract_string(attributes, '$."%s"'), '') AS id,
							coalesce(json_extract_string(attributes, '$."%s"'), '') AS state,
							attributes
						FROM events WHERE %s)
					QUALIFY row_number() OVER (PARTITION BY CASE WHEN id = '' THEN 'row ' || rid ELSE id END ORDER BY ts DESC, rid DESC) = 1
				) %s ORDER BY ts DESC, rid DESC LIMIT %d`,
				echoschema.AttrChainRoot, echoschema.AttrChainSeverity, echoschema.AttrChainFix,
				echoschema.AttrChainID, echoschema.AttrChainState, f.sql(), resolved, limit)
			rows, err := env.Store.DB().QueryContext(ctx, q, f.args...)
			if err != nil {
				return CausalChainsOutput{}, fmt.Errorf("get_causal_chains: %w", err)
			}
			defer rows.Close()
			out := CausalChainsOutput{Chains: []CausalChain{}, ByRootCause: map[string]int{}}
			for rows.Next() {
				var c CausalChain
				var ts time.Time
				var cluster, node, process sql.NullString
				var rank, pid, thread sql.NullInt64
				var attrs string
				if err := rows.Scan(&ts, &cluster, &node, &rank, &pid, &process, &thread, &c.RootCause, &c.Severity, &c.Fix, &c.ID, &c.State, &attrs); err != nil {
					return out, fmt.Errorf("get_causal_chains: %w", err)
				}
				c.Time, c.Cluster, c.Node, c.Rank = ts.UTC().Format(time.RFC3339Nano), cluster.String, node.String, ip(rank)
				c.PID, c.Process, c.Thread = ip(pid), process.String, ip(thread)
				c.Attributes = map[string]any{}
				_ = json.Unmarshal([]byte(attrs), &c.Attributes)
				for _, k := range []string{echoschema.AttrChainRoot, echoschema.AttrChainSeverity, echoschema.AttrChainFix, echoschema.AttrChainID, echoschema.AttrChainState} {
					delete(c.Attributes, k)
				}
				out.Chains = append(out.Chains, c)
				out.ByRootCause[c.RootCause]++
			}
			return out, rows.Err()
		},
		func(s *jsonschema.Schema) { setRange(s, "limit", 1, 1000) })
}
