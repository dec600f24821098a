package demo

// The demo's collector configs: the deploy/configs pipelines cut down to one machine,
// mutual TLS on loopback from a CA the demo makes (each node's certificate names its
// node, as per-node certificates do), 1 s intervals so the story takes a minute, not ten.

const gatewayConfig = `
extensions:
  health_check:
    endpoint: 127.0.0.1:${env:HEALTH_PORT}
  thresholds:
  nodecert:
  echo:
    path: ${env:ECHO_DB}
    server:
      endpoint: 127.0.0.1:${env:API_PORT}
      insecure_allow_plaintext: true # loopback only, and a token all the same
      tokens:
        - {name: demo, env: FATHOM_DEMO_TOKEN, scopes: [tools, sql]}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:${env:OTLP_PORT}
        tls:
          cert_file: ${env:TLS_CERT}
          key_file: ${env:TLS_KEY}
          client_ca_file: ${env:TLS_CA}
        middlewares: [{id: nodecert}, {id: thresholds}]
processors:
  nodeidentity:
  straggler:
    evaluation_interval: 250ms
    persistence: {beyond: 5, of: 6}
    silent_after: 10s
exporters:
  duckdb:
    store: echo
service:
  extensions: [health_check, echo, thresholds, nodecert]
  telemetry:
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [otlp]
      processors: [nodeidentity, straggler]
      exporters: [duckdb]
    logs:
      receivers: [otlp]
      processors: [nodeidentity, straggler]
      exporters: [duckdb]
`

// nodeConfig: RANK_PIDS is replaced by the node's rank pids (a list is not a value the
// collector's variables expand to).
const nodeConfig = `
extensions:
  health_check:
    endpoint: 127.0.0.1:${env:HEALTH_PORT}
  thresholds:
    ttl: 10s
receivers:
  gpuebpf:
    mode: ${env:RECEIVER_MODE}
    collection_interval: 1s
    rank_signals:
      interval: 250ms
    cluster_name: demo
    host_name: ${env:NODE_NAME}
    targets:
      all: false
      pids: [RANK_PIDS]
    logs:
      policy: notable
      nccl:
        sample_every: 8
processors:
  causalchain:
    window: 5s
    resolve_after: 10s
  straggler:
    mode: node
    thresholds: thresholds
    evaluation_interval: 250ms
    persistence: {beyond: 5, of: 6}
  batch:
    timeout: 200ms
exporters:
  otlp_grpc/gateway:
    endpoint: 127.0.0.1:${env:OTLP_PORT}
    tls:
      ca_file: ${env:TLS_CA}
      cert_file: ${env:TLS_CERT}
      key_file: ${env:TLS_KEY}
    middlewares: [{id: thresholds}]
service:
  extensions: [health_check, thresholds]
  telemetry:
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [gpuebpf]
      processors: [causalchain, straggler, batch]
      exporters: [otlp_grpc/gateway]
    logs:
      receivers: [gpuebpf]
      processors: [causalchain, straggler, batch]
      exporters: [otlp_grpc/gateway]
`

// remoteWriteExporter is added to the gateway's exporters with --prometheus-remote-write;
// resource attributes become labels, as the Grafana dashboard's queries expect.
const remoteWriteExporter = `  prometheusremotewrite:
    endpoint: ${env:REMOTE_WRITE}
    resource_to_telemetry_conversion:
      enabled: true
`

// syntheticSignals replace the straggler processors' signals in synthetic mode: the
// synthetic receiver's slow rank loses its CPU to made-up data loaders (its run-queue
// share), while its made-up syncs do not follow asynchronous NCCL's timing, so device
// wait would not name it.
const syntheticSignals = `    signals:
      - {metric: fathom.rank.run_queue.time, worse: higher, mad_floor: 0.01}
`
