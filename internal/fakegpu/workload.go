package fakegpu

import (
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
	"testing"
	"time"
)

// Options mirrors the flags of fakegpu-workload (run it with --help for the full text).
// A zero field leaves the workload's default; counts are totals over the whole run,
// spread evenly over Steps.
type Options struct {
	Steps        int           // --steps (default 10)
	StepGap      time.Duration // --step-gap-us: host-side sleep after each step
	GridBlocks   int           // --grid-blocks (default 128: one wave on 132 SMs)
	BlockThreads int           // --block-threads (default 256)

	Launches           int // cudaLaunchKernel
	LaunchesEx         int // cudaLaunchKernelExC
	DriverLaunches     int // cuLaunchKernel
	DriverLaunchesPtsz int // cuLaunchKernel_ptsz
	DriverLaunchesEx   int // cuLaunchKernelEx

	H2D, H2DAsync, D2H, D2HAsync, D2D, D2DAsync, H2H int   // cudaMemcpy / cudaMemcpyAsync
	H2DBytes, D2HBytes, D2DBytes, H2HBytes           int64 // per copy (defaults 1 MiB, 64 KiB, 1 MiB, 4 KiB)
	DefaultKind                                      bool  // pass cudaMemcpyDefault

	DriverH2D, DriverH2DAsync, DriverD2H, DriverD2HAsync int // cuMemcpy{HtoD,DtoH}[Async]_v2
	DriverD2D, DriverD2DAsync                            int // cuMemcpyDtoD[Async]_v2
	DriverMemcpy, DriverMemcpyAsync                      int // cuMemcpy[Async], host to device

	Allocs, AsyncAllocs, DriverAllocs int   // alloc+free pairs
	AllocBytes                        int64 // default 1 MiB

	Syncs       int // rotating stream / device / event syncs
	StreamWaits int // cudaEventRecord + cudaStreamWaitEvent
	DriverSyncs int // alternating cuStreamSynchronize / cuCtxSynchronize

	GraphCaptures, GraphKernels, GraphReplays, DriverGraphLaunches int

	KernelTime time.Duration // --kernel-us: one kernel wave on the device
	LaunchCost time.Duration // --launch-us: CPU time per launch or copy call
	GBps       float64       // --gbps: host<->device bandwidth

	ContentionThreads int // busy threads competing with the dispatcher
	// LockHolders threads named LockName (default tokenizer) take a process-wide mutex
	// the dispatcher also takes around each step, and hold it LockHold at a time.
	LockHolders      int
	LockHold         time.Duration
	LockName         string
	Pin              bool // pin the dispatcher (and contention threads) to PinCPU
	PinCPU           int
	DispatcherThread bool // run the loop on a thread other than the main one

	Forks          int
	ForkWork       time.Duration // CPU time per child (default 2ms)
	ForkCUDACopies int

	IOBurstMB int
	IOEvery   time.Duration // default 100ms
	IODir     string
	IOInline  bool

	// TCPSend is an IPv4 HOST:PORT the workload connects to after the gate and sends
	// TCPBytes (default 4096) to each step.
	TCPSend  string
	TCPBytes int64

	Hold    time.Duration // sleep after the gate, before the first CUDA call
	Stall   time.Duration // after the loop, block in one call for this long
	StallIn string        // stream-sync (default), device-sync, event-sync, memcpy

	// Gate makes Start wait, before the first CUDA call, until Release: tests attach
	// probes in between. Start returns once the workload sits at the gate.
	Gate bool
	// Env is added to the workload's environment (FAKEGPU_*, RANK, LOCAL_RANK, ...).
	Env []string
	// Launcher, if set, runs the workload: Start appends the workload's path and
	// arguments to it. It must exec the workload in its own process (unshare, sh -c
	// '... exec "$@"'), which keeps the pid the gate and the probes see.
	Launcher []string
	// HIP runs fakegpu-workload-hip, the same loop built as a HIP program over the fake
	// libamdhip64 (its --driver-* calls fail: HIP has no driver API).
	HIP bool
}

