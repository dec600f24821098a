package echotools

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/fathom-gpu/fathom/internal/semconv"
)

// maxThreadsPerProcess bounds the CUDA threads listed under one process; the receiver
// keeps per-thread series for 16 by default (limits.max_threads_per_process).
const maxThreadsPerProcess = 64

// starvationExplained is the ranking rule, returned with every answer so that an agent
// can repeat it to a person.
const starvationExplained = "starvation_s = seconds the process's CUDA-calling threads spent runnable but waiting for a CPU " +
	"(host.thread.runqueue.latency, fathom.thread.role=cuda). While such a thread waits, it launches no kernel and " +
	"answers no completed stream, so the GPU idles. It already holds every preempted off-CPU span (a preempted " +
	"thread waits in the run queue from the moment it is switched out) and the wait after each wakeup; voluntary " +
	"off-CPU time is left out because a CUDA thread blocks voluntarily while it waits for the GPU itself. " +
	"Ties: preempted switches of CUDA threads, then node and pid."

// ProcessPressureInput picks the processes and the window.
type ProcessPressureInput struct {
	Cluster   string `json:"cluster,omitempty" jsonschema:"only this cluster"`
	Node      string `json:"node,omitempty" jsonschema:"only this node (host.name)"`
	Rank      *int   `json:"rank,omitempty" jsonschema:"only the process of this rank (fathom.rank)"`
	Since     string `json:"since,omitempty" jsonschema:"window start: RFC 3339 or a duration before until (15m); default until minus 1h"`
	Until     string `json:"until,omitempty" jsonschema:"window end (exclusive), RFC 3339; default now"`
	Limit     int    `json:"limit,omitempty" jsonschema:"processes per page, 1 to 1000; default 100"`
	PageToken string `json:"page_token,omitempty" jsonschema:"next_page_token of the previous page; it carries the window, so since and until are then ignored"`
}

// SchedTotals is what the scheduler did to a set of threads in the window.
type SchedTotals struct {
	// RunQueueWaitS: seconds runnable but waiting for a CPU.
	RunQueueWaitS float64 `json:"run_queue_wait_s"`
	// Preempted: switched out while still runnable (the CPU was taken from them).
	PreemptedSwitches int64   `json:"preempted_switches"`
	PreemptedOffCPUS  float64 `json:"preempted_off_cpu_s"`
	// Voluntary: switched out because they blocked (sleep, lock, I/O, GPU wait).
	VoluntarySwitches int64   `json:"voluntary_switches"`
	VoluntaryOffCPUS  float64 `json:"voluntary_off_cpu_s"`
	// LongestStallS: the longest single off-CPU span known to fall in the window.
	LongestStallS *float64 `json:"longest_stall_s,omitempty"`
}

// ThreadPressure is one CUDA-calling thread.
type ThreadPressure struct {
	ThreadID int64 `json:"thread_id"`
	SchedTotals
}

// ProcessPressure is one traced process in the window.
type ProcessPressure struct {
	// Position is the process's place in the whole ranking, 1 first, across pages.
	Position int    `json:"position"`
	Cluster  string `json:"cluster,omitempty"`
	Node     string `json:"node"`
	PID      int64  `json:"pid"`
	Process  string `json:"process,omitempty"`
	Rank     *int64 `json:"rank,omitempty"`
	// StarvationS is the ranking score (see score in the answer).
	StarvationS float64 `json:"starvation_s"`
	// CUDAThreads sums the threads that call CUDA; OtherThreads all the others, which
	// the receiver keeps as one series per process.
	CUDAThreads  SchedTotals `json:"cuda_threads"`
	OtherThreads SchedTotals `json:"other_threads"`
	// CUDAP99S is the highest p99 of any of the process's CUDA API histogram points in the
	// window, and CUDAP99API the API it belongs to; NCCL likewise per op. A delta point's
	// p99 is its interval's, a cumulative point's is since its series began.
	CUDAP99S   *float64 `json:"cuda_p99_s,omitempty"`
	CUDAP99API string   `json:"cuda_p99_api,omitempty"`
	NCCLP99S   *float64 `json:"nccl_p99_s,omitempty"`
	NCCLP99Op  string   `json:"nccl_p99_op,omitempty"`
	// Forks: child processes the process forked (DataLoader workers); PageAllocs: pages
	// it allocated.
	Forks      int64 `json:"forks"`
	PageAllocs int64 `json:"page_allocs"`
	// Threads lists its CUDA-calling threads, longest run-queue wait first.
	Threads []ThreadPressure `json:"threads"`
}

