// Package demo runs Fathom's whole story on one machine: a gateway collector with the
// Echo store, node collectors that each trace their own ranks of a fake GPU job with
// real BPF, a scripted incident (one rank slowed, its dispatcher thread put under CPU
// contention), and what Fathom found, read back over MCP as an agent would. `fathom
// demo` (and `make demo`) runs it.
package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fathom-gpu/fathom/internal/collectorconfig"
	"github.com/fathom-gpu/fathom/internal/collectorrun"
	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/pki"
)

// Options of a demo run.
type Options struct {
	// Bin is the fathom binary the collectors run (default: this executable).
	Bin string
	// FakeGPU is the fake GPU stack's build directory (make -C internal/fakegpu).
	FakeGPU string
	// Dir holds the configs, the store, the logs and the token (made if missing).
	Dir string
	// Nodes node collectors of RanksPerNode ranks each.
	Nodes, RanksPerNode int
	// OTLPPort and APIPort are the gateway's OTLP/gRPC and Echo API (HTTP and MCP) ports.
	OTLPPort, APIPort int
	// Short: a shorter warm-up, and the demo ends once it has shown the answers
	// (tests, CI). Otherwise it keeps running until ctx ends.
	Short bool
	// Synthetic runs the nodes' receivers on made-up data (no BPF).
	Synthetic bool
	// RemoteWrite, when set, is a Prometheus remote-write URL the gateway also sends
	// every metric to (what the Grafana dashboard reads).
	RemoteWrite string
	// Out is where the story is told.
	Out io.Writer
}

// Story is what the demo found, for a caller (a test) to check.
type Story struct {
	NodeFlagged    string // the node that flagged its own rank ("" if none did)
	GatewayFlagged string // "rank R on NODE" the gateway named
	Chain          string // the causal chain's root cause on the contended node
	Answers        map[string]string
}

// demo is one run.
type demo struct {
	o     Options
	out   io.Writer
	start time.Time
	token string
	api   string
	otlp  string
	// collectors, then the incident's hogs, in the order started; the pinned kernel
	// state of each node collector, removed when the demo stops.
	collectors []*collectorrun.Collector
	hogs       []*exec.Cmd
	pinDirs    []string
	ddp        *fakegpu.DDPRun
	slow       string
	slowR      int
	slowN      string
	// ca signs the gateway's OTLP certificate and each node's client certificate.
	ca *pki.CA
}

// Run runs the demo until the story is told (Short) or ctx ends, and stops everything
// it started before it returns.
func Run(ctx context.Context, o Options) (*Story, error) {
	if o.Nodes < 1 || o.RanksPerNode < 1 {
		return nil, errors.New("demo: --nodes and --ranks-per-node must be at least 1")
	}
	if o.Bin == "" {
		bin, err := os.Executable()
		if err != nil {
			return nil, err
		}
		o.Bin = bin
	}
	d := &demo{o: o, out: o.Out, start: time.Now()}
	defer d.stop()
	if err := d.prepare(); err != nil {
		return nil, err
	}
	if err := d.startGateway(ctx); err != nil {
		return nil, err
	}
	if err := d.startJobAndNodes(ctx); err != nil {
		return nil, err
	}
	story, err := d.tell(ctx)
	if err != nil {
		return story, err
	}
	d.howToConnect()
	if !o.Short {
		d.say("Everything keeps running: ask the gateway yourself. Ctrl-C stops it all.")
		<-ctx.Done()
	}
	return story, nil
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "[%5.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// prepare checks the ports, and starts a fresh store, logs and token under Dir.
func (d *demo) prepare() error {
	for _, p := range []struct {
		port int
		what string
		flag string
	}{{d.o.OTLPPort, "the gateway's OTLP/gRPC port", "--otlp-port"}, {d.o.APIPort, "the Echo API (HTTP and MCP) port", "--api-port"}} {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)))
		if err != nil {
			return fmt.Errorf("demo: port %d (%s) is in use, perhaps by another collector or an earlier demo still running: stop it, or pick another with %s", p.port, p.what, p.flag)
		}
		l.Close()
	}
	if err := os.MkdirAll(d.o.Dir, 0o755); err != nil {
		return err
	}
	matches, _ := filepath.Glob(filepath.Join(d.o.Dir, "echo.duckdb*"))
	logs, _ := filepath.Glob(filepath.Join(d.o.Dir, "*.log"))
	for _, f := range append(matches, logs...) {
		if err := os.Remove(f); err != nil {
			return fmt.Errorf("demo: cannot start a fresh store: %w", err)
		}
	}
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return err
	}
	d.token = hex.EncodeToString(raw)
	d.api = fmt.Sprintf("127.0.0.1:%d", d.o.APIPort)
	d.otlp = fmt.Sprintf("127.0.0.1:%d", d.o.OTLPPort)
	if err := os.WriteFile(filepath.Join(d.o.Dir, "token"), []byte(d.token+"\n"), 0o600); err != nil {
		return err
	}
	mode := "real BPF: each node collector traces its own ranks from the kernel"
	if d.o.Synthetic {
		mode = "SYNTHETIC receiver: made-up ranks, no BPF (run as root on Linux with BTF for the real thing)"
	}
	d.say("Fathom demo: %d node collectors, %d ranks of a fake GPU job (fakegpu-ddp, asynchronous NCCL), one gateway; %s.",
		d.o.Nodes, d.o.Nodes*d.o.RanksPerNode, mode)
	d.say("Collector logs, configs and the store go to %s", d.o.Dir)
	return nil
}

