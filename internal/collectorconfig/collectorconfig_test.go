package collectorconfig

import (
	"reflect"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/fathom-gpu/fathom/deploy/configs"
)

// A shipped config comes through unchanged when nothing is layered over it: the same
// values, variables kept as written for the collector to expand.
func TestAShippedConfigComesThroughUnchanged(t *testing.T) {
	for _, name := range []string{Node, Gateway, Standalone} {
		c, err := Shipped(name)
		if err != nil {
			t.Fatal(err)
		}
		derived, err := c.YAML()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := configs.Files.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var want, got map[string]any
		if err := yaml.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(derived, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s derived with no layer differs from the shipped file:\n%s", name, derived)
		}
	}
}

// Layers merge as the collector merges --config files: maps key by key, lists and
// values replace, null replaces (the plaintext overlays take TLS off that way).
func TestLayersMergeAsTheCollectorMergesConfigFiles(t *testing.T) {
	c, err := Shipped(Gateway, GatewayPlaintext)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Get("receivers::otlp::protocols::grpc::tls"); got != nil {
		t.Errorf("the plaintext overlay left the gRPC listener's tls as %v", got)
	}
	if got := c.Get("receivers::otlp::protocols::grpc::max_recv_msg_size_mib"); got != 4 {
		t.Errorf("a key the overlay does not name is %v, want the shipped 4", got)
	}
	if err := c.Merge("processors:\n  straggler:\n    silent_after: 10s\nservice:\n  extensions: [health_check, echo]\n"); err != nil {
		t.Fatal(err)
	}
	if got := c.Get("processors::straggler::evaluation_interval"); got != "250ms" {
		t.Errorf("merging one key of the straggler processor lost its others: evaluation_interval %v", got)
	}
	if got := c.Get("processors::straggler::silent_after"); got != "10s" {
		t.Errorf("silent_after is %v after the merge", got)
	}
	if got := c.Get("service::extensions"); !reflect.DeepEqual(got, []any{"health_check", "echo"}) {
		t.Errorf("a list is replaced by a merge, not appended to: %v", got)
	}
}

// EchoOverPlainHTTP takes the Echo API's TLS off and keeps the rest of its server.
func TestEchoOverPlainHTTPTakesOnlyTheAPIsTLSOff(t *testing.T) {
	c, err := Shipped(Gateway)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Merge(EchoOverPlainHTTP); err != nil {
		t.Fatal(err)
	}
	if c.Get("extensions::echo::server::tls") != nil || c.Get("extensions::echo::server::insecure_allow_plaintext") != true {
		t.Errorf("server tls %v, insecure_allow_plaintext %v", c.Get("extensions::echo::server::tls"), c.Get("extensions::echo::server::insecure_allow_plaintext"))
	}
	if c.Get("extensions::echo::server::endpoint") != "${env:FATHOM_ECHO_ENDPOINT:-localhost:8765}" || c.Get("extensions::echo::server::tokens") == nil {
		t.Error("the layer lost the server's endpoint or tokens")
	}
}

// Replace puts a map in place of another whole, where a merge would keep the old keys.
func TestReplaceTakesTheOldMapAway(t *testing.T) {
	c, err := Shipped(Node)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Replace("receivers::gpuebpf::targets", "pids: [12, 34]"); err != nil {
		t.Fatal(err)
	}
	if got := c.Get("receivers::gpuebpf::targets::all"); got != nil {
		t.Errorf("the shipped targets.all survived a replace: %v", got)
	}
	if got := c.Get("receivers::gpuebpf::targets::pids"); !reflect.DeepEqual(got, []any{12, 34}) {
		t.Errorf("targets.pids %v", got)
	}
	if got := c.Get("receivers::gpuebpf::collection_interval"); got != "${env:FATHOM_COLLECTION_INTERVAL:-10s}" {
		t.Errorf("a sibling of the replaced key changed: %v", got)
	}
	c.Delete("receivers::otlp")
	if c.Get("receivers::otlp") != nil {
		t.Error("Delete left receivers::otlp")
	}
}

func TestBadInputIsAnError(t *testing.T) {
	if _, err := Shipped("nodes.yaml"); err == nil {
		t.Error("an unknown shipped config is no error")
	}
	c, err := Shipped(Node)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Merge("receivers: [unclosed"); err == nil {
		t.Error("a layer that is not YAML is no error")
	}
	if err := c.Merge("- a list\n- not a map\n"); err == nil {
		t.Error("a layer that is not a map is no error")
	}
}

// The listeners are found in the shipped files: each role's, and where a node sends is
// not among them.
func TestListenersAreWhatEachShippedConfigListensOn(t *testing.T) {
	for name, want := range map[string][]string{
		Node:       {"FATHOM_HEALTH_ENDPOINT", "FATHOM_NODE_OTLP", "FATHOM_TELEMETRY_PORT", "FATHOM_ZPAGES_ENDPOINT"},
		Gateway:    {"FATHOM_ECHO_ENDPOINT", "FATHOM_GATEWAY_OTLP_GRPC", "FATHOM_GATEWAY_OTLP_HTTP", "FATHOM_HEALTH_ENDPOINT", "FATHOM_TELEMETRY_PORT", "FATHOM_ZPAGES_ENDPOINT"},
		Standalone: {"FATHOM_TELEMETRY_PORT"},
	} {
		got, err := Listeners(name)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Listeners(%s) = %v, want %v", name, got, want)
		}
	}
}
