package stragglerprocessor

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/processor/stragglerprocessor/internal/metadata"
)

// gpuRequest is one node's export of its ranks' GPU clock deficit, a gauge, as the
// gpuebpf receiver sends it from NVML, with the detail it writes on each point.
func gpuRequest(node string, ranks []int64, deficit map[int64]float64, ts time.Time) pmetric.Metrics {
	md := pmetric.NewMetrics()
	for _, rank := range ranks {
		rm := md.ResourceMetrics().AppendEmpty()
		putRankResource(rm.Resource().Attributes(), node, "comm-1", "", rank)
		m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
		m.SetName(semconv.MetricRankGPUClockDeficit)
		dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
		dp.SetTimestamp(pcommon.NewTimestampFromTime(ts))
		dp.SetDoubleValue(deficit[rank])
		mhz := 1980 - int(deficit[rank]*1980+0.5)
		dp.Attributes().PutStr(semconv.SignalDetail, fmt.Sprintf("GPU %d (GPU-%d) SM clock %d,%03d of 1,980 MHz: hw_thermal_slowdown", rank, rank, mhz/1000, mhz%1000))
	}
	return md
}

// Eight ranks on four nodes send how far their GPU runs below its maximum SM clock, a
// gauge, judged as it is (not per second). From interval 6, rank 3's GPU runs 20% below
// (thermal) and rank 6's 5% below, inside the 9% the 2% MAD floor allows a cohort at
// full clock: rank 3 alone is named, and its record carries the detail its node wrote,
// naming the GPU, its clock and the reason.
func TestAThrottledGPUNamesItsRankWithTheCause(t *testing.T) {
	ctx := context.Background()
	set := processortest.NewNopSettings(metadata.Type)
	cfg := createDefaultConfig()
	cfg.EvaluationInterval = time.Hour
	logsOut := new(consumertest.LogsSink)
	mp, err := NewFactory().CreateMetrics(ctx, set, cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	lp, err := NewFactory().CreateLogs(ctx, set, cfg, logsOut)
	if err != nil {
		t.Fatal(err)
	}
	if err := mp.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	if err := lp.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mp.Shutdown(ctx); _ = lp.Shutdown(ctx) }()
	s, _ := instances.Get(set.ID)
	var clock time.Time
	s.now = func() time.Time { return clock }

	start := time.Unix(1_800_000_000, 0)
	for i := 1; i <= 12; i++ {
		clock = start.Add(time.Duration(i) * time.Second)
		deficit := map[int64]float64{}
		if i >= 6 {
			deficit[3], deficit[6] = 0.2, 0.05
		}
		for n := range 4 {
			if err := mp.ConsumeMetrics(ctx, gpuRequest(fmt.Sprintf("node-%d", n), []int64{int64(2 * n), int64(2*n + 1)}, deficit, clock)); err != nil {
				t.Fatal(err)
			}
		}
		s.evaluate(ctx)
	}
	var records []plog.LogRecord
	for _, ld := range logsOut.AllLogs() {
		for i := range ld.ResourceLogs().Len() {
			lrs := ld.ResourceLogs().At(i).ScopeLogs().At(0).LogRecords()
			for j := range lrs.Len() {
				records = append(records, lrs.At(j))
			}
		}
	}
	if len(records) != 1 {
		var bodies []string
		for _, r := range records {
			bodies = append(bodies, r.Body().Str())
		}
		t.Fatalf("%d records, want 1 naming rank 3: %q", len(records), bodies)
	}
	body := records[0].Body().Str()
	// Interval 6 is the first beyond; persistence 3 of 4 flags it at 8.
	want := "rank 3 on node-1 is a straggler in comm-1: fathom.rank.gpu.sm_clock.deficit 0.2 vs cohort median 0 (line 0.08896, higher is worse), beyond since " +
		start.Add(6*time.Second).UTC().Format(time.RFC3339) + "; GPU 3 (GPU-3) SM clock 1,584 of 1,980 MHz: hw_thermal_slowdown"
	if body != want {
		t.Errorf("record\n got %s\nwant %s", body, want)
	}
	if d, _ := records[0].Attributes().Get(semconv.SignalDetail); !strings.HasPrefix(d.Str(), "GPU 3 (GPU-3) SM clock 1,584") {
		t.Errorf("record's %s %q", semconv.SignalDetail, d.Str())
	}
}
