package echostoreexporter

import (
	"bytes"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
)

func metricsRequest(t *testing.T) []byte {
	t.Helper()
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("fathom.cluster.name", "metrics")
	rm.Resource().Attributes().PutStr("host.name", "gpu-1")
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	ts := pcommon.NewTimestampFromTime(time.Now())

	g := ms.AppendEmpty()
	g.SetName("cuda.memory.used")
	g.SetUnit("By")
	gp := g.SetEmptyGauge().DataPoints().AppendEmpty()
	gp.SetTimestamp(ts)
	gp.SetIntValue(1 << 30)
	gp.Attributes().PutInt("fathom.rank", 3)

	s := ms.AppendEmpty()
	s.SetName("rdma.port.xmit_bytes")
	sum := s.SetEmptySum()
	sum.SetIsMonotonic(true)
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	sp := sum.DataPoints().AppendEmpty()
	sp.SetTimestamp(ts)
	sp.SetDoubleValue(12345)

	h := ms.AppendEmpty()
	h.SetName("cuda.kernel.duration")
	h.SetUnit("ms")
	hp := h.SetEmptyHistogram().DataPoints().AppendEmpty()
	hp.SetTimestamp(ts)
	hp.ExplicitBounds().FromRaw([]float64{1, 10})
	hp.BucketCounts().FromRaw([]uint64{0, 10, 0})
	hp.SetCount(10)
	hp.SetSum(50)
	hp.Attributes().PutStr("cuda.api.name", "cudaLaunchKernel")

	e := ms.AppendEmpty()
	e.SetName("nccl.allreduce.duration")
	e.SetUnit("ms")
	ep := e.SetEmptyExponentialHistogram().DataPoints().AppendEmpty()
	ep.SetTimestamp(ts)
	ep.Positive().BucketCounts().FromRaw([]uint64{4})
	ep.SetCount(4)
	ep.SetSum(6)

	sm := ms.AppendEmpty()
	sm.SetName("host.sched.runq_wait")
	smp := sm.SetEmptySummary().DataPoints().AppendEmpty()
	smp.SetTimestamp(ts)
	smp.SetCount(2)
	smp.SetSum(8)
	q := smp.QuantileValues().AppendEmpty()
	q.SetQuantile(0.99)
	q.SetValue(7)

	body, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// Metrics of every type land as one row per point; a malformed request is refused by
// the receiver and does not disturb what follows.
func TestMetricsAndMalformedOTLPThroughTheGateway(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "echo.duckdb")
	gw := storeGateway(t)
	addr := gw.Listen["FATHOM_GATEWAY_OTLP_HTTP"]
	p := gw.Start(t, "FATHOM_ECHO_DB="+dbPath)
	waitOTLP(t, "http://"+addr+"/v1/logs")

	post := func(path string, body []byte) int {
		resp, err := http.Post("http://"+addr+path, "application/x-protobuf", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("/v1/metrics", []byte("\xff\xffnot protobuf at all")); code != http.StatusBadRequest {
		t.Fatalf("malformed OTLP: %d, want 400", code)
	}
	if code := post("/v1/metrics", metricsRequest(t)); code != http.StatusOK {
		t.Fatalf("metrics: %d", code)
	}
	if code := post("/v1/logs", logBatch("after-garbage", "gpu-1", 0, 7)); code != http.StatusOK {
		t.Fatalf("logs after a malformed request: %d", code)
	}
	if code := p.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}

	db := openAfterExit(t, dbPath)
	defer db.Close()
	rows, err := db.Query(`SELECT kind, name, coalesce(rank, -1), coalesce(value, -1), coalesce(count, -1), coalesce(p50, -1), coalesce(p99, -1), coalesce(api, ''), coalesce(unit, '')
		FROM events WHERE cluster = 'metrics' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var kind, name, api, unit string
		var rank, count int64
		var value, p50, p99 float64
		if err := rows.Scan(&kind, &name, &rank, &value, &count, &p50, &p99, &api, &unit); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %s rank=%d value=%g count=%d p50=%g p99=%g api=%s unit=%s", kind, name, rank, value, count, p50, p99, api, unit))
	}
	want := []string{
		// 10 values in (1, 10]: p50 at the middle of the bucket, p99 near its top.
		"histogram cuda.kernel.duration rank=-1 value=5 count=10 p50=5.5 p99=9.91 api=cudaLaunchKernel unit=ms",
		"gauge cuda.memory.used rank=3 value=1.073741824e+09 count=-1 p50=-1 p99=-1 api= unit=By",
		"summary host.sched.runq_wait rank=-1 value=4 count=2 p50=-1 p99=7 api= unit=",
		// scale 0, offset 0: 4 values in (1, 2].
		"exp_histogram nccl.allreduce.duration rank=-1 value=1.5 count=4 p50=1.5 p99=1.99 api= unit=ms",
		"sum rdma.port.xmit_bytes rank=-1 value=12345 count=-1 p50=-1 p99=-1 api= unit=",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stored points:\n%s\nwant:\n%s", joinLines(got), joinLines(want))
	}
	var logs int
	if err := db.QueryRow(`SELECT count(*) FROM events WHERE json_extract_string(attributes, '$.run') = 'after-garbage'`).Scan(&logs); err != nil || logs != 7 {
		t.Fatalf("logs after the malformed request: %d (%v), want 7", logs, err)
	}
}

func joinLines(s []string) string {
	out := ""
	for _, l := range s {
		out += "  " + l + "\n"
	}
	return out
}
