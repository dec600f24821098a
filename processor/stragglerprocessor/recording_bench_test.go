//go:build linux && bench

package stragglerprocessor_test

import (
	"compress/gzip"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
)

// TestRecordRankSignals runs one shape of the detection matrix as a real job under BPF
// and writes the rank signals its gateway stored, point by point, to
// FATHOM_RECORD_DIR/<shape>.csv.gz, with the slowdowns' onsets and ends: the detector's
// replay tests (replay_test.go) judge the recordings in seconds, where the job took
// minutes. The slow rank is slowed by 20%, 10% and 5% of its host work in turn, each
// for 40 s between healthy minutes. FATHOM_RECORD_SHAPE names the shape: base (the
// matrix's), pytorch (its threading row), 8ranks (four ranks a core), pair (two ranks,
// one a node: its one-rank-a-core row), step200 (its 200 ms step row), stall (its
// off-CPU stall row). Run: go test
// -tags duckdb_arrow,bench -run TestRecordRankSignals -v ./processor/stragglerprocessor
// (root).
func TestRecordRankSignals(t *testing.T) {
	dir := os.Getenv("FATHOM_RECORD_DIR")
	if dir == "" {
		dir = filepath.Join(fakegpu.RepoRoot(), "build", "straggler-recordings")
	}
	shape := os.Getenv("FATHOM_RECORD_SHAPE")
	row := baseMatrixRow()
	switch shape {
	case "", "base":
		shape = "base"
	case "pytorch":
		row.opts.threads = fakegpu.ThreadsPyTorch
		row.value = "6 ranks, 3 a core, 2 ms steps, PyTorch DDP's threads, host compute"
	case "8ranks":
		row.opts.ranks, row.opts.slowRank = 8, 5
		row.value = "8 ranks, 4 a core, 2 ms steps, single thread, host compute"
	case "pair":
		row.opts.ranks, row.opts.perNode, row.opts.slowRank = 2, 1, 1
		row.value = "2 ranks, 1 a core, one a node, 2 ms steps, single thread, host compute"
	case "step200":
		row.opts.hostCompute = 200 * time.Millisecond
		row.value = "6 ranks, 3 a core, 200 ms steps, single thread, host compute"
	case "stall":
		row.opts.slowMode = "stall"
		row.value = "6 ranks, 3 a core, 2 ms steps, single thread, off-CPU stall before the all-reduce"
	default:
		t.Fatalf("FATHOM_RECORD_SHAPE %q: base, pytorch, 8ranks, pair, step200 or stall", shape)
	}
	o := row.opts
	o.slowBy = o.hostCompute / 5 // replaced by each slowdown's own delay
	j := startJob(t, o)
	start := time.Now()
	type segment struct {
		pct     int
		on, off time.Time
	}
	var segments []segment
	time.Sleep(60 * time.Second)
	for _, pct := range []int{20, 10, 5} {
		us := float64(o.hostCompute.Microseconds()) * float64(pct) / 100
		if err := os.WriteFile(j.slowFile, []byte(fmt.Sprintf("%g\n", us)), 0o600); err != nil {
			t.Fatal(err)
		}
		seg := segment{pct: pct, on: time.Now()}
		time.Sleep(40 * time.Second)
		seg.off = j.speedUp()
		segments = append(segments, seg)
		time.Sleep(60 * time.Second)
	}
	names := []string{}
	for _, n := range []string{"fathom.rank.device_wait.time", "fathom.rank.host_lead.time", "fathom.rank.cpu.time", "fathom.rank.cpu.per_collective"} {
		names = append(names, "'"+n+"'")
	}
	// Paged: the SQL API answers at most 10,000 rows a query (sql.max_rows).
	var rows [][]any
	for {
		page := j.sqlRows(fmt.Sprintf(`SELECT name, coalesce(cluster, ''), coalesce(cohort, ''), coalesce(job, ''), coalesce(node, ''), rank, coalesce(pid, 0),
			coalesce(epoch_us(start_ts), 0), epoch_us(ts), value FROM events WHERE rank IS NOT NULL AND name IN (%s)
			ORDER BY ts, name, rank LIMIT 5000 OFFSET %d`, strings.Join(names, ", "), len(rows)))
		rows = append(rows, page...)
		if len(page) < 5000 {
			break
		}
	}
	if len(rows) == 0 {
		t.Fatal("no rank signals stored")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, shape+".csv.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	z := gzip.NewWriter(f)
	w := csv.NewWriter(z)
	// The header rows: the shape and its slow rank, then each slowdown.
	w.Write([]string{"#shape", shape, row.value, fmt.Sprint(o.slowRank), start.UTC().Format(time.RFC3339Nano)})
	for _, s := range segments {
		w.Write([]string{"#slowdown", fmt.Sprint(s.pct), fmt.Sprint(s.on.UnixMicro()), fmt.Sprint(s.off.UnixMicro())})
	}
	w.Write([]string{"name", "cluster", "cohort", "job", "node", "rank", "pid", "start_us", "ts_us", "value"})
	for _, r := range rows {
		rec := make([]string, len(r))
		for i, v := range r {
			rec[i] = fmt.Sprint(v)
			if f, ok := v.(float64); ok {
				// Times (µs since the epoch) whole, values to ten significant digits: a
				// %g of a 16-digit time rounds it to the second.
				rec[i] = strconv.FormatFloat(f, 'f', -1, 64)
				if i == len(r)-1 {
					rec[i] = strconv.FormatFloat(f, 'g', 10, 64)
				}
			}
		}
		w.Write(rec)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d points written to %s; slowdowns %+v", len(rows), path, segments)
	for _, r := range j.timedRecords() {
		t.Logf("record %+v", r)
	}
}
