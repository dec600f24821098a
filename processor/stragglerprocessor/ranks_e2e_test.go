//go:build linux

package stragglerprocessor_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/internal/series"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// The loop on a real job: eight rank processes of fakegpu-ddp (the asynchronous fake
// NCCL unless said), traced under real BPF by four node collectors on this machine, two
// ranks each (targets by pid, each under its own host_name), into one gateway. Nothing
// is fed by the test: the device wait each node sends is what its kernel probes saw.
//
// Each rank's host work sleeps instead of spinning (as if each rank had cores of its
// own): spinning, eight ranks share this machine's two cores, and a rank's 20% more
// work costs it a fifth of that in wall time. The fake devices run 8+2 kernels of 50 µs
// a step, so a step is about 6 ms, most of it the host's.

const (
	jobRanks     = 8
	ranksPerNode = 2
	slowRank     = 5
)

// job is a running fakegpu-ddp job and the node collectors that trace it.
type job struct {
	*loop
	run      *fakegpu.DDPRun
	slowFile string
	// nodeTelemetry is each node collector's telemetry port, in node order.
	nodeTelemetry []string
}

type jobOptions struct {
	ncclMode, slowMode string
	// ranks (default 8), ranksPerNode (default 2) and the slow rank (default 5).
	ranks, perNode, slowRank int
	// hostCompute is each rank's host work per step (default 5 ms); slowBy what the
	// slow rank adds to it (default 1 ms, 20%).
	hostCompute, slowBy time.Duration
	// transport of each node's exporter: "grpc" or "http".
	transport func(node int) string
	// nodeEnv adds variables to one node collector's environment.
	nodeEnv func(node int) []string
	// board, when set, is the fake GPUs' board directory: rank r runs on GPU r, and
	// the node collectors read the board through the fake NVML (which, without a
	// board, finds no GPU).
	board string
	// sysfs, when set, is a fake /sys/class/infiniband every node reads; rankEnv a
	// variable the launcher sets per rank (fakegpu.DDPOptions.RankEnv).
	sysfs, rankEnv string
	// noNCCL makes the ranks replicas that never call NCCL; settings are lines put
	// into every straggler processor's config ("signals: [...]").
	noNCCL   bool
	settings []string
	// rankSignals is the nodes' rank_signals.interval (default 250ms, as
	// deploy/configs/node.yaml has it; "0s": with each collection only). With samples
	// that short the processors' persistence is 5 of 6 unless settings name one.
	rankSignals string
	// threads is fakegpu-ddp's threading (fakegpu.ThreadsSingle when empty).
	threads string
	// hip runs the job as a HIP program over the fake libamdhip64 and librccl.
	hip bool
	// spin makes host work spin on the CPU (a busy host, ranks sharing cores) rather
	// than sleep (as if each rank had cores of its own).
	spin bool
	// initBeforeCollectors makes the ranks make their communicator, and then start
	// their steps, before the node collectors start one after another (a job already
	// running at a DaemonSet rollout): the collectors name it from its collectives'
	// shapes (nccl.comm.recovered), each counting from a different call.
	initBeforeCollectors bool
}

func (o *jobOptions) defaults() {
	if o.ranks == 0 {
		o.ranks, o.perNode, o.slowRank = jobRanks, ranksPerNode, slowRank
	}
	if o.hostCompute == 0 {
		o.hostCompute, o.slowBy = 5*time.Millisecond, time.Millisecond
	}
	if o.rankSignals == "" {
		o.rankSignals = "250ms"
	}
	if o.rankSignals != "0s" && !slices.ContainsFunc(o.settings, func(s string) bool { return strings.HasPrefix(s, "persistence:") }) {
		o.settings = append(o.settings, "persistence: {beyond: 5, of: 6}")
	}
}

