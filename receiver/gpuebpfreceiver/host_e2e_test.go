//go:build linux

package gpuebpfreceiver_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"golang.org/x/sys/unix"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// The host-side signals of a traced process (forks, scheduling of its dispatcher, its
// block I/O and page allocations) and of the node (block bytes, run-queue latency of
// the other threads, the receiver's own event and drop counters) all reach OTLP.
func TestHostSignalsReachOTLP(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	ioDir := blockBackedDir(t)
	// 40 steps of 50 launches of 200 µs kernels and 2 syncs: the first sync of a step
	// waits ~10 ms for the fake device, blocked in clock_nanosleep (FAKEGPU_SYNC=block,
	// the default, set here so the environment cannot change it): voluntary off-CPU of
	// the dispatcher. One fork every other step, and a 2 MiB fsync'd burst from the
	// dispatcher at most every 50 ms.
	mix := fakegpu.Options{
		Gate: true, Steps: 40, Launches: 2000, KernelTime: 200 * time.Microsecond, Syncs: 80,
		StepGap: 2 * time.Millisecond, Forks: 20,
		IOBurstMB: 2, IOEvery: 50 * time.Millisecond, IODir: ioDir, IOInline: true,
		Env: []string{"FAKEGPU_SYNC=block"},
	}
	// Held at its gate before the collector starts, so the collector's first scan of
	// /proc finds it and every fork, switch and write after the gate is traced.
	w := fakegpu.Start(t, paths, mix)
	sink, col := startCollector(t)
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	report, err := w.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if report.Forks != 20 || report.ForkFailures != 0 || report.IOBytes == 0 || report.IOBursts == 0 {
		t.Fatalf("the workload did not run its mix: forks %d (failed %d), %d I/O bursts, %d bytes", report.Forks, report.ForkFailures, report.IOBursts, report.IOBytes)
	}
	tid := fmt.Sprint(report.Tid)
	forks := seriesKey(semconv.MetricProcessForks, attrs())
	voluntary := seriesKey(semconv.MetricThreadOffCPU, attrs(semconv.OffCPUReason, "voluntary", semconv.ThreadRole, "cuda", semconv.ThreadID, tid))
	runq := seriesKey(semconv.MetricThreadRunQueue, attrs(semconv.ThreadRole, "cuda", semconv.ThreadID, tid))
	ioWrites := seriesKey(semconv.MetricBlockIODuration, attrs(semconv.DiskIODirection, "write"))
	pages := seriesKey(semconv.MetricProcessPageAllocs, attrs())
	nodeWritten := seriesKey(semconv.MetricBlockIOBytes, attrs(semconv.DiskIODirection, "write"))
	nodeRunq := seriesKey(semconv.MetricHostRunQueue, attrs())
	events := func(name string) string {
		return seriesKey(semconv.MetricReceiverEvents, attrs(semconv.EventName, name))
	}
	minPages := report.IOBytes / 4096

	// Wait (bounded) until everything the workload did was exported; then judge each
	// signal on its own, so that a failure says which one and what arrived instead.
	var proc, node processView
	var nodeHist map[string]uint64
	// The node's event counters include at least what the workload's series were built
	// from: a switch-in per off-CPU sample of its threads, its forks, its block requests.
	// The counters and the series are read at different moments of a collection, so the
	// wait is until the counters have caught up: on a quiet node the workload's
	// switch-ins are most of them (188 of 203 in one run).
	eventsLeast := func() map[string]int64 {
		var switchIns uint64
		for key, p := range proc.series {
			if strings.HasPrefix(key, semconv.MetricThreadOffCPU+"{") {
				switchIns += p.count
			}
		}
		return map[string]int64{"host.sched": int64(switchIns), "process.fork": report.Forks, "host.block.io": int64(proc.series[ioWrites].count)}
	}
	countedEvents := func(name string, least int64) bool {
		p, ok := node.series[events(name)]
		return ok && p.value > 0 && p.value >= least
	}
	settled := func() bool {
		proc, node, nodeHist = view(sink, w.Pid), hostView(sink), nodeHistogramCounts(sink)
		for name, least := range eventsLeast() {
			if !countedEvents(name, least) {
				return false
			}
		}
		return proc.series[forks].value == report.Forks && proc.series[voluntary].count > 0 &&
			proc.series[runq].count > 0 && proc.series[ioWrites].count > 0 &&
			proc.series[pages].value >= minPages && node.series[nodeWritten].value >= report.IOBytes &&
			nodeHist[nodeRunq] > 0
	}
	waited := time.Now()
	for deadline := waited.Add(30 * time.Second); !settled() && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("workload ran %.0f ms; its signals were exported %s after it exited", float64(report.WallNS)/1e6, time.Since(waited).Round(100*time.Millisecond))
	processKeys := func() string {
		return fmt.Sprintf("process %d series (processes exported: %v):\n%s", w.Pid, exportedPIDs(sink), proc.keys())
	}
	nodeKeys := func() string {
		var ks []string
		for k := range nodeHist {
			ks = append(ks, k)
		}
		return fmt.Sprintf("node series:\n%s\nnode histograms: %v\n%s", node.keys(), ks, sinkSummary(sink))
	}

	if p, ok := proc.series[forks]; !ok || p.value != report.Forks {
		t.Errorf("%s = %d (present %v), the workload forked %d; %s", forks, p.value, ok, report.Forks, processKeys())
	}
	if p, ok := proc.series[voluntary]; !ok || p.count == 0 {
		t.Errorf("no voluntary off-CPU of dispatcher %s (%s count %d); %s", tid, voluntary, p.count, processKeys())
	} else {
		syncNS := report.TotalNS["cudaStreamSynchronize"] + report.TotalNS["cudaDeviceSynchronize"] + report.TotalNS["cudaEventSynchronize"]
		t.Logf("dispatcher %s: voluntary off-CPU %d times, %.1f ms (its syncs took %.1f ms)", tid, p.count, p.sum*1e3, float64(syncNS)/1e6)
	}
	if p, ok := proc.series[runq]; !ok || p.count == 0 {
		t.Errorf("no run-queue latency of dispatcher %s (%s count %d); %s", tid, runq, p.count, processKeys())
	} else {
		t.Logf("dispatcher %s: waited runnable %d times, %.2f ms", tid, p.count, p.sum*1e3)
	}
	if p, ok := proc.series[ioWrites]; !ok || p.count == 0 {
		t.Errorf("no block write issued by the workload (%s count %d) though it fsync'd %d bytes in %s; %s", ioWrites, p.count, report.IOBytes, ioDir, processKeys())
	} else {
		t.Logf("workload block writes: %d requests, %.1f ms", p.count, p.sum*1e3)
	}
	// Writing into the page cache allocates at least one page per 4 KiB written; the
	// kernel adds the process's other allocations.
	if p, ok := proc.series[pages]; !ok || p.value < minPages {
		t.Errorf("%s = %d (present %v), want ≥ %d: the workload wrote %d bytes; %s", pages, p.value, ok, minPages, report.IOBytes, processKeys())
	} else {
		t.Logf("workload page allocations %d (wrote %d pages' worth)", p.value, minPages)
	}
	// Cumulative since the collector started, before the workload's first write; other
	// writers on the node only add to it.
	if p, ok := node.series[nodeWritten]; !ok || p.value < report.IOBytes {
		t.Errorf("node %s = %d (present %v), the workload fsync'd %d bytes; %s", nodeWritten, p.value, ok, report.IOBytes, nodeKeys())
	} else {
		t.Logf("node block writes %d bytes (workload: %d in %d bursts)", p.value, report.IOBytes, report.IOBursts)
	}
	for name, least := range eventsLeast() {
		if p, ok := node.series[events(name)]; !countedEvents(name, least) {
			t.Errorf("%s = %d (present %v), want > 0 and ≥ %d; %s", events(name), p.value, ok, least, nodeKeys())
		} else {
			t.Logf("%s = %d (workload's share ≥ %d)", events(name), p.value, least)
		}
	}
	for key, p := range node.series {
		if strings.HasPrefix(key, semconv.MetricReceiverDrops+"{") && p.value != 0 {
			t.Errorf("%s = %d", key, p.value)
		}
	}
	if n, ok := nodeHist[nodeRunq]; !ok || n == 0 {
		t.Errorf("node %s count %d (present %v); %s", nodeRunq, n, ok, nodeKeys())
	} else {
		t.Logf("node run-queue latency of other threads: %d samples", n)
	}

	if code := col.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("collector exit code %d", code)
	}
}

