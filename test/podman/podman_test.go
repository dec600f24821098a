package podman

import (
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fathom-gpu/fathom/internal/fakegpu"
	"github.com/fathom-gpu/fathom/internal/nodecheck"
	"github.com/fathom-gpu/fathom/internal/pki"
	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
	"github.com/fathom-gpu/fathom/tools/imagebuild"
)

// imageRef is the image built from the collector under test, loaded once for the
// package and removed at its end; unique, so that it never replaces a loaded release.
var (
	imageRef  = fmt.Sprintf("localhost/fathom-podman-test:%d", os.Getpid())
	imageOnce sync.Once
	imageErr  error
	loaded    bool
)

func TestMain(m *testing.M) {
	code := m.Run()
	if loaded {
		exec.Command("podman", "rmi", "--force", imageRef).Run()
	}
	os.Exit(code)
}

// requirePodman stops the test unless podman, runc, root, BPF and bpffs are here;
// under FATHOM_REQUIRE_PRIVILEGED=1 (CI, whose make deps installs podman and runc) it
// fails instead.
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
	privtest.RequireBPFFS(t)
}

// image builds the image from the collector under test (FATHOM_BIN) as make image
// does, and loads it into podman.
func image(t *testing.T) string {
	t.Helper()
	imageOnce.Do(func() {
		start := time.Now()
		root := collectortest.RepoRoot(t)
		configs, err := filepath.Glob(filepath.Join(root, "deploy", "configs", "*.yaml"))
		if err != nil || len(configs) == 0 {
			imageErr = fmt.Errorf("no configs in deploy/configs: %v", err)
			return
		}
		dir, err := os.MkdirTemp("", "fathom-podman-image-")
		if err != nil {
			imageErr = err
			return
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "fathom.oci.tar")
		if _, err := imagebuild.Build(imagebuild.Spec{
			Binary: collectortest.Binary(t), Configs: configs, Version: "0.0.0-test", Revision: "test",
			Source: "https://github.com/fathom-gpu/fathom", Reference: imageRef, Created: time.Unix(0, 0).UTC(),
			CompressionLevel: gzip.BestSpeed, CABundle: "/etc/ssl/certs/ca-certificates.crt",
		}, out); err != nil {
			imageErr = fmt.Errorf("building the image: %w", err)
			return
		}
		built := time.Since(start)
		if b, err := exec.Command("podman", "load", "-i", out).CombinedOutput(); err != nil {
			imageErr = fmt.Errorf("podman load: %v\n%s", err, b)
			return
		}
		loaded = true
		t.Logf("image %s: built in %s, loaded in %s", imageRef, built.Round(time.Millisecond), (time.Since(start) - built).Round(time.Millisecond))
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return imageRef
}

// baseFlags: runc, since crun refuses this host's hybrid cgroup layout, and this
// process's own open-files and process limits, since podman's defaults are above the
// host's hard limit, which runc may not raise.
func baseFlags() []string {
	var nofile, nproc unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile)
	unix.Getrlimit(unix.RLIMIT_NPROC, &nproc)
	return []string{"--runtime", "runc",
		"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile.Max, nofile.Max),
		"--ulimit", fmt.Sprintf("nproc=%d:%d", min(nproc.Max, 4096), min(nproc.Max, 4096))}
}

// container is one started `podman run -d`, removed at cleanup; its log is printed
// when the test fails.
func startContainer(t *testing.T, name string, flags []string, image string, args []string) {
	t.Helper()
	run := append(append([]string{"run", "-d", "--name", name}, baseFlags()...), flags...)
	run = append(append(run, image), args...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command("podman", "logs", "--tail", "60", name).CombinedOutput()
			t.Logf("podman logs %s:\n%s", name, logs)
		}
		exec.Command("podman", "rm", "-f", "-t", "2", name).Run()
	})
	if out, err := exec.Command("podman", run...).CombinedOutput(); err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(run, " "), err, out)
	}
}

// writeConfigMap writes a rendered ConfigMap's files into a new directory, as the
// kubelet's configMap volume does.
func writeConfigMap(t *testing.T, r rendered, name string) string {
	t.Helper()
	cm, ok := r.configMaps[name]
	if !ok {
		t.Fatalf("the chart renders no ConfigMap %s", name)
	}
	dir := t.TempDir()
	for file, content := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(dir, 0o755)
	return dir
}

// secretDir copies a certificate's files into a directory as a secret volume holds
// them: mode as the chart's defaultMode, the group fsGroup where the pod has one.
func secretDir(t *testing.T, f pki.Files, mode os.FileMode, group int) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range map[string]string{"ca.crt": f.CA, "tls.crt": f.Cert, "tls.key": f.Key} {
		raw, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, name)
		if err := os.WriteFile(dst, raw, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(dst, mode)
		os.Chown(dst, 0, group)
	}
	os.Chmod(dir, 0o755)
	return dir
}

