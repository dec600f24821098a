package echotools

import (
	"context"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/echoschema"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// readinessWindow is [11:00, 11:30): shorter than the 65-minute look-back, so check
// records from 10:25 on count.
const readinessWindow = `"since":"2026-03-01T11:00:00Z","until":"2026-03-01T11:30:00Z"`

// plantReadiness writes node check records as the duckdb exporter stores the gpuebpf
// receiver's: the verdict and failed checks in attributes, the checks as a JSON body.
//
//	gpu-0: ready (checked 10:40, before the window), data at 11:05
//	gpu-1: ready at 11:02, then unprivileged at 11:10: not_ready, no data
//	gpu-2: data, never a check record: no_check_record
//	gpu-3: synthetic mode
//	gpu-4: data; its only check (09:00) is older than the look-back: no_check_record
//	gpu-5: a check after the window only: not listed
func plantReadiness(t *testing.T, env *Env) {
	t.Helper()
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var rows []echoschema.Row
	check := func(node string, at time.Duration, mode string, failed, body string) {
		r := echoschema.NewRow()
		r.Time, r.Kind, r.Name, r.Cluster, r.Node = day.Add(at), echoschema.KindLog, semconv.EventNodeCheck, "c1", node
		ready := failed == ""
		r.Severity, r.SeverityNumber = "INFO", 9
		if !ready {
			r.Severity, r.SeverityNumber = "WARN", 13
		}
		readyJSON := "true"
		if !ready {
			readyJSON = "false"
		}
		r.Attributes = `{"event.name":"fathom.node.check","fathom.receiver.mode":"` + mode + `","fathom.node.ready":` + readyJSON +
			`,"fathom.node.checks.failed":[` + failed + `],"fathom.node.checks.warned":["debugfs"]}`
		r.Body = body
		rows = append(rows, r)
	}
	data := func(node string, at time.Duration) {
		r := echoschema.NewRow()
		r.Time, r.Kind, r.Name, r.Cluster, r.Node, r.Value = day.Add(at), echoschema.KindGauge, "fathom.receiver.probes", "c1", node, 40
		rows = append(rows, r)
	}
	readyBody := `{"checks":[{"advisory":false,"detail":"Linux 6.8.0","name":"kernel","ok":true},{"advisory":true,"detail":"/sys/kernel/debug","fix":"mount -t debugfs debugfs /sys/kernel/debug","impact":"nothing Fathom needs","name":"debugfs","ok":false}],"kernel":"6.8.0","ready":true}`
	unprivileged := `{"checks":[{"advisory":false,"detail":"uid 1000, effective capabilities 0x0","fix":"run as root, or grant CAP_BPF, CAP_PERFMON","impact":"no program loads, so nothing is traced","name":"privileges","ok":false}],"kernel":"6.8.0","ready":false}`
	h := time.Hour
	check("gpu-0", 10*h+40*time.Minute, "ebpf", "", readyBody)
	data("gpu-0", 11*h+5*time.Minute)
	check("gpu-1", 11*h+2*time.Minute, "ebpf", "", readyBody)
	check("gpu-1", 11*h+10*time.Minute, "ebpf", `"privileges"`, unprivileged)
	data("gpu-2", 11*h+7*time.Minute)
	check("gpu-3", 11*h+20*time.Minute, "synthetic", "", readyBody)
	check("gpu-4", 9*h, "ebpf", "", readyBody)
	data("gpu-4", 11*h+29*time.Minute)
	check("gpu-5", 11*h+40*time.Minute, "ebpf", "", readyBody)
	if err := env.Store.Append(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
}

func TestNodeReadinessTellsCannotTraceFromNoData(t *testing.T) {
	env := plantedStore(t)
	plantReadiness(t, env)
	r, _ := NewRegistry(env)
	out := call[NodeReadinessOutput](t, r, "node_readiness", `{`+readinessWindow+`}`)
	if out.ChecksSince != "2026-03-01T10:25:00Z" || out.Counts != (ReadinessCounts{NotReady: 1, NoCheckRecord: 2, Synthetic: 1, Ready: 1}) || out.Truncated {
		t.Fatalf("checks since %s, counts %+v", out.ChecksSince, out.Counts)
	}
	var got []string
	for _, n := range out.Nodes {
		got = append(got, n.Node+":"+n.Status)
	}
	want := []string{"gpu-1:not_ready", "gpu-2:no_check_record", "gpu-4:no_check_record", "gpu-3:synthetic", "gpu-0:ready"}
	if len(got) != len(want) {
		t.Fatalf("nodes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("nodes %v, want %v", got, want)
		}
	}
	// The newest record wins: gpu-1 was ready at 11:02 and lost its privileges at 11:10.
	bad := out.Nodes[0]
	if bad.CheckedAt != "2026-03-01T11:10:00Z" || bad.Mode != "ebpf" || bad.Kernel != "6.8.0" || bad.DataSeen ||
		len(bad.Failed) != 1 || bad.Failed[0] != "privileges" || len(bad.Checks) != 1 || bad.Checks[0].Fix != "run as root, or grant CAP_BPF, CAP_PERFMON" ||
		bad.Why != "the node cannot trace: privileges: no program loads, so nothing is traced" {
		t.Errorf("not ready: %+v", bad)
	}
	if n := out.Nodes[1]; n.CheckedAt != "" || !n.DataSeen || n.LastDataMinute != "2026-03-01T11:07:00Z" || len(n.Checks) != 0 || n.Cluster != "c1" {
		t.Errorf("no check record: %+v", n)
	}
	ready := out.Nodes[4]
	if ready.CheckedAt != "2026-03-01T10:40:00Z" || !ready.DataSeen || len(ready.Checks) != 2 || ready.Checks[1].Impact != "nothing Fathom needs" ||
		len(ready.Warned) != 1 || ready.Warned[0] != "debugfs" || len(ready.Failed) != 0 {
		t.Errorf("ready: %+v", ready)
	}

	// A window as long as the look-back takes records from its own start only; limit
	// cuts the list, not the counts.
	long := call[NodeReadinessOutput](t, r, "node_readiness", `{"since":"2026-03-01T08:30:00Z","until":"2026-03-01T11:30:00Z","limit":2}`)
	if long.ChecksSince != "2026-03-01T08:30:00Z" || long.Counts != (ReadinessCounts{NotReady: 1, NoCheckRecord: 1, Synthetic: 1, Ready: 2}) ||
		!long.Truncated || len(long.Nodes) != 2 {
		t.Errorf("three hours: %+v", long)
	}
}
