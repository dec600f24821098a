package fakegpu

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Slowness makes one rank of fakegpu-ddp slow from a given step.
type Slowness struct {
	Rank     int
	Delay    time.Duration // --slow-us: to the microsecond (5% of a 2 ms step is 100 µs)
	FromStep int
	// Mode is "compute" (Delay more host CPU work per step; the default), "stall" (sleep
	// Delay off-CPU before each all-reduce, like a data-loader wait), "contention" (Delay
	// of host CPU work while Threads busy threads share its CPU) or "kernel" (one extra
	// kernel of Delay: a slow device, which delays every rank's sync alike).
	Mode    string
	Threads int
	// WhileFile, when set, makes the rank slow only in steps that start while this file
	// exists: a test or benchmark turns the slowdown on and off mid-run, and knows when.
	// The slow rank writes when each slowdown's first slowed step began into
	// WhileFile.began, and when its last ended into WhileFile.ended (SlowdownBegan and
	// SlowdownEnded read them).
	WhileFile string
}

// NCCL modes of the fake libnccl (FAKENCCL_MODE).
const (
	// NCCLAsync is the default and what NCCL does: a collective is enqueued on the stream
	// and the call returns at once; peers of a late rank wait in their next synchronizing
	// CUDA call.
	NCCLAsync = "async"
	// NCCLBlocking makes collectives return only when every rank has arrived, so peers
	// wait inside the NCCL call. Not what NCCL does: for tests about that wait.
	NCCLBlocking = "blocking"
)

// DDPOptions mirrors the flags of fakegpu-ddp; a zero field keeps the program's default.
type DDPOptions struct {
	Ranks            int // --spawn (required)
	Steps            int // default 200
	BucketBytes      int64
	Buckets          int
	ComputeKernels   int
	OptimizerKernels int
	KernelTime       time.Duration // default 50us
	HostCompute      time.Duration // host CPU work per step on every rank
	// HostComputeSleeps makes host work (HostCompute and a compute Slowness) sleep
	// instead of spin, as if each rank had cores of its own: on a machine with fewer
	// cores than ranks, spinning ranks share them and a rank's extra work is diluted.
	HostComputeSleeps bool
	Slow              *Slowness
	RingBytes         int64 // per-step send/recv ring exchange
	IB                bool  // a verbs async-event thread per rank
	// NoNCCL makes the ranks replicas that never call NCCL (--no-nccl): each step is
	// host work, kernels and a sync, and no rank waits for another.
	NoNCCL bool
	// NCCLMode is NCCLAsync (the default when empty) or NCCLBlocking.
	NCCLMode string
	// Gate makes StartDDP return once every rank waits at its gate, before any CUDA or
	// NCCL call; Release starts them all.
	Gate bool
	// GateAfterInit puts the gate after each rank has made its communicator (and asked
	// NCCL its rank and size), before the first step: a job already running when its
	// collector starts.
	GateAfterInit bool
	Env           []string
	// RankEnv is NAME=VALUE set in each rank's environment by the launcher, %r in VALUE
	// replaced by the rank (as a wrapper script sets a per-rank NCCL_IB_HCA).
	RankEnv string
	// HIP runs fakegpu-ddp-hip: the same job as a HIP program, over the fake
	// libamdhip64.so.5 and librccl.so.1.
	HIP bool
	// Threads is ThreadsSingle (the default when empty) or ThreadsPyTorch.
	Threads string
}

// Threading of a DDP rank's calls.
const (
	// ThreadsSingle makes every call from one thread.
	ThreadsSingle = "single"
	// ThreadsPyTorch makes them from PyTorch DDP's threads: forward and the loss sync
	// on the main thread (named python3), backward kernels and the bucket all-reduces
	// on an autograd thread, a watchdog thread polling the collectives' events.
	ThreadsPyTorch = "pytorch"
)

// Args returns the launcher's command-line flags (gate flags excluded).
func (o DDPOptions) Args() []string {
	args := []string{"--spawn", strconv.Itoa(o.Ranks)}
	num := func(flag string, v int64) {
		if v != 0 {
			args = append(args, "--"+flag, strconv.FormatInt(v, 10))
		}
	}
	num("steps", int64(o.Steps))
	if o.RankEnv != "" {
		args = append(args, "--rank-env", o.RankEnv)
	}
	num("bucket-bytes", o.BucketBytes)
	num("buckets", int64(o.Buckets))
	num("compute-kernels", int64(o.ComputeKernels))
	num("optimizer-kernels", int64(o.OptimizerKernels))
	if o.KernelTime != 0 {
		args = append(args, "--kernel-us", strconv.FormatFloat(float64(o.KernelTime)/float64(time.Microsecond), 'f', -1, 64))
	}
	if o.HostCompute != 0 {
		args = append(args, "--host-compute-us", strconv.FormatFloat(float64(o.HostCompute)/float64(time.Microsecond), 'f', -1, 64))
	}
	if s := o.Slow; s != nil {
		args = append(args, "--slow-rank", strconv.Itoa(s.Rank))
		args = append(args, "--slow-us", strconv.FormatFloat(float64(s.Delay)/float64(time.Microsecond), 'f', -1, 64))
		num("slow-from-step", int64(s.FromStep))
		if s.Mode != "" {
			args = append(args, "--slow-mode", s.Mode)
		}
		num("slow-threads", int64(s.Threads))
		if s.WhileFile != "" {
			args = append(args, "--slow-while-file", s.WhileFile)
		}
	}
	if o.HostComputeSleeps {
		args = append(args, "--host-compute-sleep")
	}
	num("ring-bytes", o.RingBytes)
	if o.NoNCCL {
		args = append(args, "--no-nccl")
	}
	if o.IB {
		args = append(args, "--ib")
	}
	if o.Threads != "" {
		args = append(args, "--threads", o.Threads)
	}
	return args
}

