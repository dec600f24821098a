package stragglerprocessor_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
)

// The loop with real collectors: four node collectors (two export over gRPC, two over
// HTTP) into one gateway. Each node is fed its two ranks' device wait every 250 ms, as
// its gpuebpf receiver would send it. The gateway's straggler processor compares the
// eight ranks and answers every export with the cohort's line (the thresholds
// extension as server middleware); each node reads it from the answer (client
// middleware) and judges its own ranks against it. What is asserted comes back from
// the gateway's store over its Echo API. Nodes and gateway speak mutual TLS, each node
// with a certificate naming its own host, as the shipped configs do: the gateway and
// nodes are deploy/configs' gateway.yaml and node.yaml (collectortest roles), with what
// the loop changes layered over them.

type loop struct {
	t   testing.TB
	dir string
	// gw is the gateway's role (deploy/configs/gateway.yaml as the loop runs it), and
	// api, gatewayGRPC and gatewayHTTP where it listens.
	gw                            *collectortest.Role
	api, gatewayGRPC, gatewayHTTP string
	gatewayEnv                    []string
	// echo trusts the certificate of the gateway's Echo API.
	echo *http.Client
	// certs sign the gateway's OTLP certificate and each node's (node-N).
	certs     *collectortest.OTLPTLS
	gateway   *collectortest.Process
	nodes     []*collectortest.Process
	nodeAddrs []string
	// settings are lines of the straggler processor's config ("signals: [...]") put
	// into the gateway's and the nodes' configs.
	settings []string
}

// withSettings layers settings over a role's straggler processor. The shipped
// persistence (5 of 6, for the shipped 250 ms rank samples) is taken out first: the
// tests that sample so name it in settings (jobOptions.defaults), the others keep the
// processor's default (3 of 4), as they were written for.
func withSettings(t testing.TB, r *collectortest.Role, settings []string) {
	r.Delete("processors::straggler::persistence")
	if len(settings) == 0 {
		return
	}
	var b strings.Builder
	b.WriteString("processors:\n  straggler:\n")
	for _, line := range settings {
		b.WriteString("    " + line + "\n")
	}
	r.Merge(t, b.String())
}

// loopNode is deploy/configs/node.yaml as the loop's nodes run it, exporting to the
// gateway over transport ("grpc" or "http"). Their lines expire after ttl, so that a
// test sees the gateway gone within seconds (batches leave every 50 ms, as shipped), and
// a node retries within a second of the gateway's return. The caller says where the node's
// data comes from.
func (l *loop) loopNode(transport, ttl string) *collectortest.Role {
	n := collectortest.Node(l.t).Merge(l.t, `
extensions:
  thresholds:
    ttl: `+ttl+`
exporters:
  otlp_grpc/gateway:
    retry_on_failure:
      initial_interval: 200ms
      max_interval: 1s
`)
	withSettings(l.t, n, l.settings)
	if transport == "http" {
		exportOverHTTP(l.t, n)
	}
	return n
}

// exportOverHTTP makes a node send to the gateway over OTLP/HTTP (otlp_http/gateway)
// with the shipped exporter's settings, instead of over gRPC.
func exportOverHTTP(t testing.TB, n *collectortest.Role) {
	exporter, err := yaml.Marshal(n.Config.Get("exporters::otlp_grpc/gateway"))
	if err != nil {
		t.Fatal(err)
	}
	n.Delete("exporters::otlp_grpc/gateway")
	n.Replace(t, "exporters::otlp_http/gateway", string(exporter))
	for _, pipeline := range []string{"metrics", "logs"} {
		n.Replace(t, "service::pipelines::"+pipeline+"::exporters", "[otlp_http/gateway]")
	}
}

// nodeEnv is the environment of node-N sending to the gateway over transport: its
// name, its client certificate, its cluster and where the gateway listens.
func (l *loop) nodeEnv(node int, transport string) []string {
	name := fmt.Sprintf("node-%d", node)
	gateway := l.gatewayGRPC
	if transport == "http" {
		gateway = "https://" + l.gatewayHTTP
	}
	return append(l.certs.Node(l.t, name).Env(), "FATHOM_NODE_NAME="+name, "FATHOM_CLUSTER=e2e", "FATHOM_GATEWAY="+gateway)
}

// newLoop starts the gateway, with no node yet.
func newLoop(t testing.TB) *loop { return newLoopWith(t, nil) }

