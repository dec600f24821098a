package collectortest

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The shipped gateway and node, derived as the tests run them, with nothing layered
// but the node's synthetic ranks: the node's data reaches the gateway's store over
// mutual TLS and the agent's token reads it back, and both stop cleanly on SIGTERM.
func TestTheShippedNodeAndGatewayRunAsTheTestsDeriveThem(t *testing.T) {
	otlpTLS := NewOTLPTLS(t)
	echoCert, echoKey, pool := LoopbackCert(t, t.TempDir())
	gw := Gateway(t)
	gateway := gw.Start(t, append(otlpTLS.Gateway.Env(), "FATHOM_ECHO_TLS_CERT="+echoCert, "FATHOM_ECHO_TLS_KEY="+echoKey)...)
	gateway.WaitListening(t, gw.Listen["FATHOM_GATEWAY_OTLP_GRPC"], 30*time.Second)

	node := Node(t).Delete("receivers::gpuebpf::targets").
		Merge(t, "receivers:\n  gpuebpf:\n    synthetic: {ranks: 3, slow_rank: 1}\n")
	nodeProc := node.Start(t, append(otlpTLS.Node(t, "node-a").Env(), "FATHOM_GPUEBPF_MODE=synthetic", "FATHOM_NODE_NAME=node-a",
		"FATHOM_COLLECTION_INTERVAL=1s", "FATHOM_GATEWAY="+gw.Listen["FATHOM_GATEWAY_OTLP_GRPC"])...)

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
	var ranks int
	WaitFor(t, "the gateway's store to hold node-a's three ranks", 60*time.Second, func() bool {
		req, _ := http.NewRequest("POST", "https://"+gw.Listen["FATHOM_ECHO_ENDPOINT"]+"/api/v1/sql",
			strings.NewReader(`{"sql":"SELECT count(DISTINCT rank) AS ranks FROM events WHERE node = 'node-a' AND rank IS NOT NULL"}`))
		req.Header.Set("Authorization", "Bearer "+AgentToken)
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var res struct {
			Rows [][]any `json:"rows"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &res) != nil || len(res.Rows) != 1 {
			t.Logf("store answered %d: %s", resp.StatusCode, body)
			return false
		}
		n, _ := res.Rows[0][0].(float64)
		ranks = int(n)
		return ranks == 3
	})
	if code := nodeProc.Terminate(t, 30*time.Second); code != 0 {
		t.Errorf("the node exited %d on SIGTERM:\n%s", code, nodeProc.Output())
	}
	if code := gateway.Terminate(t, 30*time.Second); code != 0 {
		t.Errorf("the gateway exited %d on SIGTERM:\n%s", code, gateway.Output())
	}
}
