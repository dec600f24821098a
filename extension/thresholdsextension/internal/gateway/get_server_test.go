package gateway

import (
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/confighttp"

	"github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/lines"
	"github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/metadata"
	"github.com/fathom-gpu/fathom/internal/pushback"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/thresholdstest"
)

// The shared sample lines.
var line, launchLine, otherCohortLine = thresholdstest.Line, thresholdstest.LaunchLine, thresholdstest.OtherCohortLine

// defaultSettings are what the extension's default config gives the gateway.
func defaultSettings() Settings {
	return Settings{TTL: 2 * time.Minute, MaxResponseBytes: 1024, MaxHeld: 256}
}

// withGETServer turns the GET fallback on at a free loopback port.
func withGETServer(t *testing.T, s Settings) Settings {
	server := confighttp.NewDefaultServerConfig()
	server.NetAddr.Endpoint = collectortest.Addr(t)
	s.Server = &server
	return s
}

// startedPublisher creates and starts a gateway side whose telemetry the test can read;
// it is shut down when the test ends.
func startedPublisher(t *testing.T, s Settings) (*Publisher, *componenttest.Telemetry) {
	t.Helper()
	tel := componenttest.NewTelemetry()
	set := tel.NewTelemetrySettings()
	tb, err := metadata.NewTelemetryBuilder(set)
	if err != nil {
		t.Fatal(err)
	}
	p := NewPublisher(s, set, tb)
	thresholdstest.Start(t, p, tel)
	return p, tel
}

func getURL(gateway *Publisher) string {
	return "http://" + gateway.settings.Server.NetAddr.Endpoint + lines.GETPath
}

