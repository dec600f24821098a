package nodeidentityprocessor

import (
	"errors"
	"strings"
)

// Config says which client certificates speak for one node and which for any.
type Config struct {
	// SharedCertificates are the Common Names of client certificates that every node
	// holds (the Helm chart's default, one shared node certificate): a request with one
	// of them may name any host. Leave it empty with per-node certificates, whose
	// Common Name is the node's host.name: each node may then write only its own.
	// Empty strings are ignored, so that the example config can take the name from an
	// environment variable that may be unset.
	SharedCertificates []string `mapstructure:"shared_certificates"`
}

func createDefaultConfig() *Config { return &Config{} }

// Validate explains what is wrong in the words of the YAML.
func (c *Config) Validate() error {
	for _, name := range c.SharedCertificates {
		if name != strings.TrimSpace(name) {
			return errors.New("nodeidentity: a `shared_certificates` name has leading or trailing spaces; a certificate's Common Name never matches it")
		}
	}
	return nil
}

// shared is the set of shared certificate names, without the empty ones.
func (c *Config) shared() map[string]bool {
	m := map[string]bool{}
	for _, name := range c.SharedCertificates {
		if name != "" {
			m[name] = true
		}
	}
	return m
}
