//go:build linux

package probes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// BenchmarkProbeOverhead reports, per probed API, what Fathom's entry and return
// programs cost per call against empty programs on the same attach points. Goal:
// Fathom's per-call cost ≤ 1.2x the empty programs'. Fathom's programs run as under the
// default log policy: each call counted in the kernel, none of them notable.
//
// Two measures. Wall clock: the workload times every call itself, so a probe's cost is
// the per-call mean with probes minus the mean without; on a busy two-core machine
// this is noisy. Kernel accounting (BPF_ENABLE_STATS): the run time of the programs
// themselves, which is all that differs between Fathom and empty programs; the trap
// into the kernel costs the same for both. The ratio reported is
// (empty wall cost + Fathom's program time − empty program time) / empty wall cost.
func BenchmarkProbeOverhead(b *testing.B) {
	paths := withRunTimeStats(b)
	const calls = 40000
	cases := []struct {
		api  string
		opts fakegpu.Options
	}{
		{"cudaLaunchKernel", fakegpu.Options{Launches: calls}},
		{"cudaMemcpy", fakegpu.Options{H2H: calls, H2HBytes: 64}},
		{"cudaMemcpyAsync", fakegpu.Options{H2DAsync: calls, H2DBytes: 64}},
		{"cuLaunchKernel", fakegpu.Options{DriverLaunches: calls}},
		{"cudaStreamSynchronize", fakegpu.Options{Syncs: 3 * calls}},
		{"cuMemcpyHtoD_v2", fakegpu.Options{DriverH2D: calls, H2DBytes: 64}},
	}
	for _, c := range cases {
		b.Run(c.api, func(b *testing.B) {
			c.opts.Steps = 1
			// Programs load once per mode; the workload runs five times and the fastest
			// run counts, which keeps the other core's noise out of the numbers.
			progNS := map[string]float64{}
			measure := func(mode string) float64 {
				var p *probes.Probes
				if mode != "none" {
					p = loadForBench(b, paths, mode == "empty")
					defer p.Close()
				}
				best := math.Inf(1)
				for rep := 0; rep < 5; rep++ {
					r := fakegpu.Run(b, paths, c.opts)
					if r.Calls[c.api] != calls {
						b.Fatalf("%s: workload made %d calls, want %d", c.api, r.Calls[c.api], calls)
					}
					best = math.Min(best, float64(r.TotalNS[c.api])/float64(calls))
				}
				if p != nil {
					entry, ret, err := p.RunStats(c.api)
					if err != nil {
						b.Fatal(err)
					}
					// Per call: one entry and one return (a few setup calls share the
					// return program; their share is under 0.1%).
					progNS[mode] = float64(entry.Runtime)/float64(max(entry.Runs, 1)) + float64(ret.Runtime)/float64(max(ret.Runs, 1))
				}
				return best
			}
			none, empty, fathom := measure("none"), measure("empty"), measure("fathom")
			emptyCost := empty - none
			ratio := (emptyCost + progNS["fathom"] - progNS["empty"]) / emptyCost
			b.ReportMetric(emptyCost, "ns/call-empty")
			b.ReportMetric(fathom-none, "ns/call-fathom-wall")
			b.ReportMetric(progNS["fathom"], "ns/call-fathom-programs")
			b.ReportMetric(ratio, "x-empty")
			fmt.Printf("probe overhead %-16s empty programs %5.0f ns/call (wall); fathom %5.0f ns/call (wall), its programs run %4.0f ns vs %3.0f ns empty: %.2fx empty\n",
				c.api, emptyCost, fathom-none, progNS["fathom"], progNS["empty"], ratio)
		})
	}
}

// withRunTimeStats turns the kernel's BPF run-time accounting on for the benchmark
// (it costs every program two clock reads, so it is off otherwise) and builds the fake
// GPU stack.
func withRunTimeStats(b *testing.B) fakegpu.Paths {
	b.Helper()
	privtest.Require(b)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enable BPF run-time statistics: %v", err)
	}
	b.Cleanup(func() { stats.Close() })
	return fakegpu.Build(b)
}

// loadForBench loads Fathom's programs (the empty ones for baseline) as the receiver
// runs them by default: every call counted in the kernel, records only for notable
// calls, and none is; attached to the fake libcudart and libcuda, with a reader that
// discards what it reads until the probes are closed.
func loadForBench(b *testing.B, paths fakegpu.Paths, baseline bool) *probes.Probes {
	b.Helper()
	return loadForBenchWith(b, paths, probes.Options{TraceAllCUDA: true, Baseline: baseline}, probes.NeverNotable)
}