// newLoopWith starts the gateway with settings for its straggler processor.
func newLoopWith(t testing.TB, settings []string) *loop {
	l := &loop{t: t, dir: t.TempDir(), settings: settings, certs: collectortest.NewOTLPTLS(t)}
	// The tests ask the store several times a second, and a killed rank is to be
	// reported silent within 5 s.
	l.gw = collectortest.Gateway(t).Merge(t, `
extensions:
  echo:
    server:
      rate_limit: {requests_per_second: 1000, burst: 1000}
processors:
  straggler:
    silent_after: 5s
`)
	withSettings(t, l.gw, settings)
	l.api, l.gatewayGRPC, l.gatewayHTTP = l.gw.Listen["FATHOM_ECHO_ENDPOINT"], l.gw.Listen["FATHOM_GATEWAY_OTLP_GRPC"], l.gw.Listen["FATHOM_GATEWAY_OTLP_HTTP"]
	echoCert, echoKey, pool := collectortest.LoopbackCert(t, t.TempDir())
	l.echo = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	l.gatewayEnv = append(l.certs.Gateway.Env(), "FATHOM_ECHO_TLS_CERT="+echoCert, "FATHOM_ECHO_TLS_KEY="+echoKey)
	l.startGateway()
	return l
}

// startLoop starts the gateway and four node collectors fed over OTLP by the test.
func startLoop(t *testing.T) *loop {
	l := newLoop(t)
	for i := range 4 {
		transport := "grpc"
		if i >= 2 {
			transport = "http"
		}
		// The test feeds the ranks' signals over OTLP as the gpuebpf receiver would
		// send them: the node runs no probes of its own.
		n := l.loopNode(transport, "3s").Delete("receivers::gpuebpf")
		for _, pipeline := range []string{"metrics", "logs"} {
			n.Replace(t, "service::pipelines::"+pipeline+"::receivers", "[otlp]")
		}
		p := n.Start(t, l.nodeEnv(i, transport)...)
		addr := n.Listen["FATHOM_NODE_OTLP"]
		p.WaitListening(t, addr, 30*time.Second)
		l.nodes, l.nodeAddrs = append(l.nodes, p), append(l.nodeAddrs, addr)
	}
	return l
}

// startGateway starts the gateway, or starts it again on the same store and addresses.
func (l *loop) startGateway() {
	l.gateway = l.gw.Start(l.t, l.gatewayEnv...)
	for _, addr := range []string{l.api, l.gatewayGRPC, l.gatewayHTTP} {
		l.gateway.WaitListening(l.t, addr, 30*time.Second)
	}
}

// ranks feeds every node its two ranks' cumulative device wait each 250 ms until stop:
// 0.30 s/s with a little jitter, or rate(rank, t) where it returns one.
type ranks struct {
	mu     sync.Mutex
	slow   map[int64]float64 // rank -> its rate while slow
	totals map[int64]float64
}

func (l *loop) feed(r *ranks, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	start := time.Now()
	for node, addr := range l.nodeAddrs {
		wg.Go(func() {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				l.t.Error(err)
				return
			}
			defer conn.Close()
			client := pmetricotlp.NewGRPCClient(conn)
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for step := 0; ; step++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				md := pmetric.NewMetrics()
				now := time.Now()
				for _, rank := range []int64{int64(2 * node), int64(2*node + 1)} {
					r.mu.Lock()
					rate, slow := r.slow[rank]
					if !slow {
						rate = 0.30 + 0.01*float64((step+int(rank))%3-1)
					}
					r.totals[rank] += rate * 0.25
					total := r.totals[rank]
					r.mu.Unlock()
					rm := md.ResourceMetrics().AppendEmpty()
					res := rm.Resource().Attributes()
					res.PutStr(semconv.HostName, fmt.Sprintf("node-%d", node))
					res.PutStr(semconv.ClusterName, "e2e")
					res.PutStr(semconv.Cohort, "comm-e2e")
					res.PutInt(semconv.Rank, rank)
					res.PutInt(semconv.ProcessPID, 5000+rank)
					m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
					m.SetName(semconv.MetricRankDeviceWait)
					m.SetUnit("s")
					sum := m.SetEmptySum()
					sum.SetIsMonotonic(true)
					sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
					dp := sum.DataPoints().AppendEmpty()
					dp.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
					dp.SetTimestamp(pcommon.NewTimestampFromTime(now))
					dp.SetDoubleValue(total)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, _ = client.Export(ctx, pmetricotlp.NewExportRequestFromMetrics(md))
				cancel()
			}
		})
	}
	return &wg
}

type record struct {
	Node, State, Source string
	Rank                int
}

