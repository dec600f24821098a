// Package echoschema is the contract between the duckdb exporter, which turns OTLP into
// rows, and the echo extension, which stores them: one Row per OTLP data point or log
// record, with the attributes Fathom filters on lifted into their own columns.
package echoschema

import (
	"math"
	"time"

	"github.com/fathom-gpu/fathom/internal/semconv"
)

// Kinds of row: what the OTLP item was.
const (
	KindLog          = "log"
	KindGauge        = "gauge"
	KindSum          = "sum"
	KindHistogram    = "histogram"
	KindExpHistogram = "exp_histogram"
	KindSummary      = "summary"
)

// Attribute keys whose values get dedicated columns; the names are internal/semconv's.
const (
	AttrCluster       = semconv.ClusterName
	AttrNode          = semconv.HostName
	AttrJob           = semconv.JobName
	AttrCohort        = semconv.Cohort
	AttrRank          = semconv.Rank
	AttrLocalRank     = semconv.LocalRank
	AttrWorldSize     = semconv.WorldSize
	AttrPID           = semconv.ProcessPID
	AttrProcess       = semconv.ProcessExecutableName
	AttrThreadID      = semconv.ThreadID
	AttrCUDAAPI       = semconv.CUDAAPIName
	AttrNCCLOp        = semconv.NCCLOp
	AttrNCCLCommID    = semconv.NCCLCommID
	AttrEventName     = semconv.EventName
	EventCausalChain  = semconv.EventCausalChain
	AttrChainRoot     = semconv.ChainRootCause
	AttrChainSeverity = semconv.ChainSeverity
	AttrChainFix      = semconv.ChainFix
	AttrChainID       = semconv.ChainID
	AttrChainState    = semconv.ChainState
	// A CUDA call record and where in a Python program it was made.
	EventCUDACall       = semconv.EventCUDACall
	AttrDurationSeconds = semconv.DurationSeconds
	AttrStackID         = semconv.StackID
	AttrPythonStack     = semconv.PythonStack
	AttrNativeStack     = semconv.NativeStack
	AttrCodeFunction    = semconv.CodeFunction
	AttrCodeFilepath    = semconv.CodeFilepath
	AttrCodeLineno      = semconv.CodeLineno
	// ChainResolved is the fathom.chain.state of a chain's last record.
	ChainResolved   = "resolved"
	AttrTemporality = semconv.MetricTemporality
)

// Absent marks an integer column with no value (it is stored as NULL); ranks, pids and
// thread ids are never negative.
const Absent = -1

// Row is one stored OTLP data point or log record. Empty strings, Absent integers and
// NaN floats are stored as NULL so that filters and aggregates skip them.
type Row struct {
	Time      time.Time
	Kind      string
	Cluster   string
	Node      string
	Job       string
	Cohort    string
	Rank      int32
	LocalRank int32
	WorldSize int32
	PID       int64
	Process   string
	ThreadID  int64
	// Name is the metric name, or the log record's event name.
	Name string
	// API is the CUDA API or NCCL operation the point measures.
	API    string
	CommID string
	// Value is the gauge/sum value, a histogram's mean, or a log record's numeric body.
	Value float64
	// Count, Sum, Min, Max and the quantiles summarise histograms and summaries.
	Count          int64
	Sum            float64
	Min            float64
	Max            float64
	P50            float64
	P95            float64
	P99            float64
	Unit           string
	Severity       string
	SeverityNumber int32
	Body           string
	TraceID        string
	// Attributes is a JSON object with every resource, scope and record attribute
	// that has no dedicated column.
	Attributes string

	// Start is the OTLP point's start time: when a cumulative series began (a delta
	// point's interval start). Zero for gauges, logs and senders that gave none.
	Start time.Time
	// A histogram's buckets, kept so that what a window added to a cumulative
	// histogram is taken bucket by bucket (internal/series), never guessed from the
	// quantiles of snapshots. Exponential histograms: Scale, BucketOffset and
	// BucketCounts are the positive buckets (durations have no negative ones) and
	// ZeroCount the zero bucket. Explicit histograms: Bounds and BucketCounts.
	// BucketCounts is nil on every other row, and the other four are then not stored.
	Scale        int32
	BucketOffset int32
	BucketCounts []uint64
	ZeroCount    uint64
	Bounds       []float64
}

// NewRow returns a row with every optional column absent.
func NewRow() Row {
	nan := math.NaN()
	return Row{
		Rank: Absent, LocalRank: Absent, WorldSize: Absent, PID: Absent, ThreadID: Absent,
		Value: nan, Count: Absent, Sum: nan, Min: nan, Max: nan, P50: nan, P95: nan, P99: nan,
		Attributes: "{}",
	}
}
