package collectortest

import (
	"context"
	"net"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"google.golang.org/grpc"
	// The collector's OTLP exporter compresses with gzip by default.
	_ "google.golang.org/grpc/encoding/gzip"
)

// Sink is an OTLP/gRPC server that keeps everything exported to it, for tests that
// read a real collector's output back.
type Sink struct {
	pmetricotlp.UnimplementedGRPCServer

	Addr    string
	mu      sync.Mutex
	metrics []pmetric.Metrics
	logs    []plog.Logs
}

// StartSink listens on a free loopback port until the test ends.
func StartSink(t testing.TB) *Sink {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Sink{Addr: l.Addr().String()}
	srv := grpc.NewServer()
	pmetricotlp.RegisterGRPCServer(srv, s)
	plogotlp.RegisterGRPCServer(srv, &logsServer{s: s})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return s
}

func (s *Sink) Export(_ context.Context, req pmetricotlp.ExportRequest) (pmetricotlp.ExportResponse, error) {
	md := pmetric.NewMetrics()
	req.Metrics().CopyTo(md)
	s.mu.Lock()
	s.metrics = append(s.metrics, md)
	s.mu.Unlock()
	return pmetricotlp.NewExportResponse(), nil
}

// logsServer adapts the logs service, whose Export method has another signature.
type logsServer struct {
	plogotlp.UnimplementedGRPCServer
	s *Sink
}

func (l *logsServer) Export(_ context.Context, req plogotlp.ExportRequest) (plogotlp.ExportResponse, error) {
	ld := plog.NewLogs()
	req.Logs().CopyTo(ld)
	l.s.mu.Lock()
	l.s.logs = append(l.s.logs, ld)
	l.s.mu.Unlock()
	return plogotlp.NewExportResponse(), nil
}

// Metrics returns every batch received so far.
func (s *Sink) Metrics() []pmetric.Metrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pmetric.Metrics(nil), s.metrics...)
}

// Logs returns every batch received so far.
func (s *Sink) Logs() []plog.Logs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]plog.Logs(nil), s.logs...)
}
