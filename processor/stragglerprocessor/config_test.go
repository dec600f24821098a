package stragglerprocessor

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/semconv"
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
	// The signals a node sends only with each collection keep 3 of 4 whatever the
	// processor's persistence; the rank signals, the GPU's clock among them (read with
	// each rank sample), and the gateway's arrival lag take it.
	wantSignals := []struct {
		metric, worse string
		floor         float64
		own           bool
		windowed      bool // evidence too, but for CPU time a collective's evidence alone
	}{
		{semconv.MetricRankDeviceWait, WorseLower, 0.01, false, true}, {semconv.MetricRankHostLead, WorseHigher, 0.01, false, true},
		{semconv.MetricRankCPUTime, WorseHigher, 0.005, false, true}, {semconv.MetricRankCPUPerCollective, WorseHigher, 0.0001, false, false},
		{semconv.MetricRankGPUClockDeficit, WorseHigher, 0.02, false, false}, {semconv.MetricRankGPUErrors, WorseHigher, 0.1, true, false},
		{semconv.MetricRankRDMAErrors, WorseHigher, 0.1, true, false}, {semconv.MetricRankRDMAXmitWait, WorseHigher, 10000, true, false},
		{semconv.MetricRankTCPRetransmits, WorseHigher, 0.1, true, false}, {semconv.MetricRankArrivalLag, WorseHigher, 0.0005, false, true},
	}
	if len(def.Signals) != len(wantSignals) {
		t.Fatalf("%d default signals, want %d", len(def.Signals), len(wantSignals))
	}
	for i, w := range wantSignals {
		s := def.Signals[i]
		if s.Metric != w.metric || s.Worse != w.worse || s.MADFloor != w.floor || (s.Persistence != nil) != w.own ||
			def.persistence(i) != (PersistenceConfig{Beyond: 3, Of: 4}) {
			t.Errorf("default signal %d: %+v (persistence %+v), want %+v", i, s, def.persistence(i), w)
		}
	}
	// The rank signals and arrival lag are judged over windows as well as samples,
	// and by evidence; CPU time a collective by evidence without windows; the signals
	// that come with each collection only by samples.
	for i, w := range wantSignals {
		evidenced := w.windowed || w.metric == semconv.MetricRankCPUPerCollective
		if def.windowed(i) != w.windowed || def.evidenced(i) != evidenced {
			t.Errorf("default signal %s: windowed %v, evidence %v", w.metric, def.windowed(i), def.evidenced(i))
		}
	}
	if def.MinDuration != 1500*time.Millisecond || !slices.Equal(def.windows(), []time.Duration{3 * time.Second, 6 * time.Second, 12 * time.Second}) {
		t.Errorf("min_duration %v, windows %v; want 1.5s and 3s, 6s, 12s", def.MinDuration, def.windows())
	}
	if def.ArrivalLag != (ArrivalLagConfig{MatchWindow: 10 * time.Second, MaxInstances: 4096}) ||
		def.K != 3 || def.Quorum != 3 || def.Persistence != (PersistenceConfig{Beyond: 3, Of: 4}) || def.EvaluationInterval != time.Second {
		t.Fatalf("default config: %+v", def)
	}
	custom, err := loadConfig(t, "custom")
	if err != nil {
		t.Fatal(err)
	}
	if len(custom.Signals) != 2 || custom.Signals[1].Metric != "fathom.rank.host_lead.time" || custom.Signals[1].Worse != WorseHigher ||
		custom.persistence(0) != (PersistenceConfig{Beyond: 2, Of: 3}) || custom.persistence(1) != (PersistenceConfig{Beyond: 4, Of: 6}) ||
		custom.K != 4 || custom.Quorum != 8 || custom.MADFloor.Relative != 0.1 || custom.Warmup != 5 ||
		custom.Persistence != (PersistenceConfig{Beyond: 2, Of: 3}) || custom.SilentAfter != 10*time.Second ||
		custom.EvaluationInterval != 500*time.Millisecond || custom.Limits != (LimitsConfig{MaxCohorts: 64, MaxRanksPerCohort: 1024}) ||
		custom.ArrivalLag != (ArrivalLagConfig{MatchWindow: 3 * time.Second, MaxInstances: 100}) {
		t.Fatalf("custom config: %+v", custom)
	}
	for name, wants := range map[string][]string{
		"bad_signal": {`signals[0].worse is "sideways"; want "higher" or "lower"`, `signal "fathom.rank.device_wait.time" is listed twice`,
			"signals[1].persistence needs 1 <= beyond <= of <= 64"},
		"bad_verdicts": {"`verdicts.queue_size` must be between 1 and 65536", "`verdicts.webhook.endpoint` \"ftp://example.com/hook\" is not an http(s) URL"},
		"bad_numbers": {"`k` must be a finite number > 0", "`quorum` must be at least 3", "`persistence` needs 1 <= beyond <= of <= 64",
			"`silent_after` must be at least `evaluation_interval`", "`forget_after` must be longer than `silent_after`",
			"`arrival_lag` needs match_window > 0 and max_instances >= 1", "`min_duration` must be between 0 (samples only) and 8s"},
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