// ProcessPressureOutput is one page of the ranking.
type ProcessPressureOutput struct {
	Since         string            `json:"since"`
	Until         string            `json:"until"`
	Score         string            `json:"score"`
	Processes     []ProcessPressure `json:"processes"`
	NextPageToken string            `json:"next_page_token,omitempty"`
}

// pressureCursor is the last process of a page and the window it was ranked over; the
// ranking is recomputed for each page, and the keyset (score, preempted switches, node,
// pid) finds where the previous page stopped.
type pressureCursor struct {
	Since     int64   `json:"s"`
	Until     int64   `json:"u"`
	Score     float64 `json:"c"`
	Preempted int64   `json:"p"`
	Node      string  `json:"n"`
	PID       int64   `json:"i"`
	Position  int     `json:"o"`
}

func (c pressureCursor) token() string {
	raw, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(raw)
}

func parsePressureCursor(tok string) (pressureCursor, error) {
	var c pressureCursor
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || json.Unmarshal(raw, &c) != nil || c.Since >= c.Until || c.Position < 1 {
		return c, invalid("page_token %q was not issued by process_host_pressure", tok)
	}
	return c, nil
}

var processPressureMetrics = []string{
	semconv.MetricThreadOffCPU, semconv.MetricThreadRunQueue, semconv.MetricCUDAAPIDuration,
	semconv.MetricNCCLDuration, semconv.MetricProcessForks, semconv.MetricProcessPageAllocs,
}

func processHostPressureTool(env *Env) (*Tool, error) {
	return newTool("process_host_pressure", "Host pressure per process",
		"Per traced process and window: what the host did to it (run-queue wait, preempted and voluntary context switches and off-CPU time, "+
			"longest stall; for its CUDA threads, each thread, and its other threads), its worst CUDA and NCCL p99, forks and page allocations. "+
			"Ranked by starvation_s, the time its CUDA threads waited for a CPU: the process most likely to have starved its GPU comes first. Paged.",
		ScopeTools,
		func(ctx context.Context, in ProcessPressureInput) (ProcessPressureOutput, error) {
			return processHostPressure(ctx, env, in)
		},
		func(s *jsonschema.Schema) { setRange(s, "limit", 1, 1000); setRange(s, "rank", 0, 1<<30) })
}

