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
	"sync/atomic"

	"github.com/duckdb/duckdb-go/v2"
	"golang.org/x/sys/unix"
)

// ErrLocked means another process (or another store in this process) has the file open.
var ErrLocked = errors.New("echo store is locked by another writer")

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
	closed    atomic.Bool
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
	s := &Store{path: opts.Path, lockFile: lock, appenders: make(chan *appenderConn, writers)}
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
// queries. User SQL never goes through it: see QueryReadOnly.
func (s *Store) DB() *sql.DB { return s.db }

// Path is the DuckDB file.
func (s *Store) Path() string { return s.path }

// Close flushes the Appender, checkpoints (so the next start does not replay the WAL)
// and releases the lock.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	var errs []error
	// Taking every writer back waits for in-flight appends to finish.
	for range cap(s.appenders) {
		errs = append(errs, (<-s.appenders).close())
	}
	if s.db != nil {
		_, err := s.db.Exec("CHECKPOINT")
		errs = append(errs, err, s.db.Close())
		s.db = nil
	}
	s.unlock()
	if s.copyDir != "" {
		errs = append(errs, os.RemoveAll(s.copyDir))
	}
	return errors.Join(errs...)
}
