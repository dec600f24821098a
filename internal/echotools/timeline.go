package echotools

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/fathom-gpu/fathom/internal/echoschema"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/timeline"
)

// TimelineInput picks the window and bounds the trace.
type TimelineInput struct {
	Cluster   string `json:"cluster,omitempty" jsonschema:"only this cluster (fathom.cluster.name)"`
	Node      string `json:"node,omitempty" jsonschema:"only this node (host.name)"`
	Since     string `json:"since,omitempty" jsonschema:"window start: RFC 3339 time or a duration before until (15m); default until minus 1h"`
	Until     string `json:"until,omitempty" jsonschema:"window end (exclusive), RFC 3339; default now"`
	MaxEvents int    `json:"max_events,omitempty" jsonschema:"at most this many slices, instants, counter samples and flow events, 1 to 50000; default 20000"`
}

// Bounds of one answer. maxTimelineBytes stays under what `fathom timeline` and
// `fathom explain` read of one gateway answer (16 MiB).
const (
	maxTimelineEvents = 50000
	maxTimelineBytes  = 12 << 20
	// flagLookback: a rank flagged before the window and still flagged in it is drawn
	// from the window's start; its flagging record is looked for this far back.
	flagLookback = time.Hour
)

func timelineTool(env *Env) (*Tool, error) {
	return newTool("get_timeline", "Timeline as a Chrome/Perfetto trace",
		"The window as a Chrome trace-event JSON object (load it in ui.perfetto.dev or chrome://tracing): a process per node; in it a track per rank "+
			"(straggler flags from flagged to resolved, gateway's judgement) and per CUDA-calling thread (its recorded CUDA and NCCL calls as slices, "+
			"each collective named by operation and sequence and tied across ranks by a flow, causal chains as instants with what, evidence and fix), "+
			"and each CUDA thread's off-CPU share per export interval as a counter. Times are microseconds since the epoch. "+
			"Only recorded calls appear (notable ones under the node's default log policy). Bounded by max_events and 12 MiB; "+
			"metadata.left_out counts what did not fit (chains and flags are kept first, then off-CPU, collectives, NCCL calls, CUDA calls longest first).",
		ScopeTools,
		func(ctx context.Context, in TimelineInput) (timeline.Trace, error) {
			since, until, err := window(env, in.Since, in.Until)
			if err != nil {
				return timeline.Trace{}, err
			}
			maxEvents := in.MaxEvents
			if maxEvents == 0 {
				maxEvents = timeline.DefaultMaxEvents
			}
			var f filter
			f.addIf(in.Cluster != "", "cluster = ?", in.Cluster)
			f.addIf(in.Node != "", "node = ?", in.Node)
			input, notRead, err := readTimeline(ctx, env, since, until, f, maxEvents)
			if err != nil {
				return timeline.Trace{}, fmt.Errorf("get_timeline: %w", err)
			}
			for {
				trace := timeline.Build(input, timeline.Options{MaxEvents: maxEvents})
				trace.Metadata.LeftOut.CUDACalls += notRead.CUDACalls
				trace.Metadata.LeftOut.NCCLCalls += notRead.NCCLCalls
				trace.Metadata.LeftOut.Collectives += notRead.Collectives
				trace.Metadata.LeftOutTotal += notRead.CUDACalls + notRead.NCCLCalls + notRead.Collectives
				raw, err := json.Marshal(trace)
				if err != nil {
					return timeline.Trace{}, fmt.Errorf("get_timeline: %w", err)
				}
				if len(raw) <= maxTimelineBytes || maxEvents <= 1 {
					return trace, nil
				}
				// Too many bytes for the events allowed: fewer events, in proportion.
				maxEvents = max(1, int(float64(maxEvents)*0.9*maxTimelineBytes/float64(len(raw))))
			}
		},
		func(s *jsonschema.Schema) {
			setRange(s, "max_events", 1, maxTimelineEvents)
		})
}