// DDPBytes counts one rank's collective traffic.
type DDPBytes struct {
	AllReduce int64 `json:"allreduce"`
	Send      int64 `json:"send"`
	Recv      int64 `json:"recv"`
}

// DDPRank is one rank's JSON report. Per-step times are CLOCK_MONOTONIC nanoseconds:
// AllReduceEntryNS/ExitNS bracket the step's ncclAllReduce calls; StreamSyncNS is the
// time the step spent in cudaStreamSynchronize (where an asynchronous all-reduce's wait
// for a late peer shows).
type DDPRank struct {
	Rank      int `json:"rank"`
	LocalRank int `json:"local_rank"`
	WorldSize int `json:"world_size"`
	Pid       int `json:"pid"`
	Tid       int `json:"tid"`
	// AutogradTid and WatchdogTid are the threads of ThreadsPyTorch (0 otherwise).
	AutogradTid      int              `json:"autograd_tid"`
	WatchdogTid      int              `json:"watchdog_tid"`
	UniqueID         string           `json:"unique_id"` // hex of the 128-byte ncclUniqueId
	Slow             bool             `json:"slow"`
	Steps            int              `json:"steps"`
	BucketBytes      int64            `json:"bucket_bytes"`
	Buckets          int              `json:"buckets"`
	StartNS          int64            `json:"start_ns"`
	EndNS            int64            `json:"end_ns"`
	Calls            map[string]int64 `json:"calls"`
	TotalNS          map[string]int64 `json:"total_ns"`
	MaxNS            map[string]int64 `json:"max_ns"`
	Bytes            DDPBytes         `json:"bytes"`
	VerifyErrors     int64            `json:"verify_errors"` // wrong all-reduce or ring results
	IBEvents         int64            `json:"ib_events"`
	IBLastEvent      int              `json:"ib_last_event"` // enum ibv_event_type, -1 if none
	NCCLMode         string           `json:"nccl_mode"`
	StepStartNS      []int64          `json:"step_start_ns"`
	AllReduceEntryNS []int64          `json:"allreduce_entry_ns"`
	AllReduceExitNS  []int64          `json:"allreduce_exit_ns"`
	StepEndNS        []int64          `json:"step_end_ns"`
	StreamSyncNS     []int64          `json:"stream_sync_ns"`
}

// AllReduceTimes returns the per-step time spent in ncclAllReduce.
func (r DDPRank) AllReduceTimes() []time.Duration {
	out := make([]time.Duration, len(r.AllReduceEntryNS))
	for i := range out {
		out[i] = time.Duration(r.AllReduceExitNS[i] - r.AllReduceEntryNS[i])
	}
	return out
}

// StreamSyncTimes returns the per-step time spent in cudaStreamSynchronize.
func (r DDPRank) StreamSyncTimes() []time.Duration {
	out := make([]time.Duration, len(r.StreamSyncNS))
	for i, ns := range r.StreamSyncNS {
		out[i] = time.Duration(ns)
	}
	return out
}

// RankProcess identifies a rank process that reached its gate.
type RankProcess struct{ Pid, Tid int }

// DDPRun is a started fakegpu-ddp launcher and its ranks.
type DDPRun struct {
	Cmd *exec.Cmd
	// Ranks holds each rank's pid and dispatcher tid, indexed by rank (gated runs only).
	Ranks []RankProcess

	gate           gate
	stdout, stderr bytes.Buffer
	done           chan struct{}
	waitErr        error
}

