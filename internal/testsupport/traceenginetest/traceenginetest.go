// Package traceenginetest reads a trace file with a parser Fathom did not write: the
// Chrome DevTools trace engine (@paulirish/trace_engine, pinned in test/traceengine),
// run by node. Tests of `fathom timeline` and get_timeline compare what it made of a
// trace with what the store holds.
package traceenginetest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// Parsed is what parse.mjs prints: the engine's processes and threads, and its flows.
type Parsed struct {
	Generic   bool      `json:"generic"`
	Events    int       `json:"events"`
	Processes []Process `json:"processes"`
	Flows     [][]struct {
		PID  int     `json:"pid"`
		TID  int     `json:"tid"`
		Name string  `json:"name"`
		TS   float64 `json:"ts"`
	} `json:"flows"`
}

// Process is one of the engine's processes (a node's track).
type Process struct {
	PID     int      `json:"pid"`
	Name    string   `json:"name"`
	Threads []Thread `json:"threads"`
}

// Thread is one of the engine's threads, with the complete slices and instants it placed on it.
type Thread struct {
	TID        int      `json:"tid"`
	Name       string   `json:"name"`
	Slices     int      `json:"slices"`
	SliceNames []string `json:"slice_names"`
	Instants   int      `json:"instants"`
	Roots      int      `json:"roots"`
}

// Threads maps "process name / thread name" to the thread, for lookups by what a user sees.
func (p Parsed) Threads() map[string]Thread {
	out := map[string]Thread{}
	for _, proc := range p.Processes {
		for _, th := range proc.Threads {
			out[proc.Name+" / "+th.Name] = th
		}
	}
	return out
}

// Dir is test/traceengine with its pinned packages installed, or the test stops: it
// is skipped where node or the packages are missing, and fails instead under
// FATHOM_REQUIRE_PRIVILEGED=1 or CI (where `make deps` installs them), so CI cannot pass
// by skipping the one check made with a parser Fathom did not write.
func Dir(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "..", "test", "traceengine")
	missing := ""
	if _, err := exec.LookPath("node"); err != nil {
		missing = "node on PATH"
	} else if err := InstalledAsPinned(dir); err != nil {
		missing = err.Error()
	}
	if missing == "" {
		return dir
	}
	if os.Getenv(privtest.EnvRequire) == "1" || os.Getenv("CI") != "" {
		t.Fatalf("the trace engine check needs %s, and %s=1 or CI makes that a failure", missing, privtest.EnvRequire)
	}
	t.Skipf("needs %s (make deps installs it); set %s=1 to make this a failure", missing, privtest.EnvRequire)
	return ""
}

// InstalledAsPinned: dir's node_modules holds the versions its package.json pins, so a
// test runs the packages it claims to (this parser, or test/mcpconformance's clients).
func InstalledAsPinned(dir string) error {
	var manifest struct{ Dependencies map[string]string }
	raw, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		return fmt.Errorf("%s/package.json: %v", dir, err)
	}
	for name, pinned := range manifest.Dependencies {
		var installed struct{ Version string }
		raw, err := os.ReadFile(filepath.Join(dir, "node_modules", name, "package.json"))
		if err == nil {
			err = json.Unmarshal(raw, &installed)
		}
		if err != nil || installed.Version != pinned {
			return fmt.Errorf("%s %s installed in %s/node_modules (found %q: run `npm ci` there)", name, pinned, dir, installed.Version)
		}
	}
	return nil
}

// Parse runs the trace engine on the trace file at path. Anything the engine throws
// fails the test with its message.
func Parse(t testing.TB, path string) Parsed {
	t.Helper()
	dir := Dir(t)
	cmd := exec.Command("node", filepath.Join(dir, "parse.mjs"), path)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("the trace engine could not parse %s: %v\n%s", path, err, stderr)
	}
	var p Parsed
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatalf("parse.mjs printed %q: %v", out, err)
	}
	return p
}
