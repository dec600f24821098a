// Package echostore owns the Echo DuckDB file: one DuckDB instance per process, opened
// read-write behind an exclusive lock, migrated to the current schema at start. The
// writer (the Appender) and every reader are connections on that one instance, because
// a second instance on the same file is refused or sees stale data.
//
// It is the store side of Echo: open and lock, schema and migrations, ingest,
// retention. It knows nothing of tools, tokens or transports (internal/echotools,
// echoapi, echostdio). QueryReadOnly lives here all the same: half of its guards are how
// the instance is opened (external access and configuration changes off, see dsn), so
// the guarantee that no user query can change anything is kept in one package.
package echostore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duckdb/duckdb-go/v2"
	"golang.org/x/sys/unix"
)

// ErrLocked means another process (or another store in this process) has the file open.
var ErrLocked = errors.New("echo store is locked by another writer")

// ErrClosed is the answer to a read or write that came after Close began, or a read
// that Close interrupted because it ran past the close grace.
var ErrClosed = errors.New("echo store is closed")

// DefaultCloseGrace is how long Close lets reads in flight finish before it interrupts
// them: a tool call takes milliseconds, run_analysis at most its sql.timeout, and a
// collector being stopped should not wait on a forgotten 10^10-row join.
const DefaultCloseGrace = 5 * time.Second

// Options configure how the file is opened.
type Options struct {
	// Path of the DuckDB file; its directory must exist or be creatable.
	Path string
	// MemoryLimit is DuckDB's memory_limit (e.g. "2GB"); empty keeps DuckDB's default.
	MemoryLimit string
	// Threads is DuckDB's thread count; 0 means DefaultThreads.
	Threads int
	// Writers is how many Appenders write in parallel; 0 means 2.
	Writers int
	// CloseGrace is how long Close waits for reads in flight before it interrupts them,
	// and then again for the interrupted ones to return; 0 means DefaultCloseGrace.
	CloseGrace time.Duration
}

// Store is an open Echo file.
type Store struct {
	path      string
	connector *duckdb.Connector
	db        *sql.DB
	lockFile  *os.File

	// appenders is the pool of writers; taking one from the channel is the right to
	// write with it.
	appenders chan *appenderConn
	// closed is set, under readsMu, when Close begins: from then on Read and Append
	// answer ErrClosed.
	closed atomic.Bool

	// readsMu orders a read's start against Close, so that Close's count of reads in
	// flight cannot miss one that is about to start.
	readsMu sync.Mutex
	reads   sync.WaitGroup
	// readsRunning is the count of reads in flight, for Close's error when some will
	// not stop.
	readsRunning atomic.Int64
	// interruptReads cancels, with ErrClosed as the cause, every read in flight.
	readsCtx       context.Context
	interruptReads context.CancelCauseFunc
	closeGrace     time.Duration
	// readPolicy decides which user queries only read the store; see QueryReadOnly.
	readPolicy *readPolicy
	// copyDir is the private directory of a store opened by OpenCopy, removed on Close.
	copyDir string
}

// Open locks, opens and migrates the file. A second Open of the same file, from this
// process or another, fails with ErrLocked before DuckDB is touched.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Path == "" {
		return nil, errors.New("echo store path is empty")
	}
	if err := os.MkdirAll(filepath.Dir(opts.Path), 0o750); err != nil {
		return nil, fmt.Errorf("create directory for echo store: %w", err)
	}
	lock, err := lockFile(opts.Path + ".lock")
	if err != nil {
		return nil, err
	}
	writers := opts.Writers
	if writers <= 0 {
		writers = 2
	}
	if opts.Threads <= 0 {
		opts.Threads = DefaultThreads(runtime.NumCPU(), writers)
	}
	s := &Store{path: opts.Path, lockFile: lock, appenders: make(chan *appenderConn, writers), closeGrace: opts.CloseGrace}
	if s.closeGrace <= 0 {
		s.closeGrace = DefaultCloseGrace
	}
	s.readsCtx, s.interruptReads = context.WithCancelCause(context.Background())
	for range writers {
		s.appenders <- &appenderConn{}
	}
	if err := s.open(ctx, opts); err != nil {
		s.unlock()
		return nil, err
	}
	return s, nil
}

// DefaultThreads leaves a core to each writer. Each INSERT already runs on its writer's
// own thread; DuckDB's workers on top of that split every batch across the cores the
// writers are using. On 2 cores with 2 writers, threads=1 ingests ~200k rows/s between
// checkpoints against ~135k with one thread per core (BenchmarkIngestWhileQuerying,
// 600k rows, back to back); queries on a bigger gateway still get the cores the
// writers leave.
func DefaultThreads(cores, writers int) int {
	return max(1, cores-writers)
}

// lockFile takes a BSD flock on a sidecar file. DuckDB's own fcntl lock catches a second
// process but not a second open inside this process (fcntl locks are per process, and
// duckdb-go caches instances per path); flock on a fresh descriptor catches both, and
// the pid written into the file tells the operator who holds it.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("%w: %s is held (holder pid %s); stop the other gateway or point this one at another path",
			ErrLocked, path, strings.TrimSpace(string(holder)))
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

func (s *Store) unlock() {
	if s.lockFile != nil {
		_ = unix.Flock(int(s.lockFile.Fd()), unix.LOCK_UN)
		s.lockFile.Close()
		s.lockFile = nil
	}
}

