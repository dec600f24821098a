// Package privtest gates tests that need root and a BPF-capable kernel. Locally they
// skip with the reason; with FATHOM_REQUIRE_PRIVILEGED=1 (set by .ci/run) they fail
// instead, so CI can never pass by silently skipping the tests that matter most.
package privtest

import (
	"os"
	"syscall"
	"testing"

	"github.com/fathom-gpu/fathom/internal/bpfhost"
)

// EnvRequire names the switch that turns skips into failures.
const EnvRequire = "FATHOM_REQUIRE_PRIVILEGED"

// Require stops the test unless it runs as root on a kernel with BTF and tracefs.
func Require(t testing.TB) {
	t.Helper()
	missing := bpfhost.Missing()
	if missing == "" {
		return
	}
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("this test needs %s, and %s=1 makes that a failure", missing, EnvRequire)
	}
	t.Skipf("needs %s; set %s=1 to make this a failure", missing, EnvRequire)
}

// RequireBPFFS is Require, and a bpf file system at /sys/fs/bpf, where kernel state is
// pinned.
func RequireBPFFS(t testing.TB) {
	t.Helper()
	Require(t)
	var st syscall.Statfs_t
	if syscall.Statfs("/sys/fs/bpf", &st) == nil && st.Type == bpfFSMagic {
		return
	}
	const missing = "bpffs at /sys/fs/bpf (mount -t bpf bpf /sys/fs/bpf)"
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("this test needs %s, and %s=1 makes that a failure", missing, EnvRequire)
	}
	t.Skipf("needs %s; set %s=1 to make this a failure", missing, EnvRequire)
}

const bpfFSMagic = 0xcafe4a11 // BPF_FS_MAGIC, linux/magic.h

// RequireRoot stops the test unless it runs as root; why says what root is needed for
// (e.g. "mounting a scratch file system"). Under FATHOM_REQUIRE_PRIVILEGED=1 it fails.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("this test needs root (%s), and %s=1 makes that a failure", why, EnvRequire)
	}
	t.Skipf("needs root (%s); set %s=1 to make this a failure", why, EnvRequire)
}
