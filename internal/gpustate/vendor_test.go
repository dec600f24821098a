package gpustate

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// vendorNVML is NVIDIA's own libnvidia-ml.so.1 (driver 535, Debian non-free), as `make
// vendor-libs` puts it in build/vendor/nvidia/lib. Absent, the test skips, or fails
// under FATHOM_REQUIRE_PRIVILEGED=1 (CI, where make test fetched it first).
func vendorNVML(t *testing.T) string {
	t.Helper()
	path := filepath.Join(fakegpu.RepoRoot(), "build", "vendor", "nvidia", "lib", "libnvidia-ml.so.1")
	if _, err := os.Stat(path); err != nil {
		why := "NVIDIA's libnvidia-ml.so.1 is not at " + path + "; `make vendor-libs` fetches it"
		if os.Getenv(privtest.EnvRequire) == "1" {
			t.Fatalf("%s, and %s=1 makes that a failure", why, privtest.EnvRequire)
		}
		t.Skip(why)
	}
	return path
}

// runChild runs test name of this binary in a process of its own, with env added: NVML
// is loaded once per process (go-nvml resolves its C calls through the global symbol
// scope), so NVIDIA's library cannot be tried in a process that already loaded the fake.
func runChild(t *testing.T, name string, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in a process of its own: %v\n%s", name, err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("%s did not run in the child:\n%s", name, out)
	}
	return string(out)
}

// On a node with NVIDIA's libnvidia-ml.so.1 but no kernel driver (this machine), Open
// fails with NVML's own answer, NVML_ERROR_DRIVER_NOT_LOADED, says what to do, and the
// process runs on: both when nvml.library_path names the file and when the loader finds
// it on LD_LIBRARY_PATH.
func TestNVIDIALibraryWithoutTheDriverIsNVMLsOwnError(t *testing.T) {
	path := vendorNVML(t)
	out := runChild(t, "TestOpenVendorNVMLChild", "FATHOM_VENDOR_NVML="+path)
	out += runChild(t, "TestOpenVendorNVMLChild", "FATHOM_VENDOR_NVML=search", "LD_LIBRARY_PATH="+filepath.Dir(path))
	t.Log(out)
}

// TestOpenVendorNVMLChild is the child of the test above; it does nothing unless that
// test started it.
func TestOpenVendorNVMLChild(t *testing.T) {
	path := os.Getenv("FATHOM_VENDOR_NVML")
	if path == "" {
		return
	}
	if path == "search" {
		path = ""
	}
	lib, err := Open(path)
	if err == nil {
		lib.Close()
		t.Fatal("NVML started on a node without the NVIDIA kernel driver")
	}
	var initErr *InitError
	if !errors.As(err, &initErr) || !errors.Is(err, ErrDriverNotLoaded) {
		t.Fatalf("Open: %v (%T), want NVML_ERROR_DRIVER_NOT_LOADED", err, err)
	}
	for _, want := range []string{"NVML_ERROR_DRIVER_NOT_LOADED", "the NVIDIA kernel driver is not loaded", "modprobe nvidia", "nvml.enabled: false"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if path != "" && !strings.Contains(initErr.Summary(), path) {
		t.Errorf("summary %q does not name %s", initErr.Summary(), path)
	}
	// The library is loaded and its state is NVML's; asking it again is the same answer,
	// not a crash.
	if _, again := Open(path); !errors.Is(again, ErrDriverNotLoaded) {
		t.Errorf("second Open: %v", again)
	}
	t.Logf("Open(%q): %v", path, err)
}
