//go:build linux

package probes_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// procStats returns the kernel's call statistics of pid; nil when it has no slot.
func procStats(t *testing.T, p *probes.Probes, pid uint32) *probes.ProcessCallStats {
	t.Helper()
	procs, err := p.ReadCallStats(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range procs {
		if procs[i].PID == pid {
			return &procs[i]
		}
	}
	return nil
}

// statsOf returns the kernel's call statistics of pid by API name, the APIs it called.
func statsOf(t *testing.T, p *probes.Probes, pid uint32) map[string]probes.CallStats {
	t.Helper()
	out := map[string]probes.CallStats{}
	if proc := procStats(t, p, pid); proc != nil {
		for api, s := range proc.ByAPI {
			if s.TotalCalls() != 0 {
				out[probes.APIName(uint32(api))] = s
			}
		}
	}
	return out
}

// With thresholds set, only notable calls become records while every call is still
// counted: a launch-heavy loop whose one 80 ms synchronization is the only record.
func TestOnlyNotableCallsBecomeRecordsAndAllAreCounted(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	p := loadAndAttach(t, paths, traceNamed)
	for _, a := range probes.APIs {
		threshold := uint64(probes.NeverNotable)
		if a.Symbol == "cudaStreamSynchronize" {
			threshold = uint64(40 * time.Millisecond)
		}
		if err := p.SetNotableThreshold(a.ID, threshold); err != nil {
			t.Fatal(err)
		}
	}
	opts := fakegpu.Options{Gate: true, Steps: 4, Launches: 400, DriverLaunches: 100, H2DAsync: 40, H2DBytes: 1 << 20,
		Syncs: 30, Stall: 80 * time.Millisecond, StallIn: "stream-sync"}
	w := fakegpu.Start(t, paths, opts)
	rec := &recorder{pid: uint32(w.Pid)}
	trace(t, p, w.Pid)
	report := traceWorkload(t, p, w, rec)

	if len(rec.calls) != 1 {
		t.Fatalf("%d records, want only the stalled synchronization", len(rec.calls))
	}
	stalled := rec.calls[0]
	if probes.APIName(stalled.Api) != "cudaStreamSynchronize" || stalled.DurationNs < uint64(80*time.Millisecond) || stalled.Counted != 1 {
		t.Fatalf("record %s of %v (counted %d), want cudaStreamSynchronize of ≥ 80ms", probes.APIName(stalled.Api), time.Duration(stalled.DurationNs), stalled.Counted)
	}
	stats := statsOf(t, p, uint32(w.Pid))
	for api, want := range report.Calls {
		if probes.APIName(apiIDOf(api)) == "unknown" {
			continue
		}
		if got := stats[api].TotalCalls(); got != uint64(want) {
			t.Errorf("%s: kernel counted %d calls, workload made %d", api, got, want)
		}
		var inBuckets uint64
		for _, n := range stats[api].Buckets {
			inBuckets += uint64(n)
		}
		if inBuckets != uint64(want) {
			t.Errorf("%s: %d calls in the duration histogram, want %d", api, inBuckets, want)
		}
		// The workload times each call around the library function, the probes inside
		// it: their sum is smaller by the traps into the kernel (a few µs a call here),
		// and by the process's first traced call, which copies its environment.
		got, outer := stats[api].DurationNs, uint64(report.TotalNS[api])
		if got > outer || outer-got > uint64(want)*uint64(20*time.Microsecond)+uint64(time.Millisecond) {
			t.Errorf("%s: kernel summed %v over %d calls, workload measured %v around them", api, time.Duration(got), want, time.Duration(outer))
		}
	}
	if got := stats["cudaMemcpyAsync"].Bytes[probes.MemcpyHostToDevice]; got != uint64(report.Bytes.H2D) {
		t.Errorf("cudaMemcpyAsync bytes %d, workload copied %d", got, report.Bytes.H2D)
	}
}

// Calls of a process that finds every statistics slot taken go out as records for
// userspace to count, and each is counted as a miss: nothing is lost. Here there is one
// slot, held by another CUDA process. Only the test's processes are traced: another
// package's workload must neither take the slot nor add to the misses.
func TestCallsWithoutAStatsSlotBecomeUncountedRecords(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	p, err := probes.Load(probes.Options{TraceAllCUDA: traceNamed, ProcSlots: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, _, err := p.AttachLibrary(filepath.Join(paths.LibDir, "libcudart.so.12"), probes.LibCUDART); err != nil {
		t.Fatal(err)
	}
	for _, a := range probes.APIs {
		if err := p.SetNotableThreshold(a.ID, probes.NeverNotable); err != nil {
			t.Fatal(err)
		}
	}
	holder := fakegpu.Start(t, paths, fakegpu.Options{Gate: true, Steps: 1, Launches: 5, Stall: time.Minute, StallIn: "stream-sync"})
	trace(t, p, holder.Pid)
	if err := holder.Release(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(statsOf(t, p, uint32(holder.Pid))) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(statsOf(t, p, uint32(holder.Pid))) == 0 {
		t.Fatal("the first process never got the slot")
	}

	w := fakegpu.Start(t, paths, fakegpu.Options{Gate: true, Steps: 1, Launches: 50, Syncs: 3})
	rec := &recorder{pid: uint32(w.Pid)}
	trace(t, p, w.Pid)
	report := traceWorkload(t, p, w, rec)

	if s := statsOf(t, p, uint32(w.Pid)); len(s) != 0 {
		t.Fatalf("the second process has kernel statistics %v; there was no slot for it", s)
	}
	recorded := map[string]int64{}
	for _, c := range rec.calls {
		if c.Counted != 0 {
			t.Fatalf("%s recorded as counted, but its process has no slot", probes.APIName(c.Api))
		}
		recorded[probes.APIName(c.Api)]++
	}
	var total uint64
	for api, want := range report.Calls {
		if probes.APIName(apiIDOf(api)) == "unknown" {
			continue
		}
		if recorded[api] != want {
			t.Errorf("%s: %d records, workload made %d calls", api, recorded[api], want)
		}
		total += uint64(want)
	}
	drops, err := p.Drops()
	if err != nil {
		t.Fatal(err)
	}
	if drops["call_stats_full"] != total || total == 0 {
		t.Errorf("call_stats_full %d, want %d (one per uncounted call)", drops["call_stats_full"], total)
	}

	// Once the holder is gone and its slot given back, the next process gets the slot,
	// zeroed: its statistics are its own calls exactly.
	holder.Kill()
	<-holder.Exited()
	procs, err := p.ReadCallStats(nil)
	if err != nil || len(procs) != 1 || procs[0].PID != uint32(holder.Pid) {
		t.Fatalf("slots %v err %v, want the holder's", procs, err)
	}
	if err := p.ReleaseCallStats(&procs[0]); err != nil {
		t.Fatal(err)
	}
	if procs, _ = p.ReadCallStats(procs); len(procs) != 0 {
		t.Fatalf("%d slots still owned after the release", len(procs))
	}
	next := fakegpu.Start(t, paths, fakegpu.Options{Gate: true, Steps: 1, Launches: 30})
	trace(t, p, next.Pid)
	if err := next.Release(); err != nil {
		t.Fatal(err)
	}
	nextReport, err := next.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	stats := statsOf(t, p, uint32(next.Pid))
	if got, want := stats["cudaLaunchKernel"].TotalCalls(), uint64(nextReport.Calls["cudaLaunchKernel"]); got != want || want == 0 {
		t.Errorf("next process: %d launches counted, it made %d", got, want)
	}
	if got := stats["cudaStreamSynchronize"].TotalCalls(); got != uint64(nextReport.Calls["cudaStreamSynchronize"]) {
		t.Errorf("next process: %d syncs counted, it made %d (the holder's must not show)", got, nextReport.Calls["cudaStreamSynchronize"])
	}
}