func processHostPressure(ctx context.Context, env *Env, in ProcessPressureInput) (ProcessPressureOutput, error) {
	var (
		since, until time.Time
		cursor       *pressureCursor
	)
	if in.PageToken != "" {
		c, err := parsePressureCursor(in.PageToken)
		if err != nil {
			return ProcessPressureOutput{}, err
		}
		cursor = &c
		since, until = time.UnixMicro(c.Since).UTC(), time.UnixMicro(c.Until).UTC()
	} else {
		var err error
		if since, until, err = window(env, in.Since, in.Until); err != nil {
			return ProcessPressureOutput{}, err
		}
	}
	// Keyset values are microseconds, so the window a token carries is the window ranked.
	since, until = since.Truncate(time.Microsecond), until.Truncate(time.Microsecond)
	limit := in.Limit
	if limit == 0 {
		limit = 100
	}
	var f filter
	f.addIf(in.Cluster != "", "cluster = ?", in.Cluster)
	f.addIf(in.Node != "", "node = ?", in.Node)
	f.addIf(in.Rank != nil, "rank = ?", derefInt(in.Rank))
	ctes, args := windowTotalsCTE(since, until, processPressureMetrics, f)

	var page filter
	if cursor != nil {
		page.add(`(starvation_s < ? OR (starvation_s = ? AND (cuda_preempted_n < ? OR (cuda_preempted_n = ? AND
			(node > ? OR (node = ? AND pid > ?))))))`,
			cursor.Score, cursor.Score, cursor.Preempted, cursor.Preempted, cursor.Node, cursor.Node, cursor.PID)
	}
	// Scores are rounded to the microsecond: DuckDB sums doubles in parallel, in no fixed
	// order, and a keyset must compare the same number on every page.
	q := fmt.Sprintf(`WITH %s,
		sched AS (
			SELECT *, json_extract_string(attributes, '$."%s"') AS role,
				json_extract_string(attributes, '$."%s"') AS reason
			FROM w
		),
		processes AS (
			SELECT node, pid, coalesce(any_value(cluster), '') AS cluster, coalesce(any_value(process), '') AS process, max(rank) AS rank,
				%s,
				%s,
				max(p99) FILTER (WHERE name = '%s') AS cuda_p99, arg_max(api, p99) FILTER (WHERE name = '%s') AS cuda_p99_api,
				max(p99) FILTER (WHERE name = '%s') AS nccl_p99, arg_max(api, p99) FILTER (WHERE name = '%s') AS nccl_p99_op,
				coalesce(sum(d_value) FILTER (WHERE name = '%s'), 0)::BIGINT AS forks,
				coalesce(sum(d_value) FILTER (WHERE name = '%s'), 0)::BIGINT AS page_allocs
			FROM sched GROUP BY node, pid
		),
		ranked AS (SELECT *, round(cuda_runq, 6) AS starvation_s FROM processes)
		SELECT cluster, node, pid, process, rank, starvation_s,
			cuda_runq, cuda_preempted_n, cuda_preempted_s, cuda_voluntary_n, cuda_voluntary_s, cuda_stall,
			other_runq, other_preempted_n, other_preempted_s, other_voluntary_n, other_voluntary_s, other_stall,
			cuda_p99, coalesce(cuda_p99_api, ''), nccl_p99, coalesce(nccl_p99_op, ''), forks, page_allocs
		FROM ranked WHERE %s
		ORDER BY starvation_s DESC, cuda_preempted_n DESC, node, pid LIMIT %d`,
		ctes, semconv.ThreadRole, semconv.OffCPUReason,
		schedColumns("cuda", "role = 'cuda'"), schedColumns("other", "role = 'other'"),
		semconv.MetricCUDAAPIDuration, semconv.MetricCUDAAPIDuration, semconv.MetricNCCLDuration, semconv.MetricNCCLDuration,
		semconv.MetricProcessForks, semconv.MetricProcessPageAllocs,
		page.sql(), limit+1)
	rows, err := env.Store.DB().QueryContext(ctx, q, append(args, page.args...)...)
	if err != nil {
		return ProcessPressureOutput{}, fmt.Errorf("process_host_pressure: %w", err)
	}
	defer rows.Close()
	out := ProcessPressureOutput{
		Since: since.Format(time.RFC3339Nano), Until: until.Format(time.RFC3339Nano),
		Score: starvationExplained, Processes: []ProcessPressure{},
	}
	position := 1
	if cursor != nil {
		position = cursor.Position + 1
	}
	for rows.Next() {
		if len(out.Processes) == limit {
			last := out.Processes[limit-1]
			out.NextPageToken = pressureCursor{
				Since: since.UnixMicro(), Until: until.UnixMicro(), Score: last.StarvationS,
				Preempted: last.CUDAThreads.PreemptedSwitches, Node: last.Node, PID: last.PID, Position: last.Position,
			}.token()
			break
		}
		var (
			p                     ProcessPressure
			rank                  sql.NullInt64
			cudaStall, otherStall sql.NullFloat64
			cudaP99, ncclP99      sql.NullFloat64
			cudaRunq, otherRunq   float64
			cudaPreS, cudaVolS    float64
			otherPreS, otherVolS  float64
			cudaPreN, cudaVolN    int64
			otherPreN, otherVolN  int64
		)
		if err := rows.Scan(&p.Cluster, &p.Node, &p.PID, &p.Process, &rank, &p.StarvationS,
			&cudaRunq, &cudaPreN, &cudaPreS, &cudaVolN, &cudaVolS, &cudaStall,
			&otherRunq, &otherPreN, &otherPreS, &otherVolN, &otherVolS, &otherStall,
			&cudaP99, &p.CUDAP99API, &ncclP99, &p.NCCLP99Op, &p.Forks, &p.PageAllocs); err != nil {
			return out, fmt.Errorf("process_host_pressure: %w", err)
		}
		p.Position = position
		position++
		p.Rank, p.CUDAP99S, p.NCCLP99S = ip(rank), fp(cudaP99), fp(ncclP99)
		p.CUDAThreads = SchedTotals{cudaRunq, cudaPreN, cudaPreS, cudaVolN, cudaVolS, fp(cudaStall)}
		p.OtherThreads = SchedTotals{otherRunq, otherPreN, otherPreS, otherVolN, otherVolS, fp(otherStall)}
		p.Threads = []ThreadPressure{}
		out.Processes = append(out.Processes, p)
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("process_host_pressure: %w", err)
	}
	if err := rows.Close(); err != nil {
		return out, err
	}
	if len(out.Processes) == 0 {
		return out, nil
	}
	return out, cudaThreads(ctx, since, until, out.Processes, env)
}

