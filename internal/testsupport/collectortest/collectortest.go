// Package collectortest starts the real fathom binary in tests: with a real YAML config,
// real listeners and a real SIGTERM, so tests see what a platform team sees.
package collectortest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
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

// FreePort returns a loopback TCP port that was free a moment ago, and never one it
// returned before in this test process: the port is closed again at once, so the kernel
// may hand it out a second time before the collector it was meant for binds it, and
// two listeners of one test then collide.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if _, taken := givenPorts.LoadOrStore(port, true); !taken {
			return port
		}
	}
	t.Fatal("no loopback port that this test process has not handed out already")
	return 0
}

// givenPorts are the ports FreePort has returned in this process.
var givenPorts sync.Map

// Addr returns "127.0.0.1:<free port>".
func Addr(t testing.TB) string {
	return "127.0.0.1:" + strconv.Itoa(FreePort(t))
}

// Process is a running collector.
type Process struct {
	cmd    *exec.Cmd
	output *syncBuffer
	done   chan struct{}
	err    error
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
	p := &Process{output: &syncBuffer{}, done: make(chan struct{})}
	args := append(append([]string(nil), wrapper...), Binary(t))
	for _, c := range configs {
		args = append(args, "--config", c)
	}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout = p.output
	p.cmd.Stderr = p.output
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start fathom: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("fathom output:\n%s", p.Output())
		}
	})
	return p
}

// WaitHTTP polls url until it answers 200 or the process exits or timeout passes.
func (p *Process) WaitHTTP(t testing.TB, url string, timeout time.Duration) []byte {
	t.Helper()
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("fathom exited before %s answered (%v):\n%s", url, p.err, p.Output())
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return body.Bytes()
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not answer 200 within %s:\n%s", url, timeout, p.Output())
	return nil
}

// WaitListening polls until addr accepts a TCP connection, or the process exits or
// timeout passes. A collector starts its extensions before its receivers, so an
// extension's API can answer while the OTLP listeners are not up yet.
func (p *Process) WaitListening(t testing.TB, addr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("fathom exited before %s listened (%v):\n%s", addr, p.err, p.Output())
		default:
		}
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not listen within %s:\n%s", addr, timeout, p.Output())
}

// Terminate sends SIGTERM and waits for the process to exit; it returns the exit code.
func (p *Process) Terminate(t testing.TB, timeout time.Duration) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		// SIGQUIT makes the Go runtime print every goroutine's stack and exit: the
		// output then says where the shutdown hung.
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
		t.Fatalf("fathom did not exit within %s of SIGTERM (its goroutines, after SIGQUIT, at the end):\n%s", timeout, p.Output())
	}
	return p.cmd.ProcessState.ExitCode()
}

// Output is everything the process wrote so far (stdout and stderr).
func (p *Process) Output() string { return p.output.String() }

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

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
