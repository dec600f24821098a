// Package deploy_test checks what a platform team installs: the Helm chart renders and
// lints, every object it renders decodes strictly into the Kubernetes API types, its
// collector configs are the example configs and validate, the plain manifests are the
// chart rendered, and the systemd units verify.
package deploy_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/fathom-gpu/fathom/internal/collectortest"
	"github.com/fathom-gpu/fathom/internal/privtest"
)

// helm runs the chart's pinned Helm (deploy/helm/tools, a module of its own).
func helm(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"tool", "helm"}, args...)...)
	cmd.Dir = filepath.Join(collectortest.RepoRoot(t), "deploy", "helm", "tools")
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), stderr.String())
	}
	return out.String()
}

// objects is what the chart rendered, decoded strictly by kind: an unknown field, a
// wrong type or a misplaced key fails here as the API server would refuse it.
type objects struct {
	daemonSets   []appsv1.DaemonSet
	statefulSets []appsv1.StatefulSet
	services     []corev1.Service
	configMaps   []corev1.ConfigMap
	secrets      []corev1.Secret
	accounts     []corev1.ServiceAccount
	policies     []networkingv1.NetworkPolicy
}

func decode(t *testing.T, rendered string) objects {
	t.Helper()
	var o objects
	for _, doc := range strings.Split(rendered, "\n---") {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		var err error
		switch head.Kind {
		case "":
			continue // comments only
		case "DaemonSet":
			err = decodeStrict(doc, &o.daemonSets)
		case "StatefulSet":
			err = decodeStrict(doc, &o.statefulSets)
		case "Service":
			err = decodeStrict(doc, &o.services)
		case "ConfigMap":
			err = decodeStrict(doc, &o.configMaps)
		case "Secret":
			err = decodeStrict(doc, &o.secrets)
		case "ServiceAccount":
			err = decodeStrict(doc, &o.accounts)
		case "NetworkPolicy":
			err = decodeStrict(doc, &o.policies)
		default:
			t.Errorf("the chart renders a %s this test does not check", head.Kind)
		}
		if err != nil {
			t.Errorf("%s does not decode into the API type: %v\n%s", head.Kind, err, doc)
		}
	}
	return o
}

// decodeStrict decodes one document into a new element of list.
func decodeStrict[T any](doc string, list *[]T) error {
	*list = append(*list, *new(T))
	return yaml.UnmarshalStrict([]byte(doc), &(*list)[len(*list)-1])
}

