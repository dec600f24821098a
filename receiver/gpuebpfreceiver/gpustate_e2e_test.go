//go:build linux

package gpuebpfreceiver_test

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// gaugePoint is the latest value of one gauge series and its attributes.
type gaugePoint struct {
	value float64
	attrs pcommon.Map
}

// gauges folds every gauge the sink received into the latest point of each series of
// process pid (0: the node).
func gauges(sink *collectortest.Sink, pid int) map[string]gaugePoint {
	out := map[string]gaugePoint{}
	eachMetric(sink, func(p int64, _ pcommon.Map, m pmetric.Metric) {
		if p != int64(pid) || m.Type() != pmetric.MetricTypeGauge {
			return
		}
		for k := 0; k < m.Gauge().DataPoints().Len(); k++ {
			dp := m.Gauge().DataPoints().At(k)
			key := dp.Attributes()
			if _, ok := key.Get(semconv.SignalDetail); ok { // not part of the series' identity
				key = pcommon.NewMap()
				dp.Attributes().CopyTo(key)
				key.Remove(semconv.SignalDetail)
			}
			out[seriesKey(m.Name(), key)] = gaugePoint{value: dp.DoubleValue(), attrs: dp.Attributes()}
		}
	})
	return out
}

// A node collector reads its GPUs from NVML (the real go-nvml on the fake
// libnvidia-ml.so.1): GPU 1 runs hot and held down, on a link trained to x8 and with
// wearing memory. The node's series carry both GPUs' state exactly; the rank running on
// GPU 1 carries how far its SM clock is below the maximum, with a detail naming the GPU
// and the reasons; an XID raised on GPU 1 comes out at once as a record naming that
// rank.
func TestGPUStateIsBoundToTheRankOnEachGPU(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	board := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(board, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(board, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("gpu0", "util_gpu=12\n")
	const gpu1 = `sm_clock=1410
clock_event_reasons=sw_thermal,hw_thermal
power_mw=612500
temperature_c=87
util_gpu=99
memory_used=17179869184
pcie_width=8
pcie_replays=17
ecc_corrected=3
remapped_correctable=2
remap_pending=1
`
	write("gpu1", gpu1)
	sink, _ := startNodeCollector(t, nodeConfig("collection_interval: 300ms\nlogs:\n  policy: notable\nnvml:\n  library_path: "+paths.NVML, true),
		"FAKEGPU_BOARD="+board)

	// The rank runs on GPU 1 (CUDA_VISIBLE_DEVICES=1): the fake device lists it there
	// from its first CUDA call, as the driver lists a process with a context.
	w := fakegpu.Start(t, paths, fakegpu.Options{Gate: true, Steps: 400, Launches: 10, StepGap: 25 * time.Millisecond,
		Env: []string{"RANK=5", "LOCAL_RANK=1", "WORLD_SIZE=8", "FAKEGPU_BOARD=" + board, "CUDA_VISIBLE_DEVICES=1"}})
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = w.Wait(time.Minute) }()

	ratio := seriesKey(semconv.MetricRankGPUClockDeficit, attrs(semconv.HWID, "GPU-fa7a0000-0000-4000-8000-000000000001", semconv.GPUIndex, "1"))
	var rank gaugePoint
	deadline := time.Now().Add(20 * time.Second)
	for ok := false; !ok; rank, ok = gauges(sink, w.Pid)[ratio] {
		if time.Now().After(deadline) {
			t.Fatalf("rank 5 never carried %s; its gauges: %v", ratio, gauges(sink, w.Pid))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if math.Abs(rank.value-(1-1410.0/1980)) > 1e-12 {
		t.Errorf("rank 5's SM clock deficit %v, want %v", rank.value, 1-1410.0/1980)
	}
	detail, _ := rank.attrs.Get(semconv.SignalDetail)
	if want := "GPU 1 (GPU-fa7a0000-0000-4000-8000-000000000001) SM clock 1,410 of 1,980 MHz: sw_thermal_slowdown, hw_thermal_slowdown"; detail.Str() != want {
		t.Errorf("detail %q, want %q", detail.Str(), want)
	}

	node := gauges(sink, 0)
	gpu := func(name string, index int, kv ...string) string {
		return seriesKey(name, attrs(append([]string{semconv.HWID, "GPU-fa7a0000-0000-4000-8000-00000000000" + strconv.Itoa(index), semconv.GPUIndex, strconv.Itoa(index)}, kv...)...))
	}
	for key, want := range map[string]float64{
		gpu(semconv.MetricGPUClock, 0, semconv.GPUClockDomain, "sm"):                       1980,
		gpu(semconv.MetricGPUClock, 1, semconv.GPUClockDomain, "sm"):                       1410,
		gpu(semconv.MetricGPUClockMax, 1, semconv.GPUClockDomain, "sm"):                    1980,
		gpu(semconv.MetricGPUClockEvent, 1, semconv.GPUClockReason, "sw_thermal_slowdown"): 1,
		gpu(semconv.MetricGPUClockEvent, 1, semconv.GPUClockReason, "hw_thermal_slowdown"): 1,
		gpu(semconv.MetricGPUClockEvent, 1, semconv.GPUClockReason, "sw_power_cap"):        0,
		gpu(semconv.MetricGPUClockEvent, 0, semconv.GPUClockReason, "hw_thermal_slowdown"): 0,
		gpu(semconv.MetricGPUPower, 1):                                                     612.5,
		gpu(semconv.MetricGPUPowerLimit, 1):                                                700,
		gpu(semconv.MetricGPUTemperature, 1):                                               87,
		gpu(semconv.MetricGPUMemoryUsage, 1):                                               16 << 30,
		gpu(semconv.MetricGPUMemoryLimit, 1):                                               80 << 30,
		gpu(semconv.MetricGPUPCIeWidth, 1):                                                 8,
		gpu(semconv.MetricGPUPCIeWidthMax, 1):                                              16,
		gpu(semconv.MetricGPUPCIeGen, 1):                                                   5,
		gpu(semconv.MetricGPURemappedRows, 1, semconv.GPURemapCause, "correctable"):        2,
		gpu(semconv.MetricGPURemapPending, 1):                                              1,
		gpu(semconv.MetricGPURemapFailed, 1):                                               0,
	} {
		if p, ok := node[key]; !ok || p.value != want {
			t.Errorf("node %s = %v (%v), want %v", key, p.value, ok, want)
		}
	}
	util := seriesKey(semconv.MetricGPUUtilization, attrs(semconv.HWID, "GPU-fa7a0000-0000-4000-8000-000000000001", semconv.GPUIndex, "1",
		semconv.HWName, "NVIDIA H100 80GB HBM3", semconv.HWVendor, "NVIDIA", semconv.GPUBusID, "00000000:28:00.0"))
	if p := node[util]; p.value != 0.99 {
		t.Errorf("node %s = %v, want 0.99", util, p.value)
	}
	host := hostView(sink)
	for key, want := range map[string]int64{
		gpu(semconv.MetricGPUPCIeReplays, 1):                                          17,
		gpu(semconv.MetricGPUECCErrors, 1, semconv.GPUMemoryErrorType, "corrected"):   3,
		gpu(semconv.MetricGPUECCErrors, 1, semconv.GPUMemoryErrorType, "uncorrected"): 0,
	} {
		if got := host.value(t, key); got != want {
			t.Errorf("node %s = %d, want %d", key, got, want)
		}
	}

	// An XID on GPU 1 (79: fallen off the bus).
	f, err := os.OpenFile(filepath.Join(board, "gpu1.xid"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("79\n")
	f.Close()
	raised := time.Now()
	var body string
	for deadline := time.Now().Add(10 * time.Second); body == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, ld := range sink.Logs() {
			for i := 0; i < ld.ResourceLogs().Len(); i++ {
				lrs := ld.ResourceLogs().At(i).ScopeLogs().At(0).LogRecords()
				for j := 0; j < lrs.Len(); j++ {
					lr := lrs.At(j)
					code, _ := lr.Attributes().Get(semconv.GPUXIDCode)
					if lr.EventName() == semconv.EventGPUXID && code.Int() == 79 {
						body = lr.Body().Str()
					}
				}
			}
		}
	}
	if want := "XID 79 on GPU 1 (GPU-fa7a0000-0000-4000-8000-000000000001), running rank 5 (pid " + strconv.Itoa(w.Pid) + ")"; body != want {
		t.Fatalf("XID record %q, want %q", body, want)
	}
	t.Logf("XID 79 reached the sink %v after it was raised", time.Since(raised).Round(10*time.Millisecond))
	if strings.Contains(body, "GPU 0") {
		t.Error("the XID names GPU 0")
	}

	// GPU 1's link replays 40 more packets and its memory corrects 2 more errors: the
	// rank carries those, not the 17 replays and 3 errors from before it started.
	write("gpu1", strings.NewReplacer("pcie_replays=17", "pcie_replays=57", "ecc_corrected=3", "ecc_corrected=5").Replace(gpu1))
	wantDetail := "GPU 1 (GPU-fa7a0000-0000-4000-8000-000000000001) since the rank started: 40 PCIe replays, 2 ECC errors"
	var got int64
	var gotDetail string
	for deadline := time.Now().Add(10 * time.Second); gotDetail != wantDetail && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		eachMetric(sink, func(pid int64, _ pcommon.Map, m pmetric.Metric) {
			if pid != int64(w.Pid) || m.Name() != semconv.MetricRankGPUErrors {
				return
			}
			dp := m.Sum().DataPoints().At(0)
			d, _ := dp.Attributes().Get(semconv.SignalDetail)
			got, gotDetail = dp.IntValue(), d.Str()
		})
	}
	if got != 42 || gotDetail != wantDetail {
		t.Errorf("rank 5's %s = %d (%q), want 42 (%q)", semconv.MetricRankGPUErrors, got, gotDetail, wantDetail)
	}
}

// Where NVML lists no process (a driver that reports another pid namespace's pids, or
// none), each rank is bound by the device it selects with cudaSetDevice, mapped through
// its CUDA_VISIBLE_DEVICES: with 3,1 visible, rank 0 (device 0) runs on GPU 3 and rank 1
// (device 1) on GPU 1, which is held down; each carries its own GPU's clock deficit.
func TestARankNVMLDoesNotListIsBoundByTheDeviceItSelects(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	board := t.TempDir()
	for i, state := range []string{"", "sm_clock=1410\nclock_event_reasons=hw_thermal\n", "", ""} {
		if err := os.WriteFile(filepath.Join(board, "gpu"+strconv.Itoa(i)), []byte(state), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// At their gates (libraries mapped, no call made) before the collector starts.
	run := fakegpu.StartDDP(t, paths, fakegpu.DDPOptions{Ranks: 2, Steps: 100000, BucketBytes: 4096, Gate: true,
		Env: []string{"FAKEGPU_BOARD=" + board, "FAKEGPU_BOARD_HIDDEN=1", "FAKEGPU_DEVICES=2", "CUDA_VISIBLE_DEVICES=3,1"}})
	sink, _ := startNodeCollector(t, nodeConfig("collection_interval: 300ms\nlogs:\n  policy: none\nnvml:\n  library_path: "+paths.NVML, false),
		"FAKEGPU_BOARD="+board)
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	deficit := func(gpu int) string {
		return seriesKey(semconv.MetricRankGPUClockDeficit, attrs(semconv.HWID, "GPU-fa7a0000-0000-4000-8000-00000000000"+strconv.Itoa(gpu), semconv.GPUIndex, strconv.Itoa(gpu)))
	}
	for r, c := range []struct {
		gpu  int
		want float64
	}{{3, 0}, {1, 1 - 1410.0/1980}} {
		pid := run.Ranks[r].Pid
		var got gaugePoint
		deadline := time.Now().Add(20 * time.Second)
		for ok := false; !ok; got, ok = gauges(sink, pid)[deficit(c.gpu)] {
			if time.Now().After(deadline) {
				t.Fatalf("rank %d never carried %s; its gauges: %v", r, deficit(c.gpu), gauges(sink, pid))
			}
			time.Sleep(100 * time.Millisecond)
		}
		if math.Abs(got.value-c.want) > 1e-12 {
			t.Errorf("rank %d on GPU %d: SM clock deficit %v, want %v", r, c.gpu, got.value, c.want)
		}
		for key := range gauges(sink, pid) {
			if strings.HasPrefix(key, semconv.MetricRankGPUClockDeficit) && key != deficit(c.gpu) {
				t.Errorf("rank %d carries %s too", r, key)
			}
		}
	}
	if entries, _ := filepath.Glob(filepath.Join(board, "gpu*.procs", "*")); len(entries) != 0 {
		t.Errorf("the fake NVML lists processes %v: the test needs it to list none", entries)
	}
}

// A rank's GPU clock comes with each of its rank samples, not only with each
// collection: a GPU that starts throttling between two collections 10 s apart shows in
// the rank's samples within a second, each with its detail, so that the straggler
// loop compares it at the pace of the rank's other signals (a throttled GPU flagged in
// about 1.5 s, not three collections).
func TestARanksSamplesCarryItsGPUClockBetweenCollections(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	board := t.TempDir()
	write := func(gpu, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(board, gpu), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("gpu0", "")
	write("gpu1", "")
	sink, _ := startNodeCollector(t, nodeConfig("collection_interval: 10s\nrank_signals:\n  interval: 250ms\nnvml:\n  library_path: "+paths.NVML, false),
		"FAKEGPU_BOARD="+board)
	w := fakegpu.Start(t, paths, fakegpu.Options{Gate: true, Steps: 2000, Launches: 10, StepGap: 10 * time.Millisecond,
		Env: []string{"RANK=5", "LOCAL_RANK=1", "WORLD_SIZE=8", "FAKEGPU_BOARD=" + board, "CUDA_VISIBLE_DEVICES=1"}})
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = w.Wait(time.Minute) }()

	// deficits are the rank's SM clock deficits from its samples (the rank-signal
	// scope), with their details, in order.
	type deficit struct {
		value  float64
		detail string
		at     time.Time
	}
	deficits := func() []deficit {
		var out []deficit
		for _, md := range sink.Metrics() {
			for i := 0; i < md.ResourceMetrics().Len(); i++ {
				rm := md.ResourceMetrics().At(i)
				if pid, _ := rm.Resource().Attributes().Get(semconv.ProcessPID); pid.Int() != int64(w.Pid) {
					continue
				}
				for s := 0; s < rm.ScopeMetrics().Len(); s++ {
					sm := rm.ScopeMetrics().At(s)
					if sm.Scope().Name() != semconv.RankSignalsScope {
						continue
					}
					for j := 0; j < sm.Metrics().Len(); j++ {
						if m := sm.Metrics().At(j); m.Name() == semconv.MetricRankGPUClockDeficit {
							dp := m.Gauge().DataPoints().At(0)
							d, _ := dp.Attributes().Get(semconv.SignalDetail)
							out = append(out, deficit{dp.DoubleValue(), d.Str(), dp.Timestamp().AsTime()})
						}
					}
				}
			}
		}
		return out
	}
	// The first collection binds the rank to GPU 1; its samples then carry the clock.
	deadline := time.Now().Add(20 * time.Second)
	for len(deficits()) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("rank 5's samples never carried %s", semconv.MetricRankGPUClockDeficit)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, d := range deficits() {
		if d.value != 0 {
			t.Fatalf("a sample before the throttling says %+v", d)
		}
	}
	write("gpu1", "sm_clock=1584\nclock_event_reasons=sw_power_cap\n")
	throttled := time.Now()
	want := 1 - 1584.0/1980
	const detail = "GPU 1 (GPU-fa7a0000-0000-4000-8000-000000000001) SM clock 1,584 of 1,980 MHz: sw_power_cap"
	var after []deficit
	for time.Since(throttled) < 2*time.Second {
		time.Sleep(100 * time.Millisecond)
		after = after[:0]
		for _, d := range deficits() {
			if d.at.After(throttled) && math.Abs(d.value-want) < 1e-12 && d.detail == detail {
				after = append(after, d)
			}
		}
		if len(after) >= 3 {
			break
		}
	}
	if len(after) < 3 {
		t.Fatalf("%d samples within 2 s of the throttling carried its clock (%v, %q); all: %+v", len(after), want, detail, deficits())
	}
	t.Logf("the rank's samples carried the throttled clock %v after it began", after[0].at.Sub(throttled).Round(10*time.Millisecond))
}
