package echostoreexporter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// The gateway's disk, faulted under a live gateway: full, then back; or failed for good
// (the file system shut down, every read and write EIO). Senders behave like node
// collectors: each resends its current batch until the gateway acknowledges it, so
// what a refusal costs is a delay, and what the store holds at the end must be every
// acknowledged batch exactly once.

// scratchExt4 mounts a fresh ext4 file system of size bytes, on a loop device over an
// image file in the test's temp directory, and returns its mount point. ext4 (not tmpfs)
// because it can also be shut down like a failing disk.
func scratchExt4(t *testing.T, size int64) string {
	t.Helper()
	privtest.RequireRoot(t, "mounting a scratch file system for the store")
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	run("mkfs.ext4", "-q", "-F", img)
	dev := run("losetup", "--find", "--show", img)
	run("blockdev", "--setrw", dev) // a loop device can keep a previous user's read-only flag
	run("mount", dev, mnt)
	t.Cleanup(func() {
		_ = exec.Command("umount", mnt).Run()
		_ = exec.Command("losetup", "-d", dev).Run()
	})
	return mnt
}

// remount unmounts the file system at mnt and mounts it again (after a shutdown, this is
// what brings it back, as a reboot would).
func remount(t *testing.T, mnt string) {
	t.Helper()
	dev := ""
	out, err := exec.Command("findmnt", "-n", "-o", "SOURCE", mnt).Output()
	if err != nil {
		t.Fatalf("findmnt %s: %v", mnt, err)
	}
	dev = strings.TrimSpace(string(out))
	for _, args := range [][]string{{"umount", mnt}, {"mount", dev, mnt}} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// fillDisk allocates every free block of the file system at mnt to one file and returns
// its path; removing the file gives the space back.
func fillDisk(t *testing.T, mnt string) string {
	t.Helper()
	path := filepath.Join(mnt, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var off int64
	for _, chunk := range []int64{16 << 20, 1 << 20, 4 << 10} {
		for {
			err := syscall.Fallocate(int(f.Fd()), 0, off, chunk)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatalf("fallocate: %v", err)
			}
			off += chunk
		}
	}
	return path
}

// shutDownDisk makes the file system at mnt fail every operation with EIO, as ext4
// does after a fatal disk error (EXT4_IOC_SHUTDOWN, without flushing the journal: what
// was fsync'd is on disk, the rest is gone).
func shutDownDisk(t *testing.T, mnt string) {
	t.Helper()
	const ext4IOCShutdown = 0x8004587d // _IOR('X', 125, __u32)
	const noLogFlush = 2               // EXT4_GOING_FLAGS_NOLOGFLUSH
	d, err := os.Open(mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	flag := uint32(noLogFlush)
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, d.Fd(), ext4IOCShutdown, uintptr(unsafe.Pointer(&flag))); errno != 0 {
		t.Fatalf("EXT4_IOC_SHUTDOWN: %v", errno)
	}
}

// resendingNode sends numbered batches like a node's otlp exporter with retry_on_failure:
// a refused batch is sent again until acknowledged.
type resendingNode struct {
	name string
	// post sends one request and returns "" when it was acknowledged, else what the
	// gateway answered (status and message).
	post func(body []byte) string

	mu       sync.Mutex
	acked    []int
	refusals map[string]int // answer -> times
}

func (n *resendingNode) run(run string, perBatch int, every time.Duration, stop <-chan struct{}) {
	for seq := 0; ; seq++ {
		body := logBatch(run, n.name, seq, perBatch)
		for {
			select {
			case <-stop:
				return
			default:
			}
			answer := n.post(body)
			if answer == "" {
				n.mu.Lock()
				n.acked = append(n.acked, seq)
				n.mu.Unlock()
				break
			}
			n.mu.Lock()
			n.refusals[answer]++
			n.mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(every)
	}
}

func (n *resendingNode) counts() (acked, refused int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range n.refusals {
		refused += c
	}
	return len(n.acked), refused
}

func httpNode(name, url string) *resendingNode {
	client := &http.Client{Timeout: 10 * time.Second}
	return &resendingNode{name: name, refusals: map[string]int{}, post: func(body []byte) string {
		resp, err := client.Post(url, "application/x-protobuf", strings.NewReader(string(body)))
		if err != nil {
			return "transport: " + err.Error()
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return ""
		}
		// The OTLP/HTTP receiver answers protobuf google.rpc.Status; its message is
		// readable in the raw bytes.
		buf := make([]byte, 4096)
		k, _ := resp.Body.Read(buf)
		return fmt.Sprintf("HTTP %d Retry-After=%q %s", resp.StatusCode, resp.Header.Get("Retry-After"), printable(buf[:k]))
	}}
}

func grpcNode(t *testing.T, name, addr string) *resendingNode {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := plogotlp.NewGRPCClient(conn)
	return &resendingNode{name: name, refusals: map[string]int{}, post: func(body []byte) string {
		req := plogotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			panic(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := client.Export(ctx, req)
		if err == nil {
			return ""
		}
		st := status.Convert(err)
		retry := ""
		for _, d := range st.Details() {
			retry += fmt.Sprintf(" %T", d)
		}
		return fmt.Sprintf("gRPC %s%s %s", st.Code(), retry, st.Message())
	}}
}

func printable(b []byte) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r > '~' {
			return -1
		}
		return r
	}, string(b))
}