// schedColumns aggregates the scheduler histograms of one thread role, as columns named
// prefix_runq, prefix_preempted_n and so on.
func schedColumns(prefix, cond string) string {
	return strings.NewReplacer("$p", prefix, "$c", cond, "$offcpu", semconv.MetricThreadOffCPU, "$runq", semconv.MetricThreadRunQueue).Replace(
		`coalesce(sum(d_sum) FILTER (WHERE $c AND name = '$runq'), 0) AS $p_runq,
		coalesce(sum(d_count) FILTER (WHERE $c AND name = '$offcpu' AND reason = 'preempted'), 0)::BIGINT AS $p_preempted_n,
		coalesce(sum(d_sum) FILTER (WHERE $c AND name = '$offcpu' AND reason = 'preempted'), 0) AS $p_preempted_s,
		coalesce(sum(d_count) FILTER (WHERE $c AND name = '$offcpu' AND reason = 'voluntary'), 0)::BIGINT AS $p_voluntary_n,
		coalesce(sum(d_sum) FILTER (WHERE $c AND name = '$offcpu' AND reason = 'voluntary'), 0) AS $p_voluntary_s,
		max(new_max) FILTER (WHERE $c AND name = '$offcpu') AS $p_stall`)
}

// cudaThreads fills in the CUDA-calling threads of the page's processes, in one query
// restricted to them.
func cudaThreads(ctx context.Context, since, until time.Time, page []ProcessPressure, env *Env) error {
	var f filter
	var pairs []string
	for _, p := range page {
		pairs = append(pairs, "(node = ? AND pid = ?)")
		f.args = append(f.args, p.Node, p.PID)
	}
	f.conds = append(f.conds, "("+strings.Join(pairs, " OR ")+")", "thread_id IS NOT NULL")
	ctes, args := windowTotalsCTE(since, until, []string{semconv.MetricThreadOffCPU, semconv.MetricThreadRunQueue}, f)
	q := fmt.Sprintf(`WITH %s,
		sched AS (
			SELECT *, json_extract_string(attributes, '$."%s"') AS role,
				json_extract_string(attributes, '$."%s"') AS reason
			FROM w
		),
		threads AS (
			SELECT node, pid, thread_id, %s FROM sched GROUP BY node, pid, thread_id
		)
		SELECT node, pid, thread_id, t_runq, t_preempted_n, t_preempted_s, t_voluntary_n, t_voluntary_s, t_stall
		FROM threads
		QUALIFY row_number() OVER (PARTITION BY node, pid ORDER BY t_runq DESC, t_preempted_n DESC, thread_id) <= %d
		ORDER BY node, pid, t_runq DESC, t_preempted_n DESC, thread_id`,
		ctes, semconv.ThreadRole, semconv.OffCPUReason, schedColumns("t", "role = 'cuda'"), maxThreadsPerProcess)
	rows, err := env.Store.DB().QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("process_host_pressure threads: %w", err)
	}
	defer rows.Close()
	type key struct {
		node string
		pid  int64
	}
	index := map[key]int{}
	for i, p := range page {
		index[key{p.Node, p.PID}] = i
	}
	for rows.Next() {
		var (
			k     key
			t     ThreadPressure
			stall sql.NullFloat64
		)
		if err := rows.Scan(&k.node, &k.pid, &t.ThreadID, &t.RunQueueWaitS, &t.PreemptedSwitches, &t.PreemptedOffCPUS,
			&t.VoluntarySwitches, &t.VoluntaryOffCPUS, &stall); err != nil {
			return fmt.Errorf("process_host_pressure threads: %w", err)
		}
		t.LongestStallS = fp(stall)
		if i, ok := index[k]; ok {
			page[i].Threads = append(page[i].Threads, t)
		}
	}
	return rows.Err()
}