// blockBackedDir returns a directory whose file system sits on a block device, so that
// fsync'd writes reach the block layer (tmpfs and overlay have an anonymous device,
// major 0, with no /sys/dev/block entry). t.TempDir() is under $TMPDIR or /tmp, which on
// the test hosts is the root file system on a disk (ext4 on /dev/vda), as
// internal/probes/host_test.go relies on; /var/tmp is tried when it is not.
func blockBackedDir(t *testing.T) string {
	t.Helper()
	onDisk := func(dir string) bool {
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			return false
		}
		_, err := os.Stat(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)))
		return unix.Major(st.Dev) != 0 && err == nil
	}
	if dir := t.TempDir(); onDisk(dir) {
		return dir
	}
	dir, err := os.MkdirTemp("/var/tmp", "fathom-host-e2e-")
	if err == nil && onDisk(dir) {
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	if err == nil {
		os.RemoveAll(dir)
	}
	t.Fatalf("neither %s nor /var/tmp is on a block device: block I/O cannot be tested here", os.TempDir())
	return ""
}

// nodeHistogramCounts folds the node resource's explicit-bucket histograms (the
// kernel's log2 histograms) into the latest count of each series.
func nodeHistogramCounts(sink *collectortest.Sink) map[string]uint64 {
	out := map[string]uint64{}
	eachMetric(sink, func(pid int64, _ pcommon.Map, m pmetric.Metric) {
		if pid != 0 || m.Type() != pmetric.MetricTypeHistogram {
			return
		}
		for k := 0; k < m.Histogram().DataPoints().Len(); k++ {
			dp := m.Histogram().DataPoints().At(k)
			out[seriesKey(m.Name(), dp.Attributes())] = dp.Count()
		}
	})
	return out
}
