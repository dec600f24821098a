package echostore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slowCountSQL takes a few milliseconds on the 1,000 planted rows, so that reads
// overlap Close; the writers' rows are on another node.
const slowCountSQL = `SELECT count(*) FROM events, range(2000) WHERE node = 'n1'`

// neverEndingSQL would run for hours; only an interrupt ends it, about half a second
// after it was asked for.
const neverEndingSQL = `SELECT count(*) FROM range(100000) a, range(100000) b WHERE a.range * b.range = -1`

// Close while tools and SQL read and the exporter writes, all on the real file: every
// read that began before Close finishes with the right answer before Close returns,
// every later one is refused with ErrClosed (none is interrupted: the grace is long),
// every acknowledged batch is in the file afterwards, and the closed store answers
// errors, never a nil database.
func TestCloseLetsReadsInFlightFinishAndRefusesLaterOnes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "echo.duckdb")
	s, err := Open(context.Background(), Options{Path: path, Threads: 2, CloseGrace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(context.Background(), testRows(1000, "n1", time.Now())); err != nil {
		t.Fatal(err)
	}

	type readEnd struct {
		at  time.Time
		err error
	}
	var (
		mu       sync.Mutex
		answered int
		ends     []readEnd
		wrong    []string
	)
	// Each reader counts the rows twice, through DB() as the tools do and through
	// QueryReadOnly as run_analysis does, until the store refuses it.
	const readers = 8
	started := make(chan struct{}, readers)
	var wg sync.WaitGroup
	for i := range readers {
		wg.Go(func() {
			for first := true; ; first = false {
				err := s.Read(context.Background(), func(ctx context.Context) error {
					var viaDB int64
					if err := s.DB().QueryRowContext(ctx, slowCountSQL).Scan(&viaDB); err != nil {
						return err
					}
					res, err := s.QueryReadOnly(ctx, `SELECT count(*) FROM events WHERE node = 'n1'`, QueryLimits{MaxRows: 10, MaxBytes: 1 << 10, Timeout: time.Minute})
					if err != nil {
						return err
					}
					mu.Lock()
					defer mu.Unlock()
					if viaDB != 2_000_000 || res.RowCount != 1 || res.Rows[0][0] != int64(1000) {
						wrong = append(wrong, fmt.Sprintf("reader %d: %d rows via DB, %v via QueryReadOnly", i, viaDB, res.Rows))
					}
					answered++
					ends = append(ends, readEnd{at: time.Now()})
					return nil
				})
				if first {
					started <- struct{}{}
				}
				if err != nil {
					mu.Lock()
					ends = append(ends, readEnd{at: time.Now(), err: err})
					mu.Unlock()
					return
				}
			}
		})
	}
	// Two writers append 100-row batches until the store refuses them; each nil is an
	// acknowledgement the file must keep.
	var acknowledged atomic.Int64
	var appendErrs []error
	var appendMu sync.Mutex
	for range 2 {
		wg.Go(func() {
			for {
				if err := s.Append(context.Background(), testRows(100, "n2", time.Now())); err != nil {
					appendMu.Lock()
					appendErrs = append(appendErrs, err)
					appendMu.Unlock()
					return
				}
				acknowledged.Add(1)
			}
		})
	}
	for range readers {
		<-started
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	closedAt := time.Now()
	wg.Wait()

	if len(wrong) != 0 {
		t.Errorf("wrong answers from %v", wrong)
	}
	if answered < readers {
		t.Errorf("%d reads answered, want at least one per reader (%d)", answered, readers)
	}
	refused := 0
	for _, e := range ends {
		switch {
		case e.err == nil && e.at.After(closedAt):
			t.Errorf("a read answered at %v, after Close returned at %v", e.at, closedAt)
		case e.err != nil && e.err != ErrClosed:
			t.Errorf("a reader ended with %v, want ErrClosed itself (refused, not interrupted)", e.err)
		case e.err != nil:
			refused++
		}
	}
	if refused != readers {
		t.Errorf("%d readers refused, want all %d", refused, readers)
	}
	for _, err := range appendErrs {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("a writer ended with %v, want ErrClosed", err)
		}
	}

	if s.DB() == nil {
		t.Fatal("a closed store hands out a nil database")
	}
	var n int
	if err := s.DB().QueryRow(`SELECT count(*) FROM events`).Scan(&n); err == nil || err.Error() != "sql: database is closed" {
		t.Errorf("a query on the closed pool: %v, want sql's database is closed", err)
	}
	if err := s.Read(context.Background(), func(context.Context) error { t.Error("a read ran after Close"); return nil }); err != ErrClosed {
		t.Errorf("Read after Close: %v, want ErrClosed", err)
	}
	if _, err := s.QueryReadOnly(context.Background(), `SELECT 1`, QueryLimits{MaxRows: 1, MaxBytes: 100, Timeout: time.Second}); err != ErrClosed {
		t.Errorf("QueryReadOnly after Close: %v, want ErrClosed", err)
	}
	if _, err := s.UsedBytes(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("UsedBytes after Close: %v, want ErrClosed", err)
	}
	if err := s.Append(context.Background(), testRows(1, "n3", time.Now())); err != ErrClosed {
		t.Errorf("Append after Close: %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}

	reopened := openTest(t, path)
	defer reopened.Close()
	if got, want := count(t, reopened), 1000+100*int(acknowledged.Load()); got != want {
		t.Errorf("the reopened file holds %d rows, want %d (1,000 planted and %d acknowledged batches of 100)", got, want, acknowledged.Load())
	}
}

// A read still running when the grace is over is interrupted: DuckDB stops its query,
// the reader is told the store closed, and Close returns a grace later with the
// database closed and the lock released.
func TestCloseInterruptsReadsPastTheGrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "echo.duckdb")
	const grace = 1500 * time.Millisecond
	s, err := Open(context.Background(), Options{Path: path, Threads: 2, CloseGrace: grace})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(context.Background(), testRows(1000, "n1", time.Now())); err != nil {
		t.Fatal(err)
	}
	running := make(chan struct{}, 2)
	errs := make(chan error, 2)
	go func() {
		errs <- s.Read(context.Background(), func(ctx context.Context) error {
			running <- struct{}{}
			var n int64
			return s.DB().QueryRowContext(ctx, neverEndingSQL).Scan(&n)
		})
	}()
	go func() {
		_, err := s.QueryReadOnly(context.Background(), neverEndingSQL, QueryLimits{MaxRows: 10, MaxBytes: 1 << 10, Timeout: time.Hour})
		errs <- err
	}()
	<-running
	// QueryReadOnly gives no sign that it runs; by now it has long begun.
	time.Sleep(100 * time.Millisecond)
	began := time.Now()
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if took := time.Since(began); took < grace || took > 2*grace {
		t.Errorf("Close took %v, want the grace (%v) and the interrupt", took, grace)
	}
	for range 2 {
		err := <-errs
		if !errors.Is(err, ErrClosed) || err.Error() != "echo store is closed: the read was interrupted because the store is shutting down" {
			t.Errorf("an interrupted read: %v, want ErrClosed saying it was interrupted", err)
		}
	}
	reopened := openTest(t, path)
	defer reopened.Close()
	if got := count(t, reopened); got != 1000 {
		t.Errorf("the reopened file holds %d rows, want 1000", got)
	}
}

// A read that ignores its interrupt keeps its database: Close gives up after two
// graces and says so, the lock stays held, the read's own query still answers, and
// when it returns the store closes and the file can be opened again.
func TestCloseNeverClosesTheDatabaseUnderARead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "echo.duckdb")
	const grace = 100 * time.Millisecond
	s, err := Open(context.Background(), Options{Path: path, Threads: 2, CloseGrace: grace})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(context.Background(), testRows(1000, "n1", time.Now())); err != nil {
		t.Fatal(err)
	}
	running, release := make(chan struct{}), make(chan struct{})
	type answer struct {
		rows int
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		var rows int
		err := s.Read(context.Background(), func(context.Context) error {
			close(running)
			<-release
			return s.DB().QueryRowContext(context.Background(), `SELECT count(*) FROM events`).Scan(&rows)
		})
		answered <- answer{rows, err}
	}()
	<-running
	began := time.Now()
	err = s.Close()
	if took := time.Since(began); took < 2*grace {
		t.Errorf("Close gave up after %v, want two graces (%v)", took, 2*grace)
	}
	want := "close echo store " + path + ": reads still running 100ms after they were interrupted: 1; the last of them closes the store"
	if err == nil || err.Error() != want {
		t.Errorf("Close under a stuck read: %v, want %q", err, want)
	}
	if _, err := Open(context.Background(), Options{Path: path}); !errors.Is(err, ErrLocked) {
		t.Errorf("open while the stuck read holds the store: %v, want ErrLocked", err)
	}

	close(release)
	if got := <-answered; got.err != nil || got.rows != 1000 {
		t.Errorf("the stuck read's own query: %d rows, %v; want 1000 and no error", got.rows, got.err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		reopened, err := Open(context.Background(), Options{Path: path, Threads: 2})
		if err == nil {
			if got := count(t, reopened); got != 1000 {
				t.Errorf("the reopened file holds %d rows, want 1000", got)
			}
			reopened.Close()
			break
		}
		if !errors.Is(err, ErrLocked) || time.Now().After(deadline) {
			t.Fatalf("open after the last read returned: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A copy that does not open is told by the file the user named: the temporary copy
// is gone by the time anyone reads the message. The error still matches its cause.
func TestOpenCopyNamesTheUsersFile(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dir := t.TempDir()
	notAStore := filepath.Join(dir, "notes.duckdb")
	if err := os.WriteFile(notAStore, []byte("not a DuckDB file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := OpenCopy(context.Background(), notAStore)
	want := `open echo store ` + notAStore + `: database/sql/driver: could not connect to database: IO Error: The file "` + notAStore +
		`" exists, but it is not a valid DuckDB database file!`
	if err == nil || err.Error() != want || strings.Contains(err.Error(), tmp) {
		t.Errorf("a copy of a file that is not a store: %v, want the error to name %s and not the copy in %s", err, notAStore, tmp)
	}

	future := filepath.Join(dir, "future.duckdb")
	s := openTest(t, future)
	if _, err := s.DB().Exec(`INSERT INTO echo_schema_version (version, description) VALUES (99, 'from the future')`); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenCopy(context.Background(), future); !errors.Is(err, ErrNewerSchema) || strings.Contains(err.Error(), tmp) {
		t.Errorf("a copy of a v99 file: %v, want ErrNewerSchema without the copy's path", err)
	}
	if entries, err := os.ReadDir(tmp); err != nil || len(entries) != 0 {
		t.Errorf("TMPDIR after the refused copies: %v %v", entries, err)
	}
}
