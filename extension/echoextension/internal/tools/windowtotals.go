package tools

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fathom-gpu/fathom/internal/echoschema"
)

// seriesLookback is how far before a window the previous point of a cumulative series
// is looked for. A cumulative point holds the total since its series began, so what a
// window added is its last point minus the point before the window; the node collector
// exports every collection_interval (10s by default), so five minutes covers any sane
// interval while keeping the scan near the window.
const seriesLookback = 5 * time.Minute

// windowTotalsCTE returns two CTEs over the sums and histograms named in names, for
// points of traced processes (node and pid known) that match f:
//
//	pts: every such point from seriesLookback before since until until;
//	w:   the points inside [since, until), each with what it added to the window:
//	     d_value (sums), d_count and d_sum (histograms), new_max, the largest value
//	     known to fall inside the window (NULL when none is), and counted_before, true
//	     on a cumulative point whose series had already counted something before the
//	     window (for delta series the tools cannot know).
//
// A series is one (node, pid, name, api, thread, communicator, attributes) tuple, as an
// OTLP series is its identity plus its attributes. A delta point adds itself. A
// cumulative point adds itself minus the series' previous point, or itself whole when
// it is the series' first point in the scan (the series began within one export) or
// its count or value fell (the process restarted its counters). Rows without the
// exporter's temporality member are read as cumulative, OTLP's usual choice and the
// receiver's default.
//
// The histogram max of a cumulative point is the largest value since the series began;
// it counts as the window's only when it rose inside the window, so a stall in the
// window no longer than an earlier one is not seen there.
func windowTotalsCTE(since, until time.Time, names []string, f filter) (string, []any) {
	marks := strings.TrimSuffix(strings.Repeat("?,", len(names)), ",")
	args := []any{since.Add(-seriesLookback), until}
	for _, n := range names {
		args = append(args, n)
	}
	args = append(args, f.args...)
	args = append(args, since, since)
	cte := fmt.Sprintf(`pts AS (
		SELECT ts, cluster, node, pid, process, rank, thread_id, comm_id, name, api, attributes,
			value * %[1]s AS value, count, sum * %[1]s AS sum, max * %[1]s AS max, p99 * %[1]s AS p99,
			coalesce(json_extract_string(attributes, '$."%[2]s"'), '') = 'delta' AS delta
		FROM events
		WHERE ts >= ? AND ts < ? AND kind IN ('sum', 'histogram', 'exp_histogram')
			AND name IN (%[3]s) AND node IS NOT NULL AND pid IS NOT NULL AND %[4]s
	),
	increments AS (
		SELECT *,
			lag(value) OVER series AS prev_value, lag(count) OVER series AS prev_count,
			lag(sum) OVER series AS prev_sum, lag(max) OVER series AS prev_max, lag(ts) OVER series AS prev_ts
		FROM pts
		WINDOW series AS (PARTITION BY node, pid, name, api, thread_id, comm_id, attributes ORDER BY ts)
	),
	w AS (
		SELECT ts, cluster, node, pid, process, rank, thread_id, name, api, attributes, p99,
			CASE WHEN delta OR prev_value IS NULL OR value < prev_value THEN value ELSE value - prev_value END AS d_value,
			CASE WHEN delta OR prev_count IS NULL OR count < prev_count THEN count ELSE count - prev_count END AS d_count,
			CASE WHEN delta OR prev_count IS NULL OR count < prev_count THEN sum ELSE sum - prev_sum END AS d_sum,
			CASE WHEN delta OR prev_count IS NULL OR count < prev_count OR max > prev_max THEN max END AS new_max,
			coalesce(NOT delta AND prev_ts < ?::TIMESTAMP AND prev_value > 0, false) AS counted_before
		FROM increments WHERE ts >= ?
	)`, timeScaleSQL, echoschema.AttrTemporality, marks, f.sql())
	return cte, args
}

// timeScaleSQL converts durations to seconds from the row's unit. Counts have units
// such as {call} or {page}, which are left as they are.
var timeScaleSQL = func() string {
	units := make([]string, 0, len(secondsPer))
	for u := range secondsPer {
		units = append(units, u)
	}
	sort.Strings(units)
	var b strings.Builder
	b.WriteString("(CASE unit")
	for _, u := range units {
		fmt.Fprintf(&b, " WHEN '%s' THEN %g", u, secondsPer[u])
	}
	b.WriteString(" ELSE 1 END)")
	return b.String()
}()
