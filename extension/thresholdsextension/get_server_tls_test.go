package thresholdsextension

import (
	"crypto/tls"
	"net/http"
	"reflect"
	"testing"
	"time"

	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configtls"

	"github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/lines"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/thresholdstest"
)

// The GET fallback steers nodes as the answers do, so it asks for the same client
// certificates as the gateway's OTLP listeners: a node polling with its certificate gets
// the lines, a client without one is refused at the handshake.
func TestGETOverMutualTLSServesOnlyCertifiedNodes(t *testing.T) {
	certs := collectortest.NewOTLPTLS(t)
	cfg := gatewayConfig(t)
	cfg.Server.TLS = configoptional.Some(configtls.ServerConfig{
		Config:       configtls.Config{CertFile: certs.Gateway.Cert, KeyFile: certs.Gateway.Key},
		ClientCAFile: certs.Gateway.CA,
	})
	gateway, _ := startedExt(t, cfg)
	thresholdstest.Export(t, http.DefaultClient, thresholdstest.OTLPBehind(t, gateway, line))
	base := "https://" + cfg.Server.NetAddr.Endpoint

	anonymous := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certs.CA.Pool(), MinVersion: tls.VersionTLS12}}}
	if resp, err := anonymous.Get(base + lines.GETPath + "?cluster=c1&cohort=comm-1"); err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate was answered %d", resp.StatusCode)
	}

	node := certs.Node(t, "node-1")
	nodeCfg := nodeConfig(base, 100*time.Millisecond, 0.1)
	nodeCfg.Poll.ClientConfig.TLS = configtls.ClientConfig{Config: configtls.Config{
		CAFile: node.CA, CertFile: node.Cert, KeyFile: node.Key,
	}}
	poller, tel := startedExt(t, nodeCfg)
	collectortest.WaitFor(t, "the node's poll over mutual TLS", 5*time.Second, func() bool {
		_, ok := poller.Threshold(line.Key(), time.Now())
		return ok
	})
	if got, _ := poller.Threshold(line.Key(), time.Now()); !reflect.DeepEqual(got, line) {
		t.Fatalf("node holds %+v; want %+v", got, line)
	}
	if n := thresholdstest.Counted(t, tel, "otelcol_fathom_thresholds_polls", "outcome", "found"); n < 1 {
		t.Fatalf("otelcol_fathom_thresholds_polls{outcome=found} = %d", n)
	}
}
