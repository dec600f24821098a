package nodecheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// procWith is a /proc of one process, pid 4242, mapping the given library files.
func procWith(t *testing.T, libs ...string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "4242")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var maps strings.Builder
	for i, lib := range libs {
		maps.WriteString(strings.Join([]string{"7f0000000000-7f0000001000", "r-xp", "00000000", "08:01", string(rune('1' + i)), lib}, " ") + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(maps.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// The rocm_smi check is in the report where ROCm SMI is installed, or where a process
// runs AMD's HIP runtime without it; on a node with neither it is not, so a node
// without AMD GPUs is not told about ROCm.
func TestTheROCmSMICheckAppearsWhereItHasSomethingToSay(t *testing.T) {
	cheap := Options{
		BPFLoad: func() Check { return Check{OK: true, Detail: "stub"} },
		NVML:    func() Check { return Check{OK: true, Advisory: true, Detail: "stub"} },
	}
	missing := func() (Check, bool) {
		c := Check{Advisory: true, Impact: ROCmSMIImpact}
		c.Detail, c.Fix = ROCmSMIFailure(os.ErrNotExist)
		return c, false
	}
	rocm := func(r Report) (Check, bool) {
		for _, c := range r.Checks {
			if c.Name == ROCmSMICheck {
				return c, true
			}
		}
		return Check{}, false
	}

	for name, tc := range map[string]struct {
		libs  []string
		smi   func() (Check, bool)
		shown bool
	}{
		"neither vendor":             {[]string{"/usr/lib/libcudart.so.12"}, missing, false},
		"a HIP process, no ROCm SMI": {[]string{"/opt/rocm/lib/libamdhip64.so.6"}, missing, true},
		"ROCm SMI installed, no HIP process": {nil, func() (Check, bool) {
			return Check{OK: true, Advisory: true, Detail: "amdgpu driver 6.8.5, 8 GPUs"}, true
		}, true},
	} {
		t.Run(name, func(t *testing.T) {
			opts := cheap
			opts.ROCmSMI = tc.smi
			r := RunWith(procWith(t, tc.libs...), opts)
			c, shown := rocm(r)
			if shown != tc.shown {
				t.Fatalf("rocm_smi check shown %v, want %v:\n%s", shown, tc.shown, r.Text())
			}
			if shown && !c.OK && (!strings.Contains(c.Detail, "1 processes here run AMD's HIP runtime") || c.Fix != ROCmSMIFix) {
				t.Errorf("check %+v", c)
			}
			if !r.Ready {
				t.Errorf("an advisory check made the node unready:\n%s", r.Text())
			}
		})
	}
}

// On a node with AMD's librocm_smi64.so.1 installed but no AMD GPU (this machine), the
// rocm_smi check names ROCm SMI's own status and text, RSMI_STATUS_INIT_ERROR, with the
// fix for it: load amdgpu and give the collector its devices. It stays advisory. In a
// process of its own, as `fathom check` runs it.
func TestROCmSMICheckOnAMDsLibraryWithoutAGPU(t *testing.T) {
	if _, err := os.Stat("/usr/lib/librocm_smi64.so.1"); err != nil {
		why := "AMD's librocm_smi64.so.1 is not installed (Debian's librocm-smi64-1; `make vendor-libs` installs it)"
		if os.Getenv(privtest.EnvRequire) == "1" {
			t.Fatalf("%s, and %s=1 makes that a failure", why, privtest.EnvRequire)
		}
		t.Skip(why)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestROCmSMICheckChild$", "-test.v")
	cmd.Env = append(os.Environ(), "FATHOM_ROCM_SMI_CHECK_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the check in a process of its own: %v\n%s", err, out)
	}
	var c Check
	var found bool
	for _, line := range strings.Split(string(out), "\n") {
		if js, ok := strings.CutPrefix(strings.TrimSpace(line), "rocm_smi check: "); ok {
			if err := json.Unmarshal([]byte(js), &c); err != nil {
				t.Fatalf("%q: %v", js, err)
			}
			found = true
		}
	}
	if !found || c.Name != ROCmSMICheck || c.OK || !c.Advisory {
		t.Fatalf("check %+v, want a failed advisory rocm_smi check; child:\n%s", c, out)
	}
	for _, want := range []string{"RSMI_STATUS_INIT_ERROR", "An error occurred during initialization", "/sys/class/drm"} {
		if !strings.Contains(c.Detail, want) {
			t.Errorf("detail %q lacks %q", c.Detail, want)
		}
	}
	if !strings.Contains(c.Fix, "modprobe amdgpu") || !strings.Contains(c.Fix, "/dev/kfd") || c.Fix == ROCmSMIFix {
		t.Errorf("fix %q is not the fix for a missing driver", c.Fix)
	}
	t.Log(Report{Checks: []Check{c}}.Text())
}

// TestROCmSMICheckChild is the child of the test above; it does nothing unless that
// test started it.
func TestROCmSMICheckChild(t *testing.T) {
	if os.Getenv("FATHOM_ROCM_SMI_CHECK_CHILD") != "1" {
		return
	}
	c, found := rocmSMICheck()
	if !found {
		t.Fatalf("the library was not found: %+v", c)
	}
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\nrocm_smi check: %s", js)
}