// dsn sets the engine-level guards at open, before any connection exists: no file or
// network access outside the database itself, no extension installs or autoloads, and
// the configuration locked so that no later statement can undo any of it.
func dsn(opts Options) string {
	q := url.Values{}
	q.Set("access_mode", "read_write")
	q.Set("enable_external_access", "false")
	q.Set("autoinstall_known_extensions", "false")
	q.Set("autoload_known_extensions", "false")
	q.Set("allow_community_extensions", "false")
	q.Set("allow_persistent_secrets", "false")
	// A checkpoint rewrites the table's last, partly filled row group; with DuckDB's
	// 16 MiB default it ran every ~100k rows of ingest and cost as much as the appends.
	// 128 MiB of WAL is a few seconds of replay after a crash.
	q.Set("checkpoint_threshold", "128MB")
	if opts.MemoryLimit != "" {
		q.Set("memory_limit", opts.MemoryLimit)
	}
	q.Set("threads", strconv.Itoa(opts.Threads))
	q.Set("lock_configuration", "true")
	return opts.Path + "?" + q.Encode()
}

func (s *Store) open(ctx context.Context, opts Options) error {
	connector, err := duckdb.NewConnector(dsn(opts), nil)
	if err != nil {
		return fmt.Errorf("open echo store %s: %w", opts.Path, err)
	}
	s.connector = connector
	s.db = sql.OpenDB(connector)
	if err := migrate(ctx, s.db); err != nil {
		s.db.Close()
		return err
	}
	if s.readPolicy, err = loadReadPolicy(ctx, s.db); err != nil {
		s.db.Close()
		return err
	}
	return nil
}

// DB is a pool of connections on the store's own instance, for fixed, parameterised
// queries inside Read, which keeps Close from closing the pool under them. User SQL
// never goes through it: see QueryReadOnly. After Close it is a closed pool, whose
// every call fails with sql's "database is closed", never a nil one.
func (s *Store) DB() *sql.DB { return s.db }

// Path is the DuckDB file.
func (s *Store) Path() string { return s.path }

// Read runs read as one reader of the store: Close does not close the database while
// read runs. A read that starts after Close began gets ErrClosed without running. One
// still running when the close grace is over has its context cancelled (DuckDB
// interrupts its query) and its error becomes ErrClosed, so its caller learns why.
// Retention passes and rollup rebuilds run as Reads too: they use the pool outside
// the Appenders, and an interrupted one is rolled back.
func (s *Store) Read(ctx context.Context, read func(ctx context.Context) error) error {
	s.readsMu.Lock()
	if s.closed.Load() {
		s.readsMu.Unlock()
		return ErrClosed
	}
	s.reads.Add(1)
	s.readsRunning.Add(1)
	s.readsMu.Unlock()
	defer s.reads.Done()
	defer s.readsRunning.Add(-1)

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopInterrupt := context.AfterFunc(s.readsCtx, func() { cancel(ErrClosed) })
	defer stopInterrupt()
	err := read(ctx)
	if err != nil && errors.Is(context.Cause(ctx), ErrClosed) {
		return fmt.Errorf("%w: the read was interrupted because the store is shutting down", ErrClosed)
	}
	return err
}

// Close flushes the Appender, checkpoints (so the next start does not replay the WAL)
// and releases the lock. It refuses new reads and writes at once, waits for the writes
// in flight (each is committed or rolled back, and answers its sender either way), and
// gives the reads in flight the close grace before it interrupts them. The database is
// closed only once no read is left: closing it under a running query would crash the
// process. When interrupted reads still have not returned after another grace, Close
// answers an error and the last of them finishes the close; every committed row is in
// the WAL meanwhile, so nothing is lost however the process ends. A second Close
// answers nil at once.
func (s *Store) Close() error {
	s.readsMu.Lock()
	alreadyClosed := s.closed.Swap(true)
	s.readsMu.Unlock()
	if alreadyClosed {
		return nil
	}
	var errs []error
	// Taking every writer back waits for in-flight appends to finish. The closed ones
	// go back into the pool, where an Append still waiting for one finds it and
	// answers ErrClosed instead of waiting for ever.
	closedWriters := make([]*appenderConn, 0, cap(s.appenders))
	for range cap(s.appenders) {
		a := <-s.appenders
		errs = append(errs, a.close())
		closedWriters = append(closedWriters, a)
	}
	for _, a := range closedWriters {
		s.appenders <- a
	}
	readsDone := make(chan struct{})
	go func() {
		s.reads.Wait()
		close(readsDone)
	}()
	select {
	case <-readsDone:
	case <-time.After(s.closeGrace):
		s.interruptReads(ErrClosed)
		select {
		case <-readsDone:
		case <-time.After(s.closeGrace):
			go func() {
				<-readsDone
				_ = s.closeDatabase()
			}()
			return errors.Join(append(errs, fmt.Errorf("close echo store %s: reads still running %s after they were interrupted: %d; the last of them closes the store",
				s.path, s.closeGrace, s.readsRunning.Load()))...)
		}
	}
	errs = append(errs, s.closeDatabase())
	return errors.Join(errs...)
}

// closeDatabase checkpoints and closes the database once no reader or writer is left,
// then releases the lock and removes a copy's directory.
func (s *Store) closeDatabase() error {
	s.interruptReads(ErrClosed)
	_, err := s.db.Exec("CHECKPOINT")
	errs := []error{err, s.db.Close()}
	s.unlock()
	if s.copyDir != "" {
		errs = append(errs, os.RemoveAll(s.copyDir))
	}
	return errors.Join(errs...)
}
