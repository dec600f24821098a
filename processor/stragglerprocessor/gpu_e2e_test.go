//go:build linux

package stragglerprocessor_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// signalRecord is a fathom.straggler record with the signal that named the rank and
// what the record says.
type signalRecord struct {
	record
	Signal, Body string
}

// signalRecords reads the fathom.straggler records in the gateway's store that are
// flags, not stalls: a stall is recorded, not flagged (docs/straggler.md, Stall
// records), and a failing link's errors arrive in bursts a stall record can describe
// before the rank is flagged (seen in CI: rank 5's own 2 s stall on its RDMA errors).
func (l *loop) signalRecords() []signalRecord {
	q := `SELECT coalesce(node, ''), coalesce(rank, -1),
		json_extract_string(attributes, '$."fathom.straggler.state"'), json_extract_string(attributes, '$."fathom.straggler.source"'),
		coalesce(json_extract_string(attributes, '$."fathom.straggler.signal"'), ''), coalesce(body, '')
		FROM events WHERE name = 'fathom.straggler'
		AND coalesce(json_extract_string(attributes, '$."fathom.straggler.state"'), '') <> 'stall' ORDER BY ts`
	rows := l.sqlRows(q)
	var out []signalRecord
	for _, row := range rows {
		out = append(out, signalRecord{record: record{Node: row[0].(string), Rank: int(row[1].(float64)), State: row[2].(string), Source: row[3].(string)},
			Signal: row[4].(string), Body: row[5].(string)})
	}
	return out
}

