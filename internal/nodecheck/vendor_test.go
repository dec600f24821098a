package nodecheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// On a node with NVIDIA's libnvidia-ml.so.1 on the loader's path but no kernel driver
// (this machine, with the library `make vendor-libs` fetches), the nvml check names
// NVML's own error and the fix for it: load the driver, not mount the library. It stays
// advisory: the node is still ready to trace. The check runs in a process of its own,
// started with LD_LIBRARY_PATH, as `fathom check` would.
func TestNVMLCheckOnNVIDIAsLibraryWithoutTheDriver(t *testing.T) {
	dir := filepath.Join(fakegpu.RepoRoot(), "build", "vendor", "nvidia", "lib")
	if _, err := os.Stat(filepath.Join(dir, "libnvidia-ml.so.1")); err != nil {
		why := "NVIDIA's libnvidia-ml.so.1 is not in " + dir + "; `make vendor-libs` fetches it"
		if os.Getenv(privtest.EnvRequire) == "1" {
			t.Fatalf("%s, and %s=1 makes that a failure", why, privtest.EnvRequire)
		}
		t.Skip(why)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNVMLCheckChild$", "-test.v")
	cmd.Env = append(os.Environ(), "FATHOM_NVML_CHECK_CHILD=1", "LD_LIBRARY_PATH="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the check in a process of its own: %v\n%s", err, out)
	}
	var c Check
	for _, line := range strings.Split(string(out), "\n") {
		if js, ok := strings.CutPrefix(strings.TrimSpace(line), "nvml check: "); ok {
			if err := json.Unmarshal([]byte(js), &c); err != nil {
				t.Fatalf("%q: %v", js, err)
			}
		}
	}
	if c.Name != NVMLCheck || c.OK || !c.Advisory {
		t.Fatalf("check %+v, want a failed advisory nvml check; child:\n%s", c, out)
	}
	if !strings.Contains(c.Detail, "NVML_ERROR_DRIVER_NOT_LOADED") || !strings.Contains(c.Detail, "not loaded") {
		t.Errorf("detail %q does not give NVML's error", c.Detail)
	}
	if !strings.Contains(c.Fix, "modprobe nvidia") || c.Fix == NVMLFix {
		t.Errorf("fix %q is not the fix for a driver that is not loaded", c.Fix)
	}
	if c.Impact != NVMLImpact {
		t.Errorf("impact %q", c.Impact)
	}
	text := Report{Checks: []Check{c}}.Text()
	if !strings.Contains(text, "[warn] nvml") || !strings.Contains(text, "fix: load the NVIDIA kernel driver") {
		t.Errorf("report:\n%s", text)
	}
	t.Log(text)
}

// TestNVMLCheckChild is the child of the test above; it does nothing unless that test
// started it.
func TestNVMLCheckChild(t *testing.T) {
	if os.Getenv("FATHOM_NVML_CHECK_CHILD") != "1" {
		return
	}
	js, err := json.Marshal(nvmlCheck())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\nnvml check: %s", js)
}