// Args returns the workload's command-line flags for these options (gate flags excluded;
// Start adds them).
func (o Options) Args() []string {
	var args []string
	num := func(flag string, v int64) {
		if v != 0 {
			args = append(args, "--"+flag, strconv.FormatInt(v, 10))
		}
	}
	micros := func(flag string, d time.Duration) {
		if d != 0 {
			args = append(args, "--"+flag, strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', -1, 64))
		}
	}
	flag := func(name string, on bool) {
		if on {
			args = append(args, "--"+name)
		}
	}
	num("steps", int64(o.Steps))
	num("step-gap-us", o.StepGap.Microseconds())
	num("grid-blocks", int64(o.GridBlocks))
	num("block-threads", int64(o.BlockThreads))
	num("launches", int64(o.Launches))
	num("launches-ex", int64(o.LaunchesEx))
	num("driver-launches", int64(o.DriverLaunches))
	num("driver-launches-ptsz", int64(o.DriverLaunchesPtsz))
	num("driver-launches-ex", int64(o.DriverLaunchesEx))
	num("h2d", int64(o.H2D))
	num("h2d-async", int64(o.H2DAsync))
	num("d2h", int64(o.D2H))
	num("d2h-async", int64(o.D2HAsync))
	num("d2d", int64(o.D2D))
	num("d2d-async", int64(o.D2DAsync))
	num("h2h", int64(o.H2H))
	num("h2d-bytes", o.H2DBytes)
	num("d2h-bytes", o.D2HBytes)
	num("d2d-bytes", o.D2DBytes)
	num("h2h-bytes", o.H2HBytes)
	flag("default-kind", o.DefaultKind)
	num("driver-h2d", int64(o.DriverH2D))
	num("driver-h2d-async", int64(o.DriverH2DAsync))
	num("driver-d2h", int64(o.DriverD2H))
	num("driver-d2h-async", int64(o.DriverD2HAsync))
	num("driver-d2d", int64(o.DriverD2D))
	num("driver-d2d-async", int64(o.DriverD2DAsync))
	num("driver-memcpy", int64(o.DriverMemcpy))
	num("driver-memcpy-async", int64(o.DriverMemcpyAsync))
	num("allocs", int64(o.Allocs))
	num("async-allocs", int64(o.AsyncAllocs))
	num("driver-allocs", int64(o.DriverAllocs))
	num("alloc-bytes", o.AllocBytes)
	num("syncs", int64(o.Syncs))
	num("stream-waits", int64(o.StreamWaits))
	num("driver-syncs", int64(o.DriverSyncs))
	num("graph-captures", int64(o.GraphCaptures))
	num("graph-kernels", int64(o.GraphKernels))
	num("graph-replays", int64(o.GraphReplays))
	num("driver-graph-launches", int64(o.DriverGraphLaunches))
	micros("kernel-us", o.KernelTime)
	micros("launch-us", o.LaunchCost)
	if o.GBps != 0 {
		args = append(args, "--gbps", strconv.FormatFloat(o.GBps, 'f', -1, 64))
	}
	num("contention-threads", int64(o.ContentionThreads))
	num("lock-holders", int64(o.LockHolders))
	num("lock-hold-us", o.LockHold.Microseconds())
	if o.LockName != "" {
		args = append(args, "--lock-name", o.LockName)
	}
	if o.Pin {
		args = append(args, "--pin-cpu", strconv.Itoa(o.PinCPU))
	}
	flag("dispatcher-thread", o.DispatcherThread)
	num("forks", int64(o.Forks))
	micros("fork-work-us", o.ForkWork)
	num("fork-cuda-copies", int64(o.ForkCUDACopies))
	num("io-burst-mb", int64(o.IOBurstMB))
	num("io-every-ms", o.IOEvery.Milliseconds())
	if o.IODir != "" {
		args = append(args, "--io-dir", o.IODir)
	}
	flag("io-inline", o.IOInline)
	if o.TCPSend != "" {
		args = append(args, "--tcp-send", o.TCPSend)
	}
	num("tcp-bytes", o.TCPBytes)
	num("hold-ms", o.Hold.Milliseconds())
	num("stall-ms", o.Stall.Milliseconds())
	if o.StallIn != "" {
		args = append(args, "--stall-in", o.StallIn)
	}
	return args
}

// Bytes counts copied bytes per direction.
type Bytes struct {
	H2H int64 `json:"h2h"`
	H2D int64 `json:"h2d"`
	D2H int64 `json:"d2h"`
	D2D int64 `json:"d2d"`
}

// GraphCounts summarizes CUDA graph activity.
type GraphCounts struct {
	Captures        int64 `json:"captures"`
	Instantiations  int64 `json:"instantiations"`
	Launches        int64 `json:"launches"`        // cudaGraphLaunch
	DriverLaunches  int64 `json:"driver_launches"` // cuGraphLaunch
	CapturedKernels int64 `json:"captured_kernels"`
}

// Result is the workload's JSON report. Calls, TotalNS and MaxNS are keyed by API name
// (every API the workload can call is present, zero or not) and cover the dispatcher
// thread's calls only: children forked with ForkCUDACopies are not counted. Durations are
// the workload's own CLOCK_MONOTONIC timing around each call.
type Result struct {
	Pid               int              `json:"pid"`
	Tid               int              `json:"tid"` // the dispatcher thread
	Rank              *int             `json:"rank"`
	LocalRank         *int             `json:"local_rank"`
	WorldSize         *int             `json:"world_size"`
	Steps             int              `json:"steps"`
	SMs               int              `json:"sms"`
	StartNS           int64            `json:"start_ns"` // CLOCK_MONOTONIC, after the gate
	EndNS             int64            `json:"end_ns"`
	WallNS            int64            `json:"wall_ns"`
	Calls             map[string]int64 `json:"calls"`
	TotalNS           map[string]int64 `json:"total_ns"`
	MaxNS             map[string]int64 `json:"max_ns"`
	Bytes             Bytes            `json:"bytes"`        // runtime API copies
	DriverBytes       Bytes            `json:"driver_bytes"` // driver API copies
	Graph             GraphCounts      `json:"graph"`
	Forks             int64            `json:"forks"`
	ForkFailures      int64            `json:"fork_failures"`
	IOBursts          int64            `json:"io_bursts"`
	IOBytes           int64            `json:"io_bytes"`
	ContentionThreads int              `json:"contention_threads"`
	// LockWaits and LockWaitNS are the dispatcher's waits for the LockHolders' mutex.
	LockWaits  int64 `json:"lock_waits"`
	LockWaitNS int64 `json:"lock_wait_ns"`
	PinCPU     int   `json:"pin_cpu"`
}

// ParseResult decodes a workload report line, rejecting fields it does not know so the C
// and Go sides cannot drift apart silently.
func ParseResult(line []byte) (Result, error) {
	var r Result
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Result{}, fmt.Errorf("parsing workload report %q: %w", line, err)
	}
	return r, nil
}