// sqlRows runs a query through the gateway's Echo API, as an agent would, and returns
// its rows.
func (l *loop) sqlRows(q string) [][]any {
	body, _ := json.Marshal(map[string]string{"sql": q})
	req, _ := http.NewRequest(http.MethodPost, "https://"+l.api+"/api/v1/sql", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+collectortest.AgentToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.echo.Do(req)
	if err != nil {
		l.t.Fatalf("sql: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var res struct{ Rows [][]any }
	if err := json.Unmarshal(raw, &res); err != nil || resp.StatusCode != 200 {
		l.t.Fatalf("sql answered %d: %v: %s", resp.StatusCode, err, raw)
	}
	return res.Rows
}

// records reads every fathom.straggler record in the gateway's store.
func (l *loop) records() []record {
	q := `SELECT coalesce(node, ''), coalesce(rank, -1),
		json_extract_string(attributes, '$."fathom.straggler.state"'), json_extract_string(attributes, '$."fathom.straggler.source"')
		FROM events WHERE name = 'fathom.straggler' ORDER BY ts`
	rows := l.sqlRows(q)
	var out []record
	for _, row := range rows {
		out = append(out, record{Node: row[0].(string), Rank: int(row[1].(float64)), State: row[2].(string), Source: row[3].(string)})
	}
	return out
}

// flagBodies are the bodies of the straggler flags in the store, with the rule and
// signal of each: what a test that got a flag it did not want prints.
func (l *loop) flagBodies() []string {
	var out []string
	for _, row := range l.sqlRows(`SELECT coalesce(json_extract_string(attributes, '$."fathom.straggler.source"'), ''),
		coalesce(json_extract_string(attributes, '$."fathom.straggler.rule"'), ''), coalesce(body, '')
		FROM events WHERE name = 'fathom.straggler' AND json_extract_string(attributes, '$."fathom.straggler.state"') = 'straggler' ORDER BY ts`) {
		out = append(out, fmt.Sprintf("%v (%v rule): %v", row[0], row[1], row[2]))
	}
	return out
}

func (l *loop) waitRecords(what string, timeout time.Duration, done func([]record) bool) []record {
	l.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		recs := l.records()
		if done(recs) {
			return recs
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("timed out waiting for %s; records: %+v", what, recs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func has(recs []record, want record) bool { return slices.Contains(recs, want) }

// A slow rank is flagged by its own node from the pushed-back line, and by the
// gateway, and by nobody else; over gRPC (rank 1 on node-0) and over HTTP (rank 5 on
// node-2).
func TestTheSlowRanksNodeFlagsItselfFromThePushedBackLine(t *testing.T) {
	for _, c := range []struct {
		transport string
		rank      int
		node      string
	}{{"grpc", 1, "node-0"}, {"http", 5, "node-2"}} {
		t.Run(c.transport, func(t *testing.T) {
			l := startLoop(t)
			r := &ranks{slow: map[int64]float64{}, totals: map[int64]float64{}}
			stop := make(chan struct{})
			wg := l.feed(r, stop)
			defer func() { close(stop); wg.Wait() }()
			time.Sleep(4 * time.Second) // healthy: warm-up, lines pushed back to every node
			if recs := flags(l.records()); len(recs) != 0 {
				t.Fatalf("records from a healthy cohort: %+v", recs)
			}
			r.mu.Lock()
			r.slow[int64(c.rank)] = 0.10
			r.mu.Unlock()
			slowed := time.Now()
			self := record{Node: c.node, Rank: c.rank, State: "straggler", Source: "node"}
			gateway := record{Node: c.node, Rank: c.rank, State: "straggler", Source: "gateway"}
			l.waitRecords("the slow rank's node and the gateway to flag it", 20*time.Second, func(recs []record) bool {
				return has(recs, self) && has(recs, gateway)
			})
			t.Logf("flagged by its node and the gateway within %v of the slowdown", time.Since(slowed).Round(100*time.Millisecond))
			time.Sleep(2 * time.Second) // room for a wrong record to arrive
			if recs := flags(l.records()); len(recs) != 2 {
				t.Errorf("records: %+v, want only the node's and the gateway's for rank %d", recs, c.rank)
			}
		})
	}
}

// The gateway restarts under the nodes: each node keeps its last line until the TTL
// (3 s), then says it has none; the gateway comes back on the same store, the nodes'
// queued records arrive, and the push-back resumes: a rank slowed after the restart is
// flagged by its own node again.
func TestNodesRideOutAGatewayRestart(t *testing.T) {
	l := startLoop(t)
	r := &ranks{slow: map[int64]float64{}, totals: map[int64]float64{}}
	stop := make(chan struct{})
	wg := l.feed(r, stop)
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(4 * time.Second)
	if code := l.gateway.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("gateway exited %d", code)
	}
	time.Sleep(5 * time.Second) // past the nodes' 3 s TTL
	l.startGateway()
	l.waitRecords("every node's no_thresholds record", 30*time.Second, func(recs []record) bool {
		for node := range 4 {
			if !has(recs, record{Node: fmt.Sprintf("node-%d", node), Rank: -1, State: "no_thresholds", Source: "node"}) {
				return false
			}
		}
		return true
	})
	time.Sleep(4 * time.Second) // the restarted gateway warms up and pushes lines again
	r.mu.Lock()
	r.slow[3] = 0.10
	r.mu.Unlock()
	l.waitRecords("rank 3's node to flag it after the restart", 20*time.Second, func(recs []record) bool {
		return has(recs, record{Node: "node-1", Rank: 3, State: "straggler", Source: "node"})
	})
}