// collector writes the config derived for name into Dir, and starts it with env
// added to the listener variables collectorrun.LoopbackEnv gives ports of their own;
// its output goes to Dir/name.log. It returns the collector and its health check's
// address.
func (d *demo) collector(name, shipped string, config *collectorconfig.Config, env []string) (*collectorrun.Collector, string, error) {
	cfgPath := filepath.Join(d.o.Dir, name+".yaml")
	if err := config.WriteFile(cfgPath); err != nil {
		return nil, "", err
	}
	listen, addrs, err := collectorrun.LoopbackEnv(shipped)
	if err != nil {
		return nil, "", err
	}
	logFile, err := os.Create(filepath.Join(d.o.Dir, name+".log"))
	if err != nil {
		return nil, "", err
	}
	defer logFile.Close() // the child holds its own descriptor
	c, err := collectorrun.Start(collectorrun.Spec{Bin: d.o.Bin, Configs: []string{cfgPath}, Env: append(listen, env...),
		Output: logFile, OwnGroup: true})
	if err != nil {
		return nil, "", err
	}
	d.collectors = append(d.collectors, c)
	return c, addrs["FATHOM_HEALTH_ENDPOINT"], nil
}

// waitHealthy waits for a collector's health check to answer 200, showing progress.
func (d *demo) waitHealthy(ctx context.Context, what, health string, c *collectorrun.Collector, log string) error {
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		wait, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.WaitHTTP(wait, "http://"+health+"/")
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, collectorrun.ErrExited):
			return fmt.Errorf("demo: %s exited at start; see %s", what, log)
		case ctx.Err() != nil:
			return ctx.Err()
		}
		d.say("... still waiting for %s (%s)", what, log)
	}
	return fmt.Errorf("demo: %s did not become healthy in 90 s; see %s", what, log)
}

// tlsEnv issues who's certificate for leaf into the demo's directory and returns the
// collector environment that names its files (FATHOM_OTLP_TLS_CA, _CERT, _KEY).
func (d *demo) tlsEnv(who string, leaf pki.Leaf) ([]string, error) {
	f, err := d.ca.WriteFiles(filepath.Join(d.o.Dir, "tls", who), leaf)
	if err != nil {
		return nil, fmt.Errorf("demo: certificates: %w", err)
	}
	return f.Env(), nil
}

