package gpuebpfreceiver

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fathom-gpu/fathom/internal/probes"
)

// syntheticPIDBase numbers made-up rank processes: pid = base + rank, so the rank can
// be read back from the pid (syntheticProcess).
const syntheticPIDBase = 4_200_000

// syntheticPreemptor is the name of what takes the slow rank's CPU in synthetic mode.
var syntheticPreemptor = commOf("data_loader")

// syntheticSource simulates a data-parallel training step loop per rank: kernel
// launches, host-to-device copies, a stream synchronization per step (where a slow
// rank shows), and the dispatcher thread's scheduling. Nothing touches the kernel.
type syntheticSource struct {
	cfg    *Config
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newSyntheticSource(cfg *Config) *syntheticSource { return &syntheticSource{cfg: cfg} }

func (s *syntheticSource) start(ctx context.Context, h probes.Handler) error {
	ctx, s.cancel = context.WithCancel(ctx)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.run(ctx, h)
	}()
	return nil
}

func (s *syntheticSource) run(ctx context.Context, h probes.Handler) {
	const tick = 10 * time.Millisecond
	perTick := max(1, s.cfg.Synthetic.CallsPerSecond*int(tick/time.Millisecond)/1000)
	rng := rand.New(rand.NewPCG(1, 2))
	t := time.NewTicker(tick)
	defer t.Stop()
	var ev probes.CUDACall
	var sched probes.SchedSwitchIn
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := uint64(monotonicNow())
		for rank := 0; rank < s.cfg.Synthetic.Ranks; rank++ {
			pid := uint32(syntheticPIDBase + rank)
			slow := rank == s.cfg.Synthetic.SlowRank
			for i := 0; i < perTick; i++ {
				ev = probes.CUDACall{}
				ev.Hdr.Pid, ev.Hdr.Tid, ev.Hdr.TsNs = pid, pid, now
				ev.MemcpyKind = uint8(probes.MemcpyNone)
				switch r := rng.IntN(100); {
				case r < 80: // kernel launch: a few microseconds of CPU
					ev.Api = apiID("cudaLaunchKernel")
					ev.DurationNs = uint64(3000 + rng.IntN(4000))
					ev.Grid, ev.Block = [3]uint32{1024, 1, 1}, [3]uint32{256, 1, 1}
				case r < 95: // 4 MiB host-to-device copy at ~10 GB/s
					ev.Api = apiID("cudaMemcpyAsync")
					ev.Bytes = 4 << 20
					ev.MemcpyKind = uint8(probes.MemcpyHostToDevice)
					ev.DurationNs = uint64(380_000 + rng.IntN(60_000))
				default: // end of step: wait for the GPU
					ev.Api = apiID("cudaStreamSynchronize")
					ev.DurationNs = uint64(2_000_000 + rng.IntN(1_000_000))
					if slow {
						ev.DurationNs = uint64(float64(ev.DurationNs) * s.cfg.Synthetic.SlowFactor)
					}
				}
				h.CUDACall(&ev)
			}
			sched = probes.SchedSwitchIn{}
			sched.Hdr.Pid, sched.Hdr.Tid, sched.Hdr.TsNs = pid, pid, now
			sched.OffCpuNs = uint64(50_000 + rng.IntN(200_000))
			if slow {
				sched.Preempted = 1 // the slow rank's dispatcher loses its CPU
				sched.WaitKind = uint8(probes.WaitPreempted)
				sched.RunqNs = uint64(500_000 + rng.IntN(2_000_000))
				// to one of four made-up data-loading processes beside it
				sched.PreemptorPid = syntheticPIDBase + 1000 + uint32(rng.IntN(4))
				sched.PreemptorComm = syntheticPreemptor
			}
			h.Sched(&sched)
		}
	}
}

func (s *syntheticSource) quiesce() {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
}

func (s *syntheticSource) stop() error {
	s.quiesce()
	return nil
}

func (s *syntheticSource) hostTotals() (probes.HostAggregates, map[string]uint64, bool) {
	return probes.HostAggregates{}, nil, false
}

func (s *syntheticSource) probeCount() int { return 0 }

// The simulation has no kernel: its calls come as records marked uncounted.
func (s *syntheticSource) handOff([]probes.ProcessCallStats) error { return nil }

func (s *syntheticSource) callStats(dst []probes.ProcessCallStats) ([]probes.ProcessCallStats, error) {
	return dst[:0], nil
}

func (s *syntheticSource) releaseCallStats(*probes.ProcessCallStats) error { return nil }

func (s *syntheticSource) forgetPages(uint32) error { return nil }

func (s *syntheticSource) selectedDevices() map[uint32]int32 { return nil }

func (s *syntheticSource) setNotableThreshold(uint32, uint64) error { return nil }
