package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fathom-gpu/fathom/internal/collectorconfig"
	"github.com/fathom-gpu/fathom/internal/pki"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

type manifestModule struct {
	GoMod string `yaml:"gomod"`
}

type manifest struct {
	Dist struct {
		Name    string `yaml:"name"`
		Version string `yaml:"version"`
	} `yaml:"dist"`
	Receivers  []manifestModule `yaml:"receivers"`
	Processors []manifestModule `yaml:"processors"`
	Exporters  []manifestModule `yaml:"exporters"`
	Extensions []manifestModule `yaml:"extensions"`
	Connectors []manifestModule `yaml:"connectors"`
	Providers  []manifestModule `yaml:"providers"`
}

func readManifest(t *testing.T) manifest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(collectortest.RepoRoot(t), "builder-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := yaml.Unmarshal(raw, &m); err != nil {
		t.Fatalf("builder-config.yaml: %v", err)
	}
	return m
}

func configPath(t *testing.T, name string) string {
	return filepath.Join(collectortest.RepoRoot(t), "deploy", "configs", name)
}

func TestVersionMatchesManifest(t *testing.T) {
	m := readManifest(t)
	if m.Dist.Name != "fathom" || m.Dist.Version != version {
		t.Fatalf("builder-config.yaml dist is %s %s, main.go says fathom %s", m.Dist.Name, m.Dist.Version, version)
	}
}

// Every module named in builder-config.yaml must be in the binary, under the module
// string the manifest gives, and nothing else may be.
func TestComponentsListsEveryManifestEntry(t *testing.T) {
	out, err := exec.Command(collectortest.Binary(t), "components").Output()
	if err != nil {
		t.Fatalf("fathom components: %v", err)
	}
	var listed map[string]any
	if err := yaml.Unmarshal(out, &listed); err != nil {
		t.Fatalf("parse components output: %v\n%s", err, out)
	}
	modulesOf := func(kind string) []string {
		var mods []string
		entries, _ := listed[kind].([]any)
		for _, e := range entries {
			if mod, ok := e.(map[string]any)["module"].(string); ok {
				mods = append(mods, mod)
			}
		}
		return mods
	}
	m := readManifest(t)
	for kind, want := range map[string][]manifestModule{
		"receivers": m.Receivers, "processors": m.Processors, "exporters": m.Exporters,
		"extensions": m.Extensions, "connectors": m.Connectors, "providers": m.Providers,
	} {
		got := modulesOf(kind)
		if len(got) != len(want) {
			t.Errorf("%s: binary has %d (%v), manifest lists %d", kind, len(got), got, len(want))
		}
		for _, w := range want {
			found := false
			for _, g := range got {
				found = found || g == w.GoMod
			}
			if !found {
				t.Errorf("%s: %q from builder-config.yaml is not in `fathom components`", kind, w.GoMod)
			}
		}
	}
}

func TestExampleConfigsValidate(t *testing.T) {
	for _, name := range []string{"node.yaml", "gateway.yaml"} {
		t.Run(name, func(t *testing.T) {
			out, err := exec.Command(collectortest.Binary(t), "validate", "--config", configPath(t, name)).CombinedOutput()
			if err != nil {
				t.Fatalf("fathom validate %s: %v\n%s", name, err, out)
			}
		})
	}
}