// StartDDP launches fakegpu-ddp --spawn o.Ranks. With o.Gate it returns once every rank
// waits at its gate. Everything is killed at test cleanup if still running.
func StartDDP(t testing.TB, p Paths, o DDPOptions) *DDPRun {
	t.Helper()
	if o.Ranks < 1 {
		t.Fatal("DDPOptions.Ranks must be at least 1")
	}
	gateDir := ""
	if o.Gate {
		gateDir = t.TempDir()
	}
	run, err := LaunchDDP(p, o, gateDir)
	if run != nil {
		t.Cleanup(func() {
			run.kill()
			<-run.done
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// LaunchDDP is StartDDP for programs other than tests (the demo): the gate's files go in
// gateDir, and the caller kills the run (Kill) when done with it.
func LaunchDDP(p Paths, o DDPOptions, gateDir string) (*DDPRun, error) {
	if o.Ranks < 1 {
		return nil, errors.New("DDPOptions.Ranks must be at least 1")
	}
	args := o.Args()
	run := &DDPRun{done: make(chan struct{})}
	if o.Gate {
		run.gate = gate{waitFile: filepath.Join(gateDir, "go"), ready: filepath.Join(gateDir, "ready")}
		_ = os.Remove(run.gate.waitFile)
		args = append(args, run.gate.args()...)
		if o.GateAfterInit {
			args = append(args, "--gate-after-init")
		}
	}
	bin := p.DDP
	if o.HIP {
		bin = p.DDPHIP
	}
	run.Cmd = exec.Command(bin, args...)
	run.Cmd.Env = append(os.Environ(), o.Env...)
	if o.NCCLMode != "" {
		run.Cmd.Env = append(run.Cmd.Env, "FAKENCCL_MODE="+o.NCCLMode)
	}
	run.Cmd.Stdout = &run.stdout
	run.Cmd.Stderr = &run.stderr
	run.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := run.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() {
		run.waitErr = run.Cmd.Wait()
		close(run.done)
	}()
	if o.Gate {
		deadline := time.Now().Add(gateTimeout)
		for r := 0; r < o.Ranks; r++ {
			ready := run.gate.ready + "." + strconv.Itoa(r)
			data, err := waitForFile(ready, run.done, time.Until(deadline))
			if err != nil {
				run.kill()
				<-run.done
				return run, fmt.Errorf("rank %d never reached its gate: %w\nstderr:\n%s", r, err, run.stderr.String())
			}
			_ = os.Remove(ready)
			var rp RankProcess
			if err := json.Unmarshal(data, &rp); err != nil {
				run.kill()
				return run, fmt.Errorf("bad ready file of rank %d: %q", r, data)
			}
			run.Ranks = append(run.Ranks, rp)
		}
	}
	return run, nil
}

// Kill stops the launcher and its ranks and waits until they are gone. The ranks
// outlive the launcher as zombies until the reaper they are reparented to (init, or
// a subreaper) collects them, so for each rank it knows (gated runs) it waits, at most
// 5 s in all, until the rank's /proc entry is gone.
func (d *DDPRun) Kill() {
	d.kill()
	<-d.done
	deadline := time.Now().Add(5 * time.Second)
	for _, r := range d.Ranks {
		for time.Now().Before(deadline) {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", r.Pid)); errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// kill stops the launcher and its ranks. The launcher leads its own process group, which
// its rank processes inherit, so one signal reaches them all and no rank is orphaned.
func (d *DDPRun) kill() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = syscall.Kill(-d.Cmd.Process.Pid, syscall.SIGKILL)
}

// Release opens the gate of every rank of a gated run.
func (d *DDPRun) Release() error { return d.gate.open() }

// Wait waits for the launcher, at most timeout, and returns the ranks' reports in rank
// order.
func (d *DDPRun) Wait(timeout time.Duration) ([]DDPRank, error) {
	select {
	case <-d.done:
	case <-time.After(timeout):
		d.kill()
		<-d.done
		return nil, fmt.Errorf("fakegpu-ddp still running after %s, killed; stderr:\n%s", timeout, d.stderr.String())
	}
	if d.waitErr != nil {
		return nil, fmt.Errorf("fakegpu-ddp %v: %w; stderr:\n%s", d.Cmd.Args, d.waitErr, d.stderr.String())
	}
	var ranks []DDPRank
	sc := bufio.NewScanner(bytes.NewReader(d.stdout.Bytes()))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var r DDPRank
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("parsing rank report %.200q: %w", sc.Bytes(), err)
		}
		ranks = append(ranks, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(ranks, func(a, b DDPRank) int { return a.Rank - b.Rank })
	return ranks, nil
}

// Stderr returns what the launcher and ranks wrote to stderr; complete once they exited.
func (d *DDPRun) Stderr() string {
	<-d.done
	return d.stderr.String()
}

// RunDDP runs fakegpu-ddp to completion and returns one report per rank, in rank order,
// failing the test unless every rank reported.
func RunDDP(t testing.TB, p Paths, o DDPOptions) []DDPRank {
	t.Helper()
	run := StartDDP(t, p, o)
	if o.Gate {
		if err := run.Release(); err != nil {
			t.Fatal(err)
		}
	}
	ranks, err := run.Wait(5 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(ranks) != o.Ranks {
		t.Fatalf("%d rank reports, want %d; stderr:\n%s", len(ranks), o.Ranks, run.Stderr())
	}
	return ranks
}

// SlowdownBegan reads when the latest slowdown under whileFile (Slowness.WhileFile)
// began (its first slowed step), as the slow rank wrote it; false before it did.
func SlowdownBegan(whileFile string) (time.Time, bool) { return slowdownMark(whileFile, "began") }

// SlowdownEnded reads when the latest slowdown under whileFile ended (its last slowed
// step, up to a step after the file went), as the slow rank wrote it; false before it
// did.
func SlowdownEnded(whileFile string) (time.Time, bool) { return slowdownMark(whileFile, "ended") }

func slowdownMark(whileFile, what string) (time.Time, bool) {
	b, err := os.ReadFile(whileFile + "." + what)
	if err != nil {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}
