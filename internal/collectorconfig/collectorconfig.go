// Package collectorconfig derives a collector config from one that Fathom ships
// (deploy/configs): the shipped file, with layers merged over it the way the collector
// merges its --config files (maps merge key by key; any other value, lists included,
// replaces), and keys replaced or removed whole where a merge cannot say it. The demo
// and the tests derive their collectors' configs here, so what they run differs from
// what ships only where they say so, and a change to a shipped file reaches them.
//
// Variables (${env:NAME:-default}) are kept as written: the collector expands them
// when it loads the derived file.
package collectorconfig

import (
	"fmt"
	"os"
	"regexp"
	"slices"

	"go.opentelemetry.io/collector/confmap"
	"go.yaml.in/yaml/v3"

	"github.com/fathom-gpu/fathom/deploy/configs"
)

// The shipped configs, by their file names in deploy/configs.
const (
	Node             = "node.yaml"
	Gateway          = "gateway.yaml"
	Standalone       = "standalone.yaml"
	NodePlaintext    = "node-plaintext.yaml"
	GatewayPlaintext = "gateway-plaintext.yaml"
)

// EchoOverPlainHTTP is a layer over gateway.yaml that serves the Echo API without TLS
// (the shipped file requires it): for a listener on loopback only, as the demo's and the
// tests' gateways are, where the bearer tokens never cross a wire.
const EchoOverPlainHTTP = `
extensions:
  echo:
    server:
      tls: null
      insecure_allow_plaintext: true
`

// Config is a collector config being derived.
type Config struct {
	conf *confmap.Conf
}

// Shipped starts from deploy/configs/<name>, with the overlays named after it merged
// in order (Shipped(Node, NodePlaintext) is what `fathom --config node.yaml --config
// node-plaintext.yaml` runs).
func Shipped(name string, overlays ...string) (*Config, error) {
	var c *Config
	for i, n := range append([]string{name}, overlays...) {
		raw, err := configs.Files.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("collectorconfig: no shipped config %q: %w", n, err)
		}
		if i == 0 {
			if c, err = Parse(string(raw)); err != nil {
				return nil, fmt.Errorf("collectorconfig: %s: %w", n, err)
			}
			continue
		}
		if err := c.Merge(string(raw)); err != nil {
			return nil, fmt.Errorf("collectorconfig: %s: %w", n, err)
		}
	}
	return c, nil
}

// Parse starts from a config of the caller's own (a test of a component alone).
func Parse(yamlText string) (*Config, error) {
	m, err := parseMap(yamlText)
	if err != nil {
		return nil, err
	}
	return &Config{conf: confmap.NewFromStringMap(m)}, nil
}

// Merge merges a layer over the config as the collector merges a later --config file.
func (c *Config) Merge(yamlText string) error {
	m, err := parseMap(yamlText)
	if err != nil {
		return err
	}
	return c.conf.Merge(confmap.NewFromStringMap(m))
}

// Replace puts yamlText at key (components separated by "::", as in
// "receivers::gpuebpf::targets") in place of whatever was there: a map is not merged
// with the one it replaces. yamlText may be any YAML value.
func (c *Config) Replace(key, yamlText string) error {
	var v any
	if err := yaml.Unmarshal([]byte(yamlText), &v); err != nil {
		return fmt.Errorf("collectorconfig: the value for %s: %w", key, err)
	}
	c.conf.Delete(key)
	return c.conf.Merge(confmap.NewFromStringMap(map[string]any{key: v}))
}

// Delete removes key and what it holds; a key that is not there is no error.
func (c *Config) Delete(key string) {
	c.conf.Delete(key)
}

// Get is the value at key (nil when there is none): what a test asserts about the
// derived config.
func (c *Config) Get(key string) any {
	return c.conf.Get(key)
}

// YAML is the derived config, as the collector will read it.
func (c *Config) YAML() ([]byte, error) {
	return yaml.Marshal(c.conf.ToStringMap())
}

// WriteFile writes the derived config to path, readable by its owner only (it may
// name key files and token variables).
func (c *Config) WriteFile(path string) error {
	raw, err := c.YAML()
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o600)
}

func parseMap(yamlText string) (map[string]any, error) {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(yamlText), &m); err != nil {
		return nil, fmt.Errorf("collectorconfig: %w", err)
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// listenerVar matches the variables through which the shipped configs name what they
// listen on: an address (..._ENDPOINT, ..._OTLP, ..._OTLP_GRPC, ..._OTLP_HTTP) or a
// port (..._PORT). FATHOM_GATEWAY, where a node sends, is not one.
var listenerVar = regexp.MustCompile(`\$\{env:(FATHOM_[A-Z_]*(?:_ENDPOINT|_OTLP|_OTLP_GRPC|_OTLP_HTTP|_PORT))\b`)

// Listeners are the variables, sorted, through which the shipped config name says where
// it listens, so that a caller running several collectors on one machine can give each
// its own loopback ports (collectorrun.LoopbackEnv does).
func Listeners(name string) ([]string, error) {
	raw, err := configs.Files.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("collectorconfig: no shipped config %q: %w", name, err)
	}
	var vars []string
	for _, m := range listenerVar.FindAllStringSubmatch(string(raw), -1) {
		if !slices.Contains(vars, m[1]) {
			vars = append(vars, m[1])
		}
	}
	slices.Sort(vars)
	return vars, nil
}
