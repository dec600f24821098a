// Package explain writes `fathom explain`'s terminal report from the Echo tools'
// answers: the open causal chains with their evidence and fix, the ranks flagged as
// stragglers and what they cost their peers, and the slowest calls. It asks the tools
// through a Caller, so the same report comes from a store file or a live gateway.
package explain

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Caller runs one Echo tool with its JSON arguments and returns its JSON answer.
type Caller interface {
	Call(ctx context.Context, tool string, args map[string]any) (json.RawMessage, error)
}

// Options of one report.
type Options struct {
	// Since is the window: a duration before now (5m) or an RFC 3339 time.
	Since string
	// MaxLines bounds the report (50 by default); each section keeps its heading and
	// says how many entries it left out.
	MaxLines int
	// Color writes severities and headings in colour (a terminal only).
	Color bool
}

// Each section gets a share of the lines; what a section does not use goes to the next.
const (
	chainLines     = 3 // per chain: what, evidence, fix
	stragglerLines = 1
	callLines      = 1
	slowestCalls   = 5
)

// Write asks the tools and writes the report to w.
func Write(ctx context.Context, w io.Writer, c Caller, o Options) error {
	if o.Since == "" {
		o.Since = "5m"
	}
	if o.MaxLines <= 0 {
		o.MaxLines = 50
	}
	var chains chainsAnswer
	if err := ask(ctx, c, "get_causal_chains", map[string]any{"since": o.Since, "limit": 1000, "include_resolved": true}, &chains); err != nil {
		return err
	}
	var flags eventsAnswer
	if err := ask(ctx, c, "event_history", map[string]any{"name": "fathom.straggler", "since": o.Since, "limit": 1000}, &flags); err != nil {
		return err
	}
	var cost costAnswer
	if err := ask(ctx, c, "get_cost", map[string]any{"signal": "fathom.straggler.time_lost", "since": o.Since}, &cost); err != nil {
		return err
	}
	var calls statsAnswer
	if err := ask(ctx, c, "get_trace_stats", map[string]any{"since": o.Since, "limit": slowestCalls}, &calls); err != nil {
		return err
	}
	r := report{w: w, color: o.Color, left: o.MaxLines}
	r.line(r.bold(fmt.Sprintf("Fathom: the last %s", o.Since)))
	r.chains(chains.Chains)
	r.stragglers(flags.Events, cost.Stragglers)
	r.calls(calls.Stats)
	return r.err
}

func ask(ctx context.Context, c Caller, tool string, args map[string]any, into any) error {
	raw, err := c.Call(ctx, tool, args)
	if err != nil {
		return fmt.Errorf("%s: %w", tool, err)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("%s answered what this fathom cannot read: %w", tool, err)
	}
	return nil
}

// The parts of the tools' answers the report reads.
type chainsAnswer struct {
	Chains []chain `json:"chains"`
}

type chain struct {
	State      string         `json:"state"`
	Node       string         `json:"node"`
	Process    string         `json:"process"`
	PID        *int64         `json:"pid"`
	Thread     *int64         `json:"thread"`
	RootCause  string         `json:"root_cause"`
	Severity   string         `json:"severity"`
	Fix        string         `json:"fix"`
	Attributes map[string]any `json:"attributes"`
}

func (c chain) cost() float64 { v, _ := c.Attributes["fathom.chain.cost"].(float64); return v }

type eventsAnswer struct {
	Events []flag `json:"events"`
}

// flag is one fathom.straggler record.
type flag struct {
	Time       string         `json:"time"`
	Node       string         `json:"node"`
	Rank       *int64         `json:"rank"`
	Body       string         `json:"body"`
	Attributes map[string]any `json:"attributes"`
}

func (f flag) attr(name string) string { v, _ := f.Attributes[name].(string); return v }

type costAnswer struct {
	Stragglers []cost `json:"stragglers"`
}

