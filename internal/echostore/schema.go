package echostore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// SchemaVersion is the newest schema this build knows. A file whose ledger says more was
// written by a newer Fathom; opening it with this one is a downgrade and is refused.
const SchemaVersion = 3

// ErrNewerSchema means the file was migrated by a newer Fathom.
var ErrNewerSchema = errors.New("echo store has a newer schema than this fathom")

type migration struct {
	version     int
	description string
	statements  []string
}

// migrations run in order, each in one transaction together with its ledger row, so a
// crash mid-migration leaves the file at the previous version.
//
// The events table has no ART index: an index must be kept in memory whole and slows the
// Appender several-fold. Rows arrive in time order, so DuckDB's per-row-group min/max
// (zone maps) already skip old data for time filters, and cluster/node have few values
// per row group; the views below give the common filters a name.
var migrations = []migration{
	{
		version:     1,
		description: "events table: one row per OTLP data point or log record",
		statements: []string{
			`CREATE TABLE events (
				ts              TIMESTAMP NOT NULL,
				kind            VARCHAR NOT NULL,
				cluster         VARCHAR,
				node            VARCHAR,
				job             VARCHAR,
				cohort          VARCHAR,
				rank            INTEGER,
				local_rank      INTEGER,
				world_size      INTEGER,
				pid             BIGINT,
				process         VARCHAR,
				thread_id       BIGINT,
				name            VARCHAR NOT NULL,
				api             VARCHAR,
				comm_id         VARCHAR,
				value           DOUBLE,
				count           BIGINT,
				sum             DOUBLE,
				min             DOUBLE,
				max             DOUBLE,
				p50             DOUBLE,
				p95             DOUBLE,
				p99             DOUBLE,
				unit            VARCHAR,
				severity        VARCHAR,
				severity_number INTEGER,
				body            VARCHAR,
				trace_id        VARCHAR,
				attributes      VARCHAR NOT NULL
			)`,
		},
	},
	{
		version:     2,
		description: "rollups: per-minute signal sums (signal_rollup) and log-bucket counts of per-call API latencies (trace_rollup)",
		statements: []string{
			// Exact percentiles over millions of raw rows cost a sort per (api, node)
			// group at query time; this rollup, written in the same transaction as the
			// rows it summarises, makes get_trace_stats a scan of bucket counts.
			`CREATE TABLE trace_rollup (
				minute  TIMESTAMP NOT NULL,
				cluster VARCHAR,
				node    VARCHAR NOT NULL,
				api     VARCHAR NOT NULL,
				name    VARCHAR NOT NULL,
				unit    VARCHAR,
				bucket  INTEGER NOT NULL,
				count   BIGINT NOT NULL
			)`,
			// Comparing nodes over a window needs each node's mean of a signal; this
			// rollup makes that a scan of per-minute sums instead of every point.
			`CREATE TABLE signal_rollup (
				minute     TIMESTAMP NOT NULL,
				cluster    VARCHAR,
				node       VARCHAR NOT NULL,
				rank       INTEGER,
				name       VARCHAR NOT NULL,
				unit       VARCHAR,
				world_size INTEGER,
				count      BIGINT NOT NULL,
				sum        DOUBLE NOT NULL
			)`,
			// Files written by v1 get their rollups from the rows they already hold.
			traceRollupBackfillSQL,
			signalRollupBackfillSQL,
		},
	},
	{
		version:     3,
		description: "start_ts and histogram buckets: what a window added to a cumulative series, by the one rule of internal/series",
		statements: []string{
			// A cumulative point holds the total since its series began. What a window
			// added is decided from when the series began (a reset, a collector
			// restart, a series older than the window), and a window's percentiles
			// need the buckets it gained, not the quantiles of snapshots. Rows written
			// before v3 keep NULL here: their start is unknown.
			`ALTER TABLE events ADD COLUMN start_ts TIMESTAMP`,
			// Exponential histograms: the positive buckets as an offset and a list
			// of counts, at their scale, and the zero bucket. A list of counts is
			// OTLP's own layout (at most the sender's max size, 160 buckets for the
			// receiver), which DuckDB stores in a child column compressed like any
			// other; an encoding of our own would have to be decoded by every query.
			`ALTER TABLE events ADD COLUMN scale INTEGER`,
			`ALTER TABLE events ADD COLUMN bucket_offset INTEGER`,
			`ALTER TABLE events ADD COLUMN zero_count UBIGINT`,
			`ALTER TABLE events ADD COLUMN bucket_counts UBIGINT[]`,
			// Explicit-bucket histograms: their bounds (bucket_counts has one more).
			`ALTER TABLE events ADD COLUMN explicit_bounds DOUBLE[]`,
		},
	},
}

