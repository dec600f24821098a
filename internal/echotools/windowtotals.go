package echotools

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
//	pts: every such point from seriesLookback before since until until, one per series
//	     and time (a point sent twice is one point);
//	w:   the points inside [since, until), each with what it added to the window:
//	     d_value (sums), d_count and d_sum (histograms), new_max, the largest value
//	     known to fall inside the window (NULL when none is), counted_before, true on a
//	     cumulative point whose series had already counted something before the window
//	     (for delta series the tools cannot know), step, how the rule judged it, and
//	     from_ts, where the interval it added began (the point before, or its series'
//	     start when it adds itself whole; NULL when neither is known).
//
// A series is one (node, pid, name, api, thread, communicator, attributes) tuple, as an
// OTLP series is its identity plus its attributes. A delta point adds itself. A
// cumulative point adds what series.Next says, the one rule Fathom has (read its doc
// comment), written here in SQL with the window's start as the horizon: a point that
// continues its series (same start_ts, a total no lower and, for histograms, no bucket
// fallen) adds itself minus the point before it; a series that began (again) after
// everything counted of it (start_ts no earlier than the point before it, or than the
// window's start for a first point) adds itself whole, as does a point with no start
// time whose total fell; anything else (a series begun before the window, a restart
// whose start overlaps counted time, rows written before start_ts existed) only sets
// the baseline for the next point. The total is a sum's value or a histogram's count.
// Rows without the exporter's temporality member are read as cumulative, OTLP's usual
// choice and the receiver's default. TestWindowTotalsFollowTheSeriesRule holds this
// SQL to series.Cumulative and series.CumulativeHistogram point by point.
//
// The histogram max of a cumulative point is the largest value since the series began;
// it counts as the window's only when it rose inside the window (or the series began),
// so a stall in the window no longer than an earlier one is not seen there.
func windowTotalsCTE(since, until time.Time, names []string, f filter) (string, []any) {
	marks := strings.TrimSuffix(strings.Repeat("?,", len(names)), ",")
	args := []any{since.Add(-seriesLookback), until}
	for _, n := range names {
		args = append(args, n)
	}
	args = append(args, f.args...)
	args = append(args, since, since, since)
	cte := fmt.Sprintf(`pts AS (
		SELECT ts, start_ts, cluster, node, pid, process, rank, thread_id, comm_id, name, api, attributes,
			value * %[1]s AS value, count, sum * %[1]s AS sum, max * %[1]s AS max, p99 * %[1]s AS p99,
			CASE WHEN kind = 'sum' THEN value ELSE count END AS total,
			scale, coalesce(bucket_offset, 0) AS bucket_offset, bucket_counts, coalesce(zero_count, 0) AS zero_count,
			coalesce(json_extract_string(attributes, '$."%[2]s"'), '') = 'delta' AS delta
		FROM events
		WHERE ts >= ? AND ts < ? AND kind IN ('sum', 'histogram', 'exp_histogram')
			AND name IN (%[3]s) AND node IS NOT NULL AND pid IS NOT NULL AND %[4]s
		QUALIFY row_number() OVER (PARTITION BY %[5]s, ts ORDER BY total, start_ts) = 1
	),
	increments AS (
		SELECT *,
			lag(ts) OVER series AS prev_ts, lag(start_ts) OVER series AS prev_start, lag(total) OVER series AS prev_total,
			lag(value) OVER series AS prev_value, lag(count) OVER series AS prev_count,
			lag(sum) OVER series AS prev_sum, lag(max) OVER series AS prev_max,
			lag(scale) OVER series AS prev_scale, lag(bucket_offset) OVER series AS prev_offset,
			lag(bucket_counts) OVER series AS prev_counts, lag(zero_count) OVER series AS prev_zero
		FROM pts
		WINDOW series AS (PARTITION BY %[5]s ORDER BY ts)
	),
	judged AS (
		SELECT *, CASE
			WHEN delta THEN 'delta'
			WHEN continues AND NOT bucket_fell THEN 'continues'
			WHEN start_ts IS NOT NULL AND start_ts >= coalesce(prev_ts, ?::TIMESTAMP) THEN 'whole'
			WHEN start_ts IS NULL AND prev_ts IS NOT NULL AND (total < prev_total OR continues) THEN 'whole'
			ELSE 'baseline' END AS step
		FROM (
			SELECT *,
				coalesce(prev_ts IS NOT NULL AND start_ts IS NOT DISTINCT FROM prev_start AND total >= prev_total, false) AS continues,
				-- series.Buckets.Minus: a bucket the point before had is gone or lower.
				coalesce(bucket_counts IS NOT NULL AND prev_counts IS NOT NULL AND scale IS NOT DISTINCT FROM prev_scale AND (
					zero_count < prev_zero OR NOT list_bool_and(list_transform(range(len(prev_counts)), lambda j:
						prev_counts[j + 1] = 0 OR (j + prev_offset - bucket_offset BETWEEN 0 AND len(bucket_counts) - 1
							AND bucket_counts[j + prev_offset - bucket_offset + 1] >= prev_counts[j + 1])))), false) AS bucket_fell
			FROM increments
		)
	),
	w AS (
		SELECT ts, cluster, node, pid, process, rank, thread_id, name, api, attributes, p99, step,
			CASE step WHEN 'continues' THEN prev_ts ELSE coalesce(start_ts, prev_ts) END AS from_ts,
			CASE step WHEN 'continues' THEN value - prev_value WHEN 'baseline' THEN 0 ELSE value END AS d_value,
			CASE step WHEN 'continues' THEN count - prev_count WHEN 'baseline' THEN 0 ELSE count END AS d_count,
			CASE step WHEN 'continues' THEN sum - prev_sum WHEN 'baseline' THEN 0 ELSE sum END AS d_sum,
			CASE WHEN step IN ('delta', 'whole') OR (step = 'continues' AND max > prev_max) THEN max END AS new_max,
			coalesce(NOT delta AND prev_ts < ?::TIMESTAMP AND prev_total > 0, false) AS counted_before
		FROM judged WHERE ts >= ?
	)`, timeScaleSQL, echoschema.AttrTemporality, marks, f.sql(), seriesKeySQL)
	return cte, args
}

// seriesKeySQL is what makes a row one series' point (see windowTotalsCTE).
const seriesKeySQL = "node, pid, name, api, thread_id, comm_id, attributes"

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
