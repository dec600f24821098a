package stragglerprocessor

import (
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/configtest"
	"github.com/fathom-gpu/fathom/internal/semconv"
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
	if len(def.Signals) != 8 || def.Signals[0] != (SignalConfig{Metric: semconv.MetricRankDeviceWait, Worse: WorseLower, MADFloor: 0.01}) ||
		def.Signals[1] != (SignalConfig{Metric: semconv.MetricRankHostLead, Worse: WorseHigher, MADFloor: 0.01}) ||
		def.Signals[2] != (SignalConfig{Metric: semconv.MetricRankGPUClockDeficit, Worse: WorseHigher, MADFloor: 0.02}) ||
		def.Signals[3] != (SignalConfig{Metric: semconv.MetricRankGPUErrors, Worse: WorseHigher, MADFloor: 0.1}) ||
		def.Signals[4] != (SignalConfig{Metric: semconv.MetricRankRDMAErrors, Worse: WorseHigher, MADFloor: 0.1}) ||
		def.Signals[5] != (SignalConfig{Metric: semconv.MetricRankRDMAXmitWait, Worse: WorseHigher, MADFloor: 10000}) ||
		def.Signals[6] != (SignalConfig{Metric: semconv.MetricRankTCPRetransmits, Worse: WorseHigher, MADFloor: 0.1}) ||
		def.Signals[7] != (SignalConfig{Metric: semconv.MetricRankArrivalLag, Worse: WorseHigher, MADFloor: 0.0005}) ||
		def.ArrivalLag != (ArrivalLagConfig{MatchWindow: 10 * time.Second, MaxInstances: 4096}) ||
		def.K != 3 || def.Quorum != 3 || def.Persistence != (PersistenceConfig{Beyond: 3, Of: 4}) || def.EvaluationInterval != time.Second {
		t.Fatalf("default config: %+v", def)
	}
	custom, err := loadConfig(t, "custom")
	if err != nil {
		t.Fatal(err)
	}
	if len(custom.Signals) != 2 || custom.Signals[1] != (SignalConfig{Metric: "fathom.rank.host_lead.time", Worse: WorseHigher}) ||
		custom.K != 4 || custom.Quorum != 8 || custom.MADFloor.Relative != 0.1 || custom.Warmup != 5 ||
		custom.Persistence != (PersistenceConfig{Beyond: 2, Of: 3}) || custom.SilentAfter != 10*time.Second ||
		custom.EvaluationInterval != 500*time.Millisecond || custom.Limits != (LimitsConfig{MaxCohorts: 64, MaxRanksPerCohort: 1024}) ||
		custom.ArrivalLag != (ArrivalLagConfig{MatchWindow: 3 * time.Second, MaxInstances: 100}) {
		t.Fatalf("custom config: %+v", custom)
	}
	for name, wants := range map[string][]string{
		"bad_signal":   {`signals[0].worse is "sideways"; want "higher" or "lower"`, `signal "fathom.rank.device_wait.time" is listed twice`},
		"bad_verdicts": {"`verdicts.queue_size` must be between 1 and 65536", "`verdicts.webhook.endpoint` \"ftp://example.com/hook\" is not an http(s) URL"},
		"bad_numbers": {"`k` must be a finite number > 0", "`quorum` must be at least 3", "`persistence` needs 1 <= beyond <= of <= 64",
			"`silent_after` must be at least `evaluation_interval`", "`forget_after` must be longer than `silent_after`",
			"`arrival_lag` needs match_window > 0 and max_instances >= 1"},
	} {
		_, err := loadConfig(t, name)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		for _, want := range wants {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", name, err, want)
			}
		}
	}
}
