package echoextension

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// retentionLoop runs beside ingest; a pass that fails is logged and retried next tick.
func (e *echoExtension) retentionLoop(ctx context.Context) {
	defer close(e.retentionDone)
	tick := time.NewTicker(e.cfg.Retention.CheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		e.mu.RLock()
		st := e.store
		if st == nil {
			e.mu.RUnlock()
			return
		}
		res, err := st.ApplyRetention(ctx, time.Now(), e.cfg.Retention.MaxAge, e.cfg.Retention.MaxSizeMiB<<20)
		e.mu.RUnlock()
		if err != nil {
			// Deletions committed before the failure still count.
			e.logger.Warn("Echo retention pass failed", zap.Error(err))
		}
		if n := res.DeletedByAge + res.DeletedBySize; n > 0 {
			e.telemetry.FathomEchoRetentionDeletedRows.Add(ctx, n)
			e.logger.Info("Echo retention", zap.Int64("deleted_by_age", res.DeletedByAge),
				zap.Int64("deleted_by_size", res.DeletedBySize), zap.Int64("used_bytes", res.UsedBytes),
				zap.Bool("checkpoint_deferred_to_ingest", res.CheckpointDeferred))
		}
	}
}