// Workload is a started fakegpu-workload process.
type Workload struct {
	Cmd *exec.Cmd
	// Pid is the process; Tid is its dispatcher thread, known once the workload reached
	// its gate (Options.Gate), else 0 until the report says.
	Pid, Tid int

	gate           gate
	stdout, stderr bytes.Buffer
	done           chan struct{}
	waitErr        error
}

// gateTimeout bounds how long a gated workload waits for Release, and how long Start
// waits for the workload to reach its gate.
const gateTimeout = 60 * time.Second

// Start launches the workload. With o.Gate it returns once the workload waits at its gate,
// before any CUDA call; call Release to let it run. The process is killed at test cleanup
// if still running.
func Start(t testing.TB, p Paths, o Options) *Workload {
	t.Helper()
	exe := p.Workload
	if o.HIP {
		exe = p.WorkloadHIP
	}
	return start(t, append(slices.Clone(o.Launcher), exe), o.Args(), o.Env, o.Gate)
}

// Python is Debian's CPython, which the Python workloads run under.
const Python = "/usr/bin/python3"

// PythonProcessName is the process name Fathom reports for Python's processes
// (process.executable.name, from /proc/PID/exe): the file /usr/bin/python3 links to,
// python3.11 on Debian 12. Their threads' kernel name (comm) is python3, the name the
// interpreter was started by.
func PythonProcessName() string {
	real, err := filepath.EvalSymlinks(Python)
	if err != nil {
		return filepath.Base(Python)
	}
	return filepath.Base(real)
}

// GILWorkload is python/gil_dispatcher.py: a CPython main thread that launches kernels
// and syncs through ctypes calls into the CUDA runtime while pure-Python worker
// threads hold the GIL.
type GILWorkload struct {
	// Workers are the pure-Python threads; Launches the kernels a step (10 by default).
	Workers, Launches int
	// Env is added to the process's environment (FAKEGPU_*).
	Env []string
}

// StartGIL launches python/gil_dispatcher.py under Python with p's CUDA runtime and a
// gate: it returns once the script has loaded the runtime and waits; Tid is its main
// thread, which makes every CUDA call.
func StartGIL(t testing.TB, p Paths, o GILWorkload) *Workload {
	t.Helper()
	if _, err := os.Stat(Python); err != nil {
		t.Fatalf("the GIL workload needs Debian's CPython (apt-get install python3): %v", err)
	}
	launches := o.Launches
	if launches == 0 {
		launches = 10
	}
	script := filepath.Join(RepoRoot(), "internal", "fakegpu", "python", "gil_dispatcher.py")
	args := []string{"--cudart", p.Cudart, "--workers", strconv.Itoa(o.Workers), "--launches", strconv.Itoa(launches)}
	return start(t, []string{Python, script}, args, o.Env, true)
}

