package collectortest

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/collectorconfig"
	"github.com/fathom-gpu/fathom/internal/collectorrun"
)

// The tokens a test gateway's Echo API accepts: the shipped gateway names two, and
// fails to start when their variables are unset.
const (
	AgentToken   = "test-agent-token"
	GrafanaToken = "test-grafana-token"
)

// Role is one of the shipped configs (deploy/configs) as a test runs it: the config is
// derived from the shipped file, and what a test changes is layered over it
// (Config.Merge, Replace, Delete) and so visible in the test; the environment puts
// every listener on a loopback port of its own, and the collector's files (kernel
// state, store, audit log) in directories of the test's own. This is the one place the
// tests' node, gateway and standalone collectors come from.
type Role struct {
	Name   string
	Config *collectorconfig.Config
	// Env is the collector's environment; Start adds the caller's after it.
	Env []string
	// Listen holds each listener's address (or port) by the shipped variable that
	// names it: Listen["FATHOM_HEALTH_ENDPOINT"], Listen["FATHOM_GATEWAY_OTLP_GRPC"].
	Listen map[string]string
	dir    string
}

// NewRole derives the shipped config name, with the shipped overlays named after it
// merged in order (collectorconfig.NodePlaintext, say).
func NewRole(t testing.TB, name string, overlays ...string) *Role {
	t.Helper()
	c, err := collectorconfig.Shipped(name, overlays...)
	if err != nil {
		t.Fatal(err)
	}
	env, listen, err := collectorrun.LoopbackEnv(name)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := &Role{Name: strings.TrimSuffix(name, ".yaml"), Config: c, Env: env, Listen: listen, dir: dir}
	switch name {
	case collectorconfig.Node, collectorconfig.Standalone:
		r.Env = append(r.Env, "FATHOM_PIN_DIR="+PinDir(t))
	}
	switch name {
	case collectorconfig.Gateway, collectorconfig.Standalone:
		r.Env = append(r.Env, "FATHOM_ECHO_DB="+filepath.Join(dir, "echo.duckdb"),
			"FATHOM_ECHO_AUDIT_LOG="+filepath.Join(dir, "echo-audit.jsonl"))
	}
	if name == collectorconfig.Gateway {
		r.Env = append(r.Env, "FATHOM_ECHO_AGENT_TOKEN="+AgentToken, "FATHOM_ECHO_GRAFANA_TOKEN="+GrafanaToken)
	}
	return r
}

// Node is deploy/configs/node.yaml as a test runs it (NewRole).
func Node(t testing.TB, overlays ...string) *Role {
	t.Helper()
	return NewRole(t, collectorconfig.Node, overlays...)
}

// Gateway is deploy/configs/gateway.yaml as a test runs it (NewRole).
func Gateway(t testing.TB, overlays ...string) *Role {
	t.Helper()
	return NewRole(t, collectorconfig.Gateway, overlays...)
}

// Merge layers yamlText over the role's config, failing the test on bad YAML.
func (r *Role) Merge(t testing.TB, yamlText string) *Role {
	t.Helper()
	if err := r.Config.Merge(yamlText); err != nil {
		t.Fatal(err)
	}
	return r
}

// Replace puts yamlText at key in place of what was there (collectorconfig.Config.Replace).
func (r *Role) Replace(t testing.TB, key, yamlText string) *Role {
	t.Helper()
	if err := r.Config.Replace(key, yamlText); err != nil {
		t.Fatal(err)
	}
	return r
}

// Delete removes key and what it holds from the role's config.
func (r *Role) Delete(key string) *Role {
	r.Config.Delete(key)
	return r
}

// Dir is the role's own directory (the derived config, the store and the audit log).
func (r *Role) Dir() string { return r.dir }

// Write writes the derived config into the role's directory and returns its path.
func (r *Role) Write(t testing.TB) string {
	t.Helper()
	path := filepath.Join(r.dir, r.Name+".yaml")
	if err := r.Config.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// Start writes the derived config and runs it, with env added after the role's own
// (a later KEY= wins), and waits until its health check answers.
func (r *Role) Start(t testing.TB, env ...string) *Process {
	t.Helper()
	return r.StartUnder(t, nil, env...)
}

// StartUnder is Start under a wrapper command (StartUnder's); a role with no health
// check (the standalone one) is not waited for.
func (r *Role) StartUnder(t testing.TB, wrapper []string, env ...string) *Process {
	t.Helper()
	p := StartUnder(t, wrapper, []string{r.Write(t)}, append(append([]string(nil), r.Env...), env...)...)
	if health, ok := r.Listen["FATHOM_HEALTH_ENDPOINT"]; ok {
		p.WaitHTTP(t, "http://"+health+"/", 60*time.Second)
	}
	return p
}
