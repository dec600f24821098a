package main

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// outageOverlay, layered over the node, shrinks the node's sending queue to 5 requests so that a minute
// without the gateway overflows it, and caps the retry interval so that the node
// resumes within seconds of the gateway's return (the example's default is 30 s).
const outageOverlay = `
exporters:
  otlp_grpc/gateway:
    sending_queue:
      queue_size: 5
    retry_on_failure:
      max_interval: 3s
`

// A minute without the gateway, as a rolling update of the gateway can take. The node
// keeps taking data; its queue is bounded, so it holds what fits and counts what it
// refuses; its memory stays under its limit; when the gateway is back it delivers what
// it held, by itself, exactly once. Every point sent is either stored or counted as
// refused: nothing is lost without a count.
func TestNodeRidesOutAMinuteWithoutItsGateway(t *testing.T) {
	certs := collectortest.NewOTLPTLS(t)
	gw := collectortest.Gateway(t)
	gateway := startGateway(t, gw, certs)

	privtest.Require(t) // the node loads BPF programs
	nd := collectortest.Node(t).Merge(t, outageOverlay)
	nodeOTLP := nd.Listen["FATHOM_NODE_OTLP"]
	node := nd.Start(t, nodeEnv(t, certs, "node-1", append(quietNode, "FATHOM_GATEWAY="+gw.Listen["FATHOM_GATEWAY_OTLP_GRPC"])...)...)

	counter := func(url, name, match string) int {
		re := regexp.MustCompile(`(?m)^` + name + `(?:_total)?\{[^}]*` + match + `[^}]*\} (\d+)`)
		n := 0
		for _, m := range re.FindAllStringSubmatch(scrape(t, url), -1) {
			v, _ := strconv.Atoi(m[1])
			n += v
		}
		return n
	}
	stored := func() int {
		return counter(metricsURL(gw), "otelcol_exporter_sent_metric_points", `exporter="duckdb"`)
	}
	toGateway := `exporter="otlp_grpc/gateway"`
	const points = 11
	exportGauge(t, nodeOTLP, points)
	collectortest.WaitFor(t, "the first export stored", 20*time.Second, func() bool { return stored() == points })

	if code := gateway.Terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("gateway exit code %d", code)
	}
	// One export every 3 s for a minute, each its own request (the node batches for 2 s).
	down := time.Now()
	sent := points
	var peak nodeMemory
	for time.Since(down) < time.Minute {
		exportGauge(t, nodeOTLP, points)
		sent += points
		m := readNodeMemory(t, node.Pid())
		peak.anon, peak.bpfMaps = max(peak.anon, m.anon), max(peak.bpfMaps, m.bpfMaps)
		time.Sleep(3 * time.Second)
	}
	refused := counter(metricsURL(nd), "otelcol_exporter_enqueue_failed_metric_points", toGateway)
	t.Logf("down %v: %d points sent, %d refused by the full queue, node peak anonymous memory %d MiB, BPF maps %d MiB", time.Since(down).Round(time.Second), sent, refused, peak.anon>>20, peak.bpfMaps>>20)
	if refused == 0 || refused%points != 0 {
		t.Errorf("%d points refused: the 5-request queue should have overflowed, whole requests at a time", refused)
	}
	checkNodeMemory(t, "a minute without the gateway", peak)

	gateway = startGateway(t, gw, certs)
	// Everything not refused arrives, once: nothing is lost without a count. (The
	// restarted gateway counts from zero; the first gateway stored the first export.)
	want := sent - refused - points
	deadline := time.Now().Add(60 * time.Second)
	for stored() != want && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(5 * time.Second) // room for a duplicate to arrive
	if got := stored(); got != want {
		t.Errorf("the restarted gateway stored %d points; %d sent - %d refused - %d stored before = %d", got, sent, refused, points, want)
	}
	if got := counter(metricsURL(nd), "otelcol_exporter_sent_metric_points", toGateway); got != sent-refused {
		t.Errorf("node delivered %d points, want %d sent - %d refused", got, sent, refused)
	}
	if t.Failed() {
		t.Logf("node exporter counters:\n%s", grepLines(scrape(t, metricsURL(nd)), "otelcol_exporter"))
	}
	if n := counter(metricsURL(nd), "otelcol_exporter_send_failed_metric_points", toGateway); n != 0 {
		t.Errorf("node gave up on %d points it had accepted", n)
	}
	for name, p := range map[string]*collectortest.Process{"node": node, "gateway": gateway} {
		if code := p.Terminate(t, 20*time.Second); code != 0 {
			t.Errorf("%s exit code %d", name, code)
		}
	}
}
