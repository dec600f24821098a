package store

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// BenchmarkAppend is the store's own ceiling: pre-built rows through the Appender pool,
// by number of parallel writers.
func BenchmarkAppend(b *testing.B) {
	for _, writers := range []int{1, 2} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			s, err := Open(context.Background(), Options{Path: filepath.Join(b.TempDir(), "echo.duckdb"), Writers: writers})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			batch := testRows(8192, "node-1", time.Now())
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
