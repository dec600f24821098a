package imagebuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
	"golang.org/x/sys/unix"
)

// requirePodman stops the test unless podman and runc are installed and this is root
// (podman's storage). Under FATHOM_REQUIRE_PRIVILEGED=1 it fails: CI installs both
// (make deps), so a skip there would hide an image that does not run.
func requirePodman(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"podman", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv(privtest.EnvRequire) == "1" {
				t.Fatalf("this test needs %s (make deps installs it), and %s=1 makes that a failure", tool, privtest.EnvRequire)
			}
			t.Skipf("needs %s (make deps installs it); set %s=1 to make this a failure", tool, privtest.EnvRequire)
		}
	}
	privtest.RequireRoot(t, "podman's image storage")
}

// TestTheRealImageRunsUnderPodman builds the image from the real collector, loads it
// with `podman load` and runs it under runc, the runtime Debian's podman has here (crun
// refuses this host's hybrid cgroup layout), as the image's default user.
func TestTheRealImageRunsUnderPodman(t *testing.T) {
	requirePodman(t)
	binary := collectortest.Binary(t)
	spec := testSpec(t, binary)
	spec.Reference = fmt.Sprintf("localhost/fathom-imagebuild-test:%d", os.Getpid())
	out := filepath.Join(t.TempDir(), "fathom.oci.tar")
	if _, err := Build(spec, out); err != nil {
		t.Fatal(err)
	}
	podman := func(args ...string) string {
		t.Helper()
		b, err := exec.Command("podman", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	loaded := podman("load", "-i", out)
	if !strings.Contains(loaded, spec.Reference) {
		t.Fatalf("podman load did not name the image %s:\n%s", spec.Reference, loaded)
	}
	t.Cleanup(func() { exec.Command("podman", "rmi", "--force", spec.Reference).Run() })

	// podman's default open-files limit (1048576) is above this host's hard limit,
	// which runc may not raise: the container gets this process's own limits.
	var nofile, nproc unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile)
	unix.Getrlimit(unix.RLIMIT_NPROC, &nproc)
	run := []string{"run", "--rm", "--runtime", "runc",
		"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile.Max, nofile.Max),
		"--ulimit", fmt.Sprintf("nproc=%d:%d", min(nproc.Max, 4096), min(nproc.Max, 4096)),
		spec.Reference}

	if got := podman(append(run, "--version")...); !strings.Contains(got, "fathom version") {
		t.Errorf("fathom --version in the container said:\n%s", got)
	}
	// The gateway's config, as the default (non-root) user, through the image's own
	// libraries: the collector builds every component it names.
	podman(append(run, "validate", "--config", "/etc/fathom/gateway.yaml")...)
	if got := podman("image", "inspect", "--format", "{{.Config.User}}", spec.Reference); strings.TrimSpace(got) != "65532:65532" {
		t.Errorf("the loaded image's user is %q", got)
	}
}
