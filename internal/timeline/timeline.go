// Package timeline turns a window of the Echo store into a Chrome trace-event JSON
// object, the format Perfetto (ui.perfetto.dev) and chrome://tracing load: a process
// track per node; in it a track per rank (straggler flags) and per CUDA-calling thread
// (its recorded calls and collectives as slices, its causal chains as instants), the
// same collective tied across ranks by a flow, and each thread's off-CPU share as a
// counter. The Echo tool get_timeline builds it from store rows; `fathom timeline` asks
// that tool, so there is one implementation whichever way the trace is asked for.
package timeline

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Absent marks a rank, pid or thread the record did not carry (the store's NULL).
const Absent = -1

// Who is where a record was made. Rank, PID and TID are Absent when unknown.
type Who struct {
	Node    string
	Rank    int64
	PID     int64
	Process string
	TID     int64
}

// Call is one recorded call: a cuda.api.call, nccl.collective or nccl.call record.
type Call struct {
	Who
	Start   time.Time
	Seconds float64
	// Event is the record's event name (cuda.api.call, nccl.collective, nccl.call).
	Event string
	// API is the CUDA API, or the NCCL operation (all_reduce).
	API string
	// CommID and Seq name a collective; Seq is Absent on other calls.
	CommID string
	Seq    int64
	// Reason is why the receiver recorded the call (outlier, error, sampled ...).
	Reason string
	Body   string
}

// Flag is one fathom.straggler record.
type Flag struct {
	Time   time.Time
	Node   string
	Rank   int64
	Signal string
	// State is straggler, silent, resolved, no_thresholds or stall (a rank beyond the
	// line for a while, back before it was flagged: shown, not a flag); Source gateway
	// or node.
	State  string
	Source string
	// Since is when the rank's first interval beyond the line began (zero if unknown).
	Since time.Time
	Body  string
}

// Chain is one causal chain: what its records in the window said, the latest winning.
type Chain struct {
	Who
	// First is the chain's first record in the window, where its instant goes.
	First     time.Time
	ID        string
	State     string
	RootCause string
	Severity  string
	Symptom   string
	Evidence  string
	Fix       string
	Since     string
	Cost      float64
	Records   int64
}

// OffCPU is what one thread spent off CPU in one export interval, by reason (preempted,
// voluntary), as the window-totals rule counts it.
type OffCPU struct {
	Who
	From, To time.Time
	Reason   string
	Seconds  float64
}

// Input is a window of the store.
type Input struct {
	Since, Until time.Time
	Calls        []Call
	Flags        []Flag
	Chains       []Chain
	OffCPU       []OffCPU
}

// Options bound the trace.
type Options struct {
	// MaxEvents bounds the trace's slices, instants, counters and flow events
	// (DefaultMaxEvents when 0); the track names come on top. What does not fit is
	// left out, lowest priority first, and counted in the metadata.
	MaxEvents int
}

// DefaultMaxEvents keeps a trace near a few MB, which Perfetto opens at once.
const DefaultMaxEvents = 20000

// Trace is the JSON object format of the Chrome trace-event format.
type Trace struct {
	TraceEvents     []Event  `json:"traceEvents"`
	DisplayTimeUnit string   `json:"displayTimeUnit"`
	Metadata        Metadata `json:"metadata"`
}

// Event is one trace event. Times are microseconds since the Unix epoch.
type Event struct {
	Name string  `json:"name"`
	Cat  string  `json:"cat,omitempty"`
	Ph   string  `json:"ph"`
	TS   float64 `json:"ts"`
	// Dur is set on complete ("X") events only.
	Dur *float64 `json:"dur,omitempty"`
	PID int      `json:"pid"`
	TID int      `json:"tid"`
	// ID ties a flow's start, steps and end.
	ID uint64 `json:"id,omitempty"`
	// Scope is an instant's scope ("t" thread, "p" process); BP a flow end's binding.
	Scope string         `json:"s,omitempty"`
	BP    string         `json:"bp,omitempty"`
	Args  map[string]any `json:"args,omitempty"`
}

// Metadata says what the trace holds and what the bound left out.
type Metadata struct {
	Source    string `json:"source"`
	Since     string `json:"since"`
	Until     string `json:"until"`
	MaxEvents int    `json:"max_events"`
	// Kept and LeftOut count by kind; LeftOutTotal is their sum.
	Kept         Counts `json:"kept"`
	LeftOut      Counts `json:"left_out"`
	LeftOutTotal int    `json:"left_out_total"`
	Nodes        int    `json:"nodes"`
	Tracks       int    `json:"tracks"`
}

// Counts of trace content by kind.
type Counts struct {
	CUDACalls       int `json:"cuda_calls"`
	NCCLCalls       int `json:"nccl_calls"`
	Collectives     int `json:"collectives"`
	CollectiveFlows int `json:"collective_flows"`
	StragglerFlags  int `json:"straggler_flags"`
	Stalls          int `json:"stalls"`
	Chains          int `json:"chains"`
	OffCPUSamples   int `json:"off_cpu_samples"`
}

func (c Counts) total() int {
	return c.CUDACalls + c.NCCLCalls + c.Collectives + c.CollectiveFlows + c.StragglerFlags + c.Stalls + c.Chains + c.OffCPUSamples
}

// Event names of the records the trace reads.
const (
	EventCUDACall       = "cuda.api.call"
	EventNCCLCollective = "nccl.collective"
	EventNCCLCall       = "nccl.call"
)

// trackKey names one track inside a node's process. Kinds order the tracks: the node's
// own first, then ranks, then threads by rank, pid and thread id.
type trackKey struct {
	kind int // trackNode, trackRank, trackThread
	rank int64
	pid  int64
	tid  int64
	// lane > 0 holds slices that overlap the track's others without nesting in them:
	// a thread's calls nest, but two signals' straggler flags need not.
	lane int
}

const (
	trackNode = iota
	trackRank
	trackThread
)

// slice is a complete event before it is given its track's lane.
type slice struct {
	track      trackKey
	node       string
	start, end float64
	ev         Event
	// boundTo is the index in builder.slices of the slice a flow event binds to.
	boundTo int
}

// Build writes the trace of in, within o's bound.
func Build(in Input, o Options) Trace {
	if o.MaxEvents <= 0 {
		o.MaxEvents = DefaultMaxEvents
	}
	b := builder{budget: o.MaxEvents, names: map[string]map[trackKey]string{}}
	b.chains(in.Chains)
	b.flags(in.Flags, in.Since, in.Until)
	b.offCPU(in.OffCPU)
	b.collectives(in.Calls)
	b.calls(in.Calls)
	t := Trace{TraceEvents: b.finish(), DisplayTimeUnit: "ms"}
	t.Metadata = Metadata{
		Source: "fathom", Since: in.Since.UTC().Format(time.RFC3339Nano), Until: in.Until.UTC().Format(time.RFC3339Nano),
		MaxEvents: o.MaxEvents, Kept: b.kept, LeftOut: b.leftOut, LeftOutTotal: b.leftOut.total(),
		Nodes: len(b.nodePIDs), Tracks: b.tracks,
	}
	return t
}

type builder struct {
	budget  int
	kept    Counts
	leftOut Counts
	slices  []slice
	// points are instants, counters and flow events, placed on a track as they are.
	points []slice
	// names holds each node's tracks and their names.
	names    map[string]map[trackKey]string
	nodePIDs map[string]int
	tracks   int
	flowID   uint64
}

// take spends n events of the budget, or none when n do not fit.
func (b *builder) take(n int) bool {
	if n > b.budget {
		return false
	}
	b.budget -= n
	return true
}

func micros(t time.Time) float64 { return float64(t.UnixNano()) / 1e3 }

func (b *builder) track(node string, k trackKey, name string) {
	if b.names[node] == nil {
		b.names[node] = map[trackKey]string{}
	}
	if _, ok := b.names[node][k]; !ok {
		b.names[node][k] = name
	}
}

// whereTrack is the track a record made by w goes on: its thread's, else its rank's,
// else the node's.
func (b *builder) whereTrack(w Who) trackKey {
	switch {
	case w.TID != Absent:
		k := trackKey{kind: trackThread, rank: w.Rank, pid: w.PID, tid: w.TID}
		b.track(w.Node, k, threadName(w))
		return k
	case w.Rank != Absent:
		k := trackKey{kind: trackRank, rank: w.Rank}
		b.track(w.Node, k, fmt.Sprintf("rank %d", w.Rank))
		return k
	default:
		k := trackKey{kind: trackNode}
		b.track(w.Node, k, "node "+w.Node)
		return k
	}
}

// threadName names a thread track by rank, process and thread: "rank 5 · fakegpu-ddp[3966] · thread 3966".
func threadName(w Who) string {
	var parts []string
	if w.Rank != Absent {
		parts = append(parts, fmt.Sprintf("rank %d", w.Rank))
	}
	proc := w.Process
	if proc == "" {
		proc = "pid"
	}
	if w.PID != Absent {
		parts = append(parts, fmt.Sprintf("%s[%d]", proc, w.PID))
	} else if w.Process != "" {
		parts = append(parts, w.Process)
	}
	parts = append(parts, fmt.Sprintf("thread %d", w.TID))
	return strings.Join(parts, " · ")
}

func whoArgs(w Who, args map[string]any) map[string]any {
	if w.Rank != Absent {
		args["rank"] = w.Rank
	}
	if w.PID != Absent {
		args["pid"] = w.PID
	}
	if w.Process != "" {
		args["process"] = w.Process
	}
	if w.TID != Absent {
		args["thread"] = w.TID
	}
	return args
}

// chains: one instant per chain, at its first record in the window, carrying what the
// latest record says.
func (b *builder) chains(chains []Chain) {
	for _, c := range chains {
		if !b.take(1) {
			b.leftOut.Chains++
			continue
		}
		b.kept.Chains++
		k := b.whereTrack(c.Who)
		scope := "t"
		if k.kind == trackNode {
			scope = "p"
		}
		what := c.RootCause
		if c.Symptom != "" {
			what += ": " + c.Symptom
		}
		args := whoArgs(c.Who, map[string]any{
			"what": what, "evidence": c.Evidence, "fix": c.Fix, "severity": c.Severity, "state": c.State,
			"chain_id": c.ID, "records": c.Records,
		})
		if c.Since != "" {
			args["since"] = c.Since
		}
		if c.Cost != 0 {
			args["cost"] = c.Cost
		}
		ts := micros(c.First)
		b.points = append(b.points, slice{track: k, node: c.Node, start: ts, ev: Event{
			Name: fmt.Sprintf("chain: %s (%s)", c.RootCause, c.Severity), Cat: "chain", Ph: "I", TS: ts, Scope: scope, Args: args,
		}})
	}
}

// flags: a slice per rank and signal from the record that flagged it to the one that
// resolved it, or to the window's end. The gateway's records speak for the cohort; a
// node's own judgement and its lost-line notices are left to event_history.
func (b *builder) flags(flags []Flag, since, until time.Time) {
	type key struct {
		node   string
		rank   int64
		signal string
	}
	type open struct {
		from  time.Time
		first Flag
	}
	flags = slices.Clone(flags)
	slices.SortStableFunc(flags, func(x, y Flag) int { return x.Time.Compare(y.Time) })
	opened := map[key]*open{}
	var order []key
	emit := func(k key, o *open, to time.Time, last Flag, resolved bool) {
		if to.Before(since) {
			return // over before the window began
		}
		if !b.take(1) {
			b.leftOut.StragglerFlags++
			return
		}
		b.kept.StragglerFlags++
		tk := trackKey{kind: trackRank, rank: k.rank}
		b.track(k.node, tk, fmt.Sprintf("rank %d", k.rank))
		start, end := micros(o.from), micros(to)
		end = max(end, start)
		dur := end - start
		args := map[string]any{"rank": k.rank, "signal": k.signal, "flagged": o.first.Body, "resolved": resolved}
		if resolved {
			args["resolved_by"] = last.Body
		}
		b.slices = append(b.slices, slice{track: tk, node: k.node, start: start, end: end, ev: Event{
			Name: o.first.State + ": " + k.signal, Cat: "straggler", Ph: "X", TS: start, Dur: &dur, Args: args,
		}})
	}
	for _, f := range flags {
		if f.Rank == Absent || f.Source == "node" || f.State == "no_thresholds" {
			continue
		}
		k := key{f.Node, f.Rank, f.Signal}
		switch f.State {
		case "stall":
			b.stall(k.node, k.rank, k.signal, f, since)
		case "straggler", "silent":
			if opened[k] != nil {
				continue
			}
			from := f.Time
			// The flag began with the rank's first interval beyond the line, before the
			// record that says so; the window's start bounds it.
			if !f.Since.IsZero() && f.Since.Before(from) {
				from = f.Since
			}
			if from.Before(since) {
				from = since
			}
			opened[k] = &open{from: from, first: f}
			order = append(order, k)
		case "resolved":
			if o := opened[k]; o != nil {
				emit(k, o, f.Time, f, true)
				delete(opened, k)
			}
		}
	}
	for _, k := range order {
		if o := opened[k]; o != nil {
			emit(k, o, until, Flag{}, false)
			delete(opened, k)
		}
	}
}

// stall: a slice on the rank's track over the stall its record tells of, from its
// first interval beyond the line to its end (the record's time). A stall is not a
// flag: it has its own name and count.
func (b *builder) stall(node string, rank int64, signal string, f Flag, since time.Time) {
	from := f.Since
	if from.IsZero() || from.After(f.Time) {
		from = f.Time
	}
	if f.Time.Before(since) {
		return
	}
	if from.Before(since) {
		from = since
	}
	if !b.take(1) {
		b.leftOut.Stalls++
		return
	}
	b.kept.Stalls++
	tk := trackKey{kind: trackRank, rank: rank}
	b.track(node, tk, fmt.Sprintf("rank %d", rank))
	start, end := micros(from), micros(f.Time)
	dur := end - start
	b.slices = append(b.slices, slice{track: tk, node: node, start: start, end: end, ev: Event{
		Name: "stall: " + signal, Cat: "stall", Ph: "X", TS: start, Dur: &dur, Args: map[string]any{"rank": rank, "signal": signal, "stall": f.Body},
	}})
}

// offCPU: per thread a counter of the share of each export interval it spent off CPU,
// by reason, set at the interval's start, and back to 0 where the last interval ends.
func (b *builder) offCPU(samples []OffCPU) {
	type key struct {
		node     string
		pid, tid int64
	}
	type sample struct {
		from, to time.Time
		shares   map[string]float64
		who      Who
	}
	byThread := map[key][]*sample{}
	var order []key
	for _, s := range samples {
		if s.TID == Absent || !s.To.After(s.From) {
			continue
		}
		k := key{s.Node, s.PID, s.TID}
		list := byThread[k]
		if len(list) == 0 {
			order = append(order, k)
		}
		var at *sample
		for _, x := range list {
			if x.from.Equal(s.From) && x.to.Equal(s.To) {
				at = x
			}
		}
		if at == nil {
			at = &sample{from: s.From, to: s.To, shares: map[string]float64{"preempted": 0, "voluntary": 0}, who: s.Who}
			byThread[k] = append(list, at)
		}
		at.shares[s.Reason] += s.Seconds / s.To.Sub(s.From).Seconds()
	}
	for _, k := range order {
		list := byThread[k]
		slices.SortFunc(list, func(x, y *sample) int { return x.from.Compare(y.from) })
		name := "off-CPU share · " + threadName(list[0].who)
		var last time.Time
		for i, s := range list {
			if !b.take(1) {
				b.leftOut.OffCPUSamples += len(list) - i
				break
			}
			b.kept.OffCPUSamples++
			args := map[string]any{}
			for r, v := range s.shares {
				args[r] = v
			}
			b.counter(k.node, name, s.from, args)
			last = s.to
		}
		// The counter holds its value until the next sample: end the last interval.
		if !last.IsZero() && b.take(1) {
			b.counter(k.node, name, last, map[string]any{"preempted": 0.0, "voluntary": 0.0})
		}
	}
}

func (b *builder) counter(node, name string, at time.Time, args map[string]any) {
	if b.names[node] == nil {
		b.names[node] = map[trackKey]string{}
	}
	ts := micros(at)
	b.points = append(b.points, slice{track: trackKey{kind: trackNode}, node: node, start: ts, ev: Event{
		Name: name, Cat: "off_cpu", Ph: "C", TS: ts, Args: args,
	}})
}

// collectives: each collective a slice named by operation and sequence on its thread,
// and where two or more ranks recorded the same one (communicator, sequence), a flow
// through their slices in the order they entered it. A collective goes whole or not
// at all, earliest first.
func (b *builder) collectives(calls []Call) {
	type key struct {
		comm string
		seq  int64
	}
	groups := map[key][]Call{}
	var order []key
	for _, c := range calls {
		if c.Event != EventNCCLCollective || c.Seq == Absent {
			continue
		}
		k := key{c.CommID, c.Seq}
		if len(groups[k]) == 0 {
			order = append(order, k)
		}
		groups[k] = append(groups[k], c)
	}
	for _, k := range order {
		slices.SortStableFunc(groups[k], func(x, y Call) int { return x.Start.Compare(y.Start) })
	}
	slices.SortStableFunc(order, func(x, y key) int {
		return cmp.Or(groups[x][0].Start.Compare(groups[y][0].Start), cmp.Compare(x.comm, y.comm), cmp.Compare(x.seq, y.seq))
	})
	for _, k := range order {
		g := groups[k]
		flows := 0
		if len(g) > 1 {
			flows = len(g)
		}
		if !b.take(len(g) + flows) {
			b.leftOut.Collectives += len(g)
			b.leftOut.CollectiveFlows += flows
			continue
		}
		b.kept.Collectives += len(g)
		b.kept.CollectiveFlows += flows
		name := fmt.Sprintf("%s #%d", g[0].API, k.seq)
		var id uint64
		if flows > 0 {
			b.flowID++
			id = b.flowID
		}
		for i, c := range g {
			at := b.callSlice(c, name, "nccl")
			if flows == 0 {
				continue
			}
			s := b.slices[at]
			ph, bp := "t", ""
			switch i {
			case 0:
				ph = "s"
			case len(g) - 1:
				ph, bp = "f", "e"
			}
			// Flow events bind to the slice of the same thread that starts at the same
			// time and has the same category.
			b.points = append(b.points, slice{track: s.track, node: c.Node, start: s.start, boundTo: at, ev: Event{
				Name: "collective " + k.comm, Cat: "nccl", Ph: ph, TS: s.start, ID: id, BP: bp,
			}})
		}
	}
}

// calls: the other recorded calls, NCCL's first, then CUDA's longest first while the
// budget lasts.
func (b *builder) calls(calls []Call) {
	var nccl, cuda []Call
	for _, c := range calls {
		switch {
		case c.Event == EventNCCLCollective && c.Seq != Absent:
		case c.Event == EventCUDACall:
			cuda = append(cuda, c)
		default:
			nccl = append(nccl, c)
		}
	}
	slices.SortStableFunc(cuda, func(x, y Call) int { return cmp.Or(cmp.Compare(y.Seconds, x.Seconds), x.Start.Compare(y.Start)) })
	for _, c := range nccl {
		if !b.take(1) {
			b.leftOut.NCCLCalls++
			continue
		}
		b.kept.NCCLCalls++
		b.callSlice(c, c.API, "nccl")
	}
	for _, c := range cuda {
		if !b.take(1) {
			b.leftOut.CUDACalls++
			continue
		}
		b.kept.CUDACalls++
		b.callSlice(c, c.API, "cuda")
	}
}

// callSlice adds c's slice and returns its index in b.slices.
func (b *builder) callSlice(c Call, name, cat string) int {
	k := b.whereTrack(c.Who)
	start := micros(c.Start)
	dur := c.Seconds * 1e6
	args := whoArgs(c.Who, map[string]any{"seconds": c.Seconds})
	if c.Reason != "" {
		args["reason"] = c.Reason
	}
	if c.CommID != "" {
		args["comm"] = c.CommID
	}
	if c.Seq != Absent {
		args["seq"] = c.Seq
	}
	if c.Body != "" {
		args["record"] = c.Body
	}
	s := slice{track: k, node: c.Node, start: start, end: start + dur, ev: Event{
		Name: name, Cat: cat, Ph: "X", TS: start, Dur: &dur, Args: args,
	}}
	b.slices = append(b.slices, s)
	return len(b.slices) - 1
}

// finish places slices into lanes, numbers nodes and tracks, and writes the events:
// the names first, then everything in time order.
func (b *builder) finish() []Event {
	b.layLanes()
	nodes := make([]string, 0, len(b.names))
	for n := range b.names {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	b.nodePIDs = map[string]int{}
	tids := map[string]map[trackKey]int{}
	events := []Event{}
	for i, n := range nodes {
		pid := i + 1
		b.nodePIDs[n] = pid
		events = append(events,
			Event{Name: "process_name", Ph: "M", PID: pid, Args: map[string]any{"name": n}},
			Event{Name: "process_sort_index", Ph: "M", PID: pid, Args: map[string]any{"sort_index": pid}})
		keys := make([]trackKey, 0, len(b.names[n]))
		for k := range b.names[n] {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(x, y trackKey) int {
			return cmp.Or(cmp.Compare(x.kind, y.kind), cmp.Compare(x.rank, y.rank), cmp.Compare(x.pid, y.pid), cmp.Compare(x.tid, y.tid), cmp.Compare(x.lane, y.lane))
		})
		tids[n] = map[trackKey]int{}
		for j, k := range keys {
			tid := j + 1
			tids[n][k] = tid
			b.tracks++
			events = append(events,
				Event{Name: "thread_name", Ph: "M", PID: pid, TID: tid, Args: map[string]any{"name": b.names[n][k]}},
				Event{Name: "thread_sort_index", Ph: "M", PID: pid, TID: tid, Args: map[string]any{"sort_index": tid}})
		}
	}
	placed := make([]slice, 0, len(b.slices)+len(b.points))
	placed = append(placed, b.slices...)
	placed = append(placed, b.points...)
	// Time order, a parent before what nests in it, and a flow event after the slice it
	// binds to.
	slices.SortStableFunc(placed, func(x, y slice) int {
		return cmp.Or(cmp.Compare(x.start, y.start), cmp.Compare(y.end-y.start, x.end-x.start))
	})
	for _, s := range placed {
		ev := s.ev
		ev.PID = b.nodePIDs[s.node]
		if ev.Ph != "C" {
			ev.TID = tids[s.node][s.track]
		}
		events = append(events, ev)
	}
	return events
}

// layLanes moves a slice that overlaps another on its track without nesting in it
// (Chrome's format requires a track's slices to nest) to the first lane where it does,
// naming the lane after its track.
func (b *builder) layLanes() {
	order := make([]int, len(b.slices))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int {
		sx, sy := b.slices[x], b.slices[y]
		return cmp.Or(cmp.Compare(sx.start, sy.start), cmp.Compare(sy.end-sy.start, sx.end-sx.start))
	})
	type laneKey struct {
		node  string
		track trackKey
	}
	// open holds, per lane, the ends of the slices still open there, outermost first.
	open := map[laneKey][]float64{}
	for _, i := range order {
		s := &b.slices[i]
		base := s.track
		for lane := 0; ; lane++ {
			k := base
			k.lane = lane
			lk := laneKey{s.node, k}
			stack := open[lk]
			for len(stack) > 0 && stack[len(stack)-1] <= s.start {
				stack = stack[:len(stack)-1]
			}
			if len(stack) == 0 || s.end <= stack[len(stack)-1] {
				open[lk] = append(stack, s.end)
				s.track = k
				if lane > 0 {
					b.track(s.node, k, fmt.Sprintf("%s (overlap %d)", b.names[s.node][base], lane+1))
				}
				break
			}
			open[lk] = stack
		}
	}
	// A flow event binds to its slice's track, lane included.
	for i := range b.points {
		if p := &b.points[i]; p.ev.Ph == "s" || p.ev.Ph == "t" || p.ev.Ph == "f" {
			p.track = b.slices[p.boundTo].track
		}
	}
}