func TestTheChartRendersValidObjects(t *testing.T) {
	chart := filepath.Join(collectortest.RepoRoot(t), "deploy", "helm", "fathom")
	if out := helm(t, "lint", "--strict", chart); !strings.Contains(out, "0 chart(s) failed") {
		t.Fatalf("helm lint:\n%s", out)
	}
	o := decode(t, helm(t, "template", "obs", chart, "--namespace", "gpu-obs",
		"--set", "exporters.otlp.enabled=true,exporters.otlp.endpoint=otlp.example:4317",
		"--set", "exporters.prometheusRemoteWrite.enabled=true,exporters.prometheusRemoteWrite.endpoint=http://prom:9090/api/v1/write",
		"--set", "networkPolicy.echoNamespaces={monitoring,ai-agents}"))
	if len(o.daemonSets) != 1 || len(o.statefulSets) != 1 || len(o.services) != 2 || len(o.configMaps) != 3 || len(o.secrets) != 2 || len(o.accounts) != 2 || len(o.policies) != 1 {
		t.Fatalf("rendered %d daemon sets, %d stateful sets, %d services, %d config maps, %d secrets, %d service accounts, %d network policies",
			len(o.daemonSets), len(o.statefulSets), len(o.services), len(o.configMaps), len(o.secrets), len(o.accounts), len(o.policies))
	}

	// The node collectors: the host's pids, no privileged mode, exactly the
	// capabilities the receiver needs, the kernel's files, GPU nodes only, and
	// host.name from the node's own name.
	ds := o.daemonSets[0].Spec.Template.Spec
	c := ds.Containers[0]
	sc := c.SecurityContext
	if !ds.HostPID || sc.Privileged == nil || *sc.Privileged || *sc.AllowPrivilegeEscalation {
		t.Errorf("node pod: hostPID %v, privileged %v", ds.HostPID, sc.Privileged)
	}
	var caps []string
	for _, c := range sc.Capabilities.Add {
		caps = append(caps, string(c))
	}
	if want := []string{"BPF", "PERFMON", "SYS_RESOURCE", "SYS_PTRACE", "DAC_READ_SEARCH", "KILL"}; !slices.Equal(caps, want) || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("node capabilities add %v drop %v, want %v and ALL", caps, sc.Capabilities.Drop, want)
	}
	hostPaths := map[string]string{}
	for _, v := range ds.Volumes {
		if v.HostPath != nil {
			hostPaths[v.HostPath.Path] = v.Name
		}
	}
	for _, p := range []string{"/sys/kernel/btf", "/sys/kernel/tracing", "/proc", "/sys/fs/cgroup", "/sys/fs/bpf", "/sys/class"} {
		if hostPaths[p] == "" {
			t.Errorf("node pod does not mount the host's %s", p)
		}
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env["FATHOM_NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("FATHOM_NODE_NAME is not the node's name from the downward API: %+v", e)
	}
	if got, want := env["FATHOM_GATEWAY"].Value, o.services[0].Name+".gpu-obs.svc:4317"; got != want {
		t.Errorf("nodes export to %q, want the gateway service %q", got, want)
	}
	if ds.NodeSelector["nvidia.com/gpu.present"] != "true" || len(ds.Tolerations) != 1 || ds.Tolerations[0].Key != "nvidia.com/gpu" {
		t.Errorf("node pods: selector %v, tolerations %v", ds.NodeSelector, ds.Tolerations)
	}

	// The gateway: its store on a claim, its services (one headless), its secrets.
	ss := o.statefulSets[0]
	if len(ss.Spec.VolumeClaimTemplates) != 1 || ss.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String() != "100Gi" {
		t.Errorf("gateway claim: %+v", ss.Spec.VolumeClaimTemplates)
	}
	if headless := o.services[1]; headless.Spec.ClusterIP != "None" || headless.Name != ss.Spec.ServiceName {
		t.Errorf("headless service %s (clusterIP %q) is not the stateful set's %s", headless.Name, headless.Spec.ClusterIP, ss.Spec.ServiceName)
	}
	secrets := map[string]corev1.Secret{}
	for _, s := range o.secrets {
		secrets[s.Name] = s
	}
	for _, e := range ss.Spec.Template.Spec.Containers[0].Env {
		if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil {
			if _, ok := secrets[r.SecretKeyRef.Name].Data[r.SecretKeyRef.Key]; !ok {
				t.Errorf("%s reads key %s of secret %s, which the chart does not make", e.Name, r.SecretKeyRef.Key, r.SecretKeyRef.Name)
			}
		}
	}

	// Who may reach the gateway: its OTLP ports only the node pods the daemon set
	// makes, its Echo API and metrics only the release's namespace and those named.
	np := o.policies[0].Spec
	if !labelsMatch(np.PodSelector.MatchLabels, ss.Spec.Template.Labels) || !slices.Equal(np.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Ingress) != 2 {
		t.Fatalf("network policy selects %v (gateway pods %v), types %v, %d rules", np.PodSelector.MatchLabels, ss.Spec.Template.Labels, np.PolicyTypes, len(np.Ingress))
	}
	otlp, echo := np.Ingress[0], np.Ingress[1]
	if len(otlp.From) != 1 || otlp.From[0].PodSelector == nil || otlp.From[0].NamespaceSelector != nil ||
		!labelsMatch(otlp.From[0].PodSelector.MatchLabels, o.daemonSets[0].Spec.Template.Labels) ||
		labelsMatch(otlp.From[0].PodSelector.MatchLabels, ss.Spec.Template.Labels) || !slices.Equal(ports(otlp.Ports), []int32{4317, 4318}) {
		t.Errorf("OTLP rule: from %+v ports %v; want the node pods alone on 4317 and 4318", otlp.From, ports(otlp.Ports))
	}
	if len(echo.From) != 1 || echo.From[0].NamespaceSelector == nil || echo.From[0].PodSelector != nil || !slices.Equal(ports(echo.Ports), []int32{8765, 8888}) {
		t.Errorf("Echo rule: from %+v ports %v", echo.From, ports(echo.Ports))
	} else if ex := echo.From[0].NamespaceSelector.MatchExpressions; len(ex) != 1 || ex[0].Key != "kubernetes.io/metadata.name" ||
		!slices.Equal(ex[0].Values, []string{"gpu-obs", "monitoring", "ai-agents"}) {
		t.Errorf("Echo rule namespaces: %+v; want gpu-obs, monitoring and ai-agents", ex)
	}

	// The collector configs are the example configs, and validate as the pods run
	// them (the gateway with the backends merged over it).
	root := collectortest.RepoRoot(t)
	dir := t.TempDir()
	for _, cm := range o.configMaps {
		for name, content := range cm.Data {
			if example, err := os.ReadFile(filepath.Join(root, "deploy", "configs", name)); err == nil && strings.TrimSpace(string(example)) != strings.TrimSpace(content) {
				t.Errorf("the chart's %s differs from deploy/configs/%s: run make generate", name, name)
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	bin := collectortest.Binary(t)
	for _, configs := range [][]string{{"node.yaml"}, {"gateway.yaml", "backends.yaml"}} {
		args := []string{"validate"}
		for _, c := range configs {
			args = append(args, "--config", filepath.Join(dir, c))
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "FATHOM_ECHO_AGENT_TOKEN=x", "FATHOM_ECHO_GRAFANA_TOKEN=y")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("fathom validate %v: %v\n%s", configs, err, out)
		}
	}
}

// labelsMatch says whether a selector's labels all hold in labels.
func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

func ports(ps []networkingv1.NetworkPolicyPort) []int32 {
	var out []int32
	for _, p := range ps {
		if p.Port != nil {
			out = append(out, p.Port.IntVal)
		}
	}
	return out
}

// The plain manifests (deploy/manifests/fathom.yaml) are the chart rendered with
// secrets the operator makes; they decode as the chart's objects do.
func TestThePlainManifestsDecode(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(collectortest.RepoRoot(t), "deploy", "manifests", "fathom.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	o := decode(t, string(raw))
	if len(o.daemonSets) != 1 || len(o.statefulSets) != 1 || len(o.secrets) != 0 {
		t.Errorf("manifests: %d daemon sets, %d stateful sets, %d secrets (want 1, 1, 0: the operator makes them)",
			len(o.daemonSets), len(o.statefulSets), len(o.secrets))
	}
}

// systemd-analyze verify accepts both units, with ExecStart pointed at the built
// binary (verify checks that it exists).
func TestTheSystemdUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv(privtest.EnvRequire) == "1" {
			t.Fatalf("systemd-analyze is not installed, and %s=1 (CI) makes that a failure", privtest.EnvRequire)
		}
		t.Skip("systemd-analyze is not installed here")
	}
	bin := collectortest.Binary(t)
	dir := t.TempDir()
	var units []string
	for _, name := range []string{"fathom-node.service", "fathom-gateway.service"} {
		raw, err := os.ReadFile(filepath.Join(collectortest.RepoRoot(t), "deploy", "systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		unit := filepath.Join(dir, name)
		if err := os.WriteFile(unit, bytes.ReplaceAll(raw, []byte("/usr/local/bin/fathom"), []byte(bin)), 0o644); err != nil {
			t.Fatal(err)
		}
		units = append(units, unit)
	}
	out, err := exec.Command(analyze, append([]string{"verify"}, units...)...).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