// loadForBenchWith is loadForBench with other options and every API's notable
// threshold at notable (0: every call a record).
func loadForBenchWith(b *testing.B, paths fakegpu.Paths, opts probes.Options, notable uint64) *probes.Probes {
	b.Helper()
	p, err := probes.Load(opts)
	if err != nil {
		b.Fatal(err)
	}
	for _, a := range probes.APIs {
		if err := p.SetNotableThreshold(a.ID, notable); err != nil {
			b.Fatal(err)
		}
	}
	for lib, name := range map[probes.Library]string{probes.LibCUDART: "libcudart.so.12", probes.LibCUDA: "libcuda.so.1"} {
		if _, _, err := p.AttachLibrary(filepath.Join(paths.LibDir, name), lib); err != nil {
			b.Fatal(err)
		}
	}
	go p.Run(context.Background(), discard{}, nil)
	return p
}

type discard struct{}

func (discard) CUDACall(*probes.CUDACall)                      {}
func (discard) CUDAThread(*probes.EventHeader)                 {}
func (discard) Sched(*probes.SchedSwitchIn)                    {}
func (discard) Process(probes.EventKind, *probes.ProcessEvent) {}
func (discard) BlockIO(*probes.BlockIO)                        {}
func (discard) Identity(*probes.ProcessIdentity)               {}
func (discard) TCPRetransmit(*probes.TCPRetransmit)            {}
func (discard) NCCLCall(*probes.NCCLCall)                      {}
func (discard) RDMAAsync(*probes.RDMAAsyncEvent)               {}

// BenchmarkProgramRunTime reports what every program costs per run against an empty
// program on the same attach points, from the kernel's own accounting
// (BPF_ENABLE_STATS): each CUDA entry program and the shared return program over a
// workload that calls every probed API, and each host tracepoint program over the
// same workload (traced: its forks, syncs and fsync'd writes) plus untraced work the
// host programs must filter out first: a pipe between dd and cat (context switches) and
// a 64 MiB fsync'd write (page allocations, block requests).
// BenchmarkProbeOverhead turns such differences into the per-call ratio for the
// busiest APIs.
func BenchmarkProgramRunTime(b *testing.B) {
	paths := withRunTimeStats(b)
	mix := fakegpu.Options{
		Steps: 20, Launches: 4000, LaunchesEx: 1000, DriverLaunches: 1000, DriverLaunchesPtsz: 1000, DriverLaunchesEx: 1000,
		H2D: 400, H2DAsync: 400, D2H: 400, D2HAsync: 400, D2D: 400, D2DAsync: 400, H2H: 400,
		H2DBytes: 4096, D2HBytes: 4096, D2DBytes: 4096, H2HBytes: 4096,
		DriverH2D: 200, DriverH2DAsync: 200, DriverD2H: 200, DriverD2HAsync: 200, DriverD2D: 200, DriverD2DAsync: 200,
		DriverMemcpy: 200, DriverMemcpyAsync: 200,
		Allocs: 200, AsyncAllocs: 200, DriverAllocs: 200, AllocBytes: 4096,
		Syncs: 600, StreamWaits: 200, DriverSyncs: 200,
		GraphCaptures: 2, GraphKernels: 4, GraphReplays: 200, DriverGraphLaunches: 200,
		Forks: 20, IOBurstMB: 1, IOEvery: 20 * time.Millisecond, IODir: b.TempDir(), IOInline: true,
	}
	untracedDir := b.TempDir()
	type costs struct {
		cuda []probes.ProgramCost
		host map[string]probes.ProgramRun
	}
	measure := func(baseline bool) costs {
		p := loadForBench(b, paths, baseline)
		defer p.Close()
		if err := p.AttachHost(); err != nil {
			b.Fatal(err)
		}
		// Untraced: context switches through a pipe, then 64 MiB written through the page
		// cache and fsync'd (page allocations, block requests).
		pipe := exec.Command("sh", "-c", "dd if=/dev/zero bs=1 count=200000 status=none | cat >/dev/null; "+
			"dd if=/dev/zero of="+filepath.Join(untracedDir, "fill")+" bs=1M count=64 conv=fsync status=none")
		if err := pipe.Start(); err != nil {
			b.Fatal(err)
		}
		fakegpu.Run(b, paths, mix)
		if err := pipe.Wait(); err != nil {
			b.Fatal(err)
		}
		var c costs
		var err error
		if c.cuda, err = p.CUDARunStats(); err != nil {
			b.Fatal(err)
		}
		if c.host, err = p.HostRunStats(); err != nil {
			b.Fatal(err)
		}
		return c
	}
	perRun := func(r probes.ProgramRun) float64 { return float64(r.Runtime.Nanoseconds()) / float64(max(r.Runs, 1)) }
	empty, fathom := measure(true), measure(false)

	fmt.Println("program run time per run, Fathom's against empty programs on the same attach points:")
	emptyByProgram := map[string]probes.ProgramRun{}
	for _, c := range empty.cuda {
		emptyByProgram[c.Program] = c.Run
	}
	for _, c := range fathom.cuda {
		base := emptyByProgram["empty_entry"]
		if c.Program == "leave_call" {
			base = emptyByProgram["empty_return"]
		}
		fmt.Printf("  %-28s %4.0f ns vs %3.0f ns empty (%7d runs) %v\n", c.Program, perRun(c.Run), perRun(base), c.Run.Runs, c.APIs)
	}
	for _, tp := range probes.HostTracepoints {
		f, e := fathom.host[tp], empty.host[tp]
		fmt.Printf("  tp_btf/%-21s %4.0f ns vs %3.0f ns empty (%7d runs)\n", tp, perRun(f), perRun(e), f.Runs)
		if tp == "sched_switch" {
			b.ReportMetric(perRun(f), "ns/sched_switch")
			b.ReportMetric(perRun(e), "ns/sched_switch-empty")
		}
	}
	// All host programs together per context switch: what the node pays for a switch
	// and the wakeup before it, whichever programs run (issue 29 moved the waker's
	// attribution from sched_wakeup to sched_waking and added its system call).
	perSwitch := func(host map[string]probes.ProgramRun) float64 {
		var all time.Duration
		for _, tp := range probes.HostTracepoints {
			all += host[tp].Runtime
		}
		return float64(all.Nanoseconds()) / float64(max(host["sched_switch"].Runs, 1))
	}
	fmt.Printf("  all host programs together   %4.0f ns vs %3.0f ns empty per context switch\n", perSwitch(fathom.host), perSwitch(empty.host))
	b.ReportMetric(perSwitch(fathom.host), "host-ns/context-switch")
	b.ReportMetric(perSwitch(empty.host), "host-ns/context-switch-empty")
}

