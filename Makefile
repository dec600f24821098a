# Fathom: build, test, generate, lint, bench, demo.
# Everything runs through `go tool` (ocb, mdatagen, bpf2go, staticcheck are pinned in
# go.mod), so a fresh machine needs only Go, a C compiler and clang-19 for the BPF.
SHELL := /bin/bash
GO    ?= go
CLANG ?= clang-19
export CGO_ENABLED := 1
# go-nvml's cgo preamble calls NVML functions NVIDIA's header marks deprecated; each
# would print a compiler warning in every fresh build. Fathom calls none of them.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
# The Echo store reads Arrow batches, which duckdb-go builds only with this tag.
export GOFLAGS += -tags=duckdb_arrow

BIN       := bin/fathom
BUILD_DIR := build

.PHONY: all deps build image release generate generate-ocb generate-deploy check-generated test fuzz lint bench soak demo run-node clean

all: build

# What a fresh machine lacks for the tests: clang-19 and libbpf headers for the BPF
# build, Prometheus (the demo's test queries the Grafana dashboard against it), Node.js
# and the MCP/OpenAPI conformance clients pinned in test/mcpconformance/package-lock.json
# and the trace engine pinned in test/traceengine/package-lock.json,
# podman and runc (the image test loads the image and runs it), a mounted tracefs, and
# bpffs (where kernel state is pinned). Does nothing when all is
# present, so `make test` on a fresh clone skips no test for want of a tool.
deps:
	@if ! command -v $(CLANG) >/dev/null || ! command -v bpftool >/dev/null || [ ! -e /usr/include/bpf/bpf_helpers.h ]; then \
	  echo "installing clang-19 llvm-19 libbpf-dev bpftool"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang-19 llvm-19 libbpf-dev bpftool >/dev/null; \
	fi
	@if ! command -v prometheus >/dev/null; then \
	  echo "installing prometheus"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	  systemctl stop prometheus 2>/dev/null || true; \
	fi
	@# Node.js only where it is missing: a machine with its own Node.js (not Debian's)
	@# cannot take Debian's nodejs and npm beside it, and apt then installs nothing.
	@if ! command -v npm >/dev/null; then \
	  echo "installing nodejs npm"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; \
	fi
	@if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then \
	  echo "installing python3-torch (the Python stack tests run a real PyTorch loop)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-torch >/dev/null; \
	fi
	@if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then \
	  echo "installing podman runc"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman runc >/dev/null; \
	fi
	@if [ ! -e test/mcpconformance/node_modules/.package-lock.json ] || [ test/mcpconformance/package-lock.json -nt test/mcpconformance/node_modules/.package-lock.json ]; then \
	  echo "installing the conformance clients (npm ci)"; \
	  cd test/mcpconformance && npm ci --no-audit --no-fund >/dev/null; \
	fi
	@if [ ! -e test/traceengine/node_modules/.package-lock.json ] || [ test/traceengine/package-lock.json -nt test/traceengine/node_modules/.package-lock.json ]; then \
	  echo "installing the Chrome DevTools trace engine the timeline tests parse with (npm ci)"; \
	  cd test/traceengine && npm ci --no-audit --no-fund >/dev/null; \
	fi
	@if [ "$$(id -u)" = 0 ] && [ ! -e /sys/kernel/tracing/events ]; then mount -t tracefs tracefs /sys/kernel/tracing; fi
	@if [ "$$(id -u)" = 0 ] && [ "$$(stat -f -c %T /sys/fs/bpf 2>/dev/null)" != bpf_fs ]; then mount -t bpf bpf /sys/fs/bpf; fi

# NVIDIA's own libcudart, libcuda and libnvidia-ml, from Debian's non-free archive, in
# build/vendor/nvidia: the tests that run Fathom on the real libraries (no GPU needed)
# use them. Quick when they are already there; fails saying why when the archive is out of
# reach.
.PHONY: vendor-libs
vendor-libs:
	@.ci/vendor-libs

# go build is incremental: after a one-line change only the touched packages and the
# link are redone; nothing here downloads modules or reruns ocb.
build:
	$(GO) build -o $(BIN) ./cmd/fathom

