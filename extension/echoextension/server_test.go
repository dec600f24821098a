package echoextension

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fathom-gpu/fathom/extension/echoextension/internal/metadata"
	"github.com/fathom-gpu/fathom/internal/echoapi"
	"github.com/fathom-gpu/fathom/internal/echosocket"
)

// startLoggedSocketStore starts the extension with its API on a Unix socket, logging
// to an observer, and answers it with the socket's client.
func startLoggedSocketStore(t *testing.T) (*echoExtension, *http.Client, *observer.ObservedLogs) {
	t.Helper()
	dir := t.TempDir()
	cfg := createDefaultConfig().(*Config)
	cfg.Path = filepath.Join(dir, "echo.duckdb")
	cfg.Server.UnixSocket = UnixSocketConfig{Path: filepath.Join(dir, "echo.sock"), Mode: "0600"}
	cfg.SQL.Timeout = time.Hour
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	set := extensiontest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	ext, err := NewFactory().Create(context.Background(), set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		_ = ext.Shutdown(context.Background())
		t.Fatal(err)
	}
	client := echosocket.HTTPClient(cfg.Server.UnixSocket.Path)
	t.Cleanup(client.CloseIdleConnections)
	return ext.(*echoExtension), client, logs
}

func post(t *testing.T, client *http.Client, path, body string) (int, echoapi.ErrorBody) {
	t.Helper()
	resp, err := client.Post("http://fathom-echo"+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var e echoapi.ErrorBody
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, raw)
	}
	return resp.StatusCode, e
}

// An internal error's details reach the collector's log, and only "internal error"
// reaches the client.
func TestInternalErrorsReachTheCollectorsLog(t *testing.T) {
	ext, client, logs := startLoggedSocketStore(t)
	defer func() {
		if err := ext.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	// cluster_summary counts errors in events; without the table DuckDB names it.
	if _, err := ext.store.DB().Exec(`DROP TABLE events`); err != nil {
		t.Fatal(err)
	}
	status, e := post(t, client, "/api/v1/tools/cluster_summary", `{}`)
	if status != http.StatusInternalServerError || e.Error.Code != "internal" || e.Error.Message != "internal error" {
		t.Errorf("a failing store: %d %+v", status, e)
	}
	logged := logs.FilterMessage("Echo API internal error").All()
	if len(logged) != 1 {
		t.Fatalf("%d internal errors logged, want 1: %+v", len(logged), logs.All())
	}
	fields := logged[0].ContextMap()
	if logged[0].Level != zapcore.ErrorLevel || fields["transport"] != "http" || fields["tool"] != "cluster_summary" || fields["principal"] != "local" ||
		!strings.Contains(fields["error"].(string), "Table with name events does not exist") {
		t.Errorf("logged %s %v, want the error with DuckDB's words", logged[0].Level, fields)
	}
}

// The collector stops while a query runs and the API's own shutdown gives up on it:
// the store still does not close under the query. It interrupts it after its grace,
// the caller is told store_closed, and Shutdown returns.
func TestShutdownPastTheAPIsDeadlineAnswersAQueryInFlight(t *testing.T) {
	ext, client, _ := startLoggedSocketStore(t)
	type answer struct {
		status int
		body   echoapi.ErrorBody
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := client.Post("http://fathom-echo/api/v1/sql", "application/json",
			strings.NewReader(`{"sql":"SELECT count(*) FROM range(100000) a, range(100000) b WHERE a.range * b.range = -1"}`))
		if err != nil {
			answered <- answer{status: -1, body: echoapi.ErrorBody{}}
			return
		}
		defer resp.Body.Close()
		var e echoapi.ErrorBody
		_ = json.NewDecoder(resp.Body).Decode(&e)
		answered <- answer{resp.StatusCode, e}
	}()
	// The query would run for hours: half a second in, it is running.
	time.Sleep(500 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := ext.Shutdown(ctx)
	if err == nil || !strings.Contains(err.Error(), "context deadline exceeded") {
		t.Errorf("shutdown with a query in flight past its deadline: %v, want the API's deadline", err)
	}
	select {
	case got := <-answered:
		if got.status != http.StatusServiceUnavailable || got.body.Error.Code != "store_closed" {
			t.Errorf("the query in flight at shutdown: %d %+v, want 503 store_closed", got.status, got.body)
		}
	case <-time.After(10 * time.Second):
		t.Error("the query in flight at shutdown was never answered")
	}
}
