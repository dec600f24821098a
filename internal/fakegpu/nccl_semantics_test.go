package fakegpu

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

type semanticsPhase struct {
	CallMS float64 `json:"call_ms"`
	WaitMS float64 `json:"wait_ms"`
	OK     bool    `json:"ok"`
}

type semanticsAbort struct {
	CallRC     *int    `json:"call_rc"`
	SyncRC     int     `json:"sync_rc"`
	AsyncError int     `json:"async_error"`
	WaitMS     float64 `json:"wait_ms"`
}

type semanticsRank struct {
	Rank   int                       `json:"rank"`
	Phases map[string]semanticsPhase `json:"phases"`
	Abort  semanticsAbort            `json:"abort"`
}

// runSemantics builds testdata/nccl_semantics.c against the fake libraries and runs it.
func runSemantics(t *testing.T, mode string) map[int]semanticsRank {
	t.Helper()
	p := Build(t)
	bin := filepath.Join(t.TempDir(), "nccl-semantics")
	cc := exec.Command("cc", "-O2", "-Wall", "-Werror", "-o", bin, filepath.Join("testdata", "nccl_semantics.c"),
		"-I", filepath.Join(RepoRoot(), "internal", "fakegpu", "c"), "-L", p.LibDir,
		"-l:libcudart.so.12", "-l:libnccl.so.2", "-Wl,-rpath,"+p.LibDir)
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	cmd := exec.Command(bin)
	// A peer that never comes must fail the test in seconds, not in the default 2 minutes.
	cmd.Env = append(os.Environ(), "FAKENCCL_MODE="+mode, "FAKENCCL_TIMEOUT_MS=20000")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nccl-semantics (%s): %v\n%s%s", mode, err, out, stderr.Bytes())
	}
	ranks := map[int]semanticsRank{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r semanticsRank
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		ranks[r.Rank] = r
	}
	if len(ranks) != 3 {
		t.Fatalf("%d rank reports:\n%s", len(ranks), out)
	}
	return ranks
}

// Rank 2 comes 50 ms late to every phase. Asynchronous, its peers' NCCL calls return at
// once and they wait for it in whichever synchronizing call follows (an event sync, a
// device sync, a blocking device-to-host copy of the result, a stream sync after a
// group), while rank 2 waits for nothing but its own work; a kernel queued behind the
// collective starts only when the collective completes, so it adds its 20 ms to the
// peers' wait. Blocking, the peers wait inside the NCCL calls and the syncs wait only
// for kernels. Every result is right in both. When rank 2 aborts instead of joining an
// all-reduce, the peers' stream sync returns (async: the all-reduce was accepted; the
// error comes from ncclCommGetAsyncError) and nobody waits for the 20 s timeout.
//
// Bounds: a wait for the late rank is at least 30 ms of its 50 (it sleeps the whole 50,
// less whatever its peers spent getting to the same phase) and a call that does not wait
// stays under 15 ms, half that, even when preempted on a shared CPU: three ranks and
// the test on two cores, a call that waited for nothing took 6.2 ms in CI (2026-11-29),
// over the 5 ms this bound was.
func TestNCCLWaitsWhereCUDAShowsThem(t *testing.T) {
	const late, delay, kernel, noWait = 2, 50.0, 20.0, 15.0
	for _, mode := range []string{NCCLAsync, NCCLBlocking} {
		t.Run(mode, func(t *testing.T) {
			ranks := runSemantics(t, mode)
			for rank, r := range ranks {
				if len(r.Phases) != 5 {
					t.Errorf("rank %d: phases %v", rank, r.Phases)
				}
				for name, ph := range r.Phases {
					t.Logf("rank %d %s: %.3f ms in NCCL calls, %.3f ms in the sync", rank, name, ph.CallMS, ph.WaitMS)
					if !ph.OK {
						t.Errorf("rank %d %s: wrong results", rank, name)
					}
					ownWork := 0.0
					if name == "kernel_after" {
						ownWork = kernel
					}
					switch {
					case rank == late:
						if ph.CallMS > noWait || ph.WaitMS < ownWork*0.9 || ph.WaitMS > ownWork+noWait {
							t.Errorf("rank %d (late) %s: %.3f ms in calls, %.3f ms in the sync; want no wait but for its own %.0f ms of work",
								rank, name, ph.CallMS, ph.WaitMS, ownWork)
						}
					case mode == NCCLAsync:
						if ph.CallMS > noWait || ph.WaitMS < ownWork+0.6*delay {
							t.Errorf("rank %d %s: %.3f ms in calls, %.3f ms in the sync; want the wait for rank %d in the sync",
								rank, name, ph.CallMS, ph.WaitMS, late)
						}
					default:
						if ph.CallMS < 0.6*delay || ph.WaitMS > ownWork+noWait {
							t.Errorf("rank %d %s: %.3f ms in calls, %.3f ms in the sync; want the wait for rank %d in the calls",
								rank, name, ph.CallMS, ph.WaitMS, late)
						}
					}
				}
				if rank == late {
					continue
				}
				a := r.Abort
				wantCall := 0 // accepted: the abort shows later
				if mode == NCCLBlocking {
					wantCall = 6 // ncclRemoteError from the call that waited
				}
				if a.CallRC == nil || *a.CallRC != wantCall || a.SyncRC != 0 || a.AsyncError != 6 || a.WaitMS > 10000 {
					t.Errorf("rank %d after rank %d aborted: %+v (call rc %v); want call rc %d, sync rc 0, async error 6 (ncclRemoteError), no timeout",
						rank, late, a, a.CallRC, wantCall)
				}
			}
		})
	}
}
