package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fathom-gpu/fathom/internal/semconv"
)

// sql runs one query on the gateway's store over its HTTP API.
func (d *demo) sql(ctx context.Context, q string) ([][]any, error) {
	body, _ := json.Marshal(map[string]string{"sql": q})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+d.api+"/api/v1/sql", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+d.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the gateway answered %d: %s", resp.StatusCode, raw)
	}
	var out struct {
		Rows [][]any `json:"rows"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out.Rows, nil
}

// first is the first row of a query, nil if none (or if the query failed: the story
// goes on and asks again).
func (d *demo) first(ctx context.Context, q string) []any {
	rows, err := d.sql(ctx, q)
	if err != nil || len(rows) == 0 {
		return nil
	}
	return rows[0]
}

const stragglerQuery = `SELECT node, rank, ts,
	json_extract_string(attributes, '$."fathom.straggler.signal"'),
	json_extract_string(attributes, '$."fathom.straggler.value"'),
	json_extract_string(attributes, '$."fathom.straggler.threshold"'),
	json_extract_string(attributes, '$."fathom.straggler.score"')
	FROM events WHERE name = 'fathom.straggler' AND ts >= TIMESTAMP '%s'
	AND json_extract_string(attributes, '$."fathom.straggler.state"') = 'straggler'
	AND json_extract_string(attributes, '$."fathom.straggler.source"') = '%s'
	ORDER BY ts LIMIT 1`

// tell watches the store and narrates: ranks joining, lines learned, the incident, the
// slow rank's node flagging itself, the gateway's record, the causal chain; then asks
// the gateway over MCP what an agent would.
func (d *demo) tell(ctx context.Context) (*Story, error) {
	story := &Story{Answers: map[string]string{}}
	ranks := d.o.Nodes * d.o.RanksPerNode
	warmup := 30 * time.Second
	if d.o.Short {
		warmup = 15 * time.Second
	}
	released := time.Now()
	var incidentAt time.Time
	if d.o.Synthetic {
		d.say("INCIDENT (synthetic): rank %d's dispatcher loses its CPU to made-up data loaders from the start", d.slowR)
	}
	joined, lines := 0, false
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := released.Add(warmup + 90*time.Second)
	// The story waits for all three, the synthetic one too: the node flags its rank in
	// about 2 s, before the causal chain's window has judged anything.
	for story.NodeFlagged == "" || story.GatewayFlagged == "" || story.Chain == "" {
		select {
		case <-ctx.Done():
			return story, ctx.Err()
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return story, fmt.Errorf("demo: after %s the story is incomplete (node flag %q, gateway record %q, chain %q); see the logs in %s",
				time.Since(released).Round(time.Second), story.NodeFlagged, story.GatewayFlagged, story.Chain, d.o.Dir)
		}
		if joined < ranks {
			if r := d.first(ctx, `SELECT count(DISTINCT rank) FROM events WHERE name = 'fathom.rank.device_wait.time'`); r != nil {
				if n := int(num(r[0])); n > joined {
					joined = n
					d.say("Ranks reporting to the gateway: %d of %d", n, ranks)
				}
			}
		}
		if !lines {
			if r := d.first(ctx, `SELECT arg_max(value, ts), arg_max(cohort, ts) FROM events
				WHERE name = 'fathom.straggler.threshold' AND json_extract_string(attributes, '$."fathom.straggler.signal"') = 'fathom.rank.device_wait.time'`); r != nil && r[0] != nil {
				med := d.first(ctx, `SELECT arg_max(value, ts) FROM events WHERE name = 'fathom.straggler.median'
					AND json_extract_string(attributes, '$."fathom.straggler.signal"') = 'fathom.rank.device_wait.time'`)
				lines = true
				m := 0.0
				if med != nil {
					m = num(med[0])
				}
				d.say("Thresholds learned for cohort %v: device wait %.3f s/s at the median, a rank below %.3f s/s holds the others back; every node gets the line in the answer to its export",
					r[1], m, num(r[0]))
			}
		}
		if incidentAt.IsZero() && !d.o.Synthetic && time.Since(released) >= warmup {
			if err := d.incident(); err != nil {
				return story, err
			}
			incidentAt = time.Now()
			if d.o.Synthetic {
				d.say("INCIDENT (synthetic): rank %d's syncs take 8x longer from the start", d.slowR)
			}
		}
		if incidentAt.IsZero() && !d.o.Synthetic {
			continue
		}
		since := incidentAt.UTC().Add(-time.Second).Format("2006-01-02 15:04:05")
		if d.o.Synthetic {
			since = released.UTC().Add(-time.Minute).Format("2006-01-02 15:04:05")
		}
		if story.NodeFlagged == "" {
			if r := d.first(ctx, fmt.Sprintf(stragglerQuery, since, "node")); r != nil {
				story.NodeFlagged = fmt.Sprint(r[0])
				began, what := incidentAt, "the incident began"
				if began.IsZero() {
					began, what = released, "the job started"
				}
				d.say("%s flags its own rank %v as the straggler on %s: %s against its cohort's line %s, %.1f s after %s, from the line in the answer to its own export",
					r[0], r[1], short(r[3]), short(r[4]), short(r[5]), time.Since(began).Seconds(), what)
			}
		}
		if story.GatewayFlagged == "" {
			if r := d.first(ctx, fmt.Sprintf(stragglerQuery, since, "gateway")); r != nil {
				story.GatewayFlagged = fmt.Sprintf("rank %v on %v", r[1], r[0])
				d.say("The gateway's record names rank %v on %v (%s %s, line %s)", r[1], r[0], short(r[3]), short(r[4]), short(r[5]))
			}
		}
		if story.Chain == "" {
			if r := d.first(ctx, fmt.Sprintf(`SELECT node, json_extract_string(attributes, '$."fathom.chain.root_cause"'), body FROM events
				WHERE name = 'fathom.causal_chain' AND ts >= TIMESTAMP '%s' AND rank = %d
				AND json_extract_string(attributes, '$."fathom.chain.severity"') IN ('HIGH', 'MEDIUM')
				ORDER BY ts LIMIT 1`, since, d.slowR)); r != nil {
				story.Chain = fmt.Sprint(r[1])
				d.say("%v explains why, as a causal chain: %v", r[0], r[2])
			}
		}
	}
	return story, d.answers(ctx, story)
}

// answers asks the gateway over MCP what an agent would, and prints the gist.
func (d *demo) answers(ctx context.Context, story *Story) error {
	client := mcp.NewClient(&mcp.Implementation{Name: "fathom-demo", Version: "1"}, nil)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	session, err := client.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: "http://" + d.api + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{d.token, http.DefaultTransport}}}, nil)
	if err != nil {
		return fmt.Errorf("demo: connecting to the gateway over MCP: %w", err)
	}
	defer session.Close()
	call := func(name string, args map[string]any, out any) error {
		res, err := session.CallTool(cctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return fmt.Errorf("demo: %s over MCP: %w", name, err)
		}
		if res.IsError {
			return fmt.Errorf("demo: %s: %v", name, res.Content)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		return json.Unmarshal(raw, out)
	}
	fmt.Fprintln(d.out, "\nWhat an agent gets from the gateway over MCP:")

	var outliers struct {
		Outliers []struct {
			Node  string  `json:"node"`
			Rank  *int64  `json:"rank"`
			Value float64 `json:"value"`
			Score float64 `json:"score"`
		} `json:"outliers"`
	}
	if err := call("find_outlier_nodes", map[string]any{"signal": "fathom.straggler.score", "by": "rank", "since": "10m"}, &outliers); err != nil {
		return err
	}
	var lines []string
	for i, o := range outliers.Outliers {
		if i == 3 {
			break
		}
		score := fmt.Sprintf("%.1f", o.Score)
		if o.Score > 1000 {
			score = "over 1000: its peers agree exactly"
		}
		lines = append(lines, fmt.Sprintf("rank %s on %s (score %s)", rankOf(o.Rank), o.Node, score))
	}
	story.Answers["find_outlier_nodes"] = strings.Join(lines, "; ")
	fmt.Fprintf(d.out, "  find_outlier_nodes {signal: fathom.straggler.score, by: rank} -> %s\n", or(story.Answers["find_outlier_nodes"], "no outlier"))

	var chains struct {
		Chains []struct {
			Node      string         `json:"node"`
			Rank      *int64         `json:"rank"`
			PID       *int64         `json:"pid"`
			Thread    *int64         `json:"thread"`
			RootCause string         `json:"root_cause"`
			Severity  string         `json:"severity"`
			Fix       string         `json:"fix"`
			Attrs     map[string]any `json:"attributes"`
		} `json:"chains"`
	}
	if err := call("get_causal_chains", map[string]any{"since": "10m"}, &chains); err != nil {
		return err
	}
	// The costliest first: on a busy host every rank's dispatcher waits for a CPU now
	// and then, and the chains written last are not the ones that matter most.
	chainCost := func(attrs map[string]any) float64 { f, _ := attrs[semconv.ChainCost].(float64); return f }
	sort.SliceStable(chains.Chains, func(i, j int) bool { return chainCost(chains.Chains[i].Attrs) > chainCost(chains.Chains[j].Attrs) })
	lines = nil
	for i, c := range chains.Chains {
		if i == 3 {
			break
		}
		lines = append(lines, fmt.Sprintf("%s %s on %s rank %s thread %s: %v; fix: %s", c.Severity, c.RootCause, c.Node, rankOf(c.Rank), rankOf(c.Thread), c.Attrs["fathom.chain.evidence"], c.Fix))
	}
	story.Answers["get_causal_chains"] = strings.Join(lines, "\n      ")
	fmt.Fprintf(d.out, "  get_causal_chains -> %s\n", or(story.Answers["get_causal_chains"], "no chain"))

	var stats struct {
		Stats []struct {
			API   string  `json:"api"`
			Node  string  `json:"node"`
			Calls int64   `json:"calls"`
			P50   float64 `json:"p50"`
			P99   float64 `json:"p99"`
			Unit  string  `json:"unit"`
		} `json:"stats"`
	}
	if err := call("get_trace_stats", map[string]any{"since": "10m", "limit": 50}, &stats); err != nil {
		return err
	}
	sort.SliceStable(stats.Stats, func(i, j int) bool { return stats.Stats[i].P99 > stats.Stats[j].P99 })
	lines = nil
	for i, s := range stats.Stats {
		if i == 3 {
			break
		}
		lines = append(lines, fmt.Sprintf("%s on %s p50 %.3g p99 %.3g %s (%d calls)", s.API, s.Node, s.P50, s.P99, s.Unit, s.Calls))
	}
	story.Answers["get_trace_stats"] = strings.Join(lines, "; ")
	fmt.Fprintf(d.out, "  get_trace_stats (slowest p99) -> %s\n", or(story.Answers["get_trace_stats"], "nothing"))

	var cost struct {
		TotalHours float64 `json:"total_gpu_hours"`
		Stragglers []struct {
			Node     string  `json:"node"`
			Rank     *int64  `json:"rank"`
			GPUHours float64 `json:"gpu_hours"`
		} `json:"stragglers"`
	}
	if err := call("get_cost", map[string]any{"signal": "fathom.straggler.time_lost", "since": "10m"}, &cost); err != nil {
		return err
	}
	lines = nil
	for i, s := range cost.Stragglers {
		if i == 3 {
			break
		}
		lines = append(lines, fmt.Sprintf("rank %s on %s kept its peers waiting %.1f GPU-seconds", rankOf(s.Rank), s.Node, s.GPUHours*3600))
	}
	story.Answers["get_cost"] = strings.Join(lines, "; ")
	fmt.Fprintf(d.out, "  get_cost {signal: fathom.straggler.time_lost} -> %s\n", or(story.Answers["get_cost"], "no cost"))
	return nil
}

// howToConnect prints an MCP client snippet and how to open the store afterwards.
func (d *demo) howToConnect() {
	snippet, _ := json.MarshalIndent(map[string]any{"mcpServers": map[string]any{"fathom-demo": map[string]any{
		"type": "http", "url": "http://" + d.api + "/mcp", "headers": map[string]string{"Authorization": "Bearer " + d.token}}}}, "", "  ")
	fmt.Fprintf(d.out, "\nPoint an MCP client at the gateway (e.g. in its mcp.json):\n%s\n", snippet)
	fmt.Fprintf(d.out, "Afterwards, open the store with: %s mcp --db %s\n\n", d.o.Bin, filepath.Join(d.o.Dir, "echo.duckdb"))
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func num(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case string:
		var f float64
		fmt.Sscanf(x, "%g", &f)
		return f
	}
	return 0
}

// short prints a number the store gave as text with 3 significant digits.
func short(v any) string {
	if s, ok := v.(string); ok {
		var f float64
		if _, err := fmt.Sscanf(s, "%g", &f); err == nil {
			return fmt.Sprintf("%.3g", f)
		}
		return strings.TrimPrefix(s, "fathom.rank.")
	}
	return fmt.Sprint(v)
}

func rankOf(r *int64) string {
	if r == nil {
		return "?"
	}
	return fmt.Sprint(*r)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