// startJob starts the gateway, the job's ranks at their gates, a node collector per
// o.perNode ranks (node-0, node-1, ...), and then lets the ranks go. The slow rank is
// slow while j.slowFile exists.
func startJob(t testing.TB, o jobOptions) *job {
	privtest.Require(t)
	o.defaults()
	paths := fakegpu.Build(t)
	j := &job{loop: newLoopWith(t, o.settings)}
	j.slowFile = filepath.Join(j.dir, "slow")
	rankEnv := []string{"FATHOM_JOB=e2e-job"}
	if o.board != "" {
		rankEnv = append(rankEnv, "FAKEGPU_BOARD="+o.board, fmt.Sprintf("FAKEGPU_DEVICES=%d", o.ranks))
	}
	// Steps enough for the longest run (the matrix's full rows, about 17 minutes): a
	// pair of ranks, a core each, makes 100,000 steps of 2 ms in under six, and the
	// matrix's pair row then had no job after its ninth trial. The ranks keep only
	// the steps they made (their per-step arrays are touched as they go).
	j.run = fakegpu.StartDDP(t, paths, fakegpu.DDPOptions{
		Ranks: o.ranks, Steps: 2_000_000, BucketBytes: 16 << 10, HostCompute: o.hostCompute, HostComputeSleeps: !o.spin,
		NCCLMode: o.ncclMode, NoNCCL: o.noNCCL, Gate: true, GateAfterInit: o.initBeforeCollectors, Env: rankEnv, RankEnv: o.rankEnv, Threads: o.threads, HIP: o.hip,
		Slow: &fakegpu.Slowness{Rank: o.slowRank, Delay: o.slowBy, Mode: o.slowMode, WhileFile: j.slowFile},
	})
	if o.initBeforeCollectors {
		if err := j.run.Release(); err != nil {
			t.Fatal(err)
		}
	}
	for node := range o.ranks / o.perNode {
		transport := o.transport(node)
		var pids []string
		for r := node * o.perNode; r < (node+1)*o.perNode; r++ {
			pids = append(pids, fmt.Sprint(j.run.Ranks[r].Pid))
		}
		// The node traces its own two ranks, by pid; it keeps every 8th collective
		// (nccl.collective records, for arrival lag) at the receiver's default rates;
		// it reads the fake GPUs through the fake NVML, and the RDMA counters each
		// second.
		n := j.loopNode(transport, "4s").
			Replace(t, "receivers::gpuebpf::targets", "{all: false, pids: ["+strings.Join(pids, ", ")+"]}").
			Replace(t, "receivers::gpuebpf::logs", "{policy: notable, nccl: {sample_every: 8}}").
			Merge(t, `
receivers:
  gpuebpf:
    nvml:
      library_path: `+paths.NVML+`
    rdma:
      poll_interval: 1s
`)
		sysfs := o.sysfs
		if sysfs == "" {
			sysfs = filepath.Join(j.dir, "no-rdma") // no RDMA device on these nodes
		}
		env := append(j.nodeEnv(node, transport), "FATHOM_COLLECTION_INTERVAL=1s",
			"FATHOM_RANK_SIGNALS_INTERVAL="+o.rankSignals, "FATHOM_SYSFS_INFINIBAND="+sysfs)
		if o.board != "" {
			env = append(env, "FAKEGPU_BOARD="+o.board)
		}
		if o.nodeEnv != nil {
			env = append(env, o.nodeEnv(node)...)
		}
		j.nodes = append(j.nodes, n.Start(t, env...))
		j.nodeTelemetry = append(j.nodeTelemetry, n.Listen["FATHOM_TELEMETRY_PORT"])
	}
	if !o.initBeforeCollectors {
		if err := j.run.Release(); err != nil {
			t.Fatal(err)
		}
	}
	return j
}

// slowDown turns the slow rank's slowdown on and returns when it did.
func (j *job) slowDown() time.Time {
	if err := os.WriteFile(j.slowFile, nil, 0o600); err != nil {
		j.t.Fatal(err)
	}
	return time.Now()
}

// speedUp turns the slowdown off and returns when it did.
func (j *job) speedUp() time.Time {
	if err := os.Remove(j.slowFile); err != nil {
		j.t.Fatal(err)
	}
	return time.Now()
}

