package gpuebpfreceiver

import (
	"math"
	"testing"

	"go.opentelemetry.io/collector/confmap"
)

// FuzzConfig unmarshals any YAML into the receiver's config the way the collector does
// (defaults, then the user's keys, then every Validate) and checks that what passes is
// a config the receiver can run: no panic on the way, an error that says something on
// every refusal, and no accepted value that the receiver's arithmetic cannot use (a NaN
// factor compares false with everything and silently switches outlier logs off).
func FuzzConfig(f *testing.F) {
	for _, seed := range []string{
		"",
		"mode: synthetic\nsynthetic: {ranks: 8, slow_rank: 3, slow_factor: 20}\n",
		"mode: ebpf\ncollection_interval: 1s\ntemporality: delta\ntargets: {all: false, pids: [4242], cgroups: [/kubepods]}\n",
		"logs: {policy: all, max_per_second: -1, outlier_factor: .nan, nccl: {sample_every: 0}}\n",
		"logs: {outlier_factor: .nan}\n",
		"logs: {outlier_factor: .inf}\nsynthetic: {slow_factor: -.inf}\nmode: synthetic\n",
		"limits: {ring_buffer_bytes: 4611686018427387904, max_processes: 0}\n",
		"collection_interval: -5m\ndiscovery: {proc_root: '', rescan_interval: 1ns}\nkernel_state: {pin_dir: relative}\n",
		"targets: {pids: [-1, 0, 99999999999999999999]}\n",
		"readiness: {enabled: true, check_interval: 0s, report_interval: -1h}\n",
		"mode: [1, 2]\nlogs: 7\n",
		"synthetic: {calls_per_second: 9223372036854775807, ranks: 64}\nmode: synthetic\n",
		"{{{{",
		"a: &a [*a]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, yaml []byte) {
		retrieved, err := confmap.NewRetrievedFromYAML(yaml)
		if err != nil {
			return
		}
		conf, err := retrieved.AsConf()
		if err != nil {
			return
		}
		cfg := createDefaultConfig()
		if err := conf.Unmarshal(cfg); err != nil {
			if err.Error() == "" {
				t.Fatal("unmarshal refused the YAML without saying why")
			}
			return
		}
		if err := confmap.Validate(cfg); err != nil {
			if err.Error() == "" {
				t.Fatal("Validate refused the config without saying why")
			}
			return
		}
		finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
		if !finite(cfg.Logs.OutlierFactor) || cfg.Logs.OutlierFactor <= 1 {
			t.Fatalf("accepted logs.outlier_factor %g", cfg.Logs.OutlierFactor)
		}
		if cfg.Mode == ModeSynthetic && (!finite(cfg.Synthetic.SlowFactor) || cfg.Synthetic.SlowFactor < 1) {
			t.Fatalf("accepted synthetic.slow_factor %g", cfg.Synthetic.SlowFactor)
		}
		if cfg.Limits.MaxProcesses < 1 || cfg.Logs.NCCL.SampleEvery < 1 || cfg.Logs.MaxPerSecond < 0 {
			t.Fatalf("accepted limits %+v, logs %+v", cfg.Limits, cfg.Logs)
		}
		// An accepted config builds the receiver's pipeline parts and takes a record.
		clock := &wallClock{}
		clock.refresh()
		a := newAggregator(cfg, clock, nil, true)
		a.logs = newLogSink(cfg, clock, &a.drops, hostIdentity(cfg.ClusterName, true))
		feed(a)
	})
}

// The fuzzer's finds: factors that are not numbers were accepted.
func TestValidateRefusesFactorsThatAreNotNumbers(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Logs.OutlierFactor = math.NaN()
	if err := cfg.Validate(); err == nil || err.Error() != "logs.outlier_factor must be a number greater than 1, got NaN" {
		t.Errorf("NaN outlier factor: %v", err)
	}
	cfg = createDefaultConfig()
	cfg.Mode = ModeSynthetic
	cfg.Synthetic.SlowFactor = math.Inf(-1)
	if err := cfg.Validate(); err == nil || err.Error() != "synthetic.slow_factor must be a number of at least 1, got -Inf" {
		t.Errorf("-Inf slow factor: %v", err)
	}
}
