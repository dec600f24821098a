//go:build linux

package gpuebpfreceiver_test

import (
	"os"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/fathom-gpu/fathom/internal/semconv"
)

// The real collector in synthetic mode sends one fathom.node.check record at start: the
// host's own checks (kernel, BTF, privileges ...) run for real, and the BPF load says it
// was not tried, so that a gateway can tell made-up data from a node that traces.
func TestSyntheticModeSendsOneNodeCheckRecord(t *testing.T) {
	sink, _ := startNodeCollector(t, syntheticConfig)
	var checks []plog.LogRecord
	deadline := time.Now().Add(20 * time.Second)
	for ; len(checks) == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		checks, _ = nodeCheckRecords(sink.Logs())
	}
	time.Sleep(2 * time.Second) // a second record would come with the first logs flushes
	checks, hosts := nodeCheckRecords(sink.Logs())
	if len(checks) != 1 {
		t.Fatalf("%d node check records, want 1 (at start; the next check is minutes away)", len(checks))
	}
	hostname, _ := os.Hostname()
	lr := checks[0]
	a := lr.Attributes().AsRaw()
	if hosts[0] != hostname || a[semconv.ReceiverMode] != "synthetic" || lr.EventName() != semconv.EventNodeCheck {
		t.Fatalf("record on %q: %v", hosts[0], a)
	}
	byName := map[string]map[string]any{}
	for _, c := range lr.Body().Map().AsRaw()["checks"].([]any) {
		byName[c.(map[string]any)["name"].(string)] = c.(map[string]any)
	}
	for _, name := range []string{"kernel", "btf", "privileges", "tracefs", "debugfs", "bpf_load", "nvml", "gpu_libraries"} {
		if byName[name] == nil {
			t.Errorf("no %s check in %v", name, byName)
		}
	}
	load := byName["bpf_load"]
	if load["ok"] != false || load["advisory"] != true || load["detail"] != "not tried: the receiver runs in synthetic mode" {
		t.Errorf("bpf_load in synthetic mode: %v", load)
	}
	// The verdict agrees with the checks it lists: ready exactly when no check that
	// matters failed.
	failed := a[semconv.NodeChecksFailed].([]any)
	if a[semconv.NodeReady] != (len(failed) == 0) {
		t.Errorf("ready %v with failed checks %v", a[semconv.NodeReady], failed)
	}
	for _, name := range failed {
		if c := byName[name.(string)]; c["ok"] != false || c["advisory"] == true || c["impact"] == "" {
			t.Errorf("failed check %v: %v", name, c)
		}
	}
}

func nodeCheckRecords(batches []plog.Logs) ([]plog.LogRecord, []string) {
	var records []plog.LogRecord
	var hosts []string
	for _, ld := range batches {
		for _, rl := range ld.ResourceLogs().All() {
			host, _ := rl.Resource().Attributes().Get(semconv.HostName)
			for _, sl := range rl.ScopeLogs().All() {
				for _, lr := range sl.LogRecords().All() {
					if lr.EventName() == semconv.EventNodeCheck {
						records = append(records, lr)
						hosts = append(hosts, host.Str())
					}
				}
			}
		}
	}
	return records, hosts
}