// start runs argv with args (and a gate's, when gated), killed at test cleanup.
func start(t testing.TB, argv, args, env []string, gated bool) *Workload {
	t.Helper()
	w := &Workload{done: make(chan struct{})}
	if gated {
		w.gate = newGate(t)
		args = append(args, w.gate.args()...)
	}
	argv = append(argv, args...)
	w.Cmd = exec.Command(argv[0], argv[1:]...)
	w.Cmd.Env = append(os.Environ(), env...)
	w.Cmd.Stdout = &w.stdout
	w.Cmd.Stderr = &w.stderr
	if err := w.Cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", argv[0], err)
	}
	w.Pid = w.Cmd.Process.Pid
	go func() {
		w.waitErr = w.Cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		w.Kill()
		<-w.done
	})
	if gated {
		ready, err := waitForFile(w.gate.ready, w.done, gateTimeout)
		if err != nil {
			w.Kill()
			<-w.done
			t.Fatalf("workload never reached its gate: %v\nstderr:\n%s", err, w.stderr.String())
		}
		var gate struct{ Pid, Tid int }
		if err := json.Unmarshal(ready, &gate); err != nil || gate.Pid != w.Pid {
			t.Fatalf("bad ready file %q (pid %d): %v", ready, w.Pid, err)
		}
		w.Tid = gate.Tid
	}
	return w
}

func waitForFile(path string, exited <-chan struct{}, timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	for {
		if data, err := os.ReadFile(path); err == nil {
			return data, nil
		}
		select {
		case <-exited:
			return nil, errors.New("workload exited")
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s did not appear within %s", path, timeout)
		}
	}
}

// Release opens the gate of a workload started with Options.Gate.
func (w *Workload) Release() error { return w.gate.open() }

// gate holds a program before its first CUDA call: it writes ready (for fakegpu-ddp,
// ready.RANK per rank) once it waits, and goes on when waitFile exists.
type gate struct {
	waitFile, ready string
}

func newGate(t testing.TB) gate {
	dir := t.TempDir()
	return gate{waitFile: filepath.Join(dir, "go"), ready: filepath.Join(dir, "ready")}
}

// args are the program's flags for this gate.
func (g gate) args() []string {
	return []string{"--wait-file", g.waitFile, "--ready-file", g.ready,
		"--wait-timeout-ms", strconv.FormatInt(gateTimeout.Milliseconds(), 10)}
}

func (g gate) open() error {
	if g.waitFile == "" {
		return errors.New("not started with a gate")
	}
	return os.WriteFile(g.waitFile, nil, 0o644)
}

// Kill sends SIGKILL (a no-op once the process has exited).
func (w *Workload) Kill() {
	select {
	case <-w.done:
	default:
		_ = w.Cmd.Process.Kill()
	}
}

// Exited is closed when the process has exited.
func (w *Workload) Exited() <-chan struct{} { return w.done }

// Stderr returns what the workload wrote to stderr; complete once it exited.
func (w *Workload) Stderr() string {
	<-w.done
	return w.stderr.String()
}

// Wait waits for the workload to exit, at most timeout, and parses its report.
func (w *Workload) Wait(timeout time.Duration) (Result, error) {
	select {
	case <-w.done:
	case <-time.After(timeout):
		w.Kill()
		<-w.done
		return Result{}, fmt.Errorf("workload still running after %s, killed; stderr:\n%s", timeout, w.stderr.String())
	}
	if w.waitErr != nil {
		return Result{}, fmt.Errorf("workload %v: %w; stderr:\n%s", w.Cmd.Args, w.waitErr, w.stderr.String())
	}
	out := strings.TrimSpace(w.stdout.String())
	if strings.Contains(out, "\n") {
		return Result{}, fmt.Errorf("workload printed more than one line: %q", out)
	}
	return ParseResult([]byte(out))
}

// Run runs the workload to completion (opening its gate at once if o.Gate) and returns
// its report, failing the test on any error.
func Run(t testing.TB, p Paths, o Options) Result {
	t.Helper()
	w := Start(t, p, o)
	if o.Gate {
		if err := w.Release(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := w.Wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
