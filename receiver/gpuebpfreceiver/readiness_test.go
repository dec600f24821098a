package gpuebpfreceiver

import (
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/fathom-gpu/fathom/internal/nodecheck"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// A record goes out for the first check, for each change of which checks pass (not for
// a changed detail), again after report_interval without change, and again at the next
// check when the pipeline refused the last one.
func TestReadinessRecordsFirstResultChangesAndHourlyRepeats(t *testing.T) {
	ok := nodecheck.Check{Name: "privileges", OK: true, Detail: "uid 0"}
	fail := nodecheck.Check{Name: "privileges", OK: false, Detail: "uid 1000", Impact: "no program loads", Fix: "run as root"}
	tracefs := nodecheck.Check{Name: "tracefs", OK: false, Advisory: true, Detail: "/sys/kernel/tracing", Impact: "nothing", Fix: "mount it"}
	libs := func(n int) nodecheck.Check {
		return nodecheck.Check{Name: "gpu_libraries", OK: true, Detail: strings.Repeat("x", n)}
	}
	script := []nodecheck.Report{
		{Kernel: "6.8.0", Ready: true, Checks: []nodecheck.Check{ok, tracefs, libs(1)}},    // 0: first: sent
		{Kernel: "6.8.0", Ready: true, Checks: []nodecheck.Check{ok, tracefs, libs(2)}},    // 5m: detail only
		{Kernel: "6.8.0", Ready: false, Checks: []nodecheck.Check{fail, tracefs, libs(2)}}, // 10m: changed, refused
		{Kernel: "6.8.0", Ready: false, Checks: []nodecheck.Check{fail, tracefs, libs(2)}}, // 15m: still due: sent
		{Kernel: "6.8.0", Ready: false, Checks: []nodecheck.Check{fail, tracefs, libs(3)}}, // 20m: same
		{Kernel: "6.8.0", Ready: false, Checks: []nodecheck.Check{fail, tracefs, libs(3)}}, // 1h15m: hourly repeat
	}
	at := []time.Duration{0, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 20 * time.Minute, 75 * time.Minute}
	step := 0
	r := &readinessReporter{
		mode:           ModeEBPF,
		check:          func() nodecheck.Report { return script[step] },
		hostResource:   func(res pcommon.Resource) { res.Attributes().PutStr(semconv.HostName, "gpu-7") },
		reportInterval: time.Hour,
	}
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var sentAt []int
	var records []plog.Logs
	for step = range script {
		ld, key, due := r.next(start.Add(at[step]))
		if !due {
			continue
		}
		if step == 2 {
			continue // the pipeline refused it: not marked sent
		}
		r.sent(key, start.Add(at[step]))
		sentAt = append(sentAt, step)
		records = append(records, ld)
	}
	if len(sentAt) != 3 || sentAt[0] != 0 || sentAt[1] != 3 || sentAt[2] != 5 {
		t.Fatalf("records sent at steps %v, want [0 3 5]", sentAt)
	}

	ld := records[1]
	rl := ld.ResourceLogs().At(0)
	lr := rl.ScopeLogs().At(0).LogRecords().At(0)
	if host, _ := rl.Resource().Attributes().Get(semconv.HostName); host.Str() != "gpu-7" || ld.LogRecordCount() != 1 {
		t.Fatalf("resource %v, %d records", rl.Resource().Attributes().AsRaw(), ld.LogRecordCount())
	}
	a := lr.Attributes().AsRaw()
	if lr.EventName() != semconv.EventNodeCheck || a[semconv.EventName] != semconv.EventNodeCheck || lr.SeverityText() != "WARN" ||
		a[semconv.NodeReady] != false || a[semconv.ReceiverMode] != "ebpf" ||
		len(a[semconv.NodeChecksFailed].([]any)) != 1 || a[semconv.NodeChecksFailed].([]any)[0] != "privileges" ||
		len(a[semconv.NodeChecksWarned].([]any)) != 1 || a[semconv.NodeChecksWarned].([]any)[0] != "tracefs" ||
		!lr.Timestamp().AsTime().Equal(start.Add(15*time.Minute)) {
		t.Fatalf("record: %s at %s, attributes %v", lr.EventName(), lr.Timestamp(), a)
	}
	body := lr.Body().Map().AsRaw()
	checks := body["checks"].([]any)
	priv := checks[0].(map[string]any)
	if body["kernel"] != "6.8.0" || body["ready"] != false || len(checks) != 3 || priv["name"] != "privileges" || priv["ok"] != false ||
		priv["impact"] != "no program loads" || priv["fix"] != "run as root" || priv["detail"] != "uid 1000" {
		t.Fatalf("body: %v", body)
	}
	// A passing check carries no impact or fix: nothing is stopped.
	if _, has := checks[2].(map[string]any)["impact"]; has {
		t.Errorf("a passing check has an impact: %v", checks[2])
	}
	if first := records[0].ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0); first.SeverityText() != "INFO" {
		t.Errorf("ready node's record has severity %s", first.SeverityText())
	}
}

func TestReadinessIntervalsAreValidated(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Readiness.CheckInterval = time.Second
	cfg.Readiness.ReportInterval = 500 * time.Millisecond
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "readiness.check_interval must be at least 10s") ||
		!strings.Contains(err.Error(), "readiness.report_interval (500ms) must not be shorter than readiness.check_interval (1s)") {
		t.Fatalf("got %v", err)
	}
	cfg.Readiness.Enabled = false // nothing to check when nothing is sent
	if err := cfg.Validate(); err != nil {
		t.Fatalf("disabled: %v", err)
	}
}