// sqlCount runs one count query through the gateway's Echo API.
func (g *hostileGateway) sqlCount(t *testing.T, query string) (int, int) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"sql": query})
	req, _ := http.NewRequest(http.MethodPost, g.api+"/api/v1/sql", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+collectortest.AgentToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /api/v1/sql: %v", err)
	}
	defer resp.Body.Close()
	var res struct {
		Rows [][]any `json:"rows"`
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, -1
	}
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || len(res.Rows) != 1 {
		t.Fatalf("sql answer: %v %v", err, res)
	}
	return resp.StatusCode, int(res.Rows[0][0].(float64))
}

// checkExactlyOnce reads the store file after the gateway has exited: every batch a node
// had acknowledged is there with all its records, none twice; a batch refused until the
// end is there whole or not at all.
func checkExactlyOnce(t *testing.T, dbPath, run string, nodes []*resendingNode, perBatch int) int {
	t.Helper()
	db := openAfterExit(t, dbPath)
	defer db.Close()
	total := 0
	for _, n := range nodes {
		stored := map[int]int{}
		rows, err := db.Query(`SELECT json_extract(attributes, '$.seq')::INT, count(*) FROM events
			WHERE cluster = 'durability' AND node = ? AND json_extract_string(attributes, '$.run') = ? GROUP BY 1`, n.name, run)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var seq, c int
			if err := rows.Scan(&seq, &c); err != nil {
				t.Fatal(err)
			}
			stored[seq] = c
		}
		rows.Close()
		for _, seq := range n.acked {
			if stored[seq] != perBatch {
				t.Errorf("%s batch %d was acknowledged; the store holds %d of its %d records", n.name, seq, stored[seq], perBatch)
			}
			delete(stored, seq)
			total += perBatch
		}
		for seq, c := range stored {
			// The one batch a node was still resending when it stopped may have been
			// committed without its answer arriving.
			if seq != len(n.acked) || c != perBatch {
				t.Errorf("%s batch %d: %d records stored but never acknowledged", n.name, seq, c)
			}
		}
	}
	return total
}