// A config mistake must be reported in the user's words and stop the collector.
func TestBadConfigIsRefusedWithAClearError(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]struct{ yaml, want string }{
		"malformed yaml": {"receivers: [otlp\n", "yaml"},
		"unknown component": {
			"receivers:\n  nosuchreceiver:\nexporters:\n  debug:\nservice:\n  pipelines:\n    logs:\n      receivers: [nosuchreceiver]\n      exporters: [debug]\n",
			"nosuchreceiver",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml")
			if err := os.WriteFile(path, []byte(c.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(collectortest.Binary(t), "validate", "--config", path).CombinedOutput()
			if err == nil {
				t.Fatalf("validate accepted a bad config:\n%s", out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Fatalf("error does not mention %q:\n%s", c.want, out)
			}
		})
	}
}

// startGateway runs gw (deploy/configs/gateway.yaml derived as a test's role) with its
// OTLP listeners' half of the test's mutual TLS and its Echo API's certificate from the
// test's CA (the shipped gateway requires TLS there); env comes after and wins.
func startGateway(t *testing.T, gw *collectortest.Role, certs *collectortest.OTLPTLS, env ...string) *collectortest.Process {
	t.Helper()
	return gw.Start(t, append(append(certs.Gateway.Env(), echoCert(t, certs)...), env...)...)
}

// nodeEnv is a node's environment: named node (its host.name and its certificate's
// name) with its half of the test's mutual TLS, then extra.
func nodeEnv(t *testing.T, certs *collectortest.OTLPTLS, node string, extra ...string) []string {
	t.Helper()
	return append(append(certs.Node(t, node).Env(), "FATHOM_NODE_NAME="+node), extra...)
}

// quietNode keeps a node's own receiver quiet for a test (an hour between collections,
// no rank signals between them), so that the gateway counts only the points sent here.
var quietNode = []string{"FATHOM_COLLECTION_INTERVAL=1h", "FATHOM_RANK_SIGNALS_INTERVAL=0s"}

// echoCert is the gateway's Echo API certificate, issued by the test's CA.
func echoCert(t *testing.T, certs *collectortest.OTLPTLS) []string {
	t.Helper()
	f := collectortest.IssueFiles(t, certs.CA, t.TempDir(), pki.Loopback("fathom-echo"))
	return []string{"FATHOM_ECHO_TLS_CERT=" + f.Cert, "FATHOM_ECHO_TLS_KEY=" + f.Key}
}

// metricsURL is where a role serves the collector's own metrics.
func metricsURL(r *collectortest.Role) string {
	return "http://localhost:" + r.Listen["FATHOM_TELEMETRY_PORT"] + "/metrics"
}

// Each example config starts the real binary healthy, serves its own telemetry and
// zpages, and exits 0 on SIGTERM after a clean shutdown.
func TestExampleConfigsStartHealthyAndStopOnSIGTERM(t *testing.T) {
	for _, name := range []string{collectorconfig.Node, collectorconfig.Gateway} {
		t.Run(name, func(t *testing.T) {
			if name == collectorconfig.Node {
				privtest.Require(t) // the node loads BPF programs
			}
			certs := collectortest.NewOTLPTLS(t)
			r := collectortest.NewRole(t, name)
			var p *collectortest.Process
			if name == collectorconfig.Node {
				p = r.Start(t, nodeEnv(t, certs, "node-1")...)
			} else {
				p = startGateway(t, r, certs)
			}
			body := p.WaitHTTP(t, "http://"+r.Listen["FATHOM_HEALTH_ENDPOINT"]+"/", 30*time.Second)
			if !strings.Contains(string(body), "Server available") {
				t.Fatalf("health_check body: %s", body)
			}
			metrics := p.WaitHTTP(t, metricsURL(r), 10*time.Second)
			if !strings.Contains(string(metrics), `service_name="fathom"`) {
				t.Fatalf("own telemetry is not labelled as fathom:\n%.2000s", metrics)
			}
			p.WaitHTTP(t, "http://"+r.Listen["FATHOM_ZPAGES_ENDPOINT"]+"/debug/servicez", 10*time.Second)
			if code := p.Terminate(t, 20*time.Second); code != 0 {
				t.Fatalf("exit code %d after SIGTERM:\n%s", code, p.Output())
			}
			if !strings.Contains(p.Output(), "Shutdown complete") {
				t.Fatalf("no clean shutdown logged:\n%s", p.Output())
			}
		})
	}
}

// The two example configs work together: points sent to a node arrive at the gateway,
// and both collectors count exactly the points sent.
func TestNodeForwardsToGateway(t *testing.T) {
	certs := collectortest.NewOTLPTLS(t)
	gw := collectortest.Gateway(t)
	gateway := startGateway(t, gw, certs)

	privtest.Require(t) // the node loads BPF programs
	nd := collectortest.Node(t)
	nodeOTLP := nd.Listen["FATHOM_NODE_OTLP"]
	node := nd.Start(t, nodeEnv(t, certs, "node-1", append(quietNode, "FATHOM_GATEWAY="+gw.Listen["FATHOM_GATEWAY_OTLP_GRPC"])...)...)

	const points = 7
	exportGauge(t, nodeOTLP, points)

	accepted := regexp.MustCompile(`otelcol_receiver_accepted_metric_points(?:_total)?\{[^}]*\} (\d+)`)
	deadline := time.Now().Add(20 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		got = scrape(t, metricsURL(gw))
		if m := accepted.FindStringSubmatch(got); m != nil && m[1] == fmt.Sprint(points) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if m := accepted.FindStringSubmatch(got); m == nil || m[1] != fmt.Sprint(points) {
		t.Fatalf("gateway did not accept exactly %d points:\n%s", points, grepLines(got, "accepted_metric_points"))
	}
	if m := accepted.FindStringSubmatch(scrape(t, metricsURL(nd))); m == nil || m[1] != fmt.Sprint(points) {
		t.Fatalf("node did not accept exactly %d points", points)
	}
	if code := node.Terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("node exit code %d", code)
	}
	if code := gateway.Terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("gateway exit code %d", code)
	}
}

