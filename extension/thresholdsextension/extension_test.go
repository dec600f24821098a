package thresholdsextension

import (
	"context"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/metadata"
	"github.com/fathom-gpu/fathom/internal/pushback"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/configtest"
	"github.com/fathom-gpu/fathom/internal/testsupport/thresholdstest"
	"github.com/fathom-gpu/fathom/internal/wallclock"
)

func newExt(t *testing.T, cfg *Config) *thresholds {
	t.Helper()
	e, err := NewFactory().Create(context.Background(), extensiontest.NewNopSettings(metadata.Type), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e.(*thresholds)
}

// The shared sample line.
var line = thresholdstest.Line

// startedExt creates and starts an extension whose telemetry the test can read; it is
// shut down when the test ends.
func startedExt(t *testing.T, cfg *Config) (*thresholds, *componenttest.Telemetry) {
	t.Helper()
	tel := componenttest.NewTelemetry()
	set := extensiontest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	ext, err := NewFactory().Create(context.Background(), set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	thresholdstest.Start(t, ext, tel)
	return ext.(*thresholds), tel
}

// gatewayConfig turns the GET fallback on at a free loopback port.
func gatewayConfig(t *testing.T) *Config {
	cfg := createDefaultConfig()
	cfg.Server.NetAddr.Endpoint = collectortest.Addr(t)
	return cfg
}

// shiftNodeClock puts the node's clock (internal/wallclock, which the client side
// stamps with) ahead of the gateway's, which reads time.Now, as if the node's host were
// off.
func shiftNodeClock(t *testing.T, d time.Duration) {
	old := wallclock.Offset
	wallclock.Offset = d
	t.Cleanup(func() { wallclock.Offset = old })
}

// checkClock asserts the node measured its clock 50 ms ahead of the gateway's, within
// the uncertainty it states (half the round trip, here on loopback).
func checkClock(t *testing.T, node *thresholds) {
	t.Helper()
	off, unc, ok := node.ClockOffset(time.Now())
	if !ok || unc > 10*time.Millisecond || (off-50*time.Millisecond).Abs() > unc {
		t.Errorf("node clock offset %v ± %v (%v), want 50ms within its uncertainty", off, unc, ok)
	}
}

// The pipeline behind the middleware (here a handler standing in for the otlp
// receiver) adds thresholds to the request's context; the answer carries them, and the
// node's middleware reads them into what it holds, until the TTL. The same exchange
// tells the node how far its clock is from the gateway's.
func TestHTTPAnswerCarriesThresholdsToTheNode(t *testing.T) {
	shiftNodeClock(t, 50*time.Millisecond)
	gateway, node := newExt(t, createDefaultConfig()), newExt(t, createDefaultConfig())
	exportURL := thresholdstest.OTLPBehind(t, gateway, line)
	wrapRT, _ := node.GetHTTPRoundTripper(context.Background())
	rt, _ := wrapRT(context.Background(), http.DefaultTransport)
	if !node.LastAnswer().IsZero() {
		t.Fatal("a node that sent nothing says the gateway answered")
	}
	before := time.Now()
	resp, err := (&http.Client{Transport: rt}).Post(exportURL, "application/x-protobuf", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get(pushback.HTTPHeader) == "" {
		t.Fatal("the answer carries no thresholds header")
	}
	// The node knows the gateway answered: the straggler processor judges by an old
	// line only while it does.
	if last := node.LastAnswer(); last.Before(before) || last.After(time.Now()) {
		t.Errorf("last answer %v, want during the export", last)
	}
	got, ok := node.Threshold(line.Key(), time.Now())
	if !ok || !reflect.DeepEqual(got, line) {
		t.Fatalf("node holds %+v (%v), want %+v", got, ok, line)
	}
	if _, ok := node.Threshold(line.Key(), time.Now().Add(createDefaultConfig().TTL+time.Second)); ok {
		t.Error("a threshold older than the TTL is still held")
	}
	checkClock(t, node)
}

// The same over gRPC, as header metadata, and on an answer that is an error too.
func TestGRPCAnswerCarriesThresholdsToTheNode(t *testing.T) {
	shiftNodeClock(t, 50*time.Millisecond)
	gateway, node := newExt(t, createDefaultConfig()), newExt(t, createDefaultConfig())
	serverOpts, _ := gateway.GetGRPCServerOptions(context.Background())
	srv := grpc.NewServer(serverOpts...)
	plogotlp.RegisterGRPCServer(srv, &logsServer{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	dialOpts, _ := node.GetGRPCClientOptions(context.Background())
	conn, err := grpc.NewClient(lis.Addr().String(), append(dialOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := plogotlp.NewGRPCClient(conn).Export(context.Background(), plogotlp.NewExportRequest()); err != nil {
		t.Fatal(err)
	}
	if got, ok := node.Threshold(line.Key(), time.Now()); !ok || !reflect.DeepEqual(got, line) {
		t.Fatalf("node holds %+v (%v), want %+v", got, ok, line)
	}
	checkClock(t, node)
}

type logsServer struct {
	plogotlp.UnimplementedGRPCServer
}

func (*logsServer) Export(ctx context.Context, _ plogotlp.ExportRequest) (plogotlp.ExportResponse, error) {
	pushback.FromContext(ctx).Add(line)
	return plogotlp.NewExportResponse(), nil
}

func TestLoadConfig(t *testing.T) {
	def, err := configtest.Load[*Config](t, NewFactory(), "")
	if err != nil || !reflect.DeepEqual(def, createDefaultConfig()) {
		t.Fatalf("default: %+v %v", def, err)
	}
	// Defaults of the existing keys are unchanged; both fallbacks are off.
	if def.TTL != 2*time.Minute || def.MaxResponseBytes != 1024 || def.MaxHeld != 256 ||
		def.Server.NetAddr.Endpoint != "" || def.Poll.ClientConfig.Endpoint != "" {
		t.Fatalf("default: %+v", def)
	}
	custom, err := configtest.Load[*Config](t, NewFactory(), "custom")
	if err != nil || custom.TTL != 30*time.Second || custom.MaxResponseBytes != 4096 || custom.MaxHeld != 16 {
		t.Fatalf("custom: %+v %v", custom, err)
	}
	if _, err := configtest.Load[*Config](t, NewFactory(), "bad"); err == nil {
		t.Fatal("bad config accepted")
	}
	gateway, err := configtest.Load[*Config](t, NewFactory(), "gateway")
	if err != nil || gateway.Server.NetAddr.Endpoint != "0.0.0.0:4319" || gateway.MaxHeld != 4096 || gateway.Poll.ClientConfig.Endpoint != "" {
		t.Fatalf("gateway: %+v %v", gateway, err)
	}
	node, err := configtest.Load[*Config](t, NewFactory(), "node")
	if err != nil || node.Poll.ClientConfig.Endpoint != "http://gateway:4319" || node.Poll.Interval != 10*time.Second ||
		node.Poll.Jitter != 0.3 || node.Poll.ClientConfig.Timeout != 2*time.Second || node.Server.NetAddr.Endpoint != "" {
		t.Fatalf("node: %+v %v", node, err)
	}
}

// Each fallback mistake is named in the words of the YAML.
func TestValidateNamesEachFallbackMistake(t *testing.T) {
	_, err := configtest.Load[*Config](t, NewFactory(), "bad_fallback")
	if err == nil {
		t.Fatal("bad fallback config accepted")
	}
	for _, want := range []string{
		"`server.endpoint` \"gateway\" is not host:port",
		"`poll.endpoint` \"gateway:4319?cohort=x\" must be the http:// or https:// URL",
		"`poll.interval` must be > 0 and shorter than `ttl` (10s)",
		"`poll.jitter` must be at least 0 and below 1",
		"`poll.timeout` must be > 0",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