// A full disk refuses exports with a retryable status and a message that says so; the
// gateway stays up and keeps answering reads; when the space comes back it takes the
// resent batches, and the file holds every acknowledged batch exactly once.
func TestDiskFullRefusesExportsAndRecoversWhenSpaceReturns(t *testing.T) {
	mnt := scratchExt4(t, 256<<20)
	dbPath := filepath.Join(mnt, "echo.duckdb")
	g := startHostileGatewayOn(t, dbPath)
	const perBatch = 200
	nodes := []*resendingNode{
		httpNode("node-http-0", g.otlpHTTP), httpNode("node-http-1", g.otlpHTTP), grpcNode(t, "node-grpc", g.rpc),
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { n.run("diskfull", perBatch, 50*time.Millisecond, stop) })
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	progress := func(min int) func() bool {
		return func() bool {
			for _, n := range nodes {
				if a, _ := n.counts(); a < min {
					return false
				}
			}
			return true
		}
	}
	collectortest.WaitFor(t, "every node's first 10 batches", 30*time.Second, progress(10))
	for _, n := range nodes {
		if _, r := n.counts(); r != 0 {
			t.Fatalf("%s refused before the disk filled: %v", n.name, n.refusals)
		}
	}

	filler := fillDisk(t, mnt)
	collectortest.WaitFor(t, "every node to be refused", 30*time.Second, func() bool {
		for _, n := range nodes {
			if _, r := n.counts(); r < 3 {
				return false
			}
		}
		return true
	})
	ackedWhileFull := map[string]int{}
	for _, n := range nodes {
		ackedWhileFull[n.name], _ = n.counts()
	}
	time.Sleep(2 * time.Second)
	g.alive(t, "the disk filled")
	code, stored := g.sqlCount(t, `SELECT count(*) FROM events WHERE cluster = 'durability'`)
	if code != http.StatusOK {
		t.Errorf("a read while the disk is full answered %d", code)
	}
	total := 0
	for _, n := range nodes {
		a, _ := n.counts()
		if a != ackedWhileFull[n.name] {
			t.Errorf("%s: %d batches acknowledged while the disk stayed full", n.name, a-ackedWhileFull[n.name])
		}
		total += a * perBatch
	}
	if stored < total {
		t.Errorf("while full, the store reads %d records; %d were acknowledged", stored, total)
	}
	for _, n := range nodes {
		n.mu.Lock()
		for answer, c := range n.refusals {
			t.Logf("%s refused %d times: %s", n.name, c, answer)
			if !strings.Contains(answer, "no space left on device") ||
				!(strings.HasPrefix(answer, "HTTP 503") || strings.HasPrefix(answer, "gRPC Unavailable")) {
				t.Errorf("%s: refusal %q is not a retryable status saying the disk is full", n.name, answer)
			}
		}
		n.mu.Unlock()
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	collectortest.WaitFor(t, "every node to be acknowledged again", 60*time.Second, func() bool {
		for _, n := range nodes {
			if a, _ := n.counts(); a < ackedWhileFull[n.name]+5 {
				return false
			}
		}
		return true
	})
	close(stop)
	wg.Wait()
	if code := g.proc.Terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("gateway exited %d:\n%s", code, g.proc.Output())
	}
	got := checkExactlyOnce(t, dbPath, "diskfull", nodes, perBatch)
	t.Logf("%d records acknowledged across a full disk, all stored once", got)
}

// A disk that fails for good (every I/O EIO) refuses exports with a retryable status,
// the gateway stays up, and nothing it acknowledged before the failure is lost: after the
// file system is mounted again, every acknowledged batch is in the file exactly once.
func TestFailedDiskRefusesExportsAndKeepsWhatWasAcknowledged(t *testing.T) {
	mnt := scratchExt4(t, 256<<20)
	dbPath := filepath.Join(mnt, "echo.duckdb")
	g := startHostileGatewayOn(t, dbPath)
	const perBatch = 200
	nodes := []*resendingNode{httpNode("node-http", g.otlpHTTP), grpcNode(t, "node-grpc", g.rpc)}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { n.run("diskfailed", perBatch, 50*time.Millisecond, stop) })
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	collectortest.WaitFor(t, "every node's first 10 batches", 30*time.Second, func() bool {
		for _, n := range nodes {
			if a, _ := n.counts(); a < 10 {
				return false
			}
		}
		return true
	})

	shutDownDisk(t, mnt)
	collectortest.WaitFor(t, "every node to be refused", 30*time.Second, func() bool {
		for _, n := range nodes {
			if _, r := n.counts(); r < 3 {
				return false
			}
		}
		return true
	})
	time.Sleep(time.Second)
	g.alive(t, "the disk failed")
	close(stop)
	wg.Wait()
	for _, n := range nodes {
		for answer, c := range n.refusals {
			t.Logf("%s refused %d times: %s", n.name, c, answer)
			if !strings.Contains(answer, "input/output error") ||
				!(strings.HasPrefix(answer, "HTTP 503") || strings.HasPrefix(answer, "gRPC Unavailable")) {
				t.Errorf("%s: refusal %q is not a retryable status naming the I/O error", n.name, answer)
			}
		}
	}
	// Shutting down cannot checkpoint a file on a dead disk: the gateway says so and
	// exits non-zero, so that a supervisor sees the failure.
	code := g.proc.Terminate(t, 30*time.Second)
	out := g.proc.Output()
	last := out[strings.LastIndex(out[:len(out)-1], "\n")+1:]
	if code == 0 || !strings.Contains(last, "checkpoint") || !strings.Contains(last, "Input/output error") {
		t.Errorf("gateway on a failed disk exited %d; its last line does not say the store could not be checkpointed for an I/O error: %s", code, last)
	}

	remount(t, mnt)
	got := checkExactlyOnce(t, dbPath, "diskfailed", nodes, perBatch)
	if got == 0 {
		t.Fatal("nothing was acknowledged before the disk failed; the test proved nothing")
	}
	t.Logf("%d records acknowledged before the disk failed, all stored once", got)
}
