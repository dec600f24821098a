// Package thresholdstest holds what the tests of both sides of the thresholds extension,
// and of the whole extension, share: sample lines, an otlp endpoint behind the gateway's
// server middleware, and a reading of the extension's counters. Imported by tests only.
package thresholdstest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensionmiddleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fathom-gpu/fathom/internal/pushback"
)

// Line is one cohort's device-wait line.
var Line = pushback.Threshold{Cluster: "c1", Cohort: "comm-1", Signal: "fathom.rank.device_wait.time", Median: 0.3, Line: 0.23, Worse: "lower", At: 1}

// LaunchLine is a second signal of Line's cohort, on the other side.
var LaunchLine = pushback.Threshold{Cluster: "c1", Cohort: "comm-1", Signal: "fathom.rank.launch_rate", Median: 812.5, Line: 640.25, Worse: "lower", At: 2}

// OtherCohortLine is the same signal as Line in another cohort of the same cluster.
var OtherCohortLine = pushback.Threshold{Cluster: "c1", Cohort: "comm-2", Signal: "fathom.rank.device_wait.time", Median: 0.5, Line: 0.4, Worse: "lower", At: 3}

// OTLPBehind stands in for the gateway's otlp receiver and straggler processor behind
// the server middleware: every export is answered with lines, as the processor adds
// them to the request's context. It returns the export URL.
func OTLPBehind(t testing.TB, gateway extensionmiddleware.HTTPServer, lines ...pushback.Threshold) string {
	t.Helper()
	wrap, err := gateway.GetHTTPHandler(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h, err := wrap(context.Background(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, l := range lines {
			pushback.FromContext(r.Context()).Add(l)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write([]byte{}) // the receiver writes the body without WriteHeader
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/v1/metrics"
}

// Export posts an empty export to url, as a node's otlp exporter would, and reads the
// answer whole.
func Export(t testing.TB, client *http.Client, url string) *http.Response {
	t.Helper()
	resp, err := client.Post(url, "application/x-protobuf", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// Start starts c, whole extension or one side, and shuts it and its telemetry down
// when the test ends.
func Start(t testing.TB, c component.Component, tel *componenttest.Telemetry) {
	t.Helper()
	if err := c.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		_ = tel.Shutdown(context.Background())
	})
}

// Counted sums a counter of the extension's telemetry over the points whose attribute
// key has value ("" key: all points); a counter never added to counts 0.
func Counted(t testing.TB, tel *componenttest.Telemetry, name, key, value string) int64 {
	t.Helper()
	m, err := tel.GetMetric(name)
	if err != nil {
		return 0
	}
	var n int64
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		if v, ok := dp.Attributes.Value(attribute.Key(key)); key == "" || (ok && v.AsString() == value) {
			n += dp.Value
		}
	}
	return n
}
