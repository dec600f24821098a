package inputboundsprocessor

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"

	"github.com/fathom-gpu/fathom/internal/collectorconfig"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
)

// The hostile logs and metrics of processor_test.go, sent to the real binary over
// OTLP/HTTP: both requests are answered 200, the store holds every good record and
// point exactly and the cut ones cut and noted, the points that cannot be right are
// not stored, and the gateway's own metrics count each cut by reason.
func TestAGatewayStoresHostileInputCut(t *testing.T) {
	// The shipped gateway (the otlp receiver, then inputbounds, into the Echo store),
	// over plaintext OTLP as the test sends it, with a request cap that lets the hostile
	// request in.
	gw := collectortest.Gateway(t, collectorconfig.GatewayPlaintext).Merge(t, `
receivers:
  otlp:
    protocols:
      http:
        max_request_body_size: 33554432
`)
	echoCert, echoKey, pool := collectortest.LoopbackCert(t, t.TempDir())
	gw.Start(t, "FATHOM_ECHO_TLS_CERT="+echoCert, "FATHOM_ECHO_TLS_KEY="+echoKey)
	otlp, telemetry := gw.Listen["FATHOM_GATEWAY_OTLP_HTTP"], gw.Listen["FATHOM_TELEMETRY_PORT"]
	echo := echoAPI{addr: gw.Listen["FATHOM_ECHO_ENDPOINT"], client: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}

	// The store puts a resource's attributes on each of its records: the resource's own
	// huge value would show on every row, so here only the records carry them.
	ld := hostileLogs()
	ld.ResourceLogs().At(0).Resource().Attributes().Remove("huge")
	logs, err := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := pmetricotlp.NewExportRequestFromMetrics(hostileMetrics()).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	for path, body := range map[string][]byte{"/v1/logs": logs, "/v1/metrics": metrics} {
		resp, err := http.Post("http://"+otlp+path, "application/x-protobuf", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s (%d bytes): %d %s", path, len(body), resp.StatusCode, answer)
		}
	}

	rows := echo.sql(t, `SELECT coalesce(length(json_extract_string(attributes, '$.huge')), -1),
		coalesce(json_extract_string(attributes, '$."`+semconv.InputCut+`"'), ''), length(coalesce(body, '')),
		len(json_keys(attributes)) FROM events WHERE kind = 'log' ORDER BY rowid`)
	want := [][]any{
		{-1.0, "", 13.0, 1.0},                  // the good record, as sent
		{4096.0, "attribute_value", 0.0, 2.0},  // its 3 MB value cut
		{-1.0, "attributes", 0.0, 129.0},       // 128 of 20,000 attributes, and the note
		{-1.0, "attribute_value", 2048.0, 1.0}, // a 3 MB body cut at a character (2,048 of them, 4,096 bytes)
		{-1.0, "attribute_value", 0.0, 2.0},    // a value deep in a map cut
	}
	if got, exp := fmt.Sprint(rows), fmt.Sprint(want); got != exp {
		t.Errorf("stored log records:\n got %s\nwant %s", got, exp)
	}
	points := echo.sql(t, `SELECT name, count(*), coalesce(max(count), 0) FROM events WHERE kind <> 'log' GROUP BY name ORDER BY name`)
	if got, exp := fmt.Sprint(points), fmt.Sprint([][]any{
		{"app.temperature", 1.0, 0.0}, {"cuda.call.duration", 1.0, 5.0}, {"fathom.call.duration", 1.0, 6.0}, {semconv.MetricRankDeviceWait, 1.0, 0.0},
	}); got != exp {
		t.Errorf("stored points:\n got %s\nwant %s", got, exp)
	}

	counted := map[string]string{}
	resp, err := http.Get("http://localhost:" + telemetry + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range regexp.MustCompile(`(?m)^otelcol_fathom_inputbounds_cut\{[^}]*reason="([a-z_]+)"[^}]*\} (\d+)$`).FindAllStringSubmatch(string(text), -1) {
		counted[m[1]] = m[2]
	}
	if got := fmt.Sprint(counted); got != "map[attribute_value:3 attributes:19872 histogram_buckets:1 histogram_inconsistent:4 not_finite:4]" {
		t.Errorf("otelcol_fathom_inputbounds_cut by reason: %s\n%s", got, grep(string(text), "inputbounds"))
	}
}

// echoAPI is the gateway's Echo API, asked as an agent would.
type echoAPI struct {
	addr   string
	client *http.Client
}

func (e echoAPI) sql(t *testing.T, query string) [][]any {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"sql": query})
	req, _ := http.NewRequest(http.MethodPost, "https://"+e.addr+"/api/v1/sql", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+collectortest.AgentToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
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
	return out.Rows
}

func grep(text, word string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
