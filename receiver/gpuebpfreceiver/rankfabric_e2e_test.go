//go:build linux

package gpuebpfreceiver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// Each rank carries the counters of the RDMA ports its NCCL_IB_HCA gives it, counted
// from when the rank was first seen: rank 1 (mlx5_1 port 1) the credit waits and
// errors its link counts from then on, rank 0 (exactly mlx5_0) none, and a rank without
// NCCL_IB_HCA is bound to no port at all.
func TestARankCarriesTheCountersOfItsRDMAPorts(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	sysfs := t.TempDir()
	// Counts from before the ranks started are not theirs.
	writeCounters(t, sysfs, "mlx5_0", "InfiniBand", map[string]uint64{"port_xmit_wait": 100, "symbol_error": 1})
	writeCounters(t, sysfs, "mlx5_1", "InfiniBand", map[string]uint64{"port_xmit_wait": 200, "symbol_error": 2})
	sink, _ := startNodeCollector(t, nodeConfig("collection_interval: 300ms\nlogs:\n  policy: none\nrdma:\n  sysfs_root: ${env:SYSFS}\n  poll_interval: 200ms", false),
		"SYSFS="+sysfs)
	start := func(env ...string) *fakegpu.Workload {
		w := fakegpu.Start(t, paths, fakegpu.Options{Gate: true, Steps: 400, Launches: 10, StepGap: 25 * time.Millisecond, Env: env})
		if err := w.Release(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = w.Wait(time.Minute) })
		return w
	}
	rank0 := start("RANK=0", "NCCL_IB_HCA==mlx5_0")
	rank1 := start("RANK=1", "NCCL_IB_HCA=mlx5_1:1")
	unbound := start("RANK=2")

	series := func(metric, ports string) string {
		return seriesKey(metric, attrs(semconv.SignalDetail, "NCCL_IB_HCA: "+ports))
	}
	wait0, errs0 := series(semconv.MetricRankRDMAXmitWait, "mlx5_0 port 1 (infiniband)"), series(semconv.MetricRankRDMAErrors, "mlx5_0 port 1 (infiniband)")
	wait1, errs1 := series(semconv.MetricRankRDMAXmitWait, "mlx5_1 port 1 (infiniband)"), series(semconv.MetricRankRDMAErrors, "mlx5_1 port 1 (infiniband)")
	for _, w := range []struct {
		pid int
		key string
	}{{rank0.Pid, wait0}, {rank1.Pid, wait1}} {
		waitFor(t, sink, w.pid, "its RDMA port binding", func(v processView) bool { _, ok := v.series[w.key]; return ok })
	}
	// Rank 1's link starts waiting for credits and taking symbol errors.
	writeCounters(t, sysfs, "mlx5_1", "InfiniBand", map[string]uint64{"port_xmit_wait": 200 + 5000, "symbol_error": 2 + 3})
	waitFor(t, sink, rank1.Pid, "mlx5_1's new counts (5,000 credit-wait ticks, 3 errors) on rank 1", func(v processView) bool {
		return v.series[wait1].value == 5000 && v.series[errs1].value == 3
	})
	v0 := view(sink, rank0.Pid)
	if v0.value(t, wait0) != 0 || v0.value(t, errs0) != 0 {
		t.Errorf("rank 0 on mlx5_0 carries %d credit-wait ticks and %d errors, want none of mlx5_1's", v0.series[wait0].value, v0.series[errs0].value)
	}
	for key := range view(sink, unbound.Pid).series {
		if strings.HasPrefix(key, "fathom.rank.rdma.") {
			t.Errorf("the rank without NCCL_IB_HCA carries %s", key)
		}
	}
}

// Without NCCL_IB_HCA, a rank is bound to the NIC it creates queue pairs on, as NCCL's IB
// transport does on the NICs its connections use: fakegpu-ddp's rank r opens mlx5_r of
// four and creates a queue pair there. When mlx5_1's link takes errors, rank 1 carries
// them, with a detail naming its NIC, and ranks 0 and 2 carry none.
func TestARankIsBoundToTheNICItCreatesQueuePairsOn(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	sysfs := t.TempDir()
	for _, dev := range []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"} {
		writeCounters(t, sysfs, dev, "InfiniBand", map[string]uint64{"port_xmit_wait": 10, "symbol_error": 1})
	}
	// At their gates (libraries mapped, no call made) before the collector starts, so its
	// first scan of /proc finds libibverbs and the queue pairs come after.
	run := fakegpu.StartDDP(t, paths, fakegpu.DDPOptions{Ranks: 3, Steps: 100000, BucketBytes: 4096, IB: true, Gate: true,
		Env: []string{"FAKEIBV_DEVICES=4"}})
	sink, _ := startNodeCollector(t, nodeConfig("collection_interval: 300ms\nlogs:\n  policy: none\nrdma:\n  sysfs_root: ${env:SYSFS}\n  poll_interval: 200ms", false),
		"SYSFS="+sysfs)
	if err := run.Release(); err != nil {
		t.Fatal(err)
	}
	key := func(metric, dev string) string {
		return seriesKey(metric, attrs(semconv.SignalDetail, "queue pairs on: "+dev+" port 1 (infiniband)"))
	}

	for r, rank := range run.Ranks {
		dev := []string{"mlx5_0", "mlx5_1", "mlx5_2"}[r]
		waitFor(t, sink, rank.Pid, "its binding to "+dev, func(v processView) bool { _, ok := v.series[key(semconv.MetricRankRDMAErrors, dev)]; return ok })
	}
	writeCounters(t, sysfs, "mlx5_1", "InfiniBand", map[string]uint64{"port_xmit_wait": 10 + 700, "symbol_error": 1 + 4})
	waitFor(t, sink, run.Ranks[1].Pid, "mlx5_1's new counts (700 credit-wait ticks, 4 errors) on rank 1", func(v processView) bool {
		return v.series[key(semconv.MetricRankRDMAXmitWait, "mlx5_1")].value == 700 && v.series[key(semconv.MetricRankRDMAErrors, "mlx5_1")].value == 4
	})
	for _, r := range []int{0, 2} {
		dev := []string{"mlx5_0", "", "mlx5_2"}[r]
		v := view(sink, run.Ranks[r].Pid)
		if v.value(t, key(semconv.MetricRankRDMAXmitWait, dev)) != 0 || v.value(t, key(semconv.MetricRankRDMAErrors, dev)) != 0 {
			t.Errorf("rank %d on %s carries mlx5_1's counts", r, dev)
		}
		for k := range v.series {
			if strings.HasPrefix(k, "fathom.rank.rdma.") && !strings.Contains(k, dev) {
				t.Errorf("rank %d carries %s", r, k)
			}
		}
	}
}