// Rank 5's GPU starts throttling (thermal, its SM clock 20% down) under a real job:
// its kernels run slower and every rank's steps with them, so no host-side timing
// names it, but the clock its node reads from NVML does. Its own node and the gateway
// name rank 5 on the GPU clock deficit, with the GPU, its clock and the reason, and
// nobody is named on anything else. Then an XID on its GPU reaches the gateway's store
// as a record naming rank 5.
func TestARankOnAThrottledGPUIsNamedWithTheDeviceCause(t *testing.T) {
	board := t.TempDir()
	for gpu := range jobRanks {
		if err := os.WriteFile(filepath.Join(board, fmt.Sprintf("gpu%d", gpu)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	j := startJob(t, jobOptions{ncclMode: fakegpu.NCCLAsync, slowMode: "compute", transport: func(node int) string {
		return []string{"grpc", "http"}[node%2]
	}, board: board})
	time.Sleep(12 * time.Second) // healthy: the gateway warms up, lines reach every node
	if recs := j.signalRecords(); len(recs) != 0 {
		t.Fatalf("records from a healthy job: %+v", recs)
	}
	if err := os.WriteFile(filepath.Join(board, fmt.Sprintf("gpu%d", slowRank)), []byte("sm_clock=1584\nclock_event_reasons=hw_thermal\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	self, gateway := j.rank5Flagged(time.Now(), "its GPU began throttling")
	detail := fmt.Sprintf("GPU %d (GPU-fa7a0000-0000-4000-8000-%012x) SM clock 1,584 of 1,980 MHz: hw_thermal_slowdown", slowRank, slowRank)
	for _, r := range j.signalRecords() {
		if r.record != self && r.record != gateway {
			t.Errorf("record %+v: want only rank 5 on node-2 named a straggler", r)
			continue
		}
		if r.Signal != semconv.MetricRankGPUClockDeficit || !strings.HasSuffix(r.Body, "; "+detail) {
			t.Errorf("rank 5 named on %s: %q; want the GPU clock deficit, ending %q", r.Signal, r.Body, detail)
		}
	}

	// Then GPU 5 falls off the bus (XID 79): rank 5's node, whose logs policy is none,
	// still sends it, and it reaches the gateway's store naming rank 5.
	f, err := os.OpenFile(filepath.Join(board, fmt.Sprintf("gpu%d.xid", slowRank)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("79\n")
	f.Close()
	raised := time.Now()
	want := fmt.Sprintf("XID 79 on GPU %d (GPU-fa7a0000-0000-4000-8000-%012x), running rank %d (pid %d)", slowRank, slowRank, slowRank, j.run.Ranks[slowRank].Pid)
	for {
		if bodies := j.eventBodies("fathom.gpu.xid", "node-2"); len(bodies) > 0 {
			if len(bodies) != 1 || bodies[0] != want {
				t.Errorf("XID records from node-2: %q, want one: %q", bodies, want)
			}
			break
		}
		if time.Since(raised) > 10*time.Second {
			t.Fatal("the XID never reached the gateway's store")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("XID 79 in the gateway's store %v after it was raised", time.Since(raised).Round(100*time.Millisecond))
}

// eventBodies reads the bodies of the events of one name from one node in the
// gateway's store.
func (l *loop) eventBodies(name, node string) []string {
	q := fmt.Sprintf(`SELECT coalesce(body, '') FROM events WHERE name = '%s' AND node = '%s' ORDER BY ts`, name, node)
	rows := l.sqlRows(q)
	var out []string
	for _, row := range rows {
		out = append(out, row[0].(string))
	}
	return out
}

// writePortCounters writes one RDMA port's counters into a fake sysfs tree, each file
// whole and renamed into place, so the poller never reads half a number.
func writePortCounters(root, device string, values map[string]uint64) error {
	dir := filepath.Join(root, device, "ports", "1")
	if err := os.MkdirAll(filepath.Join(dir, "counters"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "link_layer"), []byte("InfiniBand\n"), 0o644); err != nil {
		return err
	}
	for name, v := range values {
		tmp := filepath.Join(dir, "counters", "."+name)
		if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d\n", v)), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, "counters", name)); err != nil {
			return err
		}
	}
	return nil
}

// Rank 5's link starts taking symbol errors (25 a second) under a real job; each rank
// is given its own port by NCCL_IB_HCA (mlx5_<rank>:1, as a wrapper script does). Its
// own node and the gateway name rank 5 on the RDMA errors of its port, and nobody is
// named on anything else.
func TestARankOnAFailingLinkIsNamedWithTheFabricCause(t *testing.T) {
	sysfs := t.TempDir()
	for rank := range jobRanks {
		if err := writePortCounters(sysfs, fmt.Sprintf("mlx5_%d", rank), map[string]uint64{"symbol_error": 0, "port_xmit_wait": 0}); err != nil {
			t.Fatal(err)
		}
	}
	j := startJob(t, jobOptions{ncclMode: fakegpu.NCCLAsync, slowMode: "compute", transport: func(node int) string {
		return []string{"grpc", "http"}[node%2]
	}, sysfs: sysfs, rankEnv: "NCCL_IB_HCA==mlx5_%r:1"})
	time.Sleep(12 * time.Second)
	if recs := j.signalRecords(); len(recs) != 0 {
		t.Fatalf("records from a healthy job: %+v", recs)
	}
	failing := time.Now()
	// 5 more symbol errors every 200 ms: 25 a second.
	defer every(t, 200*time.Millisecond, func(n int) error {
		return writePortCounters(sysfs, fmt.Sprintf("mlx5_%d", slowRank), map[string]uint64{"symbol_error": uint64(5 * n)})
	})()
	self, gateway := j.rank5Flagged(failing, "its link began failing")
	detail := fmt.Sprintf("NCCL_IB_HCA: mlx5_%d port 1 (infiniband)", slowRank)
	for _, r := range j.signalRecords() {
		if r.record != self && r.record != gateway {
			t.Errorf("record %+v: want only rank 5 on node-2 named a straggler", r)
			continue
		}
		if r.Signal != semconv.MetricRankRDMAErrors || !strings.HasSuffix(r.Body, "; "+detail) {
			t.Errorf("rank 5 named on %s: %q; want the RDMA errors, ending %q", r.Signal, r.Body, detail)
		}
	}
}

// Rank 5's GPU link starts replaying PCIe packets (50 a second) under a real job, at
// full clock: its own node and the gateway name rank 5 on its GPU's errors, with the
// GPU and the counts since the rank started, and nobody on anything else.
func TestARankWhoseGPULinkReplaysIsNamed(t *testing.T) {
	board := t.TempDir()
	write := func(gpu int, state string) error {
		// Whole and renamed: the fake NVML reads the file on every call.
		tmp := filepath.Join(board, fmt.Sprintf(".gpu%d", gpu))
		if err := os.WriteFile(tmp, []byte(state), 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, filepath.Join(board, fmt.Sprintf("gpu%d", gpu)))
	}
	for gpu := range jobRanks {
		if err := write(gpu, ""); err != nil {
			t.Fatal(err)
		}
	}
	j := startJob(t, jobOptions{ncclMode: fakegpu.NCCLAsync, slowMode: "compute", transport: func(node int) string {
		return []string{"grpc", "http"}[node%2]
	}, board: board})
	time.Sleep(12 * time.Second)
	if recs := j.signalRecords(); len(recs) != 0 {
		t.Fatalf("records from a healthy job: %+v", recs)
	}
	replaying := time.Now()
	// 10 more replays every 200 ms: 50 a second.
	defer every(t, 200*time.Millisecond, func(n int) error {
		return write(slowRank, fmt.Sprintf("pcie_replays=%d\n", 10*n))
	})()
	self, gateway := j.rank5Flagged(replaying, "its GPU's link began replaying")
	prefix := fmt.Sprintf("; GPU %d (GPU-fa7a0000-0000-4000-8000-%012x) since the rank started: ", slowRank, slowRank)
	for _, r := range j.signalRecords() {
		if r.record != self && r.record != gateway {
			t.Errorf("record %+v: want only rank 5 on node-2 named a straggler", r)
			continue
		}
		if r.Signal != semconv.MetricRankGPUErrors || !strings.Contains(r.Body, prefix) || !strings.HasSuffix(r.Body, " PCIe replays, 0 ECC errors") {
			t.Errorf("rank 5 named on %s: %q; want its GPU's errors, with %q and the replays", r.Signal, r.Body, prefix)
		}
	}
}
