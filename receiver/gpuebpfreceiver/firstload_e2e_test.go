//go:build linux

package gpuebpfreceiver_test

import (
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// heldLines returns the collector's "attached on first use" lines for pid, for the
// test's log: the collector samples its log (10 lines of a message per 10 s, then one in
// 100), so a line's absence proves nothing.
func heldLines(output string, pid int) []string {
	var out []string
	for _, l := range strings.Split(output, "\n") {
		if strings.Contains(l, "attached on first use") && strings.Contains(l, fmt.Sprintf(`"pid": %d,`, pid)) {
			out = append(out, l)
		}
	}
	return out
}

// A process that lives about 10 ms and calls at once, the first on the node to load its
// libraries (files no probe is on): with the hold, the kernel stops it as the loader
// maps each file and the collector continues it once the probes are on, so every launch
// is counted, in every trial. With the hold off, the same process is over, or nearly,
// before the attach: the test's own check that it exercises the gap.
func TestAHeldFirstLoadCountsATenMillisecondProcessExactly(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	const trials, launches = 5, 300
	for _, hold := range []time.Duration{50 * time.Millisecond, 0} {
		t.Run(fmt.Sprintf("first_load_hold=%s", hold), func(t *testing.T) {
			sink, col := startCollectorWith(t, fmt.Sprintf("discovery:\n  rescan_interval: 1h\n  first_load_hold: %s", hold))
			exact := 0
			for i := range trials {
				lib := privateCUDA(t, paths)
				w := fakegpu.Start(t, paths, fakegpu.Options{Steps: 1, Launches: launches, Env: []string{"LD_LIBRARY_PATH=" + lib}})
				res, err := w.Wait(time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if res.Calls["cudaLaunchKernel"] != launches {
					t.Fatalf("the workload made %d launches, want %d", res.Calls["cudaLaunchKernel"], launches)
				}
				var got int64
				if hold > 0 {
					got = waitFor(t, sink, w.Pid, "every launch", func(v processView) bool {
						return v.series[cudartLaunches].value == launches
					}).series[cudartLaunches].value
				} else {
					time.Sleep(time.Second) // two collection intervals past its exit
					got = view(sink, w.Pid).series[cudartLaunches].value
				}
				lines := heldLines(col.Output(), w.Pid)
				t.Logf("trial %d: pid %d ran %s after its gate (%s in all), %d of %d launches counted; %s",
					i, w.Pid, time.Duration(res.EndNS-res.StartNS).Round(time.Microsecond), time.Duration(res.WallNS).Round(time.Microsecond),
					got, launches, strings.Join(lines, " | "))
				if got == launches {
					exact++
				}
			}
			t.Logf("counted exactly in %d of %d trials", exact, trials)
			switch {
			case hold > 0 && exact != trials:
				t.Errorf("held: counted exactly in %d of %d trials, want all", exact, trials)
			case hold == 0 && exact == trials:
				t.Errorf("without the hold every trial was counted exactly: the test does not exercise the gap")
			}
			if code := col.Terminate(t, 30*time.Second); code != 0 {
				t.Fatalf("collector exit code %d", code)
			}
		})
	}
}

// A job whose launcher makes the NCCL unique id and whose ranks initialise their
// communicator right after the loader maps libnccl, each rank on library files no probe
// is on:
// held at its first load, every rank gets the one communicator (the hash of the unique
// id the job reports) and its exact all-reduce count. With the hold off, the ranks'
// communicator setup goes unseen: the test's own check that it exercises the gap.
func TestAJobThatInitialisesAtOnceGetsItsCommunicator(t *testing.T) {
	privtest.Require(t)
	paths := fakegpu.Build(t)
	const ranks, steps = 4, 20
	for _, hold := range []time.Duration{50 * time.Millisecond, 0} {
		t.Run(fmt.Sprintf("first_load_hold=%s", hold), func(t *testing.T) {
			// Each rank, and the launcher, loads copies of its own: every process is
			// the first to load its files, as when ranks start in containers of their own.
			base := t.TempDir()
			libs := func(dir string) string {
				lib := privateLibs(t, paths.Cudart, paths.Cuda, paths.NCCL, paths.IBVerbs)
				if err := os.Rename(lib, filepath.Join(base, dir)); err != nil {
					t.Fatal(err)
				}
				return filepath.Join(base, dir)
			}
			launcher := libs("launcher")
			for r := range ranks {
				libs(strconv.Itoa(r))
			}
			sink, col := startCollectorWith(t, fmt.Sprintf("discovery:\n  rescan_interval: 1h\n  first_load_hold: %s", hold))
			run := fakegpu.StartDDP(t, paths, fakegpu.DDPOptions{Ranks: ranks, Steps: steps, KernelTime: 10 * time.Microsecond,
				Threads: fakegpu.ThreadsPyTorch, Env: []string{"LD_LIBRARY_PATH=" + launcher}, RankEnv: "LD_LIBRARY_PATH=" + base + "/%r"})
			reports, err := run.Wait(time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := hex.DecodeString(reports[0].UniqueID)
			h := fnv.New64a()
			h.Write(raw)
			comm := fmt.Sprintf("%016x", h.Sum64())
			if hold == 0 {
				time.Sleep(time.Second) // two collection intervals past the job's end
			}
			exact := 0
			for _, r := range reports {
				want := r.Calls["ncclAllReduce"]
				if want < steps {
					t.Fatalf("rank %d made %d all-reduces in %d steps", r.Rank, want, steps)
				}
				series := seriesKey(semconv.MetricNCCLCalls, attrs(semconv.NCCLCommID, comm, semconv.NCCLOp, "all_reduce",
					semconv.NCCLRank, strconv.Itoa(r.Rank), semconv.NCCLNRanks, strconv.Itoa(ranks)))
				var v processView
				if hold > 0 {
					v = waitFor(t, sink, r.Pid, "the all-reduces on the job's communicator", func(v processView) bool { return v.series[series].value == want })
				} else {
					v = view(sink, r.Pid)
				}
				got := v.series[series].value
				var keys []string
				for k, p := range v.series {
					if strings.HasPrefix(k, semconv.MetricNCCLCalls) {
						keys = append(keys, fmt.Sprintf("%s=%d", k, p.value))
					}
				}
				t.Logf("rank %d (pid %d): %d of %d all-reduces on communicator %s; its NCCL series: %q", r.Rank, r.Pid, got, want, comm, keys)
				if got == want {
					exact++
				}
			}
			switch {
			case hold > 0 && exact != ranks:
				t.Errorf("held: %d of %d ranks have every all-reduce on the job's communicator, want all", exact, ranks)
			case hold == 0 && exact == ranks:
				t.Errorf("without the hold every rank had its communicator: the test does not exercise the gap")
			}
			for _, l := range strings.Split(col.Output(), "\n") {
				if strings.Contains(l, "attached on first use") {
					_, fields, _ := strings.Cut(l, `"pid": `)
					t.Logf("attached on first use: pid %s", fields)
				}
			}
			if code := col.Terminate(t, 30*time.Second); code != 0 {
				t.Fatalf("collector exit code %d", code)
			}
		})
	}
}
