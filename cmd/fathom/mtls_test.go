package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fathom-gpu/fathom/internal/collectorconfig"
	"github.com/fathom-gpu/fathom/internal/pki"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// gaugeFor is one request of points gauge points for host ("" names none).
func gaugeFor(host, name string, points int) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	if host != "" {
		rm.Resource().Attributes().PutStr("host.name", host)
	}
	g := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	g.SetName(name)
	dps := g.SetEmptyGauge().DataPoints()
	for i := range points {
		dp := dps.AppendEmpty()
		dp.SetIntValue(int64(i))
		dp.SetTimestamp(pcommon.NewTimestampFromTime(time.Now()))
	}
	return md
}

// clientTLS trusts the test CA and, with client files, shows their certificate.
func clientTLS(t *testing.T, certs *collectortest.OTLPTLS, client *pki.Files) *tls.Config {
	t.Helper()
	cfg := &tls.Config{RootCAs: certs.CA.Pool(), MinVersion: tls.VersionTLS12}
	if client != nil {
		pair, err := tls.LoadX509KeyPair(client.Cert, client.Key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// exportGRPC sends md to addr over OTLP/gRPC with creds.
func exportGRPC(addr string, creds credentials.TransportCredentials, md pmetric.Metrics) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pmetricotlp.NewGRPCClient(conn).Export(ctx, pmetricotlp.NewExportRequestFromMetrics(md))
	return err
}

// exportHTTP sends md to addr over OTLP/HTTP (TLS with cfg) and returns the status.
func exportHTTP(addr string, cfg *tls.Config, md pmetric.Metrics) (int, error) {
	body, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
	if err != nil {
		return 0, err
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	resp, err := client.Post("https://"+addr+"/v1/metrics", "application/x-protobuf", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// counter reads one of a collector's own counters, summed over the series that match
// (0 when absent).
func counter(t *testing.T, url, name, match string) int {
	re := regexp.MustCompile(name + `(?:_total)?\{[^}]*` + match + `[^}]*\} (\d+)`)
	n := 0
	for _, m := range re.FindAllStringSubmatch(scrape(t, url), -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

func waitCounter(t *testing.T, url, name, match string, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for counter(t, url, name, match) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s{%s} = %d after %s, want %d", name, match, counter(t, url, name, match), within, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// storedPoints is how many points of the gauge name the gateway's store holds, by node.
func storedPoints(t *testing.T, gw *collectortest.Role, certs *collectortest.OTLPTLS, name string) map[string]int {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"sql": fmt.Sprintf(
		"SELECT coalesce(node, ''), count(*) FROM events WHERE name = '%s' GROUP BY ALL ORDER BY ALL", name)})
	req, _ := http.NewRequest(http.MethodPost, "https://"+gw.Listen["FATHOM_ECHO_ENDPOINT"]+"/api/v1/sql", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+collectortest.AgentToken)
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certs.CA.Pool(), MinVersion: tls.VersionTLS12}}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		Rows [][]any `json:"rows"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("sql answered %d: %s", resp.StatusCode, raw)
	}
	got := map[string]int{}
	for _, row := range out.Rows {
		got[fmt.Sprint(row[0])] = int(row[1].(float64))
	}
	return got
}

// The example gateway refuses every OTLP client that does not show a client
// certificate from the cluster's CA, over gRPC and HTTP, and stores nothing of theirs:
// plaintext, TLS without a certificate, and a certificate from another CA.
func TestTheGatewayRefusesAClientWithoutACertificate(t *testing.T) {
	certs := collectortest.NewOTLPTLS(t)
	gw := collectortest.Gateway(t)
	grpcAddr, httpAddr := gw.Listen["FATHOM_GATEWAY_OTLP_GRPC"], gw.Listen["FATHOM_GATEWAY_OTLP_HTTP"]
	gateway := startGateway(t, gw, certs)

	stranger := collectortest.NewOTLPTLS(t) // another CA's node certificate
	strangerFiles := stranger.Node(t, "node-1")
	const name = "fathom.test.mtls"
	refusedGRPC := map[string]credentials.TransportCredentials{
		"plaintext":           insecure.NewCredentials(),
		"TLS, no certificate": credentials.NewTLS(clientTLS(t, certs, nil)),
		"another CA's":        credentials.NewTLS(&tls.Config{RootCAs: certs.CA.Pool(), Certificates: clientTLS(t, stranger, &strangerFiles).Certificates, MinVersion: tls.VersionTLS12}),
	}
	for what, creds := range refusedGRPC {
		if err := exportGRPC(grpcAddr, creds, gaugeFor("node-1", name, 3)); err == nil {
			t.Errorf("gRPC, %s: accepted", what)
		}
	}
	for what, cfg := range map[string]*tls.Config{
		"TLS, no certificate": clientTLS(t, certs, nil),
		"another CA's":        {RootCAs: certs.CA.Pool(), Certificates: clientTLS(t, stranger, &strangerFiles).Certificates, MinVersion: tls.VersionTLS12},
	} {
		if code, err := exportHTTP(httpAddr, cfg, gaugeFor("node-1", name, 3)); err == nil {
			t.Errorf("HTTP, %s: answered %d, want the handshake refused", what, code)
		}
	}
	if resp, err := http.Post("http://"+httpAddr+"/v1/metrics", "application/x-protobuf", bytes.NewReader(nil)); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("HTTP, plaintext: answered %d", resp.StatusCode)
		}
	}

	// The node's own certificate gets through, on both protocols.
	own := certs.Node(t, "node-1")
	if err := exportGRPC(grpcAddr, credentials.NewTLS(clientTLS(t, certs, &own)), gaugeFor("node-1", name, 5)); err != nil {
		t.Fatalf("gRPC with the node's certificate: %v", err)
	}
	if code, err := exportHTTP(httpAddr, clientTLS(t, certs, &own), gaugeFor("node-1", name, 2)); err != nil || code != http.StatusOK {
		t.Fatalf("HTTP with the node's certificate: %d %v", code, err)
	}
	waitCounter(t, metricsURL(gw), "otelcol_exporter_sent_metric_points", `exporter="duckdb"`, 7, 20*time.Second)
	if got := storedPoints(t, gw, certs, name); len(got) != 1 || got["node-1"] != 7 {
		t.Fatalf("stored %v, want exactly the certified node's 7 points", got)
	}
	if code := gateway.Terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("gateway exit code %d", code)
	}
}

// With per-node certificates, node-1's certificate writes node-1's data and nothing of
// node-2's: a request naming node-2 is refused whole (gRPC PermissionDenied, HTTP 403)
// and counted, the points of a request naming no host are stored as node-1's. With the
// chart's shared certificate (FATHOM_NODE_SHARED_CERT_NAME) any node may be named.
func TestANodeCertificateWritesOnlyItsOwnHost(t *testing.T) {
	certs := collectortest.NewOTLPTLS(t)
	gw := collectortest.Gateway(t)
	grpcAddr, httpAddr := gw.Listen["FATHOM_GATEWAY_OTLP_GRPC"], gw.Listen["FATHOM_GATEWAY_OTLP_HTTP"]
	gateway := startGateway(t, gw, certs, "FATHOM_NODE_SHARED_CERT_NAME=fathom-node")

	const name = "fathom.test.identity"
	node1 := certs.Node(t, "node-1")
	creds := credentials.NewTLS(clientTLS(t, certs, &node1))
	err := exportGRPC(grpcAddr, creds, gaugeFor("node-2", name, 5))
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("gRPC, node-1's certificate for node-2: %v, want PermissionDenied", err)
	}
	// One request with node-1's resource and a node-2 resource: refused whole.
	mixed := gaugeFor("node-1", name, 4)
	gaugeFor("node-2", name, 6).ResourceMetrics().MoveAndAppendTo(mixed.ResourceMetrics())
	if code, err := exportHTTP(httpAddr, clientTLS(t, certs, &node1), mixed); err != nil || code != http.StatusForbidden {
		t.Fatalf("HTTP, node-1's certificate for node-1 and node-2: %d %v, want 403", code, err)
	}
	if err := exportGRPC(grpcAddr, creds, gaugeFor("node-1", name, 3)); err != nil {
		t.Fatalf("gRPC, node-1's own: %v", err)
	}
	if code, err := exportHTTP(httpAddr, clientTLS(t, certs, &node1), gaugeFor("", name, 2)); err != nil || code != http.StatusOK {
		t.Fatalf("HTTP, node-1's with no host: %d %v", code, err)
	}
	shared := collectortest.IssueFiles(t, certs.CA, t.TempDir(), pki.NodeClient("fathom-node"))
	if err := exportGRPC(grpcAddr, credentials.NewTLS(clientTLS(t, certs, &shared)), gaugeFor("node-3", name, 1)); err != nil {
		t.Fatalf("gRPC, the shared certificate for node-3: %v", err)
	}

	waitCounter(t, metricsURL(gw), "otelcol_exporter_sent_metric_points", `exporter="duckdb"`, 6, 20*time.Second)
	if got := storedPoints(t, gw, certs, name); len(got) != 2 || got["node-1"] != 5 || got["node-3"] != 1 {
		t.Fatalf("stored %v, want node-1's 3+2 and the shared certificate's node-3 1, nothing of node-2", got)
	}
	if n := counter(t, metricsURL(gw), "otelcol_fathom_nodeidentity_refused", `reason="other_host"`); n != 15 {
		t.Fatalf("refused %d points counted, want 5 + 10", n)
	}
	if code := gateway.Terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("gateway exit code %d", code)
	}
}

// Certificates rotate under running collectors. The node's certificate expires and is
// replaced on disk: after a gateway restart the same node process reconnects with the
// new one and delivers everything. The gateway's certificate expires and is replaced on
// disk: a new connection is served with the new one, without a restart.
func TestCertificatesRotateWithoutARestart(t *testing.T) {
	certs := collectortest.NewOTLPTLS(t)
	// Short-lived first certificates: both expire during the test.
	expiry := time.Now().Add(12 * time.Second)
	gatewayLeaf := pki.Loopback("fathom-gateway")
	gatewayLeaf.NotAfter = expiry
	gatewayDir, nodeDir := t.TempDir(), t.TempDir()
	gwFiles := collectortest.IssueFiles(t, certs.CA, gatewayDir, gatewayLeaf)
	nodeLeaf := pki.NodeClient("node-1")
	nodeLeaf.NotAfter = expiry
	nodeFiles := collectortest.IssueFiles(t, certs.CA, nodeDir, nodeLeaf)

	gw := collectortest.Gateway(t)
	grpcAddr := gw.Listen["FATHOM_GATEWAY_OTLP_GRPC"]
	// The short-lived files in place of the test's usual ones, read again every second.
	gatewayCerts := append(gwFiles.Env(), "FATHOM_OTLP_TLS_RELOAD=1s")
	gateway := startGateway(t, gw, certs, gatewayCerts...)

	privtest.Require(t) // the node loads BPF programs
	// The outage test's queue and retry interval, so that the node resumes within
	// seconds of the gateway's return.
	nd := collectortest.Node(t).Merge(t, outageOverlay)
	nodeOTLP := nd.Listen["FATHOM_NODE_OTLP"]
	node := nd.Start(t, append(append(nodeFiles.Env(), "FATHOM_OTLP_TLS_RELOAD=1s", "FATHOM_NODE_NAME=node-1", "FATHOM_GATEWAY="+grpcAddr), quietNode...)...)
	stored := `exporter="duckdb"`
	exportGauge(t, nodeOTLP, 7)
	waitCounter(t, metricsURL(gw), "otelcol_exporter_sent_metric_points", stored, 7, 20*time.Second)

	// Rotate both on disk, then let the first ones expire.
	collectortest.IssueFiles(t, certs.CA, nodeDir, pki.NodeClient("node-1"))
	collectortest.IssueFiles(t, certs.CA, gatewayDir, pki.Loopback("fathom-gateway"))
	time.Sleep(time.Until(expiry) + 2*time.Second)

	// The gateway serves a new connection with its new certificate (the old one has
	// expired: a client verifying it would fail the handshake).
	fresh := certs.Node(t, "node-1")
	if err := exportGRPC(grpcAddr, credentials.NewTLS(clientTLS(t, certs, &fresh)), gaugeFor("node-1", "fathom.test.rotation", 2)); err != nil {
		t.Fatalf("a new connection after the gateway's certificate rotated: %v", err)
	}
	waitCounter(t, metricsURL(gw), "otelcol_exporter_sent_metric_points", stored, 9, 20*time.Second)

	// The node's next connection shows its new certificate: the gateway restarts, the
	// node (the same process) reconnects and delivers what it held meanwhile.
	pid := node.Pid()
	if code := gateway.Terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("gateway exit code %d", code)
	}
	exportGauge(t, nodeOTLP, 11)
	gateway = startGateway(t, gw, certs, gatewayCerts...)
	waitCounter(t, metricsURL(gw), "otelcol_exporter_sent_metric_points", stored, 11, 60*time.Second)
	if node.Pid() != pid {
		t.Fatalf("the node restarted (%d, then %d)", pid, node.Pid())
	}
	if code := node.Terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("node exit code %d", code)
	}
	if code := gateway.Terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("gateway exit code %d", code)
	}
}

// Plaintext is an explicit overlay on each side (deploy/configs/*-plaintext.yaml, as
// the chart's otlpTLS.insecure merges them): with it the gateway takes a plaintext
// export, and the node's config with its overlay is valid.
func TestThePlaintextOverlaysTurnTLSOff(t *testing.T) {
	certs := collectortest.NewOTLPTLS(t) // the Echo API keeps its TLS
	gw := collectortest.Gateway(t, collectorconfig.GatewayPlaintext)
	grpcAddr := gw.Listen["FATHOM_GATEWAY_OTLP_GRPC"]
	gateway := gw.Start(t, echoCert(t, certs)...)
	if err := exportGRPC(grpcAddr, insecure.NewCredentials(), gaugeFor("node-1", "fathom.test.plaintext", 4)); err != nil {
		t.Fatalf("plaintext export to the gateway with its plaintext overlay: %v", err)
	}
	waitCounter(t, metricsURL(gw), "otelcol_exporter_sent_metric_points", `exporter="duckdb"`, 4, 20*time.Second)
	out, err := exec.Command(collectortest.Binary(t), "validate", "--config", configPath(t, "node.yaml"), "--config", configPath(t, "node-plaintext.yaml")).CombinedOutput()
	if err != nil {
		t.Fatalf("node.yaml with node-plaintext.yaml: %v\n%s", err, out)
	}
	if code := gateway.Terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("gateway exit code %d", code)
	}
}

// A node answers only to the gateway its CA vouches for: against a gateway whose
// certificate another CA signed (whoever answers on the gateway's address), the node's
// handshake fails, it sends nothing there, and it says why.
func TestANodeRefusesAGatewayItCannotVerify(t *testing.T) {
	certs := collectortest.NewOTLPTLS(t)
	impostor := collectortest.NewOTLPTLS(t)
	gw := collectortest.Gateway(t)
	gateway := startGateway(t, gw, impostor,
		"FATHOM_NODE_SHARED_CERT_NAME=node-1") // it would take the node's data, were it sent

	privtest.Require(t) // the node loads BPF programs
	nd := collectortest.Node(t)
	nodeOTLP := nd.Listen["FATHOM_NODE_OTLP"]
	node := nd.Start(t, nodeEnv(t, certs, "node-1", append(quietNode, "FATHOM_GATEWAY="+gw.Listen["FATHOM_GATEWAY_OTLP_GRPC"])...)...)
	exportGauge(t, nodeOTLP, 5)
	collectortest.WaitFor(t, "the node to say it cannot verify the gateway", 20*time.Second, func() bool {
		return strings.Contains(node.Output(), "certificate signed by unknown authority")
	})
	if n := counter(t, metricsURL(gw), "otelcol_receiver_accepted_metric_points", ""); n != 0 {
		t.Fatalf("the impostor gateway accepted %d points", n)
	}
	if code := node.Terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("node exit code %d", code)
	}
	if code := gateway.Terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("gateway exit code %d", code)
	}
}
