package echoextension

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/fathom-gpu/fathom/extension/echoextension/internal/metadata"
	"github.com/fathom-gpu/fathom/internal/echoschema"
	"github.com/fathom-gpu/fathom/internal/echostore"
)

// RowWriter is the extension's face to the duckdb exporter, which finds it with
// host.GetExtensions() under the component ID its `store:` setting names.
type RowWriter interface {
	// AppendRows stores rows; nil means they are committed (durable across kill -9).
	AppendRows(ctx context.Context, rows []echoschema.Row) error
}

// StorageError is what AppendRows returns when the file system under the store
// refused the write (disk full, failed, read-only): nothing of the batch was stored,
// and the same write can succeed only once the file system is back.
type StorageError = echostore.StorageError

// ErrNotStarted is returned to writers before Start or after Shutdown.
var ErrNotStarted = errors.New("echo store is not open")

type echoExtension struct {
	cfg    *Config
	set    extension.Settings
	logger *zap.Logger

	mu    sync.RWMutex
	store *echostore.Store

	server        *apiServer
	stopRetention context.CancelFunc
	retentionDone chan struct{}

	// telemetry is the extension's own metrics (metadata.yaml); the API server and
	// the retention loop count into it.
	telemetry *metadata.TelemetryBuilder
}

var _ RowWriter = (*echoExtension)(nil)

func newEchoExtension(set extension.Settings, cfg *Config) (*echoExtension, error) {
	telemetry, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	e := &echoExtension{cfg: cfg, set: set, logger: set.Logger, telemetry: telemetry}
	// Read when the collector's telemetry is scraped, so an operator (and `make soak`)
	// sees what the store holds in memory and on disk without a SQL token.
	if err := errors.Join(telemetry.RegisterFathomEchoDuckdbMemoryBytesCallback(e.observeMemory),
		telemetry.RegisterFathomEchoStoreUsedBytesCallback(e.observeUsed)); err != nil {
		telemetry.Shutdown()
		return nil, err
	}
	return e, nil
}

// observeMemory and observeUsed skip the observation when the store is closed or the
// query fails: a scrape must never wait on, or fail because of, the store.
func (e *echoExtension) observeMemory(ctx context.Context, o metric.Int64Observer) error {
	e.observeStore(ctx, o, (*echostore.Store).MemoryBytes)
	return nil
}

func (e *echoExtension) observeUsed(ctx context.Context, o metric.Int64Observer) error {
	e.observeStore(ctx, o, (*echostore.Store).UsedBytes)
	return nil
}

func (e *echoExtension) observeStore(ctx context.Context, o metric.Int64Observer, read func(*echostore.Store, context.Context) (int64, error)) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if n, err := read(e.store, ctx); err == nil {
		o.Observe(n)
	}
}

func (e *echoExtension) Start(ctx context.Context, host component.Host) error {
	st, err := echostore.Open(ctx, echostore.Options{Path: e.cfg.Path, MemoryLimit: e.cfg.MemoryLimit, Threads: e.cfg.Threads})
	if err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	e.mu.Lock()
	e.store = st
	e.mu.Unlock()

	if e.cfg.Retention.MaxAge > 0 || e.cfg.Retention.MaxSizeMiB > 0 {
		rctx, cancel := context.WithCancel(context.Background())
		e.stopRetention, e.retentionDone = cancel, make(chan struct{})
		go e.retentionLoop(rctx)
	}
	if e.cfg.Server.Endpoint != "" || e.cfg.Server.UnixSocket.Path != "" {
		srv, err := newAPIServer(ctx, e.cfg, st, e.set, e.telemetry, host)
		if err != nil {
			return fmt.Errorf("echo: %w", err)
		}
		e.server = srv
	}
	e.logger.Info("Echo store open", zap.String("path", e.cfg.Path), zap.String("endpoint", e.cfg.Server.Endpoint),
		zap.String("unix_socket", e.cfg.Server.UnixSocket.Path))
	return nil
}

func (e *echoExtension) Shutdown(ctx context.Context) error {
	var errs []error
	if e.server != nil {
		errs = append(errs, e.server.shutdown(ctx))
	}
	if e.stopRetention != nil {
		e.stopRetention()
		<-e.retentionDone
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.store != nil {
		errs = append(errs, e.store.Close())
		e.store = nil
	}
	e.telemetry.Shutdown()
	return errors.Join(errs...)
}

// AppendRows implements RowWriter.
func (e *echoExtension) AppendRows(ctx context.Context, rows []echoschema.Row) error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.store == nil {
		return ErrNotStarted
	}
	return e.store.Append(ctx, rows)
}
