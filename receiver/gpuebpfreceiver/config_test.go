package gpuebpfreceiver

import (
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/testsupport/configtest"
)

func loadConfig(t *testing.T, name string) (*Config, error) {
	t.Helper()
	return configtest.Load[*Config](t, NewFactory(), name)
}

func TestLoadConfig(t *testing.T) {
	def, err := loadConfig(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if def.Mode != ModeEBPF || def.CollectionInterval != 10*time.Second || !def.Targets.All || def.Logs.Policy != LogsNotable ||
		!def.Discovery.AttachOnMap || def.KernelState.PinDir != "" {
		t.Errorf("defaults: %+v", def)
	}

	custom, err := loadConfig(t, "custom")
	if err != nil {
		t.Fatal(err)
	}
	if custom.Temporality != TemporalityDelta || custom.ClusterName != "train-a" || custom.Targets.All ||
		len(custom.Targets.PIDs) != 1 || custom.Targets.PIDs[0] != 4242 || custom.Discovery.ProcRoot != "/host/proc" ||
		custom.Discovery.AttachOnMap || custom.KernelState.PinDir != "/sys/fs/bpf/fathom" ||
		custom.Logs.MaxPerSecond != 50 || custom.Logs.OutlierMinDuration != 5*time.Millisecond ||
		custom.Limits.RingBufferBytes != 16<<20 || custom.Limits.MaxProcesses != 64 ||
		custom.Logs.NCCL != (NCCLLogsConfig{SampleEvery: 4, MinPerSecond: 2.5, MaxPerSecond: 2000}) ||
		custom.RDMA != (RDMAConfig{SysfsRoot: "/host/sys/class/infiniband", PollInterval: 30 * time.Second}) ||
		custom.NVML != (NVMLConfig{Enabled: true, LibraryPath: "/host/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"}) ||
		custom.ROCmSMI != (ROCmSMIConfig{Enabled: true, LibraryPath: "/host/opt/rocm/lib/librocm_smi64.so.1"}) || def.ROCmSMI != (ROCmSMIConfig{Enabled: true}) {
		t.Errorf("custom: %+v", custom)
	}

	sampled, err := loadConfig(t, "rank_signals")
	if err != nil {
		t.Fatal(err)
	}
	if sampled.RankSignals.Interval != 250*time.Millisecond || def.RankSignals.Interval != 0 {
		t.Errorf("rank_signals.interval: %s (default %s), want 250ms (0)", sampled.RankSignals.Interval, def.RankSignals.Interval)
	}

	synthetic, err := loadConfig(t, "synthetic")
	if err != nil {
		t.Fatal(err)
	}
	if synthetic.Synthetic.Ranks != 8 || synthetic.Synthetic.SlowRank != 5 || synthetic.Synthetic.CallsPerSecond != 2000 {
		t.Errorf("synthetic: %+v", synthetic.Synthetic)
	}
}

// Each mistake is named in the error, in the words of the YAML.
func TestInvalidConfigsSayWhatIsWrong(t *testing.T) {
	cases := map[string][]string{
		"bad_mode": {`mode must be "ebpf" or "synthetic", not "kprobe"`},
		"bad_limits": {"with all: false, name at least one of pids or cgroups", `logs.policy must be "all", "notable" or "none", not "some"`, "limits.ring_buffer_bytes must be a power of two of at least 4096, got 5000",
			"logs.nccl.sample_every must be at least 1", "logs.nccl.min_per_second must be a number of at least 0 (0 keeps one in sample_every always), got -1", "rdma.poll_interval must be at least 100ms, got 1ms",
			`kernel_state.pin_dir must be an absolute path on a bpf file system (e.g. /sys/fs/bpf/fathom), got "fathom"`},
		"bad_rank_signals_multiple": {"collection_interval (1s) must be a whole multiple of rank_signals.interval (300ms)"},
		"bad_rank_signals_delta":    {"rank_signals.interval needs temporality: cumulative; with delta, leave it 0"},
		"bad_rank_signals_short":    {"rank_signals.interval must be 0 (with each collection) or at least 100ms, got 10ms"},
		"bad_rocm_smi": {`rocm_smi.library_path must be an absolute path to librocm_smi64.so.1 (e.g. /host/opt/rocm/lib/librocm_smi64.so.1), got "opt/rocm/lib/librocm_smi64.so.1"`,
			"rocm_smi.library_path is set but rocm_smi.enabled is false"},
	}
	for name, wants := range cases {
		_, err := loadConfig(t, name)
		if err == nil {
			t.Fatalf("%s: accepted", name)
		}
		for _, want := range wants {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", name, err, want)
			}
		}
	}
}