// BenchmarkProbeOverheadOnVendorLibraries is BenchmarkProbeOverhead on the vendors' own
// libraries, whose entry instructions are theirs, not the fakes': NVIDIA's libcudart
// 11.8.89 and libcuda 535 (make vendor-libs) and AMD's libamdhip64 5.2 (Debian's
// libamdhip64-5). Without a GPU each call returns an error at once, so the call is
// about as short as a call gets and the probes' share of it as large as it gets.
// fakegpu-vendor times each call itself; the empty programs sit on the same attach
// points as Fathom's (attachOffset: libcuda's stubs past their compare).
func BenchmarkProbeOverheadOnVendorLibraries(b *testing.B) {
	paths := withRunTimeStats(b)
	nvidia := filepath.Join(fakegpu.RepoRoot(), "build", "vendor", "nvidia", "lib")
	const calls = 20000
	for _, c := range []struct {
		api  string
		lib  probes.Library
		file string   // the library file the probes attach to
		args []string // fakegpu-vendor's flags
		env  []string
	}{
		{"cudaLaunchKernel", probes.LibCUDART, filepath.Join(nvidia, "libcudart.so.11.0"), nil, []string{"LD_LIBRARY_PATH=" + nvidia}},
		{"cudaMemcpyAsync", probes.LibCUDART, filepath.Join(nvidia, "libcudart.so.11.0"), nil, []string{"LD_LIBRARY_PATH=" + nvidia}},
		{"cudaStreamSynchronize", probes.LibCUDART, filepath.Join(nvidia, "libcudart.so.11.0"), nil, []string{"LD_LIBRARY_PATH=" + nvidia}},
		{"cuLaunchKernel", probes.LibCUDA, filepath.Join(nvidia, "libcuda.so.1"), nil, []string{"LD_LIBRARY_PATH=" + nvidia}},
		{"cuMemcpyHtoD_v2", probes.LibCUDA, filepath.Join(nvidia, "libcuda.so.1"), nil, []string{"LD_LIBRARY_PATH=" + nvidia}},
		{"cuStreamSynchronize", probes.LibCUDA, filepath.Join(nvidia, "libcuda.so.1"), nil, []string{"LD_LIBRARY_PATH=" + nvidia}},
		{"hipLaunchKernel", probes.LibHIP, "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5", []string{"--hip", "libamdhip64.so.5"}, nil},
		{"hipModuleLaunchKernel", probes.LibHIP, "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5", []string{"--hip", "libamdhip64.so.5"}, nil},
		{"hipStreamSynchronize", probes.LibHIP, "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5", []string{"--hip", "libamdhip64.so.5"}, nil},
	} {
		b.Run(c.api, func(b *testing.B) {
			file, err := filepath.EvalSymlinks(c.file)
			if err != nil {
				b.Fatalf("%s: %v (make vendor-libs)", c.api, err)
			}
			progNS, spread := map[string]float64{}, map[string]float64{}
			measure := func(mode string) float64 {
				if mode != "none" {
					p, err := probes.Load(probes.Options{TraceAllCUDA: true, Baseline: mode == "empty"})
					if err != nil {
						b.Fatal(err)
					}
					defer p.Close()
					for _, a := range probes.APIs {
						if err := p.SetNotableThreshold(a.ID, probes.NeverNotable); err != nil {
							b.Fatal(err)
						}
					}
					if _, _, err := p.AttachLibrary(file, c.lib); err != nil {
						b.Fatal(err)
					}
					go p.Run(context.Background(), discard{}, nil)
					defer func() {
						entry, ret, err := p.RunStats(c.api)
						if err != nil {
							b.Fatal(err)
						}
						progNS[mode] = float64(entry.Runtime)/float64(max(entry.Runs, 1)) + float64(ret.Runtime)/float64(max(ret.Runs, 1))
					}()
				}
				best, worst := math.Inf(1), 0.0
				for rep := 0; rep < 5; rep++ {
					ns := vendorCallNS(b, paths, c.api, calls, c.args, c.env)
					best, worst = math.Min(best, ns), math.Max(worst, ns)
				}
				spread[mode] = worst - best
				return best
			}
			none, empty, fathom := measure("none"), measure("empty"), measure("fathom")
			emptyCost := empty - none
			b.ReportMetric(none, "ns/call-unprobed")
			b.ReportMetric(fathom-none, "ns/call-fathom-wall")
			line := fmt.Sprintf("vendor probe overhead %-22s %-26s unprobed %6.0f ns; empty programs +%5.0f ns (wall); fathom +%5.0f ns (wall), its programs %4.0f ns vs %3.0f ns empty",
				c.api, filepath.Base(file), none, emptyCost, fathom-none, progNS["fathom"], progNS["empty"])
			// The empty pair's cost is a difference of two wall-clock means; where the
			// call's own time varies more than that from run to run (HIP's calls without
			// a device take 20-40 µs), it is noise, and so would be a ratio over it.
			if emptyCost <= spread["none"]+spread["empty"] {
				fmt.Printf("%s: no ratio (the call's own time varies by %.0f ns between runs)\n", line, max(spread["none"], spread["empty"]))
				return
			}
			ratio := (emptyCost + progNS["fathom"] - progNS["empty"]) / emptyCost
			b.ReportMetric(emptyCost, "ns/call-empty")
			b.ReportMetric(ratio, "x-empty")
			fmt.Printf("%s: %.2fx empty\n", line, ratio)
		})
	}
}

// vendorCallNS runs fakegpu-vendor making calls calls to api and returns the mean time
// one took, as the process timed it.
func vendorCallNS(b *testing.B, paths fakegpu.Paths, api string, calls int, args, env []string) float64 {
	b.Helper()
	cmd := exec.Command(filepath.Join(paths.Out, "bin", "fakegpu-vendor"), append(append([]string{}, args...), "--plan", fmt.Sprintf("%s=%d", api, calls))...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("fakegpu-vendor %s: %v\n%s", api, err, out)
	}
	var report struct {
		APIs map[string]struct {
			Calls int64
			NS    int64
		} `json:"apis"`
	}
	if err := json.Unmarshal(out, &report); err != nil {
		b.Fatalf("fakegpu-vendor's report %q: %v", out, err)
	}
	got := report.APIs[api]
	if got.Calls != int64(calls) {
		b.Fatalf("%s: %d calls made, want %d", api, got.Calls, calls)
	}
	return float64(got.NS) / float64(calls)
}