func (d *demo) startGateway(ctx context.Context) error {
	config, err := gatewayConfig(d.o.Synthetic, d.o.RemoteWrite != "")
	if err != nil {
		return err
	}
	ca, err := pki.NewCA("fathom-demo-ca", 7*24*time.Hour)
	if err != nil {
		return err
	}
	d.ca = ca
	certs, err := d.tlsEnv("gateway", pki.Loopback("fathom-gateway"))
	if err != nil {
		return err
	}
	c, health, err := d.collector("gateway", collectorconfig.Gateway, config, append(certs, "REMOTE_WRITE="+d.o.RemoteWrite,
		"FATHOM_ECHO_DB="+filepath.Join(d.o.Dir, "echo.duckdb"), "FATHOM_ECHO_AUDIT_LOG="+filepath.Join(d.o.Dir, "echo-audit.jsonl"),
		"FATHOM_ECHO_ENDPOINT="+d.api, "FATHOM_GATEWAY_OTLP_GRPC="+d.otlp, "FATHOM_DEMO_TOKEN="+d.token))
	if err != nil {
		return err
	}
	if err := d.waitHealthy(ctx, "the gateway", health, c, filepath.Join(d.o.Dir, "gateway.log")); err != nil {
		return err
	}
	d.say("Gateway up: OTLP (mutual TLS, certificates in %s) on %s, Echo API and MCP on http://%s (token in %s), store %s",
		filepath.Join(d.o.Dir, "tls"), d.otlp, d.api, filepath.Join(d.o.Dir, "token"), filepath.Join(d.o.Dir, "echo.duckdb"))
	return nil
}

// startJobAndNodes starts the job's ranks at their gates, a node collector per
// RanksPerNode ranks, and then lets the ranks go.
func (d *demo) startJobAndNodes(ctx context.Context) error {
	ranks := d.o.Nodes * d.o.RanksPerNode
	d.slowR = min(5, ranks-1)
	d.slowN = fmt.Sprintf("node-%d", d.slowR/d.o.RanksPerNode)
	d.slow = filepath.Join(d.o.Dir, "slow")
	_ = os.Remove(d.slow)
	var pids [][]string
	if !d.o.Synthetic {
		paths := fakegpu.PathsIn(d.o.FakeGPU)
		if _, err := os.Stat(paths.DDP); err != nil {
			return fmt.Errorf("demo: the fake GPU stack is not built (%v): run `make -C internal/fakegpu` or `make demo`", err)
		}
		gates := filepath.Join(d.o.Dir, "gates")
		if err := os.MkdirAll(gates, 0o755); err != nil {
			return err
		}
		run, err := fakegpu.LaunchDDP(paths, fakegpu.DDPOptions{
			Ranks: ranks, Steps: 100_000, BucketBytes: 16 << 10, HostCompute: 20 * time.Millisecond, HostComputeSleeps: true,
			Gate: true, Env: []string{"FATHOM_JOB=demo-job"},
			Slow: &fakegpu.Slowness{Rank: d.slowR, Delay: 4 * time.Millisecond, WhileFile: d.slow},
		}, gates)
		if err != nil {
			return fmt.Errorf("demo: starting the job: %w", err)
		}
		d.ddp = run
		for n := range d.o.Nodes {
			var p []string
			for r := n * d.o.RanksPerNode; r < (n+1)*d.o.RanksPerNode; r++ {
				p = append(p, strconv.Itoa(run.Ranks[r].Pid))
			}
			pids = append(pids, p)
		}
	}
	for n := range d.o.Nodes {
		name := fmt.Sprintf("node-%d", n)
		config, err := nodeConfig(pidsOr(pids, n), d.o.Synthetic, ranks, d.slowR)
		if err != nil {
			return err
		}
		mode := "ebpf"
		if d.o.Synthetic {
			mode = "synthetic"
		}
		certs, err := d.tlsEnv(name, pki.NodeClient(name))
		if err != nil {
			return err
		}
		// Kernel state pinned apart per node collector: they share one host.
		pins := fmt.Sprintf("/sys/fs/bpf/fathom-demo-%d-%s", os.Getpid(), name)
		d.pinDirs = append(d.pinDirs, pins)
		c, health, err := d.collector(name, collectorconfig.Node, config, append(certs, "FATHOM_NODE_NAME="+name, "FATHOM_GATEWAY="+d.otlp,
			"FATHOM_CLUSTER=demo", "FATHOM_COLLECTION_INTERVAL=1s", "FATHOM_GPUEBPF_MODE="+mode, "FATHOM_PIN_DIR="+pins))
		if err != nil {
			return err
		}
		if err := d.waitHealthy(ctx, name, health, c, filepath.Join(d.o.Dir, name+".log")); err != nil {
			return err
		}
		if d.o.Synthetic {
			d.say("%s up, its receiver making up %d ranks (rank %d slow)", name, ranks, d.slowR)
			break // one synthetic node tells it all: every node would make up the same ranks
		}
		d.say("%s up, tracing ranks %d-%d (pids %s)", name, n*d.o.RanksPerNode, (n+1)*d.o.RanksPerNode-1, strings.Join(pids[n], ", "))
	}
	if d.ddp != nil {
		if err := d.ddp.Release(); err != nil {
			return err
		}
		d.say("Job demo-job released: %d ranks, 20 ms of host work and 10 kernels a step, an all-reduce per step", ranks)
	}
	return nil
}

