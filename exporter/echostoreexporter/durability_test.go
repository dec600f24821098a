package echostoreexporter

import (
	"bytes"
	"database/sql"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2" // database/sql driver, to read the file after the gateway is gone
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/fathom-gpu/fathom/internal/collectorconfig"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
)

// storeGateway is deploy/configs/gateway.yaml as these tests run the exporter in it:
// plaintext OTLP (the shipped gateway-plaintext.yaml, as the tests send without
// certificates) and the Echo API on plain HTTP on its loopback port, so that a test
// reads the store without a certificate of its own. The store is at the path a test
// gives Start in FATHOM_ECHO_DB where it reopens the file after the gateway is gone.
func storeGateway(t *testing.T) *collectortest.Role {
	t.Helper()
	return collectortest.Gateway(t, collectorconfig.GatewayPlaintext).Merge(t, collectorconfig.EchoOverPlainHTTP)
}

// logBatch is one OTLP request of n log records from one node, each tagged with its
// sender's sequence number so the test can tell exactly which records were stored.
func logBatch(run, node string, seq, n int) []byte {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("fathom.cluster.name", "durability")
	rl.Resource().Attributes().PutStr("host.name", node)
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	now := time.Now()
	for i := range n {
		lr := lrs.AppendEmpty()
		lr.SetTimestamp(pcommon.NewTimestampFromTime(now))
		lr.SetEventName("test.durability")
		lr.Attributes().PutStr("run", run)
		lr.Attributes().PutInt("seq", int64(seq))
		lr.Attributes().PutInt("i", int64(i))
	}
	body, err := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	if err != nil {
		panic(err)
	}
	return body
}

type acked struct {
	run  string
	mu   sync.Mutex
	seqs map[string][]int
}

func (a *acked) add(node string, seq int) {
	a.mu.Lock()
	a.seqs[node] = append(a.seqs[node], seq)
	a.mu.Unlock()
}

// send pushes batches until stop is closed or the gateway stops answering, recording
// every batch the gateway acknowledged with 200.
func send(url, node string, perBatch int, stop <-chan struct{}, a *acked, maxBatches int) {
	client := &http.Client{Timeout: 5 * time.Second}
	for seq := 0; seq < maxBatches; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		resp, err := client.Post(url, "application/x-protobuf", bytes.NewReader(logBatch(a.run, node, seq, perBatch)))
		if err != nil {
			return
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return
		}
		a.add(node, seq)
	}
}

func waitOTLP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Post(url, "application/x-protobuf", bytes.NewReader(logBatch("probe", "probe", -1, 0)))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("OTLP receiver at %s did not come up", url)
}

// openAfterExit opens the file once the dead gateway's lock is gone; DuckDB replays
// the WAL on this open.
func openAfterExit(t *testing.T, path string) *sql.DB {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		db, err := sql.Open("duckdb", path)
		if err == nil {
			if err = db.Ping(); err == nil {
				return db
			}
			db.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("open %s after the gateway exited: %v", path, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func checkAcked(t *testing.T, db *sql.DB, a *acked, perBatch int) int {
	t.Helper()
	total := 0
	for node, seqs := range a.seqs {
		for _, seq := range seqs {
			var n int
			err := db.QueryRow(`SELECT count(*) FROM events WHERE node = ? AND kind = 'log' AND cluster = 'durability'
				AND name = 'test.durability' AND json_extract_string(attributes, '$.run') = ? AND json_extract(attributes, '$.seq')::INT = ?`, node, a.run, seq).Scan(&n)
			if err != nil {
				t.Fatal(err)
			}
			if n != perBatch {
				t.Fatalf("%s batch %d was acknowledged but %d of %d records are in the store", node, seq, n, perBatch)
			}
			total += n
		}
	}
	return total
}

// Every record the gateway acknowledged is in the file after a kill -9 (WAL recovery),
// and after a clean restart on the same file.
func TestAcknowledgedSurvivesKillAndRestart(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "echo.duckdb")
	const perBatch, senders = 200, 8
	run := func(kill bool) *acked {
		// A gateway of its own each run (fresh ports), on the one store file.
		gw := storeGateway(t)
		url := "http://" + gw.Listen["FATHOM_GATEWAY_OTLP_HTTP"] + "/v1/logs"
		p := gw.Start(t, "FATHOM_ECHO_DB="+dbPath)
		waitOTLP(t, url)
		a := &acked{run: fmt.Sprint(kill), seqs: map[string][]int{}}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				send(url, fmt.Sprintf("node-%d", i), perBatch, stop, a, 1_000_000)
			}()
		}
		time.Sleep(3 * time.Second)
		if kill {
			if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		} else {
			close(stop)
			wg.Wait()
			if code := p.Terminate(t, 30*time.Second); code != 0 {
				t.Fatalf("gateway exited %d after SIGTERM:\n%s", code, p.Output())
			}
		}
		wg.Wait()
		return a
	}

	killed := run(true)
	db := openAfterExit(t, dbPath)
	got := checkAcked(t, db, killed, perBatch)
	if got == 0 {
		t.Fatal("no batch was acknowledged before the kill; the test proved nothing")
	}
	db.Close()

	restarted := run(false)
	db = openAfterExit(t, dbPath)
	defer db.Close()
	got += checkAcked(t, db, restarted, perBatch)
	var stored int
	if err := db.QueryRow(`SELECT count(*) FROM events WHERE cluster = 'durability'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	// A batch in flight at the kill may have been committed without its answer
	// arriving, so the store may hold more than was acknowledged, never less.
	if stored < got {
		t.Fatalf("store has %d records, %d were acknowledged", stored, got)
	}
	t.Logf("acknowledged %d records across a kill -9 and a clean restart; %d stored", got, stored)
}
