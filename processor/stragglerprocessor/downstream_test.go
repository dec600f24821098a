package stragglerprocessor

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fathom-gpu/fathom/processor/stragglerprocessor/internal/metadatatest"
)

// heldGauges is a next consumer that passes the requests through and holds the
// processor's own gauges until released, as the store's exporter holds a write that
// waits behind a checkpoint; it keeps the evaluation times of the gauges it took.
type heldGauges struct {
	release chan struct{}
	mu      sync.Mutex
	times   []time.Time
}

func (h *heldGauges) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (h *heldGauges) ConsumeMetrics(ctx context.Context, md pmetric.Metrics) error {
	rm := md.ResourceMetrics()
	if rm.Len() == 0 || rm.At(0).ScopeMetrics().Len() == 0 || rm.At(0).ScopeMetrics().At(0).Scope().Name() != scopeName {
		return nil // a request passed through
	}
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	m := rm.At(0).ScopeMetrics().At(0).Metrics().At(0)
	var at time.Time
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		at = m.Gauge().DataPoints().At(0).Timestamp().AsTime()
	case pmetric.MetricTypeSum:
		at = m.Sum().DataPoints().At(0).Timestamp().AsTime()
	}
	h.mu.Lock()
	h.times = append(h.times, at)
	h.mu.Unlock()
	return nil
}

func (h *heldGauges) taken() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Time(nil), h.times...)
}

func droppedFor(t *testing.T, tt *componenttest.Telemetry, reason string) int64 {
	t.Helper()
	m, err := tt.GetMetric("otelcol_fathom_straggler_dropped")
	if err != nil {
		return 0
	}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		if v, _ := dp.Attributes.Value("reason"); v.AsString() == reason {
			return dp.Value
		}
	}
	return 0
}

// The evaluation loop never waits on its next consumers: while they hold its gauges
// (a store write behind a checkpoint), evaluations go on every interval, queued up to
// downstreamQueue and then dropped and counted; once released, what was queued arrives
// in order, each evaluation's at its own time. Before the queue, the loop waited in
// the write and the evaluations that fell due meanwhile were never made.
func TestEvaluationDoesNotWaitOnItsDownstream(t *testing.T) {
	tt := componenttest.NewTelemetry()
	defer tt.Shutdown(context.Background())
	cfg := createDefaultConfig()
	cfg.EvaluationInterval = 5 * time.Millisecond
	next := &heldGauges{release: make(chan struct{})}
	ctx := context.Background()
	mp, err := NewFactory().CreateMetrics(ctx, metadatatest.NewSettings(tt), cfg, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := mp.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	feedTwoIntervals(t, mp)
	heldFrom := time.Now()
	deadline := heldFrom.Add(30 * time.Second)
	for droppedFor(t, tt, "downstream_full") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the held gauges never filled the queue: the loop waits on its downstream")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(next.release)
	for len(next.taken()) < downstreamQueue+1 { // the one held and the queue
		if time.Now().After(deadline) {
			t.Fatalf("%d gauges arrived once released, want at least %d", len(next.taken()), downstreamQueue+1)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := mp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	times := next.taken()
	// The first downstreamQueue+1 were all evaluated while the first was held; each is
	// a later evaluation than the one before.
	for i := 1; i <= downstreamQueue; i++ {
		if !times[i].After(times[i-1]) {
			t.Fatalf("gauges %d and %d evaluated at %v and %v, want in order", i-1, i, times[i-1], times[i])
		}
	}
}