func pidsOr(pids [][]string, n int) []string {
	if n < len(pids) {
		return pids[n]
	}
	return nil
}

// The incident's CPU contention: this many CPU-bound batch-etl processes at this nice
// value, on the CPU the slow rank's dispatcher thread is pinned to.
const (
	hogs    = 3
	hogNice = -10
)

// incident slows the slow rank's host work by 20% and puts CPU-bound batch-etl
// processes on its dispatcher thread's CPU.
func (d *demo) incident() error {
	if err := os.WriteFile(d.slow, nil, 0o600); err != nil {
		return err
	}
	if d.o.Synthetic || d.ddp == nil {
		return nil
	}
	cpu := max(0, numCPU()-1)
	var set unix.CPUSet
	set.Set(cpu)
	tid := d.ddp.Ranks[d.slowR].Tid
	if err := unix.SchedSetaffinity(tid, &set); err != nil {
		return fmt.Errorf("demo: pinning rank %d's dispatcher: %w", d.slowR, err)
	}
	hog := fakegpu.PathsIn(d.o.FakeGPU).Hog
	for range hogs {
		cmd := exec.Command(hog, "--name", "batch-etl", "--cpu", strconv.Itoa(cpu), "--seconds", "600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("demo: starting %s: %w", hog, err)
		}
		d.hogs = append(d.hogs, cmd)
		// Ahead of the rank, as a batch job given a higher priority would be.
		if err := unix.Setpriority(unix.PRIO_PROCESS, cmd.Process.Pid, hogNice); err != nil {
			return fmt.Errorf("demo: renicing batch-etl: %w", err)
		}
	}
	d.say("INCIDENT: rank %d (%s) now does 20%% more host work per step, and its dispatcher thread %d shares CPU %d with %d batch-etl processes at a higher priority (nice %d)",
		d.slowR, d.slowN, tid, cpu, hogs, hogNice)
	return nil
}

func numCPU() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 1
	}
	return set.Count()
}

// stop ends everything the demo started: the job and its hogs first, then the
// collectors, the last started first.
func (d *demo) stop() {
	if d.ddp != nil {
		d.ddp.Kill()
	}
	for _, h := range d.hogs {
		_ = syscall.Kill(-h.Process.Pid, syscall.SIGKILL)
		_ = h.Wait()
	}
	for i := len(d.collectors) - 1; i >= 0; i-- {
		if _, err := d.collectors[i].Stop(5 * time.Second); err != nil {
			d.say("%v: killed", err)
		}
	}
	for _, dir := range d.pinDirs {
		_ = os.RemoveAll(dir)
	}
	if len(d.collectors)+len(d.hogs) > 0 {
		d.say("Stopped every process the demo started.")
	}
}
