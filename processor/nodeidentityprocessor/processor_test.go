package nodeidentityprocessor

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fathom-gpu/fathom/internal/nodeidentity"
	"github.com/fathom-gpu/fathom/processor/nodeidentityprocessor/internal/metadatatest"
)

// logsFor is one request with a record for each host ("" is a resource without one).
func logsFor(hosts ...string) plog.Logs {
	ld := plog.NewLogs()
	for _, h := range hosts {
		rl := ld.ResourceLogs().AppendEmpty()
		if h != "" {
			rl.Resource().Attributes().PutStr("host.name", h)
		}
		rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().Body().SetStr("from " + h)
	}
	return ld
}

func metricsFor(host string, points int) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("host.name", host)
	dps := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty().SetEmptyGauge().DataPoints()
	for i := range points {
		dps.AppendEmpty().SetIntValue(int64(i))
	}
	return md
}

func TestANodeWritesOnlyItsOwnHost(t *testing.T) {
	cases := map[string]struct {
		cfg       *Config
		ctx       context.Context
		hosts     []string
		refused   bool
		wantHosts []string // as stored, when passed
	}{
		"its own host":                {createDefaultConfig(), nodeidentity.NewContext(context.Background(), "node-1"), []string{"node-1"}, false, []string{"node-1"}},
		"another host":                {createDefaultConfig(), nodeidentity.NewContext(context.Background(), "node-1"), []string{"node-2"}, true, nil},
		"its own and another":         {createDefaultConfig(), nodeidentity.NewContext(context.Background(), "node-1"), []string{"node-1", "node-2"}, true, nil},
		"no host is stamped its own":  {createDefaultConfig(), nodeidentity.NewContext(context.Background(), "node-1"), []string{"", "node-1"}, false, []string{"node-1", "node-1"}},
		"no certificate passes as is": {createDefaultConfig(), context.Background(), []string{"node-2", ""}, false, []string{"node-2", ""}},
		"a shared certificate speaks for any node": {&Config{SharedCertificates: []string{"", "fathom-node"}},
			nodeidentity.NewContext(context.Background(), "fathom-node"), []string{"node-2", "node-3", ""}, false, []string{"node-2", "node-3", ""}},
		"an empty shared name shares nothing": {&Config{SharedCertificates: []string{""}},
			nodeidentity.NewContext(context.Background(), "node-1"), []string{"node-2"}, true, nil},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			tt := componenttest.NewTelemetry()
			defer func() { _ = tt.Shutdown(context.Background()) }()
			sink := new(consumertest.LogsSink)
			p, err := NewFactory().CreateLogs(context.Background(), metadatatest.NewSettings(tt), c.cfg, sink)
			if err != nil {
				t.Fatal(err)
			}
			err = p.ConsumeLogs(c.ctx, logsFor(c.hosts...))
			if c.refused {
				if status.Code(errorsUnwrapStatus(err)) != codes.PermissionDenied {
					t.Fatalf("err = %v, want PermissionDenied", err)
				}
				if sink.LogRecordCount() != 0 {
					t.Fatalf("%d records passed a refused request", sink.LogRecordCount())
				}
				metadatatest.AssertEqualFathomNodeidentityRefused(t, tt, []metricdata.DataPoint[int64]{
					{Value: int64(len(c.hosts)), Attributes: attribute.NewSet(attribute.String("reason", "other_host"))},
				}, metricdatatest.IgnoreTimestamp())
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := sink.AllLogs()[0].ResourceLogs()
			if got.Len() != len(c.wantHosts) {
				t.Fatalf("%d resources passed, want %d", got.Len(), len(c.wantHosts))
			}
			for i, want := range c.wantHosts {
				h, ok := got.At(i).Resource().Attributes().Get("host.name")
				if (want == "") == ok || (ok && h.AsString() != want) {
					t.Errorf("resource %d: host.name %v (set %v), want %q", i, h.AsString(), ok, want)
				}
			}
		})
	}
}

// Metric points are checked the same way, and counted as points.
func TestAForeignHostsPointsAreRefusedAndCounted(t *testing.T) {
	tt := componenttest.NewTelemetry()
	defer func() { _ = tt.Shutdown(context.Background()) }()
	sink := new(consumertest.MetricsSink)
	p, err := NewFactory().CreateMetrics(context.Background(), metadatatest.NewSettings(tt), createDefaultConfig(), sink)
	if err != nil {
		t.Fatal(err)
	}
	ctx := nodeidentity.NewContext(context.Background(), "node-1")
	if err := p.ConsumeMetrics(ctx, metricsFor("node-1", 3)); err != nil {
		t.Fatal(err)
	}
	if err := p.ConsumeMetrics(ctx, metricsFor("node-2", 5)); status.Code(errorsUnwrapStatus(err)) != codes.PermissionDenied {
		t.Fatalf("err = %v, want PermissionDenied", err)
	}
	if sink.DataPointCount() != 3 {
		t.Fatalf("%d points passed, want node-1's 3", sink.DataPointCount())
	}
	metadatatest.AssertEqualFathomNodeidentityRefused(t, tt, []metricdata.DataPoint[int64]{
		{Value: 5, Attributes: attribute.NewSet(attribute.String("reason", "other_host"))},
	}, metricdatatest.IgnoreTimestamp())
}

func TestConfigRefusesANameThatCannotMatch(t *testing.T) {
	if err := (&Config{SharedCertificates: []string{" fathom-node"}}).Validate(); err == nil {
		t.Fatal("a name with a leading space was accepted")
	}
	if err := (&Config{SharedCertificates: []string{"", "fathom-node"}}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// errorsUnwrapStatus is the gRPC status error inside err, as the otlp receiver finds it.
func errorsUnwrapStatus(err error) error {
	var s interface{ GRPCStatus() *status.Status }
	if errors.As(err, &s) {
		return s.GRPCStatus().Err()
	}
	return err
}