// exportGauge sends one gauge of points data points over OTLP/gRPC to addr.
func exportGauge(t *testing.T, addr string, points int) {
	t.Helper()
	md := pmetric.NewMetrics()
	g := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	g.SetName("fathom.test.gauge")
	dps := g.SetEmptyGauge().DataPoints()
	for i := 0; i < points; i++ {
		dp := dps.AppendEmpty()
		dp.SetIntValue(int64(i))
		dp.SetTimestamp(pcommon.NewTimestampFromTime(time.Now()))
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pmetricotlp.NewGRPCClient(conn).Export(ctx, pmetricotlp.NewExportRequestFromMetrics(md)); err != nil {
		t.Fatalf("export to %s: %v", addr, err)
	}
}

func scrape(t *testing.T, url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The gateway goes down and comes back under a node with data on the way: the node's
// sending queue holds what it cannot deliver, retries by itself, and delivers every
// point exactly once after the gateway is back, losing and duplicating nothing. (The
// gateway is down for seconds here, not the minute of a rolling update; the queue and
// the retries are the same.)
func TestNodeRidesOutAGatewayRestart(t *testing.T) {
	certs := collectortest.NewOTLPTLS(t)
	gw := collectortest.Gateway(t)
	gateway := startGateway(t, gw, certs)

	privtest.Require(t) // the node loads BPF programs
	nd := collectortest.Node(t)
	nodeOTLP := nd.Listen["FATHOM_NODE_OTLP"]
	node := nd.Start(t, nodeEnv(t, certs, "node-1", append(quietNode, "FATHOM_GATEWAY="+gw.Listen["FATHOM_GATEWAY_OTLP_GRPC"])...)...)

	// metric reads one of a collector's own counters (0 when absent).
	metric := func(url, name, match string) int {
		re := regexp.MustCompile(name + `(?:_total)?\{[^}]*` + match + `[^}]*\} (\d+)`)
		m := re.FindStringSubmatch(scrape(t, url))
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	waitMetric := func(url, name, match string, want int, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for metric(url, name, match) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s{%s} = %d after %s, want %d:\n%s", name, match, metric(url, name, match), within, want, grepLines(scrape(t, url), "otelcol_exporter"))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	const before, during = 7, 11
	stored := `exporter="duckdb"`
	exportGauge(t, nodeOTLP, before)
	waitMetric(metricsURL(gw), "otelcol_exporter_sent_metric_points", stored, before, 20*time.Second)

	if code := gateway.Terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("gateway exit code %d", code)
	}
	exportGauge(t, nodeOTLP, during)
	// Accepted by the node, and waiting in its queue for the gateway.
	toGateway := `exporter="otlp_grpc/gateway"`
	queued := `data_type="metrics",` + toGateway
	waitMetric(metricsURL(nd), "otelcol_exporter_queue_size", queued, 1, 10*time.Second)
	time.Sleep(3 * time.Second)
	// Holding it costs the node nothing near its budgets.
	checkNodeMemory(t, "gateway down", readNodeMemory(t, node.Pid()))

	// The same gateway (same store file, addresses and tokens) comes back; the node's
	// next retry (at most 30 s apart) delivers.
	gateway = startGateway(t, gw, certs)
	waitMetric(metricsURL(gw), "otelcol_exporter_sent_metric_points", stored, during, 60*time.Second)
	waitMetric(metricsURL(nd), "otelcol_exporter_sent_metric_points", toGateway, before+during, 10*time.Second)
	waitMetric(metricsURL(nd), "otelcol_exporter_queue_size", queued, 0, 10*time.Second)
	for _, failed := range []string{"otelcol_exporter_send_failed_metric_points", "otelcol_exporter_enqueue_failed_metric_points"} {
		if n := metric(metricsURL(nd), failed, toGateway); n != 0 {
			t.Errorf("node %s = %d, want 0: everything was delivered", failed, n)
		}
	}
	if code := node.Terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("node exit code %d", code)
	}
	if code := gateway.Terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("gateway exit code %d", code)
	}
}

// nodeMemory is what a collector process costs against the budgets it runs under.
// The memory_limiter bounds the Go heap, which lives in anonymous memory; the pod's
// limit (the chart's 256 MiB) is charged that and the BPF maps the process holds.
// Resident file pages (the 230 MB binary's text, mmapped maps) are neither: the
// kernel drops and rereads them under pressure, so VmRSS is the wrong yardstick.
type nodeMemory struct {
	anon    int64 // RssAnon
	bpfMaps int64 // memlock of the distinct BPF maps behind the process's descriptors
}

func readNodeMemory(t *testing.T, pid int) nodeMemory {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var m nodeMemory
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "RssAnon:" {
			kib, _ := strconv.ParseInt(f[1], 10, 64)
			m.anon = kib << 10
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, fd := range fds {
		if target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); target != "anon_inode:bpf-map" {
			continue
		}
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
		if err != nil {
			continue // closed since the listing
		}
		var id string
		var memlock int64
		for _, line := range strings.Split(string(info), "\n") {
			if f := strings.Fields(line); len(f) == 2 {
				switch f[0] {
				case "map_id:":
					id = f[1]
				case "memlock:":
					memlock, _ = strconv.ParseInt(f[1], 10, 64)
				}
			}
		}
		if !seen[id] {
			seen[id] = true
			m.bpfMaps += memlock
		}
	}
	return m
}

// checkNodeMemory fails the test when the node's heap side is over its
// memory_limiter's 200 MiB, or heap and maps together over the chart's 256 MiB.
func checkNodeMemory(t *testing.T, when string, m nodeMemory) {
	t.Helper()
	if m.anon <= 0 || m.anon >= 200<<20 {
		t.Errorf("%s: node anonymous memory %d MiB, want under its memory_limiter's 200 MiB", when, m.anon>>20)
	}
	if sum := m.anon + m.bpfMaps; sum >= 256<<20 {
		t.Errorf("%s: node anonymous memory %d MiB + BPF maps %d MiB = %d MiB, over the chart's 256 MiB limit", when, m.anon>>20, m.bpfMaps>>20, sum>>20)
	}
}
