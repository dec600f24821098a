//go:build linux

package gpuebpfreceiver_test

import (
	"testing"

	"github.com/fathom-gpu/fathom/internal/collectorconfig"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
)

// nodeReceiver is the gpuebpf receiver of a node collector as an end-to-end test runs
// it (startNodeCollector): its config, and whether the node sends its logs as well as
// its metrics.
type nodeReceiver struct {
	yaml     string   // what receivers::gpuebpf holds, in place of the shipped receiver
	withLogs bool     // a logs pipeline beside the metrics one
	layers   []string // merged over the whole derived node config, in order
}

// nodeConfig is the receiver configured by receiverYAML (its lines, unindented, in
// place of the shipped node's gpuebpf receiver, not merged with it), sending metrics
// and, if withLogs, logs.
func nodeConfig(receiverYAML string, withLogs bool) nodeReceiver {
	return nodeReceiver{yaml: receiverYAML, withLogs: withLogs}
}

// merged is r with layer merged over the derived node config after everything else.
func (r nodeReceiver) merged(layer string) nodeReceiver {
	r.layers = append(append([]string(nil), r.layers...), layer)
	return r
}

// startNodeCollector runs the shipped node (collectortest.Node) with receiver as its
// gpuebpf receiver, exporting to a test OTLP sink that stands in for the gateway
// (plaintext, as node-plaintext.yaml), with env added to its environment, and waits
// until its health check answers. The pipelines carry the receiver alone, with no
// processor, to the exporter: the tests count exactly what the receiver emits. Only the
// health check extension runs, so the exporter leaves the thresholds extension's
// middleware out.
func startNodeCollector(t testing.TB, receiver nodeReceiver, env ...string) (*collectortest.Sink, *collectortest.Process) {
	t.Helper()
	sink := collectortest.StartSink(t)
	pipeline := "{receivers: [gpuebpf], exporters: [otlp_grpc/gateway]}"
	pipelines := "metrics: " + pipeline + "\n"
	if receiver.withLogs {
		pipelines += "logs: " + pipeline + "\n"
	}
	node := collectortest.Node(t, collectorconfig.NodePlaintext).
		Replace(t, "receivers::gpuebpf", receiver.yaml).
		Replace(t, "service::pipelines", pipelines).
		Replace(t, "service::extensions", "[health_check]").
		Delete("exporters::otlp_grpc/gateway::middlewares").
		Delete("processors")
	for _, layer := range receiver.layers {
		node.Merge(t, layer)
	}
	col := node.Start(t, append([]string{"FATHOM_GATEWAY=" + sink.Addr}, env...)...)
	return sink, col
}
