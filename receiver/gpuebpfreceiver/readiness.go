package gpuebpfreceiver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.uber.org/zap"

	"github.com/fathom-gpu/fathom/internal/gpustate/rocmsmi"
	"github.com/fathom-gpu/fathom/internal/nodecheck"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

func (c ReadinessConfig) validate() []error {
	var errs []error
	if c.CheckInterval < 10*time.Second {
		errs = append(errs, fmt.Errorf("readiness.check_interval must be at least 10s (each check scans /proc), got %s", c.CheckInterval))
	}
	if c.ReportInterval < c.CheckInterval {
		errs = append(errs, fmt.Errorf("readiness.report_interval (%s) must not be shorter than readiness.check_interval (%s)", c.ReportInterval, c.CheckInterval))
	}
	return errs
}

// readinessReporter turns node checks into fathom.node.check records: one for the first
// check, then one whenever a check's result changes, and one at least every
// reportInterval so that the newest result is never older than that in the store.
type readinessReporter struct {
	mode           string
	check          func() nodecheck.Report
	hostResource   func(pcommon.Resource)
	reportInterval time.Duration

	sentResult string // what the last record that reached the pipeline said
	sentAt     time.Time
}

// resultKey is what counts as a change: which checks pass. Details such as the number of
// library files mapped move with every process start and are not news.
func resultKey(r nodecheck.Report) string {
	var b strings.Builder
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "%s=%t;", c.Name, c.OK)
	}
	return b.String()
}

// next runs the checks and returns the record to send, if one is due.
func (r *readinessReporter) next(now time.Time) (plog.Logs, string, bool) {
	report := r.check()
	key := resultKey(report)
	if key == r.sentResult && now.Sub(r.sentAt) < r.reportInterval {
		return plog.Logs{}, "", false
	}
	return r.record(report, now), key, true
}

// sent records that a record reached the pipeline; one the pipeline refused goes out
// again at the next check.
func (r *readinessReporter) sent(key string, now time.Time) {
	r.sentResult, r.sentAt = key, now
}

// record is one log record: the verdict and the names of failed checks as attributes,
// which the Echo store keeps queryable in its attributes column, and every check in
// the body, which it keeps as a JSON object.
func (r *readinessReporter) record(report nodecheck.Report, now time.Time) plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	r.hostResource(rl.Resource())
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName(scopeName)
	lr := sl.LogRecords().AppendEmpty()
	ts := pcommon.NewTimestampFromTime(now)
	lr.SetTimestamp(ts)
	lr.SetObservedTimestamp(ts)
	lr.SetEventName(semconv.EventNodeCheck)
	lr.SetSeverityNumber(plog.SeverityNumberInfo)
	lr.SetSeverityText("INFO")
	if !report.Ready {
		lr.SetSeverityNumber(plog.SeverityNumberWarn)
		lr.SetSeverityText("WARN")
	}
	attrs := lr.Attributes()
	attrs.PutStr(semconv.EventName, semconv.EventNodeCheck)
	attrs.PutStr(semconv.ReceiverMode, r.mode)
	attrs.PutBool(semconv.NodeReady, report.Ready)
	failed := attrs.PutEmptySlice(semconv.NodeChecksFailed)
	warned := attrs.PutEmptySlice(semconv.NodeChecksWarned)
	body := lr.Body().SetEmptyMap()
	body.PutStr("kernel", report.Kernel)
	body.PutBool("ready", report.Ready)
	checks := body.PutEmptySlice("checks")
	for _, c := range report.Checks {
		if !c.OK {
			if c.Advisory {
				warned.AppendEmpty().SetStr(c.Name)
			} else {
				failed.AppendEmpty().SetStr(c.Name)
			}
		}
		m := checks.AppendEmpty().SetEmptyMap()
		m.PutStr("name", c.Name)
		m.PutBool("ok", c.OK)
		m.PutBool("advisory", c.Advisory)
		m.PutStr("detail", c.Detail)
		if !c.OK {
			m.PutStr("impact", c.Impact)
			m.PutStr("fix", c.Fix)
		}
	}
	return ld
}

// newReadinessReporter checks this node as `fathom check` does, except for the BPF load:
// the receiver answers that from its own start instead of loading every program again.
func (c *controller) newReadinessReporter() *readinessReporter {
	nvml, nvmlErr := c.nvml, c.nvmlErr
	mode, probeCount := c.cfg.Mode, c.source.probeCount
	// What this receiver's own load of NVML found, fixed at start.
	nvmlCheck := func() nodecheck.Check {
		c := nodecheck.Check{Advisory: true, Impact: nodecheck.NVMLImpact, Fix: nodecheck.NVMLFix}
		switch {
		case nvml != nil:
			c.OK, c.Detail = true, "loaded by this receiver"
		case nvmlErr != nil:
			c.Detail, c.Fix = nodecheck.NVMLFailure(nvmlErr)
		default:
			c.Detail = "off (nvml.enabled: false, or synthetic mode)"
		}
		return c
	}
	rocm, rocmErr, rocmOn := c.rocm, c.rocmErr, c.cfg.ROCmSMI.Enabled && c.cfg.Mode != ModeSynthetic
	// What this receiver's own load of ROCm SMI found; shown where the library was
	// there, or where a process runs HIP (nodecheck decides).
	rocmCheck := func() (nodecheck.Check, bool) {
		c := nodecheck.Check{Advisory: true, Impact: nodecheck.ROCmSMIImpact, Fix: nodecheck.ROCmSMIFix}
		switch {
		case rocm != nil:
			c.OK, c.Detail = true, "loaded by this receiver"
			return c, true
		case rocmErr != nil:
			c.Detail, c.Fix = nodecheck.ROCmSMIFailure(rocmErr)
			return c, !errors.Is(rocmErr, rocmsmi.ErrNoLibrary)
		case !rocmOn:
			c.Detail = "off (rocm_smi.enabled: false, or synthetic mode)"
		}
		return c, false
	}
	return &readinessReporter{
		mode:           mode,
		hostResource:   c.hostRes,
		reportInterval: c.cfg.Readiness.ReportInterval,
		check: func() nodecheck.Report {
			return nodecheck.RunWith(c.cfg.Discovery.ProcRoot, nodecheck.Options{BPFLoad: func() nodecheck.Check {
				if mode == ModeSynthetic {
					return nodecheck.Check{OK: false, Advisory: true, Detail: "not tried: the receiver runs in synthetic mode",
						Impact: "nothing on this node is traced: every event is made up (fathom.synthetic)", Fix: "set mode: ebpf"}
				}
				// In ebpf mode the receiver would not be running had its load failed.
				return nodecheck.Check{OK: true, Detail: fmt.Sprintf("loaded by this receiver: %d probes attached", probeCount())}
			}, NVML: nvmlCheck, ROCmSMI: rocmCheck})
		},
	}
}

// watchReadiness sends the node check record at start and after each check that finds
// a record due, until ctx ends.
func (c *controller) watchReadiness(ctx context.Context) {
	defer c.wg.Done()
	reporter := c.newReadinessReporter()
	tick := time.NewTicker(c.cfg.Readiness.CheckInterval)
	defer tick.Stop()
	for {
		c.mu.Lock()
		next := c.logs
		c.mu.Unlock()
		if next != nil {
			now := time.Now()
			if ld, key, due := reporter.next(now); due {
				if err := next.ConsumeLogs(ctx, ld); err != nil {
					c.settings.Logger.Warn("node check record refused by the next consumer", zap.Error(err))
				} else {
					reporter.sent(key, now)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