// BucketsPerOctave is the rollup's resolution: bucket b holds values in
// [2^(b/32), 2^((b+1)/32)), about 2.2% wide, so a percentile read from it is within
// about 1.1% of the exact one.
const BucketsPerOctave = 32

const bucketsPerOctaveSQL = "32"

// traceRollupBackfillSQL builds trace_rollup from the events table, bucketing exactly
// as Bucket does; signalRollupBackfillSQL does the same for signal_rollup.
const traceRollupBackfillSQL = `INSERT INTO trace_rollup
	SELECT date_trunc('minute', ts), cluster, node, api, name, unit,
		least(greatest(floor(log2(value) * ` + bucketsPerOctaveSQL + `), -32000), 32000)::INTEGER, count(*)
	FROM events
	WHERE kind = 'log' AND api IS NOT NULL AND node IS NOT NULL AND value > 0 AND isfinite(value)
	GROUP BY ALL`

const signalRollupBackfillSQL = `INSERT INTO signal_rollup
	SELECT date_trunc('minute', ts), cluster, node, rank, name, unit, max(world_size), count(*), sum(value)
	FROM events
	WHERE node IS NOT NULL AND value IS NOT NULL AND isfinite(value)
	GROUP BY date_trunc('minute', ts), cluster, node, rank, name, unit`

// RebuildRollup recomputes both rollups from the events table, for rows written with
// plain SQL (bulk imports, benchmark fixtures) rather than through Append.
func (s *Store) RebuildRollup(ctx context.Context) error {
	return s.Read(ctx, s.rebuildRollup)
}

func (s *Store) rebuildRollup(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	for _, stmt := range []string{"DELETE FROM trace_rollup", "DELETE FROM signal_rollup", traceRollupBackfillSQL, signalRollupBackfillSQL} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Columns is the events table's column list in Appender order.
var Columns = []string{
	"ts", "kind", "cluster", "node", "job", "cohort", "rank", "local_rank", "world_size",
	"pid", "process", "thread_id", "name", "api", "comm_id", "value", "count", "sum", "min",
	"max", "p50", "p95", "p99", "unit", "severity", "severity_number", "body", "trace_id",
	"attributes", "start_ts", "scale", "bucket_offset", "zero_count", "bucket_counts", "explicit_bounds",
}

// SchemaDDL is the current schema as text, served to agents as an MCP resource.
func SchemaDDL() string {
	out := fmt.Sprintf("-- Echo store schema v%d (DuckDB)\n", SchemaVersion)
	for _, m := range migrations {
		out += fmt.Sprintf("-- v%d: %s\n", m.version, m.description)
		for _, s := range m.statements {
			out += s + ";\n"
		}
	}
	return out
}

func migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS echo_schema_version (
		version INTEGER PRIMARY KEY, description VARCHAR, applied_at TIMESTAMP DEFAULT current_timestamp)`); err != nil {
		return fmt.Errorf("create schema ledger: %w", err)
	}
	var current int
	if err := db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM echo_schema_version`).Scan(&current); err != nil {
		return fmt.Errorf("read schema ledger: %w", err)
	}
	if current > SchemaVersion {
		return fmt.Errorf("%w: the file is at schema v%d, this build knows up to v%d; use the newer fathom or a fresh path",
			ErrNewerSchema, current, SchemaVersion)
	}
	for _, m := range migrations {
		if m.version <= current {
			continue
		}
		if err := apply(ctx, db, m); err != nil {
			return fmt.Errorf("migrate echo store to v%d (%s): %w", m.version, m.description, err)
		}
	}
	return nil
}

func apply(ctx context.Context, db *sql.DB, m migration) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	for _, stmt := range m.statements {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO echo_schema_version (version, description) VALUES (?, ?)`,
		m.version, m.description); err != nil {
		return err
	}
	return tx.Commit()
}