func httpGet(t *testing.T, method, url string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

func encoded(t *testing.T, maxBytes int, ts ...pushback.Threshold) string {
	t.Helper()
	v, left := pushback.Encode(ts, maxBytes)
	if left != 0 {
		t.Fatalf("%d of %d lines do not fit in %d bytes", left, len(ts), maxBytes)
	}
	return v
}

// After the middleware has answered an export with a cohort's lines, a GET of that
// cohort returns exactly them, in the push-back's wire form, sorted by signal; a signal
// narrows it to one line; another cohort gets its own.
func TestGETServesTheLinesTheAnswersCarried(t *testing.T) {
	gateway, tel := startedPublisher(t, withGETServer(t, defaultSettings()))
	exportURL := thresholdstest.OTLPBehind(t, gateway, launchLine, line, otherCohortLine)
	base := getURL(gateway)

	if code, body, _ := httpGet(t, http.MethodGet, base+"?cluster=c1&cohort=comm-1"); code != http.StatusNotFound || !strings.HasPrefix(body, lines.NoLinesFor) {
		t.Fatalf("before any export: %d %q; want 404", code, body)
	}
	thresholdstest.Export(t, http.DefaultClient, exportURL)

	code, body, header := httpGet(t, http.MethodGet, base+"?cluster=c1&cohort=comm-1")
	if want := encoded(t, 1024, line, launchLine) + "\n"; code != http.StatusOK || body != want {
		t.Fatalf("comm-1: %d %q; want 200 %q", code, body, want)
	}
	if ct := header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	got, err := pushback.Decode(strings.TrimSpace(body))
	if err != nil || len(got) != 2 || !reflect.DeepEqual(got[0], line) || !reflect.DeepEqual(got[1], launchLine) {
		t.Fatalf("decoded %+v (%v); want %+v and %+v", got, err, line, launchLine)
	}
	if code, body, _ := httpGet(t, http.MethodGet, base+"?cluster=c1&cohort=comm-1&signal=fathom.rank.launch_rate"); code != http.StatusOK || body != encoded(t, 1024, launchLine)+"\n" {
		t.Fatalf("one signal: %d %q", code, body)
	}
	if code, body, _ := httpGet(t, http.MethodGet, base+"?cluster=c1&cohort=comm-2"); code != http.StatusOK || body != encoded(t, 1024, otherCohortLine)+"\n" {
		t.Fatalf("comm-2: %d %q", code, body)
	}
	if n := thresholdstest.Counted(t, tel, "otelcol_fathom_thresholds_served", "outcome", servedFound); n != 3 {
		t.Errorf("otelcol_fathom_thresholds_served{outcome=found} = %d; want 3", n)
	}
	if n := thresholdstest.Counted(t, tel, "otelcol_fathom_thresholds_served", "outcome", servedNotFound); n != 1 {
		t.Errorf("otelcol_fathom_thresholds_served{outcome=not_found} = %d; want 1", n)
	}
}

// A query it cannot read is a 400 that says why; a cohort (or a signal) it has no line
// of is a 404 that names it; other methods and paths are not served.
func TestGETRefusesWhatItCannotAnswer(t *testing.T) {
	gateway, tel := startedPublisher(t, withGETServer(t, defaultSettings()))
	thresholdstest.Export(t, http.DefaultClient, thresholdstest.OTLPBehind(t, gateway, line))
	base := getURL(gateway)
	for _, c := range []struct {
		method, query string
		code          int
		body          string
	}{
		{http.MethodGet, "?cluster=c1", http.StatusBadRequest, "`cohort` is required; ask GET /v1/thresholds?cluster=<fathom.cluster.name>&cohort=<fathom.cohort>[&signal=<metric>]\n"},
		{http.MethodGet, "?cluster=c1&cohort=a&cohort=b", http.StatusBadRequest, `"cohort" is given 2 times; give it once; ask GET`},
		{http.MethodGet, "?cluster=c1&cohrt=comm-1", http.StatusBadRequest, `unknown query parameter "cohrt"; the parameters are cluster, cohort and signal; ask GET`},
		{http.MethodGet, "?cluster=c1&cohort=%zz", http.StatusBadRequest, "the query is not URL-encoded: "},
		{http.MethodGet, "?cluster=c1&cohort=comm-9", http.StatusNotFound, `no thresholds for cohort "comm-9" in cluster "c1": no answer to an export of its ranks carried one within the last 2m0s`},
		{http.MethodGet, "?cohort=comm-1", http.StatusNotFound, `no thresholds for cohort "comm-1" in cluster "": `},
		{http.MethodGet, "?cluster=c1&cohort=comm-1&signal=nope", http.StatusNotFound, `no thresholds for cohort "comm-1" in cluster "c1", signal "nope": `},
		{http.MethodPost, "?cluster=c1&cohort=comm-1", http.StatusMethodNotAllowed, ""},
	} {
		code, body, _ := httpGet(t, c.method, base+c.query)
		if code != c.code || !strings.HasPrefix(body, c.body) {
			t.Errorf("%s %s: %d %q; want %d starting %q", c.method, c.query, code, body, c.code, c.body)
		}
	}
	if code, _, _ := httpGet(t, http.MethodGet, "http://"+gateway.settings.Server.NetAddr.Endpoint+"/v1/metrics"); code != http.StatusNotFound {
		t.Errorf("another path: %d; want 404", code)
	}
	if bad, none := thresholdstest.Counted(t, tel, "otelcol_fathom_thresholds_served", "outcome", servedBadRequest), thresholdstest.Counted(t, tel, "otelcol_fathom_thresholds_served", "outcome", servedNotFound); bad != 4 || none != 3 {
		t.Errorf("otelcol_fathom_thresholds_served: bad_request %d, not_found %d; want 4 and 3", bad, none)
	}
}

// A line no answer renewed for the TTL is no longer served; the next export brings it
// back.
func TestGETForgetsLinesNoAnswerRenewed(t *testing.T) {
	s := withGETServer(t, defaultSettings())
	s.TTL = 300 * time.Millisecond
	gateway, _ := startedPublisher(t, s)
	exportURL := thresholdstest.OTLPBehind(t, gateway, line)
	url := getURL(gateway) + "?cluster=c1&cohort=comm-1"
	thresholdstest.Export(t, http.DefaultClient, exportURL)
	if code, _, _ := httpGet(t, http.MethodGet, url); code != http.StatusOK {
		t.Fatalf("fresh: %d", code)
	}
	time.Sleep(s.TTL + 100*time.Millisecond)
	if code, body, _ := httpGet(t, http.MethodGet, url); code != http.StatusNotFound || !strings.Contains(body, "within the last 300ms") {
		t.Fatalf("past the TTL: %d %q; want 404", code, body)
	}
	thresholdstest.Export(t, http.DefaultClient, exportURL)
	if code, body, _ := httpGet(t, http.MethodGet, url); code != http.StatusOK || body != encoded(t, 1024, line)+"\n" {
		t.Fatalf("renewed: %d %q", code, body)
	}
}

// The answer to a GET is bounded by max_response_bytes like the push-back: lines past
// it are left out whole, and counted.
func TestGETAnswerIsBoundedByMaxResponseBytes(t *testing.T) {
	s := withGETServer(t, defaultSettings())
	s.MaxResponseBytes = 256
	gateway, tel := startedPublisher(t, s)
	var lines []pushback.Threshold
	for _, s := range []string{"a", "b", "c", "d", "e", "f"} {
		l := line
		l.Signal = "fathom.rank.signal_" + s
		lines = append(lines, l)
	}
	thresholdstest.Export(t, http.DefaultClient, thresholdstest.OTLPBehind(t, gateway, lines...))
	leftByExport := thresholdstest.Counted(t, tel, "otelcol_fathom_thresholds_left_out", "", "")
	want, left := pushback.Encode(lines, 256)
	if left == 0 || left == len(lines) {
		t.Fatalf("the test needs some lines to fit and some not: %d left out", left)
	}
	code, body, _ := httpGet(t, http.MethodGet, getURL(gateway)+"?cluster=c1&cohort=comm-1")
	if code != http.StatusOK || body != want+"\n" || len(want) > 256 {
		t.Fatalf("%d %q (%d bytes); want %q", code, body, len(body), want)
	}
	if n := thresholdstest.Counted(t, tel, "otelcol_fathom_thresholds_left_out", "", "") - leftByExport; n != int64(left) {
		t.Errorf("the GET left out %d lines uncounted or miscounted: counted %d", left, n)
	}
}
