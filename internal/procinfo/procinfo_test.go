package procinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseKubernetesCgroup(t *testing.T) {
	cases := []struct{ path, pod, container string }{
		{
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/cri-containerd-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope",
			"1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		},
		{
			"/kubepods/besteffort/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
			"1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901", "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
		},
		{"/user.slice/user-0.slice/session-1.scope", "", ""},
	}
	for _, c := range cases {
		pod, container := ParseKubernetesCgroup(c.path)
		if pod != c.pod || container != c.container {
			t.Errorf("%s: got pod %q container %q", c.path, pod, container)
		}
	}
}

// A real child process with launcher variables: torchrun's names win over SLURM's.
func TestReadRealProcess(t *testing.T) {
	cmd := exec.Command("sleep", "5")
	cmd.Env = append(os.Environ(), "RANK=5", "SLURM_PROCID=9", "SLURM_LOCALID=1", "WORLD_SIZE=8", "TORCHELASTIC_RUN_ID=job-42",
		"MASTER_ADDR=10.0.0.7", "MASTER_PORT=29500")
	p := startAndRead(t, cmd)
	if p.Executable != "sleep" || p.CommandLine != "sleep 5" {
		t.Errorf("executable %q command line %q", p.Executable, p.CommandLine)
	}
	if p.Rank != 5 || p.LocalRank != 1 || p.WorldSize != 8 || p.Job != "job-42" {
		t.Errorf("rank %d local %d world %d job %q", p.Rank, p.LocalRank, p.WorldSize, p.Job)
	}
	if p.Rendezvous != "10.0.0.7:29500" {
		t.Errorf("rendezvous %q, want 10.0.0.7:29500", p.Rendezvous)
	}
	if p.CgroupPath == "" {
		t.Errorf("no cgroup v2 path read")
	}
	if _, err := Read("/proc", 1<<30); err == nil {
		t.Errorf("a missing process must be an error")
	}
}

// The executable's name comes from /proc/PID/exe, whole; comm would cut it to 15 bytes.
func TestExecutableNameIsNotTruncated(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	const name = "a-training-loop-with-a-long-name"
	bin := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "5")
	p := startAndRead(t, cmd)
	comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "comm"))
	if p.Executable != name || strings.TrimSpace(string(comm)) != name[:15] {
		t.Errorf("executable %q (comm %q), want %q", p.Executable, strings.TrimSpace(string(comm)), name)
	}

	// Without a readable exe link, comm stands in.
	proc := t.TempDir()
	dir := filepath.Join(proc, "42")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "comm"), []byte("pt_main_thread\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := Read(proc, 42); err != nil || p.Executable != "pt_main_thread" {
		t.Errorf("without exe: executable %q, err %v", p.Executable, err)
	}
}

// startAndRead starts cmd, killed at cleanup, and reads its process once it runs.
func startAndRead(t *testing.T, cmd *exec.Cmd) Process {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	time.Sleep(50 * time.Millisecond)
	p, err := Read("/proc", uint32(cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
