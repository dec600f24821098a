//go:build linux

package gpuebpfreceiver_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/collectortest"
	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/privtest"
)

// BenchmarkNodeCollectorRSS drives the real node collector (gpuebpf receiver, notable
// logs, OTLP exporter) with a workload making ~100k CUDA calls a second and reports
// the collector's peak resident memory. Goal: ≤ 100 MB at 100k events/s.
func BenchmarkNodeCollectorRSS(b *testing.B) {
	privtest.Require(b)
	paths := fakegpu.Build(b)
	sink := collectortest.StartSink(b)
	cfg := filepath.Join(b.TempDir(), "node.yaml")
	if err := os.WriteFile(cfg, []byte(e2eConfig), 0o600); err != nil {
		b.Fatal(err)
	}
	health := collectortest.Addr(b)
	col := collectortest.Start(b, cfg, "SINK="+sink.Addr, "HEALTH="+health)
	col.WaitHTTP(b, "http://"+health+"/", 60*time.Second)

	// Two processes with four launches per step and a 1 µs launch cost keep both cores
	// busy at roughly 100k calls per second in total.
	var ws []*fakegpu.Workload
	for i := 0; i < 2; i++ {
		ws = append(ws, fakegpu.Start(b, paths, fakegpu.Options{Steps: 200000, Launches: 800000, LaunchCost: time.Microsecond, KernelTime: time.Microsecond}))
	}
	var calls int64
	var wall time.Duration
	for _, w := range ws {
		r, err := w.Wait(5 * time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		calls += r.Calls["cudaLaunchKernel"]
		wall = max(wall, time.Duration(r.WallNS))
	}
	peak := statusKB(b, col.Pid(), "VmHWM")
	rss := statusKB(b, col.Pid(), "VmRSS")
	// RSS splits into the collector's own memory (anonymous: heap, stacks) and file
	// pages: those of its 230 MB executable that it uses (main hands back what only
	// start-up touched, internal/startpages) and the event ring, mapped twice.
	anon := statusKB(b, col.Pid(), "RssAnon")
	file := statusKB(b, col.Pid(), "RssFile")
	rate := float64(calls) / wall.Seconds()
	b.ReportMetric(rate, "events/s")
	b.ReportMetric(float64(peak)/1024, "MB-peak-rss")
	b.ReportMetric(float64(anon)/1024, "MB-anon-rss")
	fmt.Printf("node collector: %.0f CUDA events/s for %.1fs, peak RSS %.1f MB, RSS after %.1f MB (anonymous %.1f MB, executable and other files %.1f MB)\n",
		rate, wall.Seconds(), float64(peak)/1024, float64(rss)/1024, float64(anon)/1024, float64(file)/1024)
}

func statusKB(b *testing.B, pid int, field string) int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