// slowRankFlagged slows rank 5 down and waits until it is flagged (rank5Flagged).
func (j *job) slowRankFlagged() { j.rank5Flagged(j.slowDown(), "its slowdown") }

// rank5Flagged waits until rank 5's own node and the gateway have flagged it, logs how
// long after since (when cause began) that was, and leaves 3 s for a wrong record to
// arrive. It returns the two records it waited for.
func (j *job) rank5Flagged(since time.Time, cause string) (self, gateway record) {
	self = record{Node: "node-2", Rank: slowRank, State: "straggler", Source: "node"}
	gateway = record{Node: "node-2", Rank: slowRank, State: "straggler", Source: "gateway"}
	j.waitRecords("rank 5's node and the gateway to flag it", 30*time.Second, func(recs []record) bool {
		return has(recs, self) && has(recs, gateway)
	})
	j.t.Logf("rank 5 flagged by its node and the gateway %v after %s", time.Since(since).Round(100*time.Millisecond), cause)
	// 3 s more for any other record to come, and at least 7 s of slowness in all: the
	// tools' checks that follow average each rank over the whole run, healthy part
	// included, and a rank flagged in under 2 s had too little slow time in that mean
	// (arrival lag named nobody once on CI).
	time.Sleep(max(3*time.Second, time.Until(since.Add(7*time.Second))))
	return self, gateway
}

