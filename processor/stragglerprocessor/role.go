package stragglerprocessor

import (
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/pushback"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// role is what the gateway and a node do differently, chosen once from `mode` when the
// processor is built: the gateway draws each cohort's lines from all its ranks and
// answers every export with them; a node judges its own ranks by the lines pushed back
// to it and reports its clock offset. The processor calls every method with its lock
// held.
type role interface {
	// start takes what the role needs from the collector.
	start(host component.Host) error
	// answer adds to an export's response what its sender judges its ranks by.
	answer(resp *pushback.Response, points []point, sent []sentCohort)
	// judge is one evaluation: the state changes and gauges, and the arrival lags it
	// measured; false when the role cannot judge yet (a node not started).
	judge(now time.Time) (evaluation, []rankValue, bool)
	// extra is what the role reports beside the gauges after an evaluation.
	extra(now time.Time) (pmetric.Metrics, bool)
	// source is the fathom.straggler.source of its records and verdicts.
	source() string
	// arrivals matches the nccl.collective records of the arrival-lag signal, nil where
	// the role does not measure it (a node, or a gateway without that signal).
	arrivals() *arrivals
}

func newRole(cfg *Config, det *detector, signalIndex map[string]int) role {
	if cfg.Mode == ModeNode {
		return &nodeRole{det: det, thresholds: cfg.Thresholds}
	}
	g := &gatewayRole{det: det}
	if i, ok := signalIndex[semconv.MetricRankArrivalLag]; ok {
		g.arr = newArrivals(cfg.ArrivalLag.MatchWindow, cfg.ArrivalLag.MaxInstances, cfg.Limits.MaxRanksPerCohort, det.drops)
		g.arrivalSignal = i
	}
	return g
}

// gatewayRole compares every cohort's ranks with each other and pushes the lines back.
type gatewayRole struct {
	det *detector
	// arr matches collective instances for the arrival-lag signal, nil when it is not
	// among the signals.
	arr           *arrivals
	arrivalSignal int
}

func (g *gatewayRole) start(component.Host) error { return nil }

// answer puts the lines of the cohorts in the request (as of the last evaluation) into
// its response, each with the gateway's verdict on the ranks of the sender's node: its
// node says that verdict (and judges by the line only when a gateway sends none). A
// rank its node knows only by job gets its communicator's line under the job's name,
// which is what its node looks it up by.
func (g *gatewayRole) answer(resp *pushback.Response, points []point, sent []sentCohort) {
	if resp == nil {
		return
	}
	// The verdict covers every rank of the senders' nodes in the cohort, not only
	// those in this request: a rank left out of one export is not thereby healthy.
	type answered struct {
		cohort cohortKey
		signal int
		sentAs string
	}
	nodes := map[answered][]string{}
	var order []answered
	for i, p := range points {
		k := answered{cohort: p.cohort, signal: p.signal, sentAs: sent[i].cohort}
		ns, seen := nodes[k]
		if !seen {
			order = append(order, k)
		}
		if !slices.Contains(ns, p.node) {
			nodes[k] = append(ns, p.node)
		}
	}
	for _, k := range order {
		t, ok := g.det.pushed(k.cohort, k.signal)
		if !ok {
			continue
		}
		t.Cohort = k.sentAs
		if !t.Pair {
			t.Verdicts, t.Flagged = true, g.det.flagsOn(k.cohort, k.signal, nodes[k])
		}
		resp.Add(t)
	}
}

func (g *gatewayRole) judge(now time.Time) (evaluation, []rankValue, bool) {
	var lags []rankValue
	if g.arr != nil {
		for _, l := range g.arr.drain(now) {
			v := l.sum / float64(l.n)
			g.det.observe(point{cohort: l.cohort, job: l.job, node: l.node, rank: l.rank, pid: l.pid, signal: g.arrivalSignal,
				gauge: true, value: v, ts: now.UnixNano()}, now)
			lags = append(lags, rankValue{cohort: l.cohort, job: l.job, node: l.node, rank: l.rank, value: v})
		}
	}
	return g.det.evaluate(now), lags, true
}

func (g *gatewayRole) extra(time.Time) (pmetric.Metrics, bool) { return pmetric.Metrics{}, false }

func (g *gatewayRole) source() string { return ModeGateway }

func (g *gatewayRole) arrivals() *arrivals { return g.arr }

// nodeRole judges the node's own ranks by the lines the gateway pushed back, held by
// the thresholds extension.
type nodeRole struct {
	det        *detector
	thresholds component.ID
	lines      pushback.Source // nil until started
}

func (n *nodeRole) start(host component.Host) error {
	ext, ok := host.GetExtensions()[n.thresholds]
	if !ok {
		return fmt.Errorf("straggler: thresholds extension %q is not an extension of this collector: add it under `extensions:` and `service.extensions`", n.thresholds)
	}
	src, ok := ext.(pushback.Source)
	if !ok {
		return fmt.Errorf("straggler: extension %q does not hold straggler thresholds", n.thresholds)
	}
	n.lines = src
	return nil
}

func (n *nodeRole) answer(*pushback.Response, []point, []sentCohort) {}

func (n *nodeRole) judge(now time.Time) (evaluation, []rankValue, bool) {
	if n.lines == nil {
		return evaluation{}, nil, false
	}
	return n.det.evaluateAgainst(n.lines, now), nil, true
}

// extra is the node's clock offset against the gateway's (from the thresholds
// extension's exchange), one resource per node of its ranks, for the gateway's arrival
// lag to take each node's clock back by.
func (n *nodeRole) extra(now time.Time) (pmetric.Metrics, bool) {
	clock, ok := n.lines.(pushback.Clock)
	if !ok {
		return pmetric.Metrics{}, false
	}
	offset, uncertainty, ok := clock.ClockOffset(time.Now())
	if !ok {
		return pmetric.Metrics{}, false
	}
	nodes := n.det.nodes()
	if len(nodes) == 0 {
		return pmetric.Metrics{}, false
	}
	md := pmetric.NewMetrics()
	ts := pcommon.NewTimestampFromTime(now)
	for _, k := range nodes {
		rm := md.ResourceMetrics().AppendEmpty()
		res := rm.Resource().Attributes()
		if k.cluster != "" {
			res.PutStr(semconv.ClusterName, k.cluster)
		}
		res.PutStr(semconv.HostName, k.node)
		sm := rm.ScopeMetrics().AppendEmpty()
		sm.Scope().SetName(scopeName)
		for _, g := range []struct {
			name, desc string
			v          time.Duration
		}{
			{semconv.MetricNodeClockOffset, "This node's clock minus the gateway's", offset},
			{semconv.MetricNodeClockUncertain, "Half the round trip of the exchange the offset comes from", uncertainty},
		} {
			m := sm.Metrics().AppendEmpty()
			m.SetName(g.name)
			m.SetUnit("s")
			m.SetDescription(g.desc)
			dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
			dp.SetTimestamp(ts)
			dp.SetDoubleValue(g.v.Seconds())
		}
	}
	return md, true
}

func (n *nodeRole) source() string { return ModeNode }

func (n *nodeRole) arrivals() *arrivals { return nil }
