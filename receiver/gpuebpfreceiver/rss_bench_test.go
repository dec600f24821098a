//go:build linux

package gpuebpfreceiver_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// BenchmarkNodeCollectorRSS drives the real node collector (gpuebpf receiver, OTLP
// exporter) with a workload making ~100k CUDA calls a second and reports the
// collector's peak resident memory. Goal: ≤ 100 MB at 100k events/s. Under the default
// notable policy the kernel counts the calls and few reach userspace; under policy all
// every call crosses the ring buffer and is decoded and aggregated (its log records are
// then capped at max_per_second, the rest counted as drops), which is the load on the
// collector's own memory.
func BenchmarkNodeCollectorRSS(b *testing.B) {
	for _, policy := range []string{"notable", "all"} {
		b.Run("policy="+policy, func(b *testing.B) {
			benchmarkNodeCollectorRSS(b, e2eConfig.merged("receivers: {gpuebpf: {logs: {policy: "+policy+"}}}"))
		})
	}
}

func benchmarkNodeCollectorRSS(b *testing.B, receiver nodeReceiver) {
	privtest.Require(b)
	paths := fakegpu.Build(b)
	sink, col := startNodeCollector(b, receiver)

	// Two processes with four launches per step and a 1 µs launch cost keep both cores
	// busy at roughly 100k calls per second in total.
	// The peak under load is sampled: VmHWM also holds start-up, before main hands
	// back the executable's start-up pages (internal/startpages), and whether the
	// kernel records that moment varies from start to start.
	stopSampling := make(chan struct{})
	sampled := make(chan int64)
	go func() {
		var peak int64
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				sampled <- peak
				return
			case <-tick.C:
				if kb, err := readStatusKB(col.Pid(), "VmRSS"); err == nil {
					peak = max(peak, kb)
				}
			}
		}
	}()
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
	close(stopSampling)
	peak := <-sampled
	hwm := statusKB(b, col.Pid(), "VmHWM")
	rss := statusKB(b, col.Pid(), "VmRSS")
	// RSS splits into the collector's own memory (anonymous: heap, stacks) and file
	// pages: those of its 230 MB executable that it uses (main hands back what only
	// start-up touched, internal/startpages) and the event ring, mapped twice.
	anon := statusKB(b, col.Pid(), "RssAnon")
	file := statusKB(b, col.Pid(), "RssFile")
	// What crossed the ring: the receiver's own count of decoded call records, read
	// from its self-telemetry once the last export is in.
	time.Sleep(time.Second)
	decoded := hostView(sink).series[seriesKey(semconv.MetricReceiverEvents, attrs(semconv.EventName, semconv.EventCUDACall))].value
	rate := float64(calls) / wall.Seconds()
	b.ReportMetric(rate, "events/s")
	b.ReportMetric(float64(decoded)/wall.Seconds(), "ring-events/s")
	b.ReportMetric(float64(peak)/1024, "MB-peak-rss")
	b.ReportMetric(float64(hwm)/1024, "MB-hwm")
	b.ReportMetric(float64(anon)/1024, "MB-anon-rss")
	fmt.Printf("node collector: %.0f CUDA events/s for %.1fs (%.0f/s of them decoded from the ring), peak RSS under load %.1f MB (VmHWM since start %.1f MB), RSS after %.1f MB (anonymous %.1f MB, executable and other files %.1f MB)\n",
		rate, wall.Seconds(), float64(decoded)/wall.Seconds(), float64(peak)/1024, float64(hwm)/1024, float64(rss)/1024, float64(anon)/1024, float64(file)/1024)
}

func statusKB(b *testing.B, pid int, field string) int64 {
	kb, err := readStatusKB(pid, field)
	if err != nil {
		b.Fatal(err)
	}
	return kb
}

// readStatusKB reads one kB field of /proc/PID/status.
func readStatusKB(pid int, field string) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
