package nodecheck

import (
	"strings"
	"testing"
)

func TestKernelCheckWantsTheFeaturesTheProbesUse(t *testing.T) {
	for release, ok := range map[string]bool{
		"5.15.0-1057-aws":   false, // Ubuntu 22.04's GA kernel: no prev_state in tp_btf sched_switch
		"5.17.15":           false,
		"5.18.0":            true,
		"6.8.0-45-generic":  true,
		"6.18.44-fc-v657":   true,
		"4.18.0-553.el8_10": false,
		"":                  false,
	} {
		c := kernelCheck(release)
		if c.OK != ok {
			t.Errorf("%q: ok %v, want %v", release, c.OK, ok)
		}
		if !strings.Contains(c.Fix, "5.18") || c.Impact == "" {
			t.Errorf("%q: fix %q impact %q", release, c.Fix, c.Impact)
		}
	}
}

// A failed check says what will not work and how to fix it; an advisory one warns
// without making the node unready.
func TestReportSaysWhatWillNotWork(t *testing.T) {
	r := Report{Kernel: "5.15.0", Checks: []Check{
		kernelCheck("5.15.0"),
		{Name: "debugfs", Detail: "/sys/kernel/debug", Fix: "mount it", Impact: "nothing Fathom needs", Advisory: true},
		{Name: "tracefs", OK: true, Detail: "/sys/kernel/tracing"},
	}}
	text := r.Text()
	for _, want := range []string{
		"[FAIL] kernel         Linux 5.15.0",
		"won't work: the programs do not load on this kernel; run the receiver with mode: synthetic",
		"fix: Fathom needs Linux 5.18 or newer",
		"[warn] debugfs",
		"[ok  ] tracefs",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
}

func TestOnlyChecksThatMatterMakeANodeUnready(t *testing.T) {
	kernel, debugfs := kernelCheck("6.8.0"), Check{Name: "debugfs", Advisory: true}
	if !ready([]Check{kernel, debugfs}) {
		t.Errorf("a node without debugfs is ready")
	}
	if ready([]Check{kernel, debugfs, {Name: "privileges"}}) {
		t.Errorf("a node without privileges is not ready")
	}
}
