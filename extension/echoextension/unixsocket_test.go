package echoextension

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"

	"github.com/fathom-gpu/fathom/extension/echoextension/internal/metadata"
	"github.com/fathom-gpu/fathom/internal/echosocket"
)

func TestUnixSocketConfig(t *testing.T) {
	cfg, err := loadConfig(t, "unix_socket")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.UnixSocket.Path != "/run/fathom/echo.sock" || cfg.Server.UnixSocket.fileMode() != 0o660 {
		t.Fatalf("unix_socket: %+v", cfg.Server.UnixSocket)
	}
	_, err = loadConfig(t, "unix_socket_and_endpoint")
	for _, want := range []string{
		"set either `server.endpoint` (localhost:8765, a TCP listener with tokens) or `server.unix_socket.path`",
		`must be an absolute path`,
		`want "0600" (the collector's user) or "0660"`,
		"do not apply to `server.unix_socket`",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("endpoint and socket: got %v, want it to mention %q", err, want)
		}
	}
	long := &ServerConfig{UnixSocket: UnixSocketConfig{Path: "/" + strings.Repeat("d", 120)}, RateLimit: RateLimitConfig{RequestsPerSecond: 1, Burst: 1}}
	if errs := long.validate(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "holds at most 107") {
		t.Errorf("a 121-byte path: %v", errs)
	}
}

// startSocketStore starts the echo extension with its API on a socket at path.
func startSocketStore(t *testing.T, path string) (stop func(), startErr error) {
	t.Helper()
	cfg := createDefaultConfig().(*Config)
	cfg.Path = filepath.Join(t.TempDir(), "echo.duckdb")
	cfg.Server.UnixSocket = UnixSocketConfig{Path: path, Mode: "0660"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ext, err := NewFactory().Create(context.Background(), extensiontest.NewNopSettings(metadata.Type), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		_ = ext.Shutdown(context.Background())
		return nil, err
	}
	return func() {
		if err := ext.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}, nil
}

// The socket comes up with its mode, answers MCP without a token (its permissions are
// the boundary), replaces a socket a dead collector left, refuses a live one and a
// plain file, says which directory is missing, and is gone after shutdown.
func TestUnixSocketServesMCPAndCleansUp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "echo.sock")

	// What a killed collector leaves: a socket file nobody listens on.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()

	stop, err := startSocketStore(t, path)
	if err != nil {
		t.Fatalf("start over a stale socket: %v", err)
	}
	st, err := os.Lstat(path)
	if err != nil || st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o660 {
		t.Fatalf("socket: %v, %v", st.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the socket's directory holds more than the socket: %v", entries)
	}

	client := mcp.NewClient(&mcp.Implementation{Name: "fathom-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: echosocket.MCPEndpoint, HTTPClient: echosocket.HTTPClient(path)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// run_analysis needs the sql scope: a socket's caller has every scope.
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "run_analysis", Arguments: map[string]any{"sql": "SELECT 40 + 2 AS answer"}})
	if err != nil || res.IsError {
		t.Fatalf("run_analysis over the socket: %v %+v", err, res)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if !strings.Contains(string(raw), "42") {
		t.Errorf("run_analysis answered %s", raw)
	}
	s.Close()

	// A second store on the same path: the first one still answers there.
	if _, err := startSocketStore(t, path); err == nil || !strings.Contains(err.Error(), "another process is serving on this socket") {
		t.Errorf("a second collector on a live socket: %v", err)
	}
	stop()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket outlived the shutdown: %v", err)
	}

	plain := filepath.Join(dir, "not-a-socket")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := startSocketStore(t, plain); err == nil || !strings.Contains(err.Error(), "exists and is not a socket") {
		t.Errorf("a plain file at the path: %v", err)
	}
	if _, err := os.Stat(plain); err != nil {
		t.Errorf("the plain file was removed: %v", err)
	}
	if _, err := startSocketStore(t, filepath.Join(dir, "missing", "echo.sock")); err == nil || !strings.Contains(err.Error(), "its directory "+filepath.Join(dir, "missing")) {
		t.Errorf("a socket in a missing directory: %v", err)
	}
}
