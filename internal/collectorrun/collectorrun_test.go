package collectorrun

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/collectorconfig"
)

// script writes an executable shell script standing in for the binary: the launcher's
// behaviour at exits and signals, apart from what the real collector does (which the
// demo's and collectortest's tests run).
func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fake-fathom")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The configs are passed as --config flags in order, the environment added, the output
// kept, and a SIGTERM answered with the process's own exit code.
func TestACollectorGetsItsConfigsAndEnvironmentAndStopsOnSIGTERM(t *testing.T) {
	var out lockedBuffer
	c, err := Start(Spec{Bin: script(t, `echo "args: $*"; echo "env: $FATHOM_X"; trap 'exit 3' TERM; while :; do sleep 0.05; done`),
		Configs: []string{"a.yaml", "b.yaml"}, Env: []string{"FATHOM_X=y"}, Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "env: ") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	code, err := c.Stop(10 * time.Second)
	if err != nil || code != 3 {
		t.Fatalf("Stop = %d, %v; want the script's exit code 3", code, err)
	}
	if want := "args: --config a.yaml --config b.yaml\nenv: y\n"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
}

// One that ignores SIGTERM is made to exit (SIGQUIT, then SIGKILL) and Stop says so.
func TestACollectorThatIgnoresSIGTERMIsEndedAndReported(t *testing.T) {
	c, err := Start(Spec{Bin: script(t, `trap '' TERM QUIT; while :; do sleep 0.05; done`), OwnGroup: true})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the traps set
	if _, err := c.Stop(200 * time.Millisecond); err == nil {
		t.Fatal("Stop of a process that ignores SIGTERM returned no error")
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("the process still runs after Stop")
	}
}

// The waits end with ErrExited when the collector exits first, and with ctx's error
// when ctx ends first.
func TestTheWaitsEndWhenTheCollectorExitsOrTheContextEnds(t *testing.T) {
	c, err := Start(Spec{Bin: script(t, `exit 1`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitHTTP(context.Background(), "http://127.0.0.1:1/"); !errors.Is(err, ErrExited) {
		t.Errorf("WaitHTTP on an exited collector: %v, want ErrExited", err)
	}
	if c.ExitCode() != 1 {
		t.Errorf("ExitCode %d, want 1", c.ExitCode())
	}
	running, err := Start(Spec{Bin: script(t, `sleep 30`)})
	if err != nil {
		t.Fatal(err)
	}
	defer running.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := running.WaitListening(ctx, "127.0.0.1:1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitListening past its context: %v", err)
	}
}

func TestStartWithoutABinaryIsAnError(t *testing.T) {
	if _, err := Start(Spec{}); err == nil {
		t.Error("no error without a binary")
	}
	if _, err := Start(Spec{Bin: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("no error for a binary that is not there")
	}
}

// FreePort never hands out a port twice in one process, and LoopbackEnv gives an
// address, or a bare port for a _PORT variable.
func TestLoopbackPortsAreNeverHandedOutTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	env, values, err := LoopbackEnv(collectorconfig.Standalone)
	if err != nil {
		t.Fatal(err)
	}
	if len(values) != 1 || values["FATHOM_TELEMETRY_PORT"] == "" || strings.Contains(values["FATHOM_TELEMETRY_PORT"], ":") {
		t.Errorf("standalone's values %v, want its telemetry port alone, bare", values)
	}
	if len(env) != 1 || env[0] != "FATHOM_TELEMETRY_PORT="+values["FATHOM_TELEMETRY_PORT"] {
		t.Errorf("env %v", env)
	}
	_, values, err = LoopbackEnv(collectorconfig.Node)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(values["FATHOM_HEALTH_ENDPOINT"], "127.0.0.1:") || len(values) != 4 {
		t.Errorf("node's values %v, want its four listeners, addresses on loopback", values)
	}
}
