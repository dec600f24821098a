package echosocket_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fathom-gpu/fathom/internal/echosocket"
	"github.com/fathom-gpu/fathom/internal/echotools"
	"github.com/fathom-gpu/fathom/internal/testsupport/echosockettest"
	"github.com/fathom-gpu/fathom/internal/testsupport/echostoretest"
)

var plantedAt = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func listen(t *testing.T, path string, mode os.FileMode) *echosocket.Listener {
	t.Helper()
	l, err := echosocket.Listen(path, mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// answers says whether something accepts connections on the socket at path.
func answers(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	list, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		names = append(names, e.Name())
	}
	return names
}

// The socket has the mode asked for, not what the umask would have given a plain
// bind (0777 under umask 0, 0700 under 077), and its staging directory is gone.
func TestListenGivesTheSocketItsModeWhateverTheUmask(t *testing.T) {
	for _, c := range []struct {
		umask int
		mode  os.FileMode
	}{{0, 0o600}, {0o077, 0o660}} {
		dir := t.TempDir()
		path := filepath.Join(dir, "echo.sock")
		old := syscall.Umask(c.umask)
		l, err := echosocket.Listen(path, c.mode)
		syscall.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Lstat(path)
		if err != nil || st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != c.mode {
			t.Errorf("umask %#o, mode %#o: got %v (%v)", c.umask, c.mode, st.Mode(), err)
		}
		if names := entries(t, dir); len(names) != 1 || names[0] != "echo.sock" {
			t.Errorf("the socket's directory holds %v, want only echo.sock", names)
		}
		if !answers(path) {
			t.Errorf("nothing answers on %s", path)
		}
		l.Close()
	}
}

// A socket nobody answers on (a killed collector's) is replaced; a live one is
// refused and keeps answering; a plain file, a directory and a symlink are refused
// and left as they were.
func TestListenReplacesOnlyAStaleSocket(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	dead, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	dead.SetUnlinkOnClose(false)
	dead.Close()
	listen(t, stale, 0o600)
	if !answers(stale) {
		t.Error("the stale socket was not replaced by a live one")
	}

	if _, err := echosocket.Listen(stale, 0o600); err == nil ||
		err.Error() != "server.unix_socket.path "+stale+": another process is serving on this socket (a second collector?); stop it or choose another path" {
		t.Errorf("a second listener on a live socket: %v", err)
	}
	if !answers(stale) {
		t.Error("the live socket stopped answering after a second listener was refused")
	}

	plain := filepath.Join(dir, "echo.duckdb")
	if err := os.WriteFile(plain, []byte("rows"), 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.sock")
	if err := os.Symlink(stale, link); err != nil {
		t.Fatal(err)
	}
	for path, kind := range map[string]string{plain: "----------", sub: "d---------", link: "L---------"} {
		_, err := echosocket.Listen(path, 0o600)
		want := fmt.Sprintf("server.unix_socket.path %s exists and is not a socket (%s); remove it or choose another path", path, kind)
		if err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
	if raw, err := os.ReadFile(plain); err != nil || string(raw) != "rows" {
		t.Errorf("the refused plain file now holds %q (%v)", raw, err)
	}
	if target, err := os.Readlink(link); err != nil || target != stale {
		t.Errorf("the refused symlink: %q %v", target, err)
	}
	if names := entries(t, dir); strings.Join(names, " ") != "echo.duckdb link.sock stale.sock sub" {
		t.Errorf("the directory after the refusals: %v", names)
	}
}

// A path whose directory is missing, or is a file, is refused with what to do.
func TestListenSaysWhatIsWrongWithTheDirectory(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "run", "fathom", "echo.sock")
	_, err := echosocket.Listen(missing, 0o600)
	if err == nil || !strings.HasPrefix(err.Error(), "server.unix_socket.path "+missing+": its directory "+filepath.Dir(missing)+": ") ||
		!strings.HasSuffix(err.Error(), "(create it first, e.g. systemd's RuntimeDirectory=fathom or a hostPath volume)") {
		t.Errorf("a missing directory: %v", err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	underFile := filepath.Join(file, "echo.sock")
	if _, err := echosocket.Listen(underFile, 0o600); err == nil || err.Error() != "server.unix_socket.path "+underFile+": "+file+" is not a directory" {
		t.Errorf("a file as the directory: %v", err)
	}
}

// Close removes the listener's own socket, and leaves one a later listener put at
// the same path.
func TestCloseRemovesOnlyItsOwnSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "echo.sock")
	first, err := echosocket.Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	// An operator removes the file and a new collector binds the path.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	second := listen(t, path, 0o600)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if !answers(path) {
		t.Fatal("closing the first listener removed the second one's socket")
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket outlived its listener: %v", err)
	}
}

// HTTPClient takes every request to the socket whatever the URL's host: MCP at
// MCPEndpoint answers the planted data, with the sql scope a socket's caller holds,
// and any host reaches the same API.
func TestHTTPClientReachesTheAPIOnTheSocket(t *testing.T) {
	srv := echosockettest.ServePlanted(t, filepath.Join(t.TempDir(), "echo.sock"), plantedAt)
	client := mcp.NewClient(&mcp.Implementation{Name: "echosocket-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: echosocket.MCPEndpoint, HTTPClient: echosocket.HTTPClient(srv.Path)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "find_outlier_nodes", Arguments: map[string]any{
		"signal": "nccl.allreduce.duration", "since": "2026-03-01T12:00:00Z", "until": "2026-03-01T12:30:00Z"}})
	if err != nil || res.IsError {
		t.Fatalf("find_outlier_nodes: %v %+v", err, res)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var out echotools.OutlierOutput
	if err := json.Unmarshal(raw, &out); err != nil || out.Groups != 8 || len(out.Outliers) != 1 || out.Outliers[0].Node != "gpu-5" || out.Outliers[0].Lag < 14.9-1e-9 || out.Outliers[0].Lag > 14.9+1e-9 {
		t.Errorf("find_outlier_nodes: %s", raw)
	}
	res, err = s.CallTool(ctx, &mcp.CallToolParams{Name: "run_analysis", Arguments: map[string]any{"sql": "SELECT count(*) FROM events"}})
	if err != nil || res.IsError {
		t.Fatalf("run_analysis: %v %+v", err, res)
	}
	if raw, _ := json.Marshal(res.StructuredContent); !strings.Contains(string(raw), fmt.Sprintf(`"rows":[[%d]]`, echostoretest.PlantedRows)) {
		t.Errorf("run_analysis: %s", raw)
	}

	resp, err := echosocket.HTTPClient(srv.Path).Get("http://any-host.example:9/api/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"status":"ok"`) {
		t.Errorf("health through another host name: %d %s", resp.StatusCode, body)
	}
}

// With nothing at the path, or the collector gone, the client fails at once with the
// path in its error instead of trying the URL's host.
func TestHTTPClientFailsWithoutASocket(t *testing.T) {
	dir := t.TempDir()
	srv := echosockettest.ServePlanted(t, filepath.Join(dir, "echo.sock"), plantedAt)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{srv.Path, filepath.Join(dir, "never.sock")} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://127.0.0.1:1/api/v1/health", nil)
		_, err := echosocket.HTTPClient(path).Do(req)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "dial unix "+path) {
			t.Errorf("%s: %v, want a failed dial of the socket", path, err)
		}
	}
}
