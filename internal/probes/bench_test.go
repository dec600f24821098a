//go:build linux

package probes_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/privtest"
	"github.com/fathom-gpu/fathom/internal/probes"
)

// BenchmarkProbeOverhead reports, per probed API, what Fathom's entry and return
// programs add to each call, next to what empty programs on the same attach points
// add: the workload times every call itself (CLOCK_MONOTONIC around the call), so the
// overhead is the per-call mean with probes minus the mean without. Goal: Fathom's
// cost ≤ 1.2x the empty programs' cost.
func BenchmarkProbeOverhead(b *testing.B) {
	privtest.Require(b)
	paths := fakegpu.Build(b)
	const calls = 20000
	cases := []struct {
		api  string
		opts fakegpu.Options
	}{
		{"cudaLaunchKernel", fakegpu.Options{Launches: calls}},
		{"cudaMemcpy", fakegpu.Options{H2H: calls, H2HBytes: 64}},
		{"cudaMemcpyAsync", fakegpu.Options{H2DAsync: calls, H2DBytes: 64}},
		{"cuLaunchKernel", fakegpu.Options{DriverLaunches: calls}},
		{"cuMemcpyHtoD_v2", fakegpu.Options{DriverH2D: calls, H2DBytes: 64}},
	}
	for _, c := range cases {
		b.Run(c.api, func(b *testing.B) {
			c.opts.Steps = 1
			measure := func(mode string) float64 {
				best := math.Inf(1)
				for rep := 0; rep < 3; rep++ {
					var p *probes.Probes
					if mode != "none" {
						var err error
						if p, err = probes.Load(probes.Options{TraceAllCUDA: true, Baseline: mode == "empty"}); err != nil {
							b.Fatal(err)
						}
						for lib, name := range map[probes.Library]string{probes.LibCUDART: "libcudart.so.12", probes.LibCUDA: "libcuda.so.1"} {
							if _, _, err := p.AttachLibrary(filepath.Join(paths.LibDir, name), lib); err != nil {
								b.Fatal(err)
							}
						}
					}
					ctx, cancel := context.WithCancel(context.Background())
					if p != nil {
						go p.Run(ctx, discard{}, nil)
					}
					r := fakegpu.Run(b, paths, c.opts)
					cancel()
					if p != nil {
						time.Sleep(20 * time.Millisecond)
						p.Close()
					}
					if r.Calls[c.api] != calls {
						b.Fatalf("%s: workload made %d calls, want %d", c.api, r.Calls[c.api], calls)
					}
					best = math.Min(best, float64(r.TotalNS[c.api])/float64(calls))
				}
				return best
			}
			none, empty, fathom := measure("none"), measure("empty"), measure("fathom")
			b.ReportMetric(empty-none, "ns/call-empty")
			b.ReportMetric(fathom-none, "ns/call-fathom")
			b.ReportMetric((fathom-none)/(empty-none), "x-empty")
			fmt.Printf("probe overhead %-18s no probes %7.0f ns/call, empty programs +%5.0f ns, fathom +%5.0f ns (%.2fx empty)\n",
				c.api, none, empty-none, fathom-none, (fathom-none)/(empty-none))
		})
	}
}

type discard struct{}

func (discard) CUDACall(*probes.CUDACall)                      {}
func (discard) Sched(*probes.SchedSwitchIn)                    {}
func (discard) Process(probes.EventKind, *probes.ProcessEvent) {}
func (discard) BlockIO(*probes.BlockIO)                        {}
func (discard) Identity(*probes.ProcessIdentity)               {}
func (discard) TCPRetransmit(*probes.TCPRetransmit)            {}
