package demo

import (
	"fmt"
	"strings"

	"github.com/fathom-gpu/fathom/internal/collectorconfig"
)

// The demo's collectors run the shipped configs (deploy/configs), with what one machine
// and a one-minute story need layered over them here: every listener on a loopback port
// of its own, mutual TLS from a CA the demo makes (each node's certificate names its
// node, as per-node certificates do), 1 s collections, and shorter windows and TTLs so
// that the story takes a minute, not ten.

// gatewayLayer: the demo's one token (the shipped file asks for two), and a rank silent
// for 10 s judged gone. The Echo API is on loopback in plaintext
// (collectorconfig.EchoOverPlainHTTP), with a token all the same.
const gatewayLayer = `
extensions:
  echo:
    server:
      tokens:
        - {name: demo, env: FATHOM_DEMO_TOKEN, scopes: [tools, sql]}
processors:
  straggler:
    silent_after: 10s
`

// nodeLayer: the thresholds kept 10 s when the gateway stops answering, every 8th NCCL
// collective recorded, and causal chains over 5 s windows, resolved after 10 s quiet.
const nodeLayer = `
extensions:
  thresholds:
    ttl: 10s
receivers:
  gpuebpf:
    logs:
      nccl:
        sample_every: 8
processors:
  causalchain:
    window: 5s
    resolve_after: 10s
`

// remoteWriteLayer adds, with --prometheus-remote-write, an exporter that sends every
// metric to a Prometheus remote-write URL; resource attributes become labels, as the
// Grafana dashboard's queries expect.
const remoteWriteLayer = `
exporters:
  prometheusremotewrite:
    endpoint: ${env:REMOTE_WRITE}
    resource_to_telemetry_conversion:
      enabled: true
service:
  pipelines:
    metrics:
      exporters: [debug, duckdb, prometheusremotewrite]
`

// syntheticSignalsLayer replaces the straggler processors' signals in synthetic mode:
// the synthetic receiver's slow rank loses its CPU to made-up data loaders (its
// run-queue share), while its made-up syncs do not follow asynchronous NCCL's timing,
// so device wait would not name it.
const syntheticSignalsLayer = `
processors:
  straggler:
    signals:
      - {metric: fathom.rank.run_queue.time, worse: higher, mad_floor: 0.01}
`

// gatewayConfig derives the demo's gateway from deploy/configs/gateway.yaml.
func gatewayConfig(synthetic, remoteWrite bool) (*collectorconfig.Config, error) {
	layers := []string{collectorconfig.EchoOverPlainHTTP, gatewayLayer}
	if synthetic {
		layers = append(layers, syntheticSignalsLayer)
	}
	if remoteWrite {
		layers = append(layers, remoteWriteLayer)
	}
	return derive(collectorconfig.Gateway, layers)
}

// nodeConfig derives a node collector from deploy/configs/node.yaml: tracing the
// given pids, or, synthetic, making up ranks of which slowRank is slow.
func nodeConfig(pids []string, synthetic bool, ranks, slowRank int) (*collectorconfig.Config, error) {
	c, err := derive(collectorconfig.Node, []string{nodeLayer})
	if err != nil {
		return nil, err
	}
	if synthetic {
		c.Delete("receivers::gpuebpf::targets")
		return c, mergeAll(c, []string{fmt.Sprintf("receivers:\n  gpuebpf:\n    synthetic: {ranks: %d, slow_rank: %d}\n", ranks, slowRank), syntheticSignalsLayer})
	}
	// Its own ranks only: the node collectors of the demo share one host.
	return c, c.Replace("receivers::gpuebpf::targets", "{all: false, pids: ["+strings.Join(pids, ", ")+"]}")
}

func derive(shipped string, layers []string) (*collectorconfig.Config, error) {
	c, err := collectorconfig.Shipped(shipped)
	if err != nil {
		return nil, err
	}
	return c, mergeAll(c, layers)
}

func mergeAll(c *collectorconfig.Config, layers []string) error {
	for _, l := range layers {
		if err := c.Merge(l); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	return nil
}
