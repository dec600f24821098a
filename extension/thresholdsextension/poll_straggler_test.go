package thresholdsextension_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/extensionmiddleware"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/fathom-gpu/fathom/extension/thresholdsextension"
	"github.com/fathom-gpu/fathom/internal/pushback"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/processor/stragglerprocessor"
)

// This test lives outside the package because it runs the node's real straggler
// processor against the extension, through the interfaces the collector gives them.

var thresholdsID = component.MustNewID("thresholds")

type extensionsHost map[component.ID]component.Component

func (h extensionsHost) GetExtensions() map[component.ID]component.Component { return h }

func startThresholds(t *testing.T, cfg *thresholdsextension.Config) extension.Extension {
	t.Helper()
	ext, err := thresholdsextension.NewFactory().Create(context.Background(), extensiontest.NewNopSettings(thresholdsID.Type()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ext.Shutdown(context.Background()) })
	return ext
}

// deviceWait is one export of a node's three rank processes' cumulative device wait.
func deviceWait(totals [3]float64, start, ts time.Time) pmetric.Metrics {
	md := pmetric.NewMetrics()
	for rank, total := range totals {
		rm := md.ResourceMetrics().AppendEmpty()
		res := rm.Resource().Attributes()
		res.PutStr(semconv.HostName, "node-1")
		res.PutStr(semconv.ClusterName, "c1")
		res.PutStr(semconv.Cohort, "comm-1")
		res.PutInt(semconv.Rank, int64(rank))
		res.PutInt(semconv.ProcessPID, int64(4000+rank))
		m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
		m.SetName(semconv.MetricRankDeviceWait)
		sum := m.SetEmptySum()
		sum.SetIsMonotonic(true)
		sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		dp := sum.DataPoints().AppendEmpty()
		dp.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		dp.SetTimestamp(pcommon.NewTimestampFromTime(ts))
		dp.SetDoubleValue(total)
	}
	return md
}

// A node whose gateway's answers lose the push-back (a proxy strips the header) still
// judges its own ranks: its straggler processor asks the extension for its cohort's
// line, the extension polls the gateway's GET for it, and the processor flags the slow
// rank against exactly that line, and nobody else.
func TestPolledLinesReachTheStragglerProcessor(t *testing.T) {
	ctx := t.Context()
	line := pushback.Threshold{Cluster: "c1", Cohort: "comm-1", Signal: semconv.MetricRankDeviceWait, Median: 0.3, Line: 0.23, Worse: "lower", At: 1}

	// The gateway: the extension's server middleware in front of a stand-in for the
	// otlp receiver and straggler processor, which answer with the cohort's line, and
	// its thresholds server.
	gatewayCfg := thresholdsextension.NewFactory().CreateDefaultConfig().(*thresholdsextension.Config)
	gatewayCfg.Server.NetAddr.Endpoint = collectortest.Addr(t)
	gateway := startThresholds(t, gatewayCfg)
	wrap, err := gateway.(extensionmiddleware.HTTPServer).GetHTTPHandler(ctx)
	if err != nil {
		t.Fatal(err)
	}
	otlp, err := wrap(ctx, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pushback.FromContext(r.Context()).Add(line)
		_, _ = w.Write([]byte{})
	}))
	if err != nil {
		t.Fatal(err)
	}
	otlpServer := httptest.NewServer(otlp)
	t.Cleanup(otlpServer.Close)
	target, _ := url.Parse(otlpServer.URL)
	stripper := httputil.NewSingleHostReverseProxy(target)
	stripper.ModifyResponse = func(resp *http.Response) error {
		resp.Header.Del(pushback.HTTPHeader)
		return nil
	}
	proxy := httptest.NewServer(stripper)
	t.Cleanup(proxy.Close)

	// The node: the extension polls the gateway's thresholds server.
	nodeCfg := thresholdsextension.NewFactory().CreateDefaultConfig().(*thresholdsextension.Config)
	nodeCfg.Poll.ClientConfig.Endpoint = "http://" + gatewayCfg.Server.NetAddr.Endpoint
	nodeCfg.Poll.Interval = 100 * time.Millisecond
	node := startThresholds(t, nodeCfg)
	wrapRT, err := node.(extensionmiddleware.HTTPClient).GetHTTPRoundTripper(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := wrapRT(ctx, http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt}).Post(proxy.URL+"/v1/metrics", "application/x-protobuf", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get(pushback.HTTPHeader) != "" {
		t.Fatal("the proxy let the push-back through")
	}

	// The node's straggler processor, in its metrics and logs pipelines; one sample
	// beyond the line flags a rank.
	factory := stragglerprocessor.NewFactory()
	cfg := factory.CreateDefaultConfig().(*stragglerprocessor.Config)
	cfg.Mode = stragglerprocessor.ModeNode
	cfg.Thresholds = thresholdsID
	cfg.Persistence = stragglerprocessor.PersistenceConfig{Beyond: 1, Of: 1}
	cfg.EvaluationInterval = 20 * time.Millisecond
	set := processortest.NewNopSettings(component.MustNewType("straggler"))
	records := new(consumertest.LogsSink)
	mp, err := factory.CreateMetrics(ctx, set, cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	lp, err := factory.CreateLogs(ctx, set, cfg, records)
	if err != nil {
		t.Fatal(err)
	}
	host := extensionsHost{thresholdsID: node}
	for _, c := range []component.Component{mp, lp} {
		if err := c.Start(ctx, host); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	}

	// Rank 0 waits 0.1 s per second, below the line at 0.23; ranks 1 and 2 wait 0.3.
	start := time.Now().Add(-time.Minute)
	t0 := time.Now().Add(-time.Second)
	for _, md := range []pmetric.Metrics{
		deviceWait([3]float64{0, 0, 0}, start, t0),
		deviceWait([3]float64{0.1, 0.3, 0.3}, start, t0.Add(time.Second)),
	} {
		if err := mp.ConsumeMetrics(ctx, md); err != nil {
			t.Fatal(err)
		}
	}
	collectortest.WaitFor(t, "a fathom.straggler record", 10*time.Second, func() bool { return records.LogRecordCount() > 0 })
	time.Sleep(10 * cfg.EvaluationInterval) // any other record would be written by now
	if n := records.LogRecordCount(); n != 1 {
		t.Fatalf("%d records; want exactly one", n)
	}
	rl := records.AllLogs()[0].ResourceLogs().At(0)
	rank, _ := rl.Resource().Attributes().Get(semconv.Rank)
	attrs := rl.ScopeLogs().At(0).LogRecords().At(0).Attributes()
	get := func(key string) pcommon.Value { v, _ := attrs.Get(key); return v }
	if rank.Int() != 0 || get(semconv.StragglerState).Str() != "straggler" || get(semconv.StragglerSource).Str() != "node" ||
		get(semconv.StragglerThreshold).Double() != 0.23 || get(semconv.StragglerMedian).Double() != 0.3 ||
		get(semconv.StragglerValue).Double() != 0.1 {
		t.Fatalf("record on rank %d: %v; want rank 0 flagged by the node against line 0.23, median 0.3, value 0.1", rank.Int(), attrs.AsRaw())
	}
}