// readTimeline reads the window's records for timeline.Build. Calls are read up to a
// cap of a few times maxEvents per kind (the longest CUDA calls, the earliest NCCL
// ones, as Build keeps them); notRead counts the rest, so the trace can say what it
// left out without holding an hour of calls in memory.
func readTimeline(ctx context.Context, env *Env, since, until time.Time, f filter, maxEvents int) (timeline.Input, timeline.Counts, error) {
	in := timeline.Input{Since: since, Until: until}
	var notRead timeline.Counts
	attr := func(key string) string { return fmt.Sprintf(`json_extract_string(attributes, '$."%s"')`, key) }
	db := env.Store.DB()
	readCap := 2*maxEvents + 100

	callKinds := []struct {
		names   []string
		order   string
		notRead *int
	}{
		{[]string{semconv.EventNCCLCollective}, "ts", &notRead.Collectives},
		{[]string{semconv.EventNCCLCall}, "ts", &notRead.NCCLCalls},
		{[]string{semconv.EventCUDACall}, "d DESC NULLS LAST, ts", &notRead.CUDACalls},
	}
	for _, kind := range callKinds {
		var w filter
		w.add("kind = ? AND ts >= ? AND ts < ?", echoschema.KindLog, since, until)
		w.add("name = ?", kind.names[0])
		w.conds = append(w.conds, f.conds...)
		w.args = append(w.args, f.args...)
		var total int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM events WHERE "+w.sql(), w.args...).Scan(&total); err != nil {
			return in, notRead, err
		}
		q := fmt.Sprintf(`SELECT * FROM (
				SELECT ts, name, node, rank, pid, process, thread_id, api, comm_id,
					TRY_CAST(%s AS BIGINT) AS seq, TRY_CAST(%s AS DOUBLE) AS d, %s AS reason, body
				FROM events WHERE %s)
			ORDER BY %s LIMIT %d`,
			attr(semconv.NCCLSeq), attr(semconv.DurationSeconds), attr(semconv.NotableReason), w.sql(), kind.order, readCap)
		rows, err := db.QueryContext(ctx, q, w.args...)
		if err != nil {
			return in, notRead, err
		}
		read := 0
		for rows.Next() {
			var c timeline.Call
			var node, process, api, comm, reason, body sql.NullString
			var rank, pid, tid, seq sql.NullInt64
			var d sql.NullFloat64
			if err := rows.Scan(&c.Start, &c.Event, &node, &rank, &pid, &process, &tid, &api, &comm, &seq, &d, &reason, &body); err != nil {
				rows.Close()
				return in, notRead, err
			}
			c.Who = who(node, rank, pid, process, tid)
			c.API, c.CommID, c.Reason, c.Body = api.String, comm.String, reason.String, body.String
			c.Seq, c.Seconds = orAbsent(seq), d.Float64
			in.Calls = append(in.Calls, c)
			read++
		}
		if err := finishRows(rows); err != nil {
			return in, notRead, err
		}
		*kind.notRead += total - read
	}

	// Straggler records, from flagLookback before the window (a flag raised before it).
	var fl filter
	fl.add("kind = ? AND name = ? AND ts >= ? AND ts < ?", echoschema.KindLog, semconv.EventStraggler, since.Add(-flagLookback), until)
	fl.conds = append(fl.conds, f.conds...)
	fl.args = append(fl.args, f.args...)
	q := fmt.Sprintf(`SELECT ts, node, rank, %s, %s, %s, %s, body FROM events WHERE %s ORDER BY ts LIMIT %d`,
		attr(semconv.StragglerSignal), attr(semconv.StragglerState), attr(semconv.StragglerSource), attr(semconv.StragglerSince), fl.sql(), readCap)
	rows, err := db.QueryContext(ctx, q, fl.args...)
	if err != nil {
		return in, notRead, err
	}
	for rows.Next() {
		var fg timeline.Flag
		var node, signal, state, source, flagSince, body sql.NullString
		var rank sql.NullInt64
		if err := rows.Scan(&fg.Time, &node, &rank, &signal, &state, &source, &flagSince, &body); err != nil {
			rows.Close()
			return in, notRead, err
		}
		fg.Node, fg.Rank, fg.Signal, fg.State, fg.Source, fg.Body = node.String, orAbsent(rank), signal.String, state.String, source.String, body.String
		if t, err := time.Parse(time.RFC3339Nano, flagSince.String); err == nil {
			fg.Since = t
		}
		in.Flags = append(in.Flags, fg)
	}
	if err := finishRows(rows); err != nil {
		return in, notRead, err
	}

	// Causal chains: one per chain id, first seen in the window, as its latest record says.
	var ch filter
	ch.add("kind = ? AND name = ? AND ts >= ? AND ts < ?", echoschema.KindLog, echoschema.EventCausalChain, since, until)
	ch.conds = append(ch.conds, f.conds...)
	ch.args = append(ch.args, f.args...)
	q = fmt.Sprintf(`SELECT min(ts), count(*), arg_max(node, ts), arg_max(rank, ts), arg_max(pid, ts), arg_max(process, ts),
			arg_max(thread_id, ts), arg_max(attributes, ts), chain
		FROM (SELECT *, coalesce(%s, 'row-' || rowid::VARCHAR) AS chain FROM events WHERE %s)
		GROUP BY chain ORDER BY min(ts), chain LIMIT %d`, attr(echoschema.AttrChainID), ch.sql(), readCap)
	rows, err = db.QueryContext(ctx, q, ch.args...)
	if err != nil {
		return in, notRead, err
	}
	for rows.Next() {
		var c timeline.Chain
		var node, process sql.NullString
		var rank, pid, tid sql.NullInt64
		var attrs string
		if err := rows.Scan(&c.First, &c.Records, &node, &rank, &pid, &process, &tid, &attrs, &c.ID); err != nil {
			rows.Close()
			return in, notRead, err
		}
		c.Who = who(node, rank, pid, process, tid)
		a := map[string]any{}
		_ = json.Unmarshal([]byte(attrs), &a)
		str := func(k string) string { v, _ := a[k].(string); return v }
		c.State, c.RootCause, c.Severity, c.Fix = str(semconv.ChainState), str(semconv.ChainRootCause), str(semconv.ChainSeverity), str(semconv.ChainFix)
		c.Symptom, c.Evidence, c.Since = str(semconv.ChainSymptom), str(semconv.ChainEvidence), str(semconv.ChainSince)
		c.Cost, _ = a[semconv.ChainCost].(float64)
		in.Chains = append(in.Chains, c)
	}
	if err := finishRows(rows); err != nil {
		return in, notRead, err
	}

	// Off-CPU time of CUDA-calling threads, per export interval, by the window-totals rule.
	cte, args := windowTotalsCTE(since, until, []string{semconv.MetricThreadOffCPU}, f)
	q = fmt.Sprintf(`WITH %s
		SELECT node, rank, pid, process, thread_id, from_ts, ts, %s AS reason, d_sum FROM w
		WHERE d_sum > 0 AND from_ts IS NOT NULL AND from_ts < ts AND thread_id IS NOT NULL AND %s = 'cuda'
		ORDER BY node, pid, thread_id, from_ts LIMIT %d`, cte, attr(semconv.OffCPUReason), attr(semconv.ThreadRole), readCap)
	rows, err = db.QueryContext(ctx, q, args...)
	if err != nil {
		return in, notRead, err
	}
	for rows.Next() {
		var o timeline.OffCPU
		var node, process, reason sql.NullString
		var rank, pid, tid sql.NullInt64
		if err := rows.Scan(&node, &rank, &pid, &process, &tid, &o.From, &o.To, &reason, &o.Seconds); err != nil {
			rows.Close()
			return in, notRead, err
		}
		o.Who, o.Reason = who(node, rank, pid, process, tid), reason.String
		in.OffCPU = append(in.OffCPU, o)
	}
	return in, notRead, finishRows(rows)
}

// finishRows reports an error that ended the iteration, else closes.
func finishRows(rows *sql.Rows) error {
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	return rows.Close()
}

func who(node sql.NullString, rank, pid sql.NullInt64, process sql.NullString, tid sql.NullInt64) timeline.Who {
	return timeline.Who{Node: node.String, Rank: orAbsent(rank), PID: orAbsent(pid), Process: process.String, TID: orAbsent(tid)}
}

func orAbsent(n sql.NullInt64) int64 {
	if !n.Valid {
		return timeline.Absent
	}
	return n.Int64
}
