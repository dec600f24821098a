// Package collectortest starts the real fathom binary in tests: with a real YAML config,
// real listeners and a real SIGTERM, so tests see what a platform team sees. The
// process is run by internal/collectorrun, as the demo's collectors are, and the
// configs of the node, gateway and standalone roles are derived from the shipped ones
// (roles.go).
package collectortest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/collectorrun"
)

var (
	buildOnce sync.Once
	builtPath string
	buildErr  error
)

// Binary returns the path of the fathom binary under test: $FATHOM_BIN when set (make
// test builds it once for every package), otherwise one built from this checkout.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("FATHOM_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("FATHOM_BIN=%s: %v", p, err)
		}
		return p
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fathom-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtPath = filepath.Join(dir, "fathom")
		cmd := exec.Command("go", "build", "-o", builtPath, "./cmd/fathom")
		cmd.Dir = RepoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/fathom: %v\n%s", err, out)
			return
		}
		// Written back now, as an installed binary's would long be: dirty page-cache
		// pages cannot be paged out, so the collector's start-up release
		// (internal/startpages) would keep them, and memory measurements with them.
		buildErr = syncFile(builtPath)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtPath
}

// RepoRoot is the checkout's root directory (the one holding go.mod).
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate collectortest source file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// FreePort returns a loopback TCP port that was free a moment ago, and never one
// handed out before in this test process (collectorrun.FreePort).
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := collectorrun.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Addr returns "127.0.0.1:<free port>".
func Addr(t testing.TB) string {
	return "127.0.0.1:" + strconv.Itoa(FreePort(t))
}

// Process is a running collector.
type Process struct {
	*collectorrun.Collector
	output *syncBuffer
}

// Start runs `fathom --config <config>` with extra environment variables (KEY=VALUE).
// The process is killed at test cleanup if the test did not stop it.
func Start(t testing.TB, config string, env ...string) *Process {
	t.Helper()
	return StartConfigs(t, []string{config}, env...)
}

// StartConfigs runs fathom with several --config files, which the collector merges in
// order (maps merge, a later list replaces an earlier one).
func StartConfigs(t testing.TB, configs []string, env ...string) *Process {
	t.Helper()
	return StartUnder(t, nil, configs, env...)
}

// StartUnder is StartConfigs under a wrapper command (e.g. `unshare --net ...`), given
// the binary and its flags as its last arguments. The wrapper must exec them in its own
// process, so that Pid and Terminate reach the collector itself.
func StartUnder(t testing.TB, wrapper, configs []string, env ...string) *Process {
	t.Helper()
	p := &Process{output: &syncBuffer{}}
	c, err := collectorrun.Start(collectorrun.Spec{Bin: Binary(t), Configs: configs, Wrapper: wrapper, Env: env, Output: p.output})
	if err != nil {
		t.Fatal(err)
	}
	p.Collector = c
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("fathom output:\n%s", p.Output())
		}
	})
	return p
}

// WaitHTTP polls url until it answers 200 or the process exits or timeout passes.
func (p *Process) WaitHTTP(t testing.TB, url string, timeout time.Duration) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	body, err := p.Collector.WaitHTTP(ctx, url)
	if err != nil {
		t.Fatalf("fathom: %v:\n%s", err, p.Output())
	}
	return body
}

// WaitListening polls until addr accepts a TCP connection, or the process exits or
// timeout passes. A collector starts its extensions before its receivers, so an
// extension's API can answer while the OTLP listeners are not up yet.
func (p *Process) WaitListening(t testing.TB, addr string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := p.Collector.WaitListening(ctx, addr); err != nil {
		t.Fatalf("fathom: %v:\n%s", err, p.Output())
	}
}

// Terminate sends SIGTERM and waits for the process to exit; it returns the exit code.
// One that does not exit within timeout fails the test with its goroutines' stacks.
func (p *Process) Terminate(t testing.TB, timeout time.Duration) int {
	t.Helper()
	code, err := p.Stop(timeout)
	if err != nil {
		t.Fatalf("%v (its goroutines, after SIGQUIT, at the end):\n%s", err, p.Output())
	}
	return code
}

// Output is everything the process wrote so far (stdout and stderr).
func (p *Process) Output() string { return p.output.String() }

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// PinDir returns a bpffs directory of the test's own for a node collector's pinned
// kernel state (kernel_state.pin_dir), removed with what it holds when the test ends:
// collectors of different tests must not adopt each other's state.
func PinDir(t testing.TB) string {
	t.Helper()
	dir := fmt.Sprintf("/sys/fs/bpf/fathom-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// WaitFor polls cond every 50 ms until it holds, and fails the test, naming what it
// waited for, once timeout has passed.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
