package stragglerprocessor

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/fathom-gpu/fathom/processor/stragglerprocessor/internal/metadata"
)

// The remediation hook: a program connected to the verdicts socket, and a webhook,
// each get the one verdict the slow-rank scenario produces, as JSON that names the
// rank, its node and the numbers. A second client over max_clients is turned away.
func TestVerdictsReachTheSocketAndTheWebhook(t *testing.T) {
	var mu sync.Mutex
	var posted []Verdict
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v Verdict
		if err := json.NewDecoder(r.Body).Decode(&v); err != nil || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("webhook body: %v", err)
		}
		mu.Lock()
		posted = append(posted, v)
		mu.Unlock()
	}))
	defer hook.Close()
	cfg := createDefaultConfig()
	cfg.EvaluationInterval = time.Hour
	cfg.Verdicts.UnixSocket = filepath.Join(t.TempDir(), "verdicts.sock")
	cfg.Verdicts.Webhook.Endpoint = hook.URL + "/verdict"
	cfg.Verdicts.MaxClients = 1
	ctx := context.Background()
	set := processortest.NewNopSettings(metadata.Type)
	mp, err := NewFactory().CreateMetrics(ctx, set, cfg, new(consumertest.MetricsSink))
	if err != nil {
		t.Fatal(err)
	}
	if err := mp.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	defer mp.Shutdown(ctx)
	s, _ := instances.Get(set.ID)
	var clock time.Time
	s.now = func() time.Time { return clock }

	client, err := net.Dial("unix", cfg.Verdicts.UnixSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	deadline := time.Now().Add(5 * time.Second)
	for { // the listener registers the client asynchronously
		s.verdicts.mu.Lock()
		n := len(s.verdicts.clients)
		s.verdicts.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the socket client was never registered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	refused, err := net.Dial("unix", cfg.Verdicts.UnixSocket)
	if err != nil {
		t.Fatal(err)
	}
	_ = refused.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := refused.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("a client over max_clients was not closed: %v", err)
	}
	refused.Close()

	start := time.Unix(1_800_000_000, 0)
	slowRankScenario(t, mp, s, start, func(c time.Time) { clock = c })

	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(client).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var v Verdict
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		t.Fatal(err)
	}
	if v.State != "straggler" || v.Source != "gateway" || v.Rank == nil || *v.Rank != 5 || v.Node != "node-2" || v.Cohort != "comm-1" ||
		v.Cluster != "c1" || v.Job != "llama" || v.Value < 0.0999 || v.Value > 0.1001 || !v.Since.Equal(start.Add(11*time.Second)) ||
		!strings.HasPrefix(v.Message, "rank 5 on node-2 is a straggler") {
		t.Errorf("socket verdict: %s", line)
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(posted)
		mu.Unlock()
		if n == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(posted) != 1 || posted[0].State != "straggler" || *posted[0].Rank != 5 {
		t.Errorf("webhook got %+v, want the one straggler verdict", posted)
	}
}

// A verdicts path that is some other file is refused at start, and left alone.
func TestVerdictsSocketRefusesToReplaceAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "not-a-socket")
	if err := os.WriteFile(path, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := createDefaultConfig()
	cfg.Verdicts.UnixSocket = path
	ctx := context.Background()
	mp, err := NewFactory().CreateMetrics(ctx, processortest.NewNopSettings(metadata.Type), cfg, new(consumertest.MetricsSink))
	if err != nil {
		t.Fatal(err)
	}
	err = mp.Start(ctx, componenttest.NewNopHost())
	if err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Errorf("start: %v", err)
	}
	_ = mp.Shutdown(ctx)
	if b, _ := os.ReadFile(path); string(b) != "keep" {
		t.Error("the file was replaced")
	}
}