type cost struct {
	Node          string  `json:"node"`
	Rank          *int64  `json:"rank"`
	Steps         int64   `json:"steps"`
	AffectedRanks int64   `json:"affected_ranks"`
	GPUHours      float64 `json:"gpu_hours"`
	USD           float64 `json:"usd"`
}

type statsAnswer struct {
	Stats []stat `json:"stats"`
}

type stat struct {
	API   string  `json:"api"`
	Node  string  `json:"node"`
	Calls int64   `json:"calls"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	Unit  string  `json:"unit"`
}

// report writes lines until its budget is spent.
type report struct {
	w     io.Writer
	color bool
	left  int
	err   error
}

func (r *report) line(s string) {
	if r.left <= 0 || r.err != nil {
		return
	}
	r.left--
	_, r.err = fmt.Fprintln(r.w, s)
}

const red, yellow, bold, reset = "\x1b[31m", "\x1b[33m", "\x1b[1m", "\x1b[0m"

func (r *report) paint(code, s string) string {
	if !r.color {
		return s
	}
	return code + s + reset
}

func (r *report) bold(s string) string { return r.paint(bold, s) }

// room is how many entries of perEntry lines fit, keeping tail lines for what follows.
func (r *report) room(perEntry, tail int) int { return max(0, (r.left-tail)/perEntry) }

func (r *report) chains(chains []chain) {
	r.line("")
	if len(chains) == 0 {
		r.line(r.bold("Causal chains: none in the window"))
		return
	}
	open := 0
	for _, c := range chains {
		if c.State != "resolved" {
			open++
		}
	}
	r.line(r.bold(fmt.Sprintf("Causal chains: %d in the window, %d still open; costliest first", len(chains), open)))
	slices.SortStableFunc(chains, func(a, b chain) int {
		return cmp.Or(cmp.Compare(severityRank(b.Severity), severityRank(a.Severity)), cmp.Compare(b.cost(), a.cost()))
	})
	// Room is kept for the other sections: their headings and a line or two each.
	fit := min(len(chains), r.room(chainLines, 8))
	for _, c := range chains[:fit] {
		who := c.Process
		if c.PID != nil {
			who += fmt.Sprintf(" (pid %d", *c.PID)
			if c.Thread != nil {
				who += fmt.Sprintf(", thread %d", *c.Thread)
			}
			who += ")"
		}
		sev := c.Severity
		switch sev {
		case "HIGH":
			sev = r.paint(red, sev)
		case "MEDIUM":
			sev = r.paint(yellow, sev)
		}
		state := ""
		if c.State == "resolved" {
			state = " (resolved)"
		}
		r.line(fmt.Sprintf("  %s %s on %s: %s%s", sev, c.RootCause, c.Node, who, state))
		evidence, _ := c.Attributes["fathom.chain.evidence"].(string)
		r.line("    " + evidence)
		r.line("    fix: " + c.Fix)
	}
	if fit < len(chains) {
		r.line(fmt.Sprintf("  ... %d more (get_causal_chains, or fathom mcp, has them all)", len(chains)-fit))
	}
}

func severityRank(s string) int {
	return map[string]int{"HIGH": 3, "MEDIUM": 2, "LOW": 1}[s]
}

// stragglers lists the ranks flagged (straggler or silent) in the window, by the first
// record that flagged each, saying which are back, and what the flagged ranks cost
// their peers. The gateway's records speak for the cohort, a node's for itself: the
// gateway's are read.
func (r *report) stragglers(events []flag, costs []cost) {
	type key struct {
		node string
		rank int64
	}
	first, latest := map[key]flag{}, map[key]flag{}
	var order []key
	// A stall (beyond the line for a while, back before it was flagged) is not a flag:
	// counted apart, it neither names a rank here nor says whether one is back.
	stalls, stalled := 0, map[key]bool{}
	for _, e := range events {
		state := e.attr("fathom.straggler.state")
		if e.Rank == nil || e.attr("fathom.straggler.source") == "node" || state == "no_thresholds" {
			continue
		}
		if state == "stall" {
			stalls++
			stalled[key{e.Node, *e.Rank}] = true
			continue
		}
		k := key{e.Node, *e.Rank}
		if _, seen := first[k]; !seen && (state == "straggler" || state == "silent") {
			first[k] = e
			order = append(order, k)
		}
		if prev, seen := latest[k]; !seen || prev.Time <= e.Time {
			latest[k] = e
		}
	}
	still := 0
	for _, k := range order {
		if latest[k].attr("fathom.straggler.state") != "resolved" {
			still++
		}
	}
	r.line("")
	r.line(r.bold(fmt.Sprintf("Stragglers: %d flagged in the window, %d still flagged", len(order), still)))
	fit := min(len(order), r.room(stragglerLines, 4+min(len(costs), 3)+min(stalls, 1)))
	for _, k := range order[:fit] {
		back := ""
		if latest[k].attr("fathom.straggler.state") == "resolved" {
			back = " (back since " + latest[k].Time + ")"
		}
		r.line("  " + first[k].Body + back)
	}
	if fit < len(order) {
		r.line(fmt.Sprintf("  ... %d more (event_history with name fathom.straggler)", len(order)-fit))
	}
	if stalls > 0 {
		r.line(fmt.Sprintf("  and %d stalls on %d ranks, each shorter than a straggler (fathom.straggler.state stall)", stalls, len(stalled)))
	}
	slices.SortStableFunc(costs, func(a, b cost) int { return cmp.Compare(b.GPUHours, a.GPUHours) })
	fit = min(len(costs), r.room(1, 3))
	for _, c := range costs[:fit] {
		who := c.Node
		if c.Rank != nil {
			who = fmt.Sprintf("rank %d on %s", *c.Rank, c.Node)
		}
		usd := ""
		if c.USD > 0 {
			usd = fmt.Sprintf(" ($%.2f)", c.USD)
		}
		r.line(fmt.Sprintf("  cost: %s kept %d peers waiting %.1f GPU-seconds%s over %d flagged intervals",
			who, c.AffectedRanks, c.GPUHours*3600, usd, c.Steps))
	}
}

func (r *report) calls(stats []stat) {
	r.line("")
	if len(stats) == 0 {
		r.line(r.bold("Slowest calls: none in the window"))
		return
	}
	r.line(r.bold("Slowest calls (p99)"))
	for _, s := range stats[:min(len(stats), r.room(callLines, 0))] {
		r.line(fmt.Sprintf("  %s on %s: p99 %s, p50 %s, %d calls", s.API, s.Node, duration(s.P99, s.Unit), duration(s.P50, s.Unit), s.Calls))
	}
}

// duration writes a latency in its unit as a readable duration.
func duration(v float64, unit string) string {
	per := map[string]float64{"s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}[unit]
	if per == 0 {
		return strings.TrimSpace(fmt.Sprintf("%.4g %s", v, unit))
	}
	return time.Duration(v * per * float64(time.Second)).Round(time.Microsecond).String()
}

// Gateway asks a gateway's Echo API over HTTP(S): POST {URL}/api/v1/tools/{tool}, with
// the token as a bearer token (the tools scope is enough).
type Gateway struct {
	URL, Token string
	Client     *http.Client
}

// maxAnswer bounds what one tool's answer may hold.
const maxAnswer = 16 << 20

func (g Gateway) Call(ctx context.Context, tool string, args map[string]any) (json.RawMessage, error) {
	body, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(g.URL, "/")+"/api/v1/tools/"+tool, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if g.Token != "" {
		req.Header.Set("Authorization", "Bearer "+g.Token)
	}
	client := g.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the gateway answered %s: %s", resp.Status, strings.TrimSpace(string(raw)))
	}
	return raw, nil
}