// every calls f(1), f(2), ... every period on a goroutine until the returned stop is
// called (which waits for it); an error from f is the test's, and ends the calls.
func every(t testing.TB, period time.Duration, f func(n int) error) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for n := 1; ; n++ {
			select {
			case <-quit:
				return
			case <-tick.C:
				if err := f(n); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	return func() { close(quit); <-done }
}

// stragglers are the records that name a straggler (not silent, no_thresholds or
// resolved ones).
// flags leaves out the stall records: a rank that stalled shorter than min_duration is
// recorded, not flagged.
func flags(recs []record) []record {
	var out []record
	for _, r := range recs {
		if r.State != "stall" {
			out = append(out, r)
		}
	}
	return out
}

func stragglers(recs []record) []record {
	var out []record
	for _, r := range recs {
		if r.State == "straggler" {
			out = append(out, r)
		}
	}
	return out
}

// rankOutlier is one rank find_outlier_nodes named, with how far it lies from the
// cohort's median.
type rankOutlier struct {
	Rank int     `json:"rank"`
	Lag  float64 `json:"lag"`
}

// tool calls one of the gateway's Echo tools over HTTP, as an agent would, and decodes
// its answer into out.
func (l *loop) tool(name, body string, out any) {
	req, _ := http.NewRequest(http.MethodPost, "https://"+l.api+"/api/v1/tools/"+name, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+collectortest.AgentToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.echo.Do(req)
	if err != nil {
		l.t.Fatalf("%s: %v", name, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, out); err != nil || resp.StatusCode != 200 {
		l.t.Fatalf("%s answered %d: %v: %s", name, resp.StatusCode, err, raw)
	}
}

// outlierRanks asks the gateway's find_outlier_nodes tool which ranks lie beyond their
// cohort on a signal (larger is worse), worst first.
func (l *loop) outlierRanks(signal string) []rankOutlier {
	var out struct {
		Outliers []rankOutlier `json:"outliers"`
	}
	l.tool("find_outlier_nodes", `{"signal":"`+signal+`","by":"rank","since":"10m"}`, &out)
	return out.Outliers
}

// stragglerCost is what get_cost says of one rank, priced from fathom.straggler.time_lost.
type stragglerCost struct {
	Node          string  `json:"node"`
	Rank          *int    `json:"rank"`
	LagSeconds    float64 `json:"lag_seconds"`
	Steps         int64   `json:"steps"`
	AffectedRanks int64   `json:"affected_ranks"`
	GPUHours      float64 `json:"gpu_hours"`
}

// timeLost asks the gateway's get_cost tool what the straggler processor measured: the
// GPU time each flagged rank's peers waited for it.
func (l *loop) timeLost() []stragglerCost {
	var out struct {
		Stragglers []stragglerCost `json:"stragglers"`
	}
	l.tool("get_cost", `{"signal":"fathom.straggler.time_lost","since":"10m"}`, &out)
	return out.Stragglers
}

func allOver(transport string) func(int) string { return func(int) string { return transport } }

// Rank 5's host is 20% slower per step from some point on: its own node flags it from
// the line the gateway pushed back, the gateway flags it, nobody else is flagged, and
// find_outlier_nodes names it. Each way of being slow (more host work, or a stall
// off-CPU before the all-reduce, as a data loader does) with both fakes (asynchronous
// collective), over gRPC and over HTTP; and a HIP job over RCCL, as on AMD GPUs, whose
// device waits come from hipStreamSynchronize and its collectives from librccl.so.1.
func TestTheSlowRankOfARealJobIsNamedByItsOwnNode(t *testing.T) {
	for _, c := range []struct {
		nccl, slow, transport, threads string
		hip                            bool
	}{
		{fakegpu.NCCLAsync, "compute", "grpc", fakegpu.ThreadsSingle, false},
		{fakegpu.NCCLAsync, "stall", "http", fakegpu.ThreadsSingle, false},
		{fakegpu.NCCLBlocking, "compute", "http", fakegpu.ThreadsSingle, false},
		{fakegpu.NCCLBlocking, "stall", "grpc", fakegpu.ThreadsSingle, false},
		// PyTorch DDP's threads: all-reduces from the autograd thread, the sync on
		// the main thread.
		{fakegpu.NCCLAsync, "compute", "grpc", fakegpu.ThreadsPyTorch, false},
		{fakegpu.NCCLAsync, "stall", "http", fakegpu.ThreadsPyTorch, false},
		{fakegpu.NCCLAsync, "compute", "grpc", fakegpu.ThreadsSingle, true},
	} {
		name := c.nccl + "/" + c.slow + "/" + c.transport + "/" + c.threads
		if c.hip {
			name = "hip/" + name
		}
		t.Run(name, func(t *testing.T) {
			j := startJob(t, jobOptions{ncclMode: c.nccl, slowMode: c.slow, transport: allOver(c.transport), threads: c.threads, hip: c.hip})
			time.Sleep(12 * time.Second) // healthy: the gateway warms up, lines reach every node
			if recs := flags(j.records()); len(recs) != 0 {
				t.Fatalf("records from a healthy job: %+v", recs)
			}
			j.slowRankFlagged()
			for _, r := range flags(j.records()) {
				if r.Rank != slowRank || r.Node != "node-2" || r.State != "straggler" {
					t.Errorf("record %+v: want only records of rank 5 on node-2 being a straggler (on device wait, and on host lead when it stalls)", r)
				}
			}
			// The tool compares each rank's mean score over the whole run, healthy part
			// included, across only eight ranks: a healthy rank can sit just past
			// 3 MADs of its seven peers. What an agent reads is the ranking, so rank 5
			// must come first and lie at least twice as far out as any other rank named.
			got := j.outlierRanks(semconv.MetricStragglerScore)
			if len(got) == 0 || got[0].Rank != slowRank {
				t.Fatalf("find_outlier_nodes on the straggler score: %+v, want rank 5 first", got)
			}
			for _, o := range got[1:] {
				if o.Lag*2 > got[0].Lag {
					t.Errorf("find_outlier_nodes on the straggler score: rank %d lies %.2f from the median, rank 5 only %.2f: want rank 5 at least twice as far", o.Rank, o.Lag, got[0].Lag)
				}
			}
			t.Logf("find_outlier_nodes on the straggler score: %+v", got)
			// Matched across the nodes, rank 5 enters the all-reduces later than the
			// median rank: by its extra 1 ms per step while slow, averaged over a run
			// whose first 12 s were healthy. It is the first rank find_outlier_nodes
			// names on arrival lag, once a few seconds of its slowness are matched: the
			// flag can come 1.7 s after the onset, when the slow steps are still few in
			// the run's mean (seen in CI: none named then, rank 5 a moment later).
			var late []rankOutlier
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(500 * time.Millisecond) {
				late = j.outlierRanks(semconv.MetricRankArrivalLag)
				if (len(late) > 0 && late[0].Rank == slowRank) || time.Now().After(deadline) {
					break
				}
			}
			if len(late) == 0 || late[0].Rank != slowRank {
				t.Errorf("find_outlier_nodes on arrival lag: %+v, want rank 5 first", late)
			}
			t.Logf("find_outlier_nodes on arrival lag: %+v", late)
			// get_cost on the processor's own measure names rank 5 alone, its seven
			// peers the ranks it held up. Its 1 ms more per step of about 6 ms keeps
			// each peer waiting a sixth of the time, less what the 2-core host blurs:
			// between 2% and 50% of each flagged second.
			cost := j.timeLost()
			if len(cost) != 1 || cost[0].Node != "node-2" || cost[0].Rank == nil || *cost[0].Rank != slowRank || cost[0].AffectedRanks != jobRanks-1 ||
				cost[0].Steps < 1 || cost[0].LagSeconds < 0.02 || cost[0].LagSeconds > 0.5 {
				t.Errorf("get_cost on fathom.straggler.time_lost: %+v, want rank 5 on node-2 alone, holding its 7 peers 2-50%% of each flagged second", cost)
			} else {
				t.Logf("get_cost: rank 5 cost its peers %.1f GPU-seconds over %d flagged intervals (%.3f s each per peer)",
					cost[0].GPUHours*3600, cost[0].Steps, cost[0].LagSeconds)
			}
		})
	}
}

// Eight replicas that never call NCCL (inference replicas; a job that synchronises some
// other way) have no communicator, so the gateway compares them by their job
// (job:e2e-job), on the signals for such jobs. No replica waits for another, so device
// wait names nobody; a replica whose host work per step grows from 5 to 7 ms launches
// about a quarter fewer kernels a second, and its own node and the gateway name it on
// its launch rate, and nobody else on anything.
func TestAJobWithoutNCCLIsComparedByItsJob(t *testing.T) {
	j := startJob(t, jobOptions{noNCCL: true, slowMode: "compute", slowBy: 2 * time.Millisecond, hostCompute: 5 * time.Millisecond,
		transport: func(node int) string { return []string{"grpc", "http"}[node%2] },
		settings:  []string{"signals: [{metric: fathom.rank.launches, worse: lower}, {metric: fathom.rank.run_queue.time, worse: higher, mad_floor: 0.01}]"}})
	time.Sleep(12 * time.Second) // healthy: the gateway warms up, lines reach every node
	if recs := j.signalRecords(); len(recs) != 0 {
		t.Fatalf("records from a healthy job: %+v", recs)
	}
	j.slowRankFlagged()
	for _, r := range j.signalRecords() {
		if r.Rank != slowRank || r.Node != "node-2" || r.State != "straggler" || r.Signal != semconv.MetricRankLaunches {
			t.Errorf("record %+v: want only rank 5 on node-2 named on its launch rate", r)
		}
	}
	rows := j.sqlRows(`SELECT DISTINCT cohort FROM events WHERE name = 'fathom.straggler'`)
	if len(rows) != 1 || rows[0][0] != "job:e2e-job" {
		t.Errorf("records' cohorts %v, want job:e2e-job alone", rows)
	}
}

// One stall of a second (rank 5 sleeps once before an all-reduce, as a page-fault storm
// or a preemption would hold it) is shorter than min_duration's windows and the 5-of-6
// persistence of quarter-second samples: nobody is flagged, by the nodes or the
// gateway, on any signal, in the 15 s after it.
func TestAOneSecondStallFlagsNobody(t *testing.T) {
	j := startJob(t, jobOptions{ncclMode: fakegpu.NCCLAsync, slowMode: "stall", hostCompute: 5 * time.Millisecond, slowBy: time.Second, transport: allOver("grpc")})
	time.Sleep(12 * time.Second) // healthy: the gateway warms up, lines reach every node
	if recs := flags(j.records()); len(recs) != 0 {
		t.Fatalf("records from a healthy job: %+v", recs)
	}
	// The rank looks for the file before each all-reduce: the first look finds it and
	// stalls a second; by the next the file is gone.
	stalled := time.Now()
	j.slowDown()
	time.Sleep(50 * time.Millisecond)
	j.speedUp()
	time.Sleep(15 * time.Second)
	if recs := flags(j.records()); len(recs) != 0 {
		t.Errorf("flags after a single one-second stall: %+v", recs)
	}
	// It is recorded as a stall of rank 5, by the gateway, over about the second it
	// lasted (its samples' quarter seconds around it), after the file appeared.
	stalls := j.sqlRows(`SELECT coalesce(node, ''), coalesce(rank, -1), json_extract_string(attributes, '$."fathom.straggler.source"'),
			json_extract_string(attributes, '$."fathom.straggler.signal"'), json_extract_string(attributes, '$."fathom.straggler.since"'),
			epoch_ms(ts), body
		FROM events WHERE name = 'fathom.straggler' AND json_extract_string(attributes, '$."fathom.straggler.state"') = 'stall' ORDER BY ts`)
	found := false
	for _, row := range stalls {
		t.Logf("stall record: %v", row)
		if row[0] != "node-2" || int(row[1].(float64)) != slowRank || row[2] != "gateway" {
			continue
		}
		since, err := time.Parse(time.RFC3339Nano, row[4].(string))
		if err != nil {
			t.Fatalf("stall record %v: since: %v", row, err)
		}
		at := time.UnixMilli(int64(row[5].(float64)))
		if d := at.Sub(since); since.Before(stalled.Add(-time.Second)) || d < 600*time.Millisecond || d > 2*time.Second {
			t.Errorf("stall record %v: from %v to %v (%v), the file appeared at %v: want about the second after it", row, since, at, d, stalled)
		}
		found = true
	}
	if !found {
		t.Errorf("no stall record of rank 5 on node-2 from the gateway after a one-second stall: %v", stalls)
	}
	// The stall happened: it lies between rank 5's sync and its all-reduce, so its
	// host lead over the run is about a second more than its peers'.
	var leads []float64
	var rank5 float64
	for _, row := range j.sqlRows(`SELECT rank, max(value) FROM events WHERE name = '` + semconv.MetricRankHostLead + `' GROUP BY rank`) {
		if int(row[0].(float64)) == slowRank {
			rank5 = row[1].(float64)
		} else {
			leads = append(leads, row[1].(float64))
		}
	}
	if len(leads) != jobRanks-1 || rank5-series.Median(leads) < 0.8 {
		t.Errorf("host lead over the run: rank 5 %.3f s, its peers %v: want rank 5 a second ahead (did it stall?)", rank5, leads)
	}
	t.Logf("host lead over the run: rank 5 %.3f s, its peers' median %.3f s", rank5, series.Median(leads))
}

// A healthy job, node-3's clock 50 ms ahead of the others', flags nobody; then rank 3 is
// killed: the gateway reports it silent (its peers hang in their next sync, as NCCL's
// do, and all wait alike), and nobody is called a straggler.
func TestAHealthyRealJobFlagsNobodyAndAKilledRankIsSilent(t *testing.T) {
	j := startJob(t, jobOptions{ncclMode: fakegpu.NCCLAsync, slowMode: "compute", transport: func(node int) string {
		return []string{"grpc", "http"}[node%2]
	}, nodeEnv: func(node int) []string {
		if node == 3 {
			return []string{"FATHOM_TEST_CLOCK_OFFSET=50ms"}
		}
		return nil
	}})
	time.Sleep(20 * time.Second)
	if recs := flags(j.records()); len(recs) != 0 {
		t.Fatalf("records from a healthy job: %+v", recs)
	}
	// Each node measured its clock against the gateway's: node-3 50 ms ahead, the
	// others in step, each within the uncertainty it states (half a loopback round
	// trip, plus a millisecond for a busy 2-core host). With node-3's offset taken
	// out, its ranks enter the collectives with the others.
	for _, row := range j.sqlRows(`SELECT node, arg_max(value, ts) FILTER (WHERE name = 'fathom.node.clock.offset'),
			arg_max(value, ts) FILTER (WHERE name = 'fathom.node.clock.uncertainty')
		FROM events WHERE name LIKE 'fathom.node.clock.%' GROUP BY node ORDER BY node`) {
		node, offset, unc := row[0].(string), row[1].(float64), row[2].(float64)
		want := 0.0
		if node == "node-3" {
			want = 0.050
		}
		if math.Abs(offset-want) > unc+0.001 {
			t.Errorf("%s: clock offset %.6f s ± %.6f, want %.3f", node, offset, unc, want)
		}
		t.Logf("%s: clock offset %.6f s ± %.6f", node, offset, unc)
	}
	lags := j.sqlRows(`SELECT rank, avg(value) FROM events WHERE name = 'fathom.rank.arrival_lag' GROUP BY rank ORDER BY rank`)
	if len(lags) != jobRanks {
		t.Fatalf("arrival lags of %d ranks, want %d: %v", len(lags), jobRanks, lags)
	}
	// The arrival-lag line lies at least 2.2 ms past the median (its 0.5 ms MAD floor).
	// Healthy ranks sharing two cores enter up to about a millisecond apart on average
	// (CI saw node-3's two ranks at 1.1 and 1.25 ms once in six runs); uncorrected,
	// node-3's would be 50 ms late.
	for _, row := range lags {
		lag := row[1].(float64)
		t.Logf("rank %v: mean arrival lag %.6f s", row[0], lag)
		if math.Abs(lag) > 0.002 {
			t.Errorf("rank %v enters %.6f s after the median on average, want within 2 ms", row[0], lag)
		}
	}
	if err := syscall.Kill(j.run.Ranks[3].Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	silent := record{Node: "node-1", Rank: 3, State: "silent", Source: "gateway"}
	recs := j.waitRecords("rank 3 reported silent", 30*time.Second, func(recs []record) bool { return has(recs, silent) })
	t.Logf("rank 3 reported silent %v after it was killed", time.Since(killed).Round(100*time.Millisecond))
	if s := stragglers(recs); len(s) != 0 {
		t.Errorf("stragglers named after a rank was killed: %+v", s)
	}
}

// The gateway restarts under a running job: each node keeps its line until the TTL and
// then says it has none; the gateway comes back on the same store, and a slowdown after
// the restart is flagged by rank 5's own node again.
func TestARealJobRidesOutAGatewayRestart(t *testing.T) {
	j := startJob(t, jobOptions{ncclMode: fakegpu.NCCLAsync, slowMode: "stall", transport: func(node int) string {
		return []string{"grpc", "http"}[node%2]
	}})
	time.Sleep(8 * time.Second)
	if code := j.gateway.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("gateway exited %d", code)
	}
	time.Sleep(6 * time.Second) // past the nodes' 4 s TTL
	j.startGateway()
	j.waitRecords("every node's no_thresholds record", 30*time.Second, func(recs []record) bool {
		for node := range jobRanks / ranksPerNode {
			if !has(recs, record{Node: fmt.Sprintf("node-%d", node), Rank: -1, State: "no_thresholds", Source: "node"}) {
				return false
			}
		}
		return true
	})
	time.Sleep(8 * time.Second) // the restarted gateway warms up and pushes lines again
	if s := stragglers(j.records()); len(s) != 0 {
		t.Fatalf("stragglers before any slowdown: %+v\n%s", s, strings.Join(j.flagBodies(), "\n"))
	}
	j.slowDown()
	j.waitRecords("rank 5's node to flag it after the restart", 30*time.Second, func(recs []record) bool {
		return has(recs, record{Node: "node-2", Rank: slowRank, State: "straggler", Source: "node"})
	})
	for _, p := range j.nodes {
		if strings.Contains(p.Output(), "panic") {
			t.Errorf("a node collector panicked:\n%s", p.Output())
		}
	}
}
