// Package procinfo reads what Fathom attributes events to from /proc: the executable,
// the cgroup (and from it the Kubernetes pod and container), and the distributed-
// training identity (rank, local rank, world size, job) from the process environment.
package procinfo

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Process is one process's identity. Unknown integers are -1.
type Process struct {
	PID         uint32
	Executable  string
	CommandLine string
	CgroupPath  string
	ContainerID string
	PodUID      string
	Job         string
	// Rendezvous is MASTER_ADDR:MASTER_PORT, where the job's ranks met: torchrun and
	// most launchers set it, and it tells apart two runs of one job name (torchrun's
	// static rendezvous names every run "none"). Empty when either is unset.
	Rendezvous string
	Rank       int
	LocalRank  int
	WorldSize  int
	// IBHCAs is NCCL_IB_HCA: the RDMA ports the rank's traffic may use.
	IBHCAs HCAs
	// VisibleDevices is CUDA_VISIBLE_DEVICES: the GPUs its device ordinals name.
	VisibleDevices VisibleDevices
}

// Launchers spell rank and size differently; the first variable present wins.
var (
	rankVars      = []string{"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}
	localRankVars = []string{"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}
	worldSizeVars = []string{"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}
	jobVars       = []string{"FATHOM_JOB", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"}
)

const maxCommandLine = 256

// Read reads process pid under procRoot (normally /proc). Only a missing process is
// an error: unreadable parts (environ of another user without CAP_SYS_PTRACE) are
// left unknown.
func Read(procRoot string, pid uint32) (Process, error) {
	dir := filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10))
	p := Process{PID: pid, Rank: -1, LocalRank: -1, WorldSize: -1}
	comm, err := os.ReadFile(filepath.Join(dir, "comm"))
	if err != nil {
		return p, err
	}
	p.Executable = executableName(dir, string(comm))
	if cmd, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
		cmd = bytes.TrimRight(cmd, "\x00")
		if len(cmd) > maxCommandLine {
			cmd = cmd[:maxCommandLine]
		}
		p.CommandLine = string(bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}))
	}
	if cg, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
		p.WithCgroup(unifiedCgroup(string(cg)))
	}
	if env, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil {
		p.fillFromEnviron(env)
	}
	return p, nil
}

// executableName is the base name of the process's executable, as OpenTelemetry's
// process.executable.name asks: /proc/PID/exe's target, which comm truncates to 15
// bytes ("fakegpu-workloa") and threads may rename. comm stands in when exe cannot be
// read (another user's process without CAP_SYS_PTRACE, a kernel thread).
func executableName(dir, comm string) string {
	if target, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
		if name := filepath.Base(strings.TrimSuffix(target, " (deleted)")); name != "/" && name != "." {
			return name
		}
	}
	return strings.TrimSpace(comm)
}

// WithCgroup sets the cgroup v2 path of p, and the pod and container parsed from it.
func (p *Process) WithCgroup(path string) {
	p.CgroupPath = path
	p.PodUID, p.ContainerID = ParseKubernetesCgroup(path)
}

// FromEnviron builds a process identity from what the kernel copied at the process's
// first traced call (executable name and environment block), for processes gone from
// /proc.
func FromEnviron(pid uint32, executable string, env []byte) Process {
	p := Process{PID: pid, Executable: executable, Rank: -1, LocalRank: -1, WorldSize: -1}
	p.fillFromEnviron(env)
	return p
}

func (p *Process) fillFromEnviron(env []byte) {
	vars := parseEnviron(env)
	p.Rank = firstInt(vars, rankVars)
	p.LocalRank = firstInt(vars, localRankVars)
	p.WorldSize = firstInt(vars, worldSizeVars)
	p.IBHCAs = ParseHCAs(vars["NCCL_IB_HCA"])
	visible, set := vars["CUDA_VISIBLE_DEVICES"]
	p.VisibleDevices = ParseVisibleDevices(visible, set)
	if addr, port := vars["MASTER_ADDR"], vars["MASTER_PORT"]; addr != "" && port != "" {
		p.Rendezvous = addr + ":" + port
	}
	for _, k := range jobVars {
		if v, ok := vars[k]; ok && v != "" {
			p.Job = v
			break
		}
	}
}

// unifiedCgroup picks the cgroup v2 line ("0::/path"); on hybrid hosts the v1 lines
// are ignored.
func unifiedCgroup(content string) string {
	for _, line := range strings.Split(content, "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest
		}
	}
	return ""
}

var (
	// systemd driver: .../kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope
	// cgroupfs driver: /kubepods/burstable/pod<uid>/<id>
	podPattern       = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})`)
	containerPattern = regexp.MustCompile(`(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$`)
)

// ParseKubernetesCgroup extracts the pod uid and container id from a cgroup path, or
// empty strings when the process does not run in a Kubernetes pod.
func ParseKubernetesCgroup(path string) (podUID, containerID string) {
	if m := podPattern.FindStringSubmatch(path); m != nil {
		podUID = strings.ReplaceAll(m[1], "_", "-")
	}
	if m := containerPattern.FindStringSubmatch(path); m != nil {
		containerID = m[1]
	}
	return podUID, containerID
}

func parseEnviron(env []byte) map[string]string {
	vars := map[string]string{}
	for _, kv := range bytes.Split(env, []byte{0}) {
		if k, v, ok := bytes.Cut(kv, []byte{'='}); ok {
			vars[string(k)] = string(v)
		}
	}
	return vars
}

func firstInt(vars map[string]string, names []string) int {
	for _, name := range names {
		if v, ok := vars[name]; ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
				return n
			}
		}
	}
	return -1
}
