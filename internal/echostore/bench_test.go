package echostore

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/echoschema"
)

// benchLogRows look like the node collector's per-call NCCL events.
func benchLogRows(n int, start time.Time) []echoschema.Row {
	rows := make([]echoschema.Row, n)
	for i := range rows {
		r := echoschema.NewRow()
		r.Time = start.Add(time.Duration(i) * time.Microsecond)
		r.Kind, r.Name, r.API, r.Unit = echoschema.KindLog, "nccl.allreduce.duration", "allreduce", "ms"
		r.Cluster, r.Node, r.Job, r.Process = "bench", fmt.Sprintf("node-%03d", i%256), "llama", "python3"
		r.Rank, r.WorldSize, r.PID, r.ThreadID = int32(i%64), 64, 4000, int64(i)
		r.CommID, r.Value, r.Severity, r.SeverityNumber = "0x1f2e", 10+float64(i%50)*0.01, "INFO", 9
		rows[i] = r
	}
	return rows
}

// BenchmarkAppend is the store's own ceiling: pre-built rows (NCCL events) through the
// writer pool, by number of parallel writers, rollups included.
func BenchmarkAppend(b *testing.B) {
	for _, writers := range []int{1, 2} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			s, err := Open(context.Background(), Options{Path: filepath.Join(b.TempDir(), "echo.duckdb"), Writers: writers})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			batch := benchLogRows(8192, time.Now())
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			per := (b.N + writers - 1) / writers
			for range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						if err := s.Append(context.Background(), batch); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(per*writers*len(batch))/time.Since(start).Seconds(), "rows/s")
		})
	}
}