// volumeDir is an emptyDir or a claim: writable by the pod's fsGroup (the kubelet
// gives the volume to that group, setgid) or by anyone (an emptyDir's 0777).
func volumeDir(t *testing.T, group int) string {
	t.Helper()
	dir := t.TempDir()
	if group >= 0 {
		os.Chown(dir, 0, group)
		os.Chmod(dir, 0o2770)
	} else {
		os.Chmod(dir, 0o777)
	}
	return dir
}

func waitHealthy(t *testing.T, name, url string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not healthy at %s after %s: %v", name, url, within, err)
		}
		state, _ := exec.Command("podman", "inspect", "--format", "{{.State.Status}}", name).Output()
		if s := strings.TrimSpace(string(state)); s == "exited" {
			t.Fatalf("%s exited before it was healthy", name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The node container with exactly the chart's security context (capabilities BPF,
// PERFMON, SYS_PTRACE, DAC_READ_SEARCH and KILL, no SYS_RESOURCE; uid 0; read-only
// root; no privilege escalation; the chart's own seccomp profile), its host mounts,
// host pids and memory limit traces a fake CUDA workload on the host and exports it
// over mutual TLS to a gateway container with the chart's context (uid 65532, read-only
// root, no capabilities, a store volume), which stores it and serves it over its Echo
// API: every launch the workload made is counted there.
func TestTheChartsNodeContainerTracesAndExportsUnderPodman(t *testing.T) {
	requirePodman(t)
	start := time.Now()
	r := renderChart(t)
	ref := image(t)
	imageReady := time.Since(start)
	paths := fakegpu.Build(t)

	prefix := fmt.Sprintf("fathom-podman-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	certs := collectortest.NewOTLPTLS(t)
	const fsGroup = 65532
	const agentToken = "podman-test-agent-token"
	echoFiles := collectortest.IssueFiles(t, certs.CA, t.TempDir(), pki.Loopback("fathom-echo"))

	// The gateway.
	grpcAddr, httpAddr, echoAddr, gwHealth := collectortest.Addr(t), collectortest.Addr(t), collectortest.Addr(t), collectortest.Addr(t)
	gwPod := r.gateway.Spec.Template.Spec
	gwFlags, gwArgs := podmanArgs(t, gwPod, gwPod.Containers[0], standIns{
		volumes: map[string]string{
			"config":   writeConfigMap(t, r, r.gateway.Name),
			"tls":      secretDir(t, echoFiles, 0o644, 0),
			"otlp-tls": secretDir(t, certs.Gateway, 0o440, fsGroup),
			"store":    volumeDir(t, fsGroup),
			"audit":    volumeDir(t, -1),
			"tmp":      volumeDir(t, -1),
		},
		env: map[string]string{
			"FATHOM_GATEWAY_OTLP_GRPC": grpcAddr, "FATHOM_GATEWAY_OTLP_HTTP": httpAddr,
			"FATHOM_ECHO_ENDPOINT": echoAddr, "FATHOM_HEALTH_ENDPOINT": gwHealth,
			"FATHOM_ECHO_AGENT_TOKEN": agentToken, "FATHOM_ECHO_GRAFANA_TOKEN": "podman-test-grafana-token",
		},
		extraEnv: map[string]string{
			"FATHOM_ZPAGES_ENDPOINT": collectortest.Addr(t),
			"FATHOM_TELEMETRY_PORT":  fmt.Sprint(collectortest.FreePort(t)),
		},
	})
	startContainer(t, prefix+"-gateway", append(gwFlags, "--network", "host"), ref, gwArgs)
	waitHealthy(t, prefix+"-gateway", "http://"+gwHealth+"/", 30*time.Second)
	gatewayUp := time.Since(start)

	// The node: the chart's profile is installed where a kubelet would read it.
	seccompDir := writeConfigMap(t, r, r.node.Name+"-seccomp")
	nodeHealth := collectortest.Addr(t)
	pinDir := collectortest.PinDir(t)
	nodePod := r.node.Spec.Template.Spec
	nodeFlags, nodeArgs := podmanArgs(t, nodePod, nodePod.Containers[0], standIns{
		volumes: map[string]string{
			"config":   writeConfigMap(t, r, r.node.Name),
			"otlp-tls": secretDir(t, certs.Node(t, "fathom-node"), 0o400, 0),
		},
		env: map[string]string{
			"FATHOM_NODE_NAME":           "podman-node",
			"FATHOM_GATEWAY":             grpcAddr,
			"FATHOM_COLLECTION_INTERVAL": "1s",
			"FATHOM_PIN_DIR":             pinDir,
			"FATHOM_HEALTH_ENDPOINT":     nodeHealth,
		},
		extraEnv: map[string]string{
			"FATHOM_NODE_OTLP":       collectortest.Addr(t),
			"FATHOM_ZPAGES_ENDPOINT": collectortest.Addr(t),
			"FATHOM_TELEMETRY_PORT":  fmt.Sprint(collectortest.FreePort(t)),
		},
		seccompDir: seccompDir,
	})
	t.Logf("node: podman run %s %s %s", strings.Join(nodeFlags, " "), ref, strings.Join(nodeArgs, " "))
	startContainer(t, prefix+"-node", append(nodeFlags, "--network", "host"), ref, nodeArgs)
	waitHealthy(t, prefix+"-node", "http://"+nodeHealth+"/", 45*time.Second)
	nodeUp := time.Since(start)

	// A CUDA workload on the host, outside any container.
	res := fakegpu.Run(t, paths, fakegpu.Options{Steps: 20, Launches: 400, Syncs: 20, StepGap: 50 * time.Millisecond})
	launches := res.Calls["cudaLaunchKernel"]
	if launches != 400 {
		t.Fatalf("the workload made %d launches, want 400", launches)
	}

	// Its launches, counted in the kernel by the node, stored by the gateway.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certs.CA.Pool(), MinVersion: tls.VersionTLS12}}}
	query := fmt.Sprintf(`SELECT coalesce(max(value), 0), any_value(node) FROM events WHERE name = 'cuda.api.calls' AND pid = %d AND api = 'cudaLaunchKernel'`, res.Pid)
	var stored float64
	var node any
	deadline := time.Now().Add(30 * time.Second)
	for stored != float64(launches) {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway's store holds %v launches of pid %d (node %v) after 30 s, want %d", stored, res.Pid, node, launches)
		}
		time.Sleep(500 * time.Millisecond)
		rows := sql(t, client, echoAddr, agentToken, query)
		if len(rows) == 1 {
			stored, _ = rows[0][0].(float64)
			node = rows[0][1]
		}
	}
	if node != "podman-node" {
		t.Errorf("the launches are stored for node %v, want podman-node", node)
	}
	t.Logf("image ready %s, gateway healthy %s, node healthy %s, launches stored %s (from the test's start)",
		imageReady.Round(time.Millisecond), gatewayUp.Round(time.Millisecond), nodeUp.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// sql asks the gateway's Echo HTTP API.
func sql(t *testing.T, client *http.Client, addr, token, query string) [][]any {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"sql": query})
	req, _ := http.NewRequest(http.MethodPost, "https://"+addr+"/api/v1/sql", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("Echo API: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		Rows [][]any `json:"rows"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("Echo API answered %d: %s", resp.StatusCode, raw)
	}
	return out.Rows
}

// `fathom check` in the node container with the chart's context, but podman's default
// seccomp profile in place of the chart's, names the profile as the cause and the
// chart's profile as the fix; with the chart's profile the node is ready.
func TestFathomCheckNamesTheSeccompProfile(t *testing.T) {
	requirePodman(t)
	r := renderChart(t)
	ref := image(t)
	nodePod := r.node.Spec.Template.Spec
	c := nodePod.Containers[0]
	check := func(profile string) nodecheck.Report {
		t.Helper()
		c := c
		sc := *c.SecurityContext
		stand := standIns{
			volumes:    map[string]string{"config": writeConfigMap(t, r, r.node.Name), "otlp-tls": t.TempDir()},
			env:        map[string]string{"FATHOM_NODE_NAME": "podman-node"},
			seccompDir: writeConfigMap(t, r, r.node.Name+"-seccomp"),
		}
		if profile == "default" {
			sc.SeccompProfile = nil // the runtime's default: podman's /usr/share/containers/seccomp.json
		}
		c.SecurityContext = &sc
		flags, _ := podmanArgs(t, nodePod, c, stand)
		run := append(append(append([]string{"run", "--rm"}, baseFlags()...), flags...), ref, "check", "--json", "--proc-root", "/host/proc")
		var stdout, stderr bytes.Buffer
		cmd := exec.Command("podman", run...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.Run() // exits 1 when the node is not ready
		var report nodecheck.Report
		if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
			t.Fatalf("fathom check --json under the %s profile: %v\n%s%s", profile, err, stdout.String(), stderr.String())
		}
		return report
	}
	byName := func(r nodecheck.Report) map[string]nodecheck.Check {
		m := map[string]nodecheck.Check{}
		for _, c := range r.Checks {
			m[c.Name] = c
		}
		return m
	}

	refused := byName(check("default"))
	if c := refused["syscalls"]; c.OK || !strings.Contains(c.Detail, "seccomp filter") || !strings.Contains(c.Detail, "refuses bpf() (EPERM)") || c.Fix != nodecheck.SeccompFix {
		t.Errorf("under podman's default profile, syscalls: %+v", c)
	}
	if c := refused[nodecheck.BPFLoadCheck]; c.OK || !strings.Contains(c.Detail, "not the kernel's refusal: the seccomp filter") || c.Fix != nodecheck.SeccompFix {
		t.Errorf("under podman's default profile, bpf_load: %+v", c)
	}
	if c := refused["privileges"]; !c.OK {
		t.Errorf("the chart's capabilities judged missing: %+v", c)
	}

	report := check("chart")
	if got := byName(report); !report.Ready || !got["syscalls"].OK || !got[nodecheck.BPFLoadCheck].OK {
		t.Errorf("under the chart's profile: ready %v, %+v", report.Ready, report.Checks)
	}
}