# The container image, built without a container daemon by tools/imagebuild
# (docs/distribution.md): an OCI archive for `podman load -i`, tagged with the chart's
# appVersion, and its SPDX SBOM beside it. The binary in it is bin/fathom's build without
# the symbol table and DWARF (-s -w: a relink, not a rebuild). Layer times are
# SOURCE_DATE_EPOCH, else the commit time.
VERSION     := $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$$/\1/p' deploy/helm/fathom/Chart.yaml)
IMAGE_DIR   := $(BUILD_DIR)/image
IMAGE       := $(IMAGE_DIR)/fathom-$(VERSION).oci.tar
RELEASE_DIR := $(BUILD_DIR)/release

image:
	@mkdir -p $(IMAGE_DIR)
	$(GO) build -ldflags='-s -w' -o $(IMAGE_DIR)/fathom ./cmd/fathom
	$(GO) run ./tools/imagebuild/buildimage -binary $(IMAGE_DIR)/fathom -version $(VERSION) -out $(IMAGE)

# What a release publishes, and SHA256SUMS over it (`sha256sum -c SHA256SUMS` there).
release: image
	rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_DIR)
	cp $(IMAGE) $(IMAGE_DIR)/fathom-$(VERSION).spdx.json $(RELEASE_DIR)/
	cp $(IMAGE_DIR)/fathom $(RELEASE_DIR)/fathom-$(VERSION)-linux-amd64
	cp deploy/configs/*.yaml deploy/systemd/*.service $(RELEASE_DIR)/
	cd $(RELEASE_DIR) && sha256sum $$(ls | grep -v '^SHA256SUMS$$') > SHA256SUMS

# Regenerates every committed generated file. CI runs `make check-generated`, which
# fails when the committed files differ from what these generators produce.
generate: generate-ocb generate-deploy
	rm -rf $(BPF_GENERATE_ROOT) && mkdir -p $(BPF_GENERATE_ROOT)/internal
	cp -r go.mod go.sum bpf $(BPF_GENERATE_ROOT)/
	cp -r internal/probes $(BPF_GENERATE_ROOT)/internal/
	cd $(BPF_GENERATE_ROOT)/internal/probes && $(GO) generate .
	cp $(BPF_GENERATE_ROOT)/internal/probes/*_bpfel.go $(BPF_GENERATE_ROOT)/internal/probes/*_bpfel.o internal/probes/
	$(GO) generate $$($(GO) list ./... | grep -v '/internal/probes$$')

# clang orders some BTF types (forward declarations) by where things sit in its memory,
# which the length of the source's absolute path shifts: a clone elsewhere compiled
# host.bpf.c with types in another order. A symlink at a fixed path was not enough
# (clang resolves it), so bpf2go compiles a copy of the sources at this fixed real path
# and the objects are copied back: every clone generates the same bytes.
BPF_GENERATE_ROOT := /tmp/fathom-bpf-generate

# ocb writes a whole distribution (main.go, go.mod ...) into build/ocb; Fathom keeps its
# own main.go (it adds subcommands) and commits only the generated component list.
generate-ocb:
	@mkdir -p $(BUILD_DIR)/ocb
	$(GO) tool builder --config builder-config.yaml --skip-compilation --skip-get-modules >$(BUILD_DIR)/ocb.log 2>&1 || (cat $(BUILD_DIR)/ocb.log; exit 1)
	gofmt < $(BUILD_DIR)/ocb/components.go > cmd/fathom/components.go

# The Helm chart carries the example configs, and the plain manifests are the chart
# rendered with secrets the operator makes (deploy/manifests/README.md). Helm is pinned as
# a Go tool in deploy/helm/tools, a module of its own.
generate-deploy:
	cp deploy/configs/node.yaml deploy/configs/gateway.yaml deploy/configs/node-plaintext.yaml deploy/configs/standalone.yaml \
	  deploy/configs/gateway-plaintext.yaml deploy/helm/fathom/files/
	@mkdir -p deploy/manifests
	cd deploy/helm/tools && GOFLAGS= $(GO) tool helm template fathom ../fathom --namespace fathom \
	  --set gateway.tokens.existingSecret=fathom-tokens,gateway.tls.existingSecret=fathom-tls \
	  --set otlpTLS.existingSecrets.gateway=fathom-otlp-gateway,otlpTLS.existingSecrets.node=fathom-otlp-node \
	  > ../../manifests/fathom.yaml

check-generated: generate
	@git diff --exit-code --stat -- cmd bpf receiver processor exporter extension internal tools docs deploy || \
	  (echo "generated files are out of date: run 'make generate' and commit the result"; exit 1)

# Runs every test. Under CI (FATHOM_REQUIRE_PRIVILEGED=1) tests that need BPF fail
# instead of skipping. The last line is the plain "N passed, N failed" count.
# Packages run one at a time (-p 1): the BPF tests time real workloads, and another
# package's workload on the same two cores changes what they measure.
test: deps vendor-libs build
	@mkdir -p $(BUILD_DIR)
	@set -o pipefail; FATHOM_BIN=$(abspath $(BIN)) $(GO) test -p 1 -count=1 -v -timeout 40m ./... 2>&1 \
	  | tee $(BUILD_DIR)/test.log | grep -E '^(ok|FAIL|panic|--- FAIL|\s+--- FAIL|---)|^\s+\S+_test\.go:[0-9]+:' ; status=$$?; \
	  pass=$$(grep -cE '^\s*--- PASS' $(BUILD_DIR)/test.log); fail=$$(grep -cE '^\s*--- FAIL' $(BUILD_DIR)/test.log); \
	  skip=$$(grep -cE '^\s*--- SKIP' $(BUILD_DIR)/test.log); \
	  if grep -qE '^(FAIL|panic:)' $(BUILD_DIR)/test.log; then status=1; fi; \
	  echo "tests: $$pass passed, $$fail failed, $$skip skipped"; exit $$status

# Short runs of every fuzz target, one at a time (go fuzzes one target per package per
# run). Their seed corpora (f.Add and testdata/fuzz/) already run as plain tests in
# `make test`. Each target runs a fixed number of inputs, about 10 s of fuzzing on the
# 2-core dev VM: with a duration, Go 1.26's fuzz coordinator can fail a clean run with
# "context deadline exceeded" when a worker is still busy as the time runs out
# (go.dev/issue/75804, fixed in Go 1.27), which the DuckDB-writing targets hit in CI.
# Longer locally: make fuzz FUZZTIME=10m (a duration or a count, for every target), or
# one target by hand (see docs/reliability.md). Minimising a new find is capped too: a
# mutated multi-KB OTLP request otherwise holds a worker for a minute.
FUZZTIME         ?=
FUZZMINIMIZETIME ?= 5s
FUZZ_TARGETS := \
	./receiver/gpuebpfreceiver:FuzzDecodeRecord:30000x \
	./receiver/gpuebpfreceiver:FuzzConfig:20000x \
	./internal/probes:FuzzNCCLAndVerbsArguments:30000x \
	./exporter/echostoreexporter:FuzzLogRows:2000x \
	./exporter/echostoreexporter:FuzzMetricRows:2000x \
	./internal/echostore:FuzzQueryReadOnly:3000x \
	./internal/echotools:FuzzRegistryCall:20000x

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; budget=$${rest#*:}; \
	  if [ -n "$(FUZZTIME)" ]; then budget=$(FUZZTIME); fi; \
	  echo "== fuzz $$name ($$pkg, $$budget)"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $$budget -fuzzminimizetime $(FUZZMINIMIZETIME) $$pkg; \
	done

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) tool staticcheck ./...

# One package at a time: benchmarks of two packages running at once on a small machine
# would measure each other. Then the straggler loop's detection report on a real job
# under BPF (needs root; ~20 min; processor/stragglerprocessor/detection_bench_test.go),
# written to build/straggler-bench.md, and again with PyTorch DDP's threads
# (build/straggler-bench-pytorch.md). BENCH_TRIALS and BENCH_SLOWDOWNS change it. Before
# it, the causal-chain scenario suite's precision, recall and time to each chain
# (docs/causalchain.md), written to build/causalchain-bench.md.
BENCH_TRIALS ?= 20
BENCH_SLOWDOWNS ?= 20,10,5
# The cohort-size rows of the matrix (processor/stragglerprocessor/cohort_bench_test.go):
# cohorts of 3 to 64 ranks made from the recorded jobs, replayed, written to
# build/straggler-cohorts.md; no root, about 3 minutes. COHORT_SIZES picks the sizes.
COHORT_SIZES ?= 3,4,8,16,32,64
# The detection matrix (processor/stragglerprocessor/matrix_test.go), written to
# build/straggler-matrix.md: 13 rows of 20 trials with 30 s healthy windows, about 15
# minutes a row. BENCH_MATRIX_ROWS="base,step=" runs only the rows whose names hold one.
BENCH_MATRIX_ROWS ?=
bench: build vendor-libs
	$(GO) test -p 1 -run '^$$' -bench . -benchmem ./...
	FATHOM_CHAIN_REPORT=$(abspath $(BUILD_DIR))/causalchain-bench.md FATHOM_BIN=$(abspath $(BIN)) \
	  $(GO) test -count=1 -v -run '^TestScenariosYieldTheirRootCauseOverMCP$$' ./processor/causalchainprocessor
	FATHOM_BENCH_TRIALS=$(BENCH_TRIALS) FATHOM_BENCH_SLOWDOWNS=$(BENCH_SLOWDOWNS) FATHOM_COHORT_SIZES=$(COHORT_SIZES) \
	  FATHOM_COHORT_REPORT=$(abspath $(BUILD_DIR))/straggler-cohorts.md \
	  $(GO) test -tags duckdb_arrow,bench -count=1 -v -run '^TestStragglerCohortMatrix$$' -timeout 0 ./processor/stragglerprocessor
	FATHOM_BENCH_TRIALS=$(BENCH_TRIALS) FATHOM_BENCH_SLOWDOWNS=$(BENCH_SLOWDOWNS) FATHOM_BIN=$(abspath $(BIN)) \
	  $(GO) test -tags duckdb_arrow,bench -count=1 -v -run '^TestStragglerDetectionReport$$' -timeout 0 ./processor/stragglerprocessor
	FATHOM_BENCH_THREADS=pytorch FATHOM_BENCH_TRIALS=$(BENCH_TRIALS) FATHOM_BENCH_SLOWDOWNS=$(BENCH_SLOWDOWNS) FATHOM_BIN=$(abspath $(BIN)) \
	  $(GO) test -tags duckdb_arrow,bench -count=1 -v -run '^TestStragglerDetectionReport$$' -timeout 0 ./processor/stragglerprocessor
	FATHOM_BENCH_TRIALS=$(BENCH_TRIALS) FATHOM_BENCH_ROWS="$(BENCH_MATRIX_ROWS)" FATHOM_BIN=$(abspath $(BIN)) \
	  $(GO) test -tags duckdb_arrow,bench -count=1 -v -run '^TestStragglerDetectionMatrix$$' -timeout 0 ./processor/stragglerprocessor

# The soak (not in CI): a node collector under ~100k CUDA calls/s from fake GPU
# workloads and a gateway under a steady OTLP ingest, both on the example configs, for
# SOAK_DURATION. Prints a row of RSS, goroutines, open files, threads and DuckDB memory
# per sample, writes the table to build/soak.md, and fails if anything grew after
# warm-up. Needs root (BPF). Knobs: FATHOM_SOAK_SAMPLE, FATHOM_SOAK_CALLS,
# FATHOM_SOAK_ROWS (see cmd/fathom/soak_test.go).
SOAK_DURATION ?= 30m
soak: deps build
	FATHOM_SOAK_DURATION=$(SOAK_DURATION) FATHOM_BIN=$(abspath $(BIN)) $(GO) test -tags duckdb_arrow,soak -count=1 -v -run '^TestSoak$$' -timeout 0 ./cmd/fathom

# Start a node collector on the example config (it needs a gateway at FATHOM_GATEWAY).
run-node: build
	./$(BIN) --config deploy/configs/node.yaml

# The README's run command: a gateway and four node collectors on a fake GPU job, one
# rank slowed, and what Fathom finds (internal/demo). Root runs it with real BPF; without,
# it says so and uses the synthetic receiver. DEMO_FLAGS=--short ends after the answers.
demo:
	@echo "== building bin/fathom and the fake GPU stack (the first build on a fresh machine takes about 10 minutes)"
	@$(MAKE) -s build
	@$(MAKE) -s -C internal/fakegpu
	@if [ "$$(id -u)" = 0 ] && [ ! -e /sys/kernel/tracing/events ]; then mount -t tracefs tracefs /sys/kernel/tracing; fi
	./$(BIN) demo $(DEMO_FLAGS)

clean:
	rm -rf bin $(BUILD_DIR)
