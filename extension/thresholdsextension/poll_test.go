package thresholdsextension

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/pushback"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/thresholdstest"
)

// nodeConfig polls getURL's server every interval ±jitter.
func nodeConfig(gatewayGET string, interval time.Duration, jitter float64) *Config {
	cfg := createDefaultConfig()
	cfg.Poll.ClientConfig.Endpoint = gatewayGET
	cfg.Poll.Interval = interval
	cfg.Poll.Jitter = jitter
	return cfg
}

// getRecorder sits between the node and the gateway's thresholds server and notes
// when each GET arrived and what it asked.
type getRecorder struct {
	mu      sync.Mutex
	arrived []time.Time
	queries []string
}

func (r *getRecorder) start(t *testing.T, gatewayGET string) string {
	t.Helper()
	target, _ := url.Parse("http://" + gatewayGET)
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.arrived = append(r.arrived, time.Now())
		r.queries = append(r.queries, req.URL.Path+"?"+req.URL.RawQuery)
		r.mu.Unlock()
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func (r *getRecorder) gets() ([]time.Time, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.arrived...), append([]string(nil), r.queries...)
}

// headerStripper is a proxy in front of the gateway's otlp endpoint that drops the
// push-back header from every answer, as some ingress proxies drop unknown headers.
func headerStripper(t *testing.T, exportURL string) string {
	t.Helper()
	target, _ := url.Parse(exportURL)
	target.Path = ""
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(resp *http.Response) error {
		resp.Header.Del(pushback.HTTPHeader)
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv.URL + "/v1/metrics"
}

// nodeClient is the node's otlp exporter's HTTP client, with the client middleware.
func nodeClient(t *testing.T, node *thresholds) *http.Client {
	t.Helper()
	wrap, err := node.GetHTTPRoundTripper(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	rt, err := wrap(t.Context(), http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: rt}
}

// While every export's answer carries the cohort's line, the node never polls: not one
// GET over ten intervals, while its straggler processor keeps asking for the line.
func TestPushbackPresentMeansNoPolls(t *testing.T) {
	gatewayCfg := gatewayConfig(t)
	gateway, _ := startedExt(t, gatewayCfg)
	exportURL := thresholdstest.OTLPBehind(t, gateway, line)
	var rec getRecorder
	const interval = 100 * time.Millisecond
	node, tel := startedExt(t, nodeConfig(rec.start(t, gatewayCfg.Server.NetAddr.Endpoint), interval, 0.2))
	client := nodeClient(t, node)

	for end := time.Now().Add(10 * interval); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if resp := thresholdstest.Export(t, client, exportURL); resp.Header.Get(pushback.HTTPHeader) == "" {
			t.Fatal("the answer carries no push-back")
		}
		if got, ok := node.Threshold(line.Key(), time.Now()); !ok || !reflect.DeepEqual(got, line) {
			t.Fatalf("node holds %+v (%v); want %+v", got, ok, line)
		}
	}
	if arrived, _ := rec.gets(); len(arrived) != 0 {
		t.Errorf("%d GETs with push-back present; want none", len(arrived))
	}
	if n := thresholdstest.Counted(t, tel, "otelcol_fathom_thresholds_polls", "", ""); n != 0 {
		t.Errorf("otelcol_fathom_thresholds_polls = %d; want 0", n)
	}
}

// With a proxy that strips the push-back header, the node polls the gateway for its
// cohort, each GET interval·(1±jitter) after the previous round, not in step; it then
// holds exactly the gateway's line.
func TestAbsentPushbackIsPolledWithJitter(t *testing.T) {
	gatewayCfg := gatewayConfig(t)
	gateway, _ := startedExt(t, gatewayCfg)
	stripped := headerStripper(t, thresholdstest.OTLPBehind(t, gateway, line))
	var rec getRecorder
	const (
		interval = 150 * time.Millisecond
		jitter   = 0.4
		polls    = 7
	)
	node, tel := startedExt(t, nodeConfig(rec.start(t, gatewayCfg.Server.NetAddr.Endpoint), interval, jitter))
	client := nodeClient(t, node)
	if resp := thresholdstest.Export(t, client, stripped); resp.Header.Get(pushback.HTTPHeader) != "" {
		t.Fatal("the proxy let the push-back through")
	}
	if _, ok := node.Threshold(line.Key(), time.Now()); ok {
		t.Fatal("the node holds a line push-back never brought")
	}
	collectortest.WaitFor(t, "seven polls, answered and counted", 20*interval, func() bool {
		node.Threshold(line.Key(), time.Now()) // as the straggler processor does every evaluation
		arrived, _ := rec.gets()
		// The gateway records a GET when it arrives, the node counts it once the
		// answer is read: wait for both, or the last poll's count may still be on its
		// way (seen once in CI: 6 counted of 7 arrived).
		return len(arrived) >= polls && thresholdstest.Counted(t, tel, "otelcol_fathom_thresholds_polls", "outcome", "found") >= polls
	})
	arrived, queries := rec.gets()
	for i, q := range queries {
		if q != "/v1/thresholds?cluster=c1&cohort=comm-1" {
			t.Errorf("GET %d asked %q", i, q)
		}
	}
	lo, hi := time.Duration(float64(interval)*(1-jitter)), time.Duration(float64(interval)*(1+jitter))
	shortest, longest := time.Hour, time.Duration(0)
	for i := 1; i < polls; i++ {
		gap := arrived[i].Sub(arrived[i-1])
		shortest, longest = min(shortest, gap), max(longest, gap)
		// A round's wait starts when its GET is answered, so a gap is never below the
		// shortest wait; above the longest it is only by the time a GET takes.
		if gap < lo || gap > hi+50*time.Millisecond {
			t.Errorf("gap %d is %v; want within [%v, %v] (+50ms for the GET itself)", i, gap, lo, hi)
		}
	}
	// Six waits drawn from a 120 ms wide range all within 10 ms of each other would
	// be a poller that does not jitter (odds about 1 in 40,000).
	if longest-shortest < 10*time.Millisecond {
		t.Errorf("gaps from %v to %v: the polls are in step", shortest, longest)
	}
	if got, ok := node.Threshold(line.Key(), time.Now()); !ok || !reflect.DeepEqual(got, line) {
		t.Fatalf("node holds %+v (%v); want %+v", got, ok, line)
	}
	if found := thresholdstest.Counted(t, tel, "otelcol_fathom_thresholds_polls", "outcome", "found"); found < polls {
		t.Errorf("otelcol_fathom_thresholds_polls{outcome=found} = %d; want at least %d", found, polls)
	}
}

// With the gateway gone, polls fail (counted) and the node keeps the last line, exactly,
// until its TTL; then it says it has none.
func TestUnreachableGatewayKeepsLinesUntilTheirTTL(t *testing.T) {
	gatewayCfg := gatewayConfig(t)
	gateway, _ := startedExt(t, gatewayCfg)
	thresholdstest.Export(t, http.DefaultClient, thresholdstest.OTLPBehind(t, gateway, line)) // answered, but not to the node
	cfg := nodeConfig("http://"+gatewayCfg.Server.NetAddr.Endpoint, 100*time.Millisecond, 0.2)
	cfg.TTL = time.Second
	node, tel := startedExt(t, cfg)
	collectortest.WaitFor(t, "the node to hold the polled line", 5*time.Second, func() bool {
		_, ok := node.Threshold(line.Key(), time.Now())
		return ok
	})

	if err := gateway.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	collectortest.WaitFor(t, "a failed poll", 5*time.Second, func() bool {
		node.Threshold(line.Key(), time.Now())
		return thresholdstest.Counted(t, tel, "otelcol_fathom_thresholds_polls", "outcome", "failed") > 0
	})
	// Polled no earlier than down - interval·1.2, so held at least until then + TTL.
	time.Sleep(time.Until(down.Add(cfg.TTL / 2)))
	if got, ok := node.Threshold(line.Key(), time.Now()); !ok || !reflect.DeepEqual(got, line) {
		t.Fatalf("half a TTL after the gateway went: node holds %+v (%v); want %+v", got, ok, line)
	}
	time.Sleep(time.Until(down.Add(cfg.TTL + 100*time.Millisecond)))
	if got, ok := node.Threshold(line.Key(), time.Now()); ok {
		t.Fatalf("past the TTL the node still holds %+v", got)
	}
}
