package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/fathom-gpu/fathom/internal/pushback"
)

// A node whose ranks belong to sixteen cohorts sends requests whose lines do not all fit
// in one answer: each answer on its connection starts where the last one stopped, so
// every cohort's line reaches it, and another node's connection keeps its own turn.
func TestAnswersTakeTurnsAmongLinesThatDoNotFit(t *testing.T) {
	var lines []pushback.Threshold
	for i := range 16 {
		l := line
		l.Cohort = fmt.Sprintf("nccl:%016x", 0x9e3779b97f4a7c15*uint64(i+1))
		lines = append(lines, l)
	}
	gateway, _ := startedPublisher(t, defaultSettings())
	_, fit := pushback.Encode(lines, gateway.settings.MaxResponseBytes)
	fit = len(lines) - fit
	if fit < 2 || fit >= len(lines) {
		t.Fatalf("%d of %d lines fit in %d bytes: the test needs some, not all", fit, len(lines), gateway.settings.MaxResponseBytes)
	}
	wrap, _ := gateway.GetHTTPHandler(context.Background())
	h, _ := wrap(context.Background(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, l := range lines {
			pushback.FromContext(r.Context()).Add(l)
		}
		w.WriteHeader(http.StatusOK)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()

	// Each client keeps one connection: one node collector's exporter.
	nodeA, nodeB := &http.Client{Transport: &http.Transport{}}, &http.Client{Transport: &http.Transport{}}
	answer := func(c *http.Client) []string {
		t.Helper()
		resp, err := c.Post(srv.URL+"/v1/metrics", "application/x-protobuf", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got, err := pushback.Decode(resp.Header.Get(pushback.HTTPHeader))
		if err != nil {
			t.Fatal(err)
		}
		var cohorts []string
		for _, l := range got {
			cohorts = append(cohorts, l.Cohort)
		}
		return cohorts
	}
	want := func(from int) []string {
		var cohorts []string
		for i := range fit {
			cohorts = append(cohorts, lines[(from+i)%len(lines)].Cohort)
		}
		return cohorts
	}
	carried := map[string]bool{}
	for i := range (len(lines) + fit - 1) / fit {
		got := answer(nodeA)
		if w := want(i * fit); !slices.Equal(got, w) {
			t.Fatalf("answer %d to node A carries %v, want %v", i, got, w)
		}
		for _, c := range got {
			carried[c] = true
		}
	}
	if len(carried) != len(lines) {
		t.Errorf("node A got %d of %d cohorts' lines", len(carried), len(lines))
	}
	if got, w := answer(nodeB), want(0); !slices.Equal(got, w) {
		t.Errorf("first answer to node B carries %v, want %v (its own turn, from the first line)", got, w)
	}
}
