// Package deploy_test checks what a platform team installs: the Helm chart renders and
// lints, every object it renders decodes strictly into the Kubernetes API types, its
// collector configs are the example configs and validate, the plain manifests are the
// chart rendered, and the systemd units verify.
package deploy_test

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
	"github.com/fathom-gpu/fathom/internal/testsupport/privtest"
)

// helm runs the chart's pinned Helm (deploy/helm/tools, a module of its own).
func helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := helmRun(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// helmRun is helm for a render that may fail: the error carries what Helm said.
func helmRun(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"tool", "helm"}, args...)...)
	cmd.Dir = filepath.Join(collectortest.RepoRoot(t), "deploy", "helm", "tools")
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w\n%s%s", err, out.String(), stderr.String())
	}
	return out.String(), nil
}

// chartRender renders the chart as an install (existing empty) or as an upgrade over
// the objects in existing (YAML), whose lookups see those objects, through
// deploy/helm/tools/chartrender; it returns every file, NOTES.txt included.
func chartRender(t *testing.T, existing string, sets ...string) map[string]string {
	t.Helper()
	tools := filepath.Join(collectortest.RepoRoot(t), "deploy", "helm", "tools")
	bin := filepath.Join(t.TempDir(), "chartrender")
	build := exec.Command("go", "build", "-o", bin, "./chartrender")
	build.Dir, build.Env = tools, append(os.Environ(), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./chartrender: %v\n%s", err, out)
	}
	args := []string{"-chart", filepath.Join(tools, "..", "fathom"), "-name", "obs", "-namespace", "gpu-obs"}
	if existing != "" {
		file := filepath.Join(t.TempDir(), "existing.yaml")
		if err := os.WriteFile(file, []byte(existing), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-existing", file)
	}
	for _, s := range sets {
		args = append(args, "-set", s)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chartrender %v: %v\n%s", args, err, stderr.String())
	}
	var files map[string]string
	if err := json.Unmarshal(out, &files); err != nil {
		t.Fatal(err)
	}
	return files
}

// manifests joins the rendered files but NOTES.txt into one stream of documents.
func manifests(files map[string]string) string {
	var docs []string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if !strings.HasSuffix(name, "NOTES.txt") {
			docs = append(docs, files[name])
		}
	}
	return strings.Join(docs, "\n---\n")
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
	certificates []certificate
}

// certificate is what the chart writes of cert-manager's Certificate (cert-manager.io/v1,
// its field names checked against cert-manager's API reference). Decoded strictly, a
// field the chart misspells or misplaces fails here; this test does not have
// cert-manager's CRD schema, so a field it adds must be added here too.
type certificate struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		SecretName  string   `json:"secretName"`
		CommonName  string   `json:"commonName"`
		DNSNames    []string `json:"dnsNames"`
		Usages      []string `json:"usages"`
		Duration    string   `json:"duration"`
		RenewBefore string   `json:"renewBefore"`
		PrivateKey  struct {
			RotationPolicy string `json:"rotationPolicy"`
		} `json:"privateKey"`
		IssuerRef struct {
			Name  string `json:"name"`
			Kind  string `json:"kind"`
			Group string `json:"group"`
		} `json:"issuerRef"`
	} `json:"spec"`
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
		case "Certificate":
			err = decodeStrict(doc, &o.certificates)
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
	if len(o.daemonSets) != 1 || len(o.statefulSets) != 1 || len(o.services) != 2 || len(o.configMaps) != 4 || len(o.secrets) != 5 || len(o.accounts) != 2 || len(o.policies) != 1 {
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
	if want := []string{"BPF", "PERFMON", "SYS_PTRACE", "DAC_READ_SEARCH", "KILL"}; !slices.Equal(caps, want) || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("node capabilities add %v drop %v, want %v and ALL", caps, sc.Capabilities.Drop, want)
	}
	// The chart's own seccomp profile, which the kubelet finds in its seccomp
	// directory; the chart renders the same file into a ConfigMap to copy from.
	if p := sc.SeccompProfile; p == nil || p.Type != corev1.SeccompProfileTypeLocalhost || p.LocalhostProfile == nil || *p.LocalhostProfile != "fathom-node.json" {
		t.Errorf("node seccomp profile %+v, want Localhost fathom-node.json", p)
	}
	profile, err := os.ReadFile(filepath.Join(collectortest.RepoRoot(t), "deploy", "helm", "fathom", "files", "seccomp", "fathom-node.json"))
	if err != nil {
		t.Fatal(err)
	}
	var shipped bool
	for _, cm := range o.configMaps {
		if cm.Name == "obs-fathom-node-seccomp" {
			shipped = strings.TrimSpace(cm.Data["fathom-node.json"]) == strings.TrimSpace(string(profile))
		}
	}
	if !shipped {
		t.Errorf("the ConfigMap obs-fathom-node-seccomp does not hold files/seccomp/fathom-node.json")
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

	// OTLP between them is mutual TLS with certificates the chart made: one CA, the
	// gateway's certificate for its service names, one node certificate all nodes share.
	checkGeneratedOTLPTLS(t, o, "gpu-obs")

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

// checkGeneratedOTLPTLS checks the OTLP certificates the chart makes as the collectors
// use them: both secrets from one CA (the one kept in obs-fathom-otlp-ca), the
// gateway's certificate for the names the nodes dial, the nodes' a client certificate
// named fathom-node, each with its key, a handshake between them as the gateway
// (client certificates required) and a node make it; and both pods mounting them.
func checkGeneratedOTLPTLS(t *testing.T, o objects, namespace string) {
	t.Helper()
	secrets := secretsByName(o)
	ca, gateway, node := secrets["obs-fathom-otlp-ca"], secrets["obs-fathom-otlp-gateway"], secrets["obs-fathom-otlp-node"]
	for name, s := range map[string]corev1.Secret{"ca": ca, "gateway": gateway, "node": node} {
		if s.Type != corev1.SecretTypeTLS {
			t.Fatalf("the %s's OTLP secret: type %q, want %q (rendered: %v)", name, s.Type, corev1.SecretTypeTLS, slices.Sorted(maps.Keys(secrets)))
		}
	}
	if !bytes.Equal(gateway.Data["ca.crt"], ca.Data["tls.crt"]) || !bytes.Equal(node.Data["ca.crt"], ca.Data["tls.crt"]) {
		t.Errorf("the gateway's and the nodes' ca.crt are not the CA the chart keeps")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca.Data["tls.crt"]) {
		t.Fatalf("the CA is not a PEM certificate:\n%s", ca.Data["tls.crt"])
	}
	svc := "obs-fathom-gateway"
	gatewayCert := parseCertificate(t, gateway.Data["tls.crt"])
	for _, name := range []string{svc, svc + "." + namespace + ".svc", svc + "." + namespace + ".svc.cluster.local", svc + "-0." + svc + "-headless." + namespace + ".svc"} {
		if _, err := gatewayCert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("the gateway's certificate does not verify for %s as a server: %v", name, err)
		}
	}
	nodeCert := parseCertificate(t, node.Data["tls.crt"])
	if _, err := nodeCert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || nodeCert.Subject.CommonName != "fathom-node" {
		t.Errorf("the nodes' certificate (CN %q) does not verify as a client named fathom-node: %v", nodeCert.Subject.CommonName, err)
	}
	gatewayPair, err := tls.X509KeyPair(gateway.Data["tls.crt"], gateway.Data["tls.key"])
	if err != nil {
		t.Fatalf("the gateway's key is not its certificate's: %v", err)
	}
	nodePair, err := tls.X509KeyPair(node.Data["tls.crt"], node.Data["tls.key"])
	if err != nil {
		t.Fatalf("the nodes' key is not their certificate's: %v", err)
	}
	if peer := handshake(t, gatewayPair, nodePair, roots, svc+"."+namespace+".svc"); peer != "fathom-node" {
		t.Errorf("the gateway saw a client named %q, want fathom-node", peer)
	}

	ds, ss := o.daemonSets[0].Spec.Template, o.statefulSets[0].Spec.Template
	if v := otlpTLSVolume(t, ds.Spec); v == nil || v.Secret == nil || v.Secret.SecretName != node.Name {
		t.Errorf("node pods mount %+v at /etc/fathom/otlp-tls, want secret %s", v, node.Name)
	}
	if v := otlpTLSVolume(t, ss.Spec); v == nil || v.Secret == nil || v.Secret.SecretName != gateway.Name {
		t.Errorf("gateway pods mount %+v at /etc/fathom/otlp-tls, want secret %s", v, gateway.Name)
	}
	if e, ok := envOf(ss.Spec)["FATHOM_NODE_SHARED_CERT_NAME"]; !ok || e.Value != "fathom-node" {
		t.Errorf("gateway FATHOM_NODE_SHARED_CERT_NAME %+v, want fathom-node (the certificate the nodes share)", e)
	}
	for role, pod := range map[string]corev1.PodSpec{"node": ds.Spec, "gateway": ss.Spec} {
		for _, arg := range pod.Containers[0].Args {
			if strings.Contains(arg, "plaintext") {
				t.Errorf("%s pods merge %s with TLS on", role, arg)
			}
		}
	}
	// A new CA rolls both, since a node reads its CA file only at start.
	sum := sha256.Sum256(ca.Data["tls.crt"])
	for role, annotations := range map[string]map[string]string{"node": ds.Annotations, "gateway": ss.Annotations} {
		if got := annotations["checksum/otlp-ca"]; got != hex.EncodeToString(sum[:]) {
			t.Errorf("%s pods' checksum/otlp-ca %q is not the CA's", role, got)
		}
	}
}

func parseCertificate(t *testing.T, raw []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(raw)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("not a PEM certificate:\n%s", raw)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// handshake runs a TLS handshake between a gateway that requires client certificates
// signed by roots and a node that dials serverName, and returns the Common Name the
// gateway saw.
func handshake(t *testing.T, gateway, node tls.Certificate, roots *x509.CertPool, serverName string) string {
	t.Helper()
	gatewayEnd, nodeEnd := net.Pipe()
	defer gatewayEnd.Close()
	defer nodeEnd.Close()
	server := tls.Server(gatewayEnd, &tls.Config{Certificates: []tls.Certificate{gateway}, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert})
	client := tls.Client(nodeEnd, &tls.Config{Certificates: []tls.Certificate{node}, RootCAs: roots, ServerName: serverName})
	clientErr := make(chan error, 1)
	go func() { clientErr <- client.Handshake() }()
	if err := server.Handshake(); err != nil {
		t.Fatalf("gateway side of the handshake: %v (node side: %v)", err, <-clientErr)
	}
	if err := <-clientErr; err != nil {
		t.Fatalf("node side of the handshake: %v", err)
	}
	return server.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// otlpTLSVolume is the volume the pod mounts at /etc/fathom/otlp-tls, or nil.
func otlpTLSVolume(t *testing.T, pod corev1.PodSpec) *corev1.Volume {
	t.Helper()
	for _, m := range pod.Containers[0].VolumeMounts {
		if m.MountPath != "/etc/fathom/otlp-tls" {
			continue
		}
		if !m.ReadOnly {
			t.Errorf("/etc/fathom/otlp-tls is mounted writable")
		}
		for i, v := range pod.Volumes {
			if v.Name == m.Name {
				return &pod.Volumes[i]
			}
		}
		t.Fatalf("/etc/fathom/otlp-tls mounts volume %s, which the pod does not have", m.Name)
	}
	return nil
}

func envOf(pod corev1.PodSpec) map[string]corev1.EnvVar {
	env := map[string]corev1.EnvVar{}
	for _, e := range pod.Containers[0].Env {
		env[e.Name] = e
	}
	return env
}

func secretsByName(o objects) map[string]corev1.Secret {
	secrets := map[string]corev1.Secret{}
	for _, s := range o.secrets {
		secrets[s.Name] = s
	}
	return secrets
}

// The other ways to the OTLP certificates (values.otlpTLS): cert-manager, secrets the
// operator makes, per-node certificates on the hosts, and none; and what the chart
// refuses to guess.
func TestTheChartOTLPTLSModes(t *testing.T) {
	chart := filepath.Join(collectortest.RepoRoot(t), "deploy", "helm", "fathom")
	template := func(sets ...string) []string {
		args := []string{"template", "obs", chart, "--namespace", "gpu-obs"}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		return args
	}
	noOTLPSecrets := func(t *testing.T, o objects) {
		t.Helper()
		for name := range secretsByName(o) {
			if strings.Contains(name, "otlp") {
				t.Errorf("the chart made secret %s", name)
			}
		}
	}

	t.Run("certManager", func(t *testing.T) {
		o := decode(t, helm(t, template("otlpTLS.certManager.issuerRef.name=fathom-ca,otlpTLS.certManager.issuerRef.kind=ClusterIssuer,otlpTLS.certManager.issuerRef.group=cert-manager.io")...))
		noOTLPSecrets(t, o)
		if len(o.certificates) != 2 {
			t.Fatalf("%d Certificates, want the gateway's and the nodes'", len(o.certificates))
		}
		certs := map[string]certificate{}
		for _, c := range o.certificates {
			certs[c.Spec.SecretName] = c
			if c.APIVersion != "cert-manager.io/v1" || c.Spec.IssuerRef.Name != "fathom-ca" || c.Spec.IssuerRef.Kind != "ClusterIssuer" || c.Spec.IssuerRef.Group != "cert-manager.io" ||
				c.Spec.Duration == "" || c.Spec.RenewBefore == "" || c.Metadata.Namespace != "gpu-obs" {
				t.Errorf("Certificate %s: %+v", c.Metadata.Name, c)
			}
		}
		gateway, node := certs["obs-fathom-otlp-gateway"], certs["obs-fathom-otlp-node"]
		if !slices.Contains(gateway.Spec.Usages, "server auth") || !slices.Contains(gateway.Spec.DNSNames, "obs-fathom-gateway.gpu-obs.svc") {
			t.Errorf("gateway Certificate: usages %v, DNS names %v", gateway.Spec.Usages, gateway.Spec.DNSNames)
		}
		if !slices.Contains(node.Spec.Usages, "client auth") || node.Spec.CommonName != "fathom-node" || len(node.Spec.DNSNames) != 0 {
			t.Errorf("node Certificate: usages %v, CN %q, DNS names %v", node.Spec.Usages, node.Spec.CommonName, node.Spec.DNSNames)
		}
		if v := otlpTLSVolume(t, o.daemonSets[0].Spec.Template.Spec); v == nil || v.Secret == nil || v.Secret.SecretName != node.Spec.SecretName {
			t.Errorf("node pods mount %+v, want the node Certificate's secret", v)
		}
		ss := o.statefulSets[0].Spec.Template.Spec
		if v := otlpTLSVolume(t, ss); v == nil || v.Secret == nil || v.Secret.SecretName != gateway.Spec.SecretName {
			t.Errorf("gateway pods mount %+v, want the gateway Certificate's secret", v)
		}
		if e := envOf(ss)["FATHOM_NODE_SHARED_CERT_NAME"]; e.Value != "fathom-node" {
			t.Errorf("gateway FATHOM_NODE_SHARED_CERT_NAME %q, want fathom-node", e.Value)
		}
	})

	t.Run("existingSecrets", func(t *testing.T) {
		o := decode(t, helm(t, template("otlpTLS.existingSecrets.gateway=mine-gateway,otlpTLS.existingSecrets.node=mine-node")...))
		noOTLPSecrets(t, o)
		if v := otlpTLSVolume(t, o.daemonSets[0].Spec.Template.Spec); v == nil || v.Secret == nil || v.Secret.SecretName != "mine-node" {
			t.Errorf("node pods mount %+v, want secret mine-node", v)
		}
		if v := otlpTLSVolume(t, o.statefulSets[0].Spec.Template.Spec); v == nil || v.Secret == nil || v.Secret.SecretName != "mine-gateway" {
			t.Errorf("gateway pods mount %+v, want secret mine-gateway", v)
		}
	})

	t.Run("perNode", func(t *testing.T) {
		o := decode(t, helm(t, template("otlpTLS.perNode.hostPath=/etc/fathom/node-tls,otlpTLS.perNode.gatewaySecret=otlp-gateway-tls")...))
		noOTLPSecrets(t, o)
		v := otlpTLSVolume(t, o.daemonSets[0].Spec.Template.Spec)
		if v == nil || v.HostPath == nil || v.HostPath.Path != "/etc/fathom/node-tls" || v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectory {
			t.Errorf("node pods mount %+v at /etc/fathom/otlp-tls, want the host's /etc/fathom/node-tls (a directory)", v)
		}
		ss := o.statefulSets[0].Spec.Template.Spec
		if v := otlpTLSVolume(t, ss); v == nil || v.Secret == nil || v.Secret.SecretName != "otlp-gateway-tls" {
			t.Errorf("gateway pods mount %+v, want secret otlp-gateway-tls", v)
		}
		// Set and empty: no certificate speaks for another node.
		if e, ok := envOf(ss)["FATHOM_NODE_SHARED_CERT_NAME"]; !ok || e.Value != "" || e.ValueFrom != nil {
			t.Errorf("gateway FATHOM_NODE_SHARED_CERT_NAME %+v (set %v), want set and empty", e, ok)
		}
	})

	t.Run("insecure", func(t *testing.T) {
		files := chartRender(t, "", "otlpTLS.insecure=true")
		o := decode(t, manifests(files))
		noOTLPSecrets(t, o)
		// Each role merges its plaintext overlay (deploy/configs/*-plaintext.yaml) last.
		root := collectortest.RepoRoot(t)
		for role, pod := range map[string]corev1.PodSpec{"node": o.daemonSets[0].Spec.Template.Spec, "gateway": o.statefulSets[0].Spec.Template.Spec} {
			overlay := role + "-plaintext.yaml"
			if args := pod.Containers[0].Args; len(args) < 2 || args[len(args)-2] != "--config" || args[len(args)-1] != "/etc/fathom/"+overlay {
				t.Errorf("%s pods: args %q, want --config /etc/fathom/%s last", role, args, overlay)
			}
			want, err := os.ReadFile(filepath.Join(root, "deploy", "configs", overlay))
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, cm := range o.configMaps {
				if got, ok := cm.Data[overlay]; ok {
					found = true
					if strings.TrimSpace(got) != strings.TrimSpace(string(want)) {
						t.Errorf("configmap %s: %s differs from deploy/configs/%s", cm.Name, overlay, overlay)
					}
				}
			}
			if !found {
				t.Errorf("no configmap carries %s", overlay)
			}
			if v := otlpTLSVolume(t, pod); v != nil {
				t.Errorf("%s pods mount %+v at /etc/fathom/otlp-tls with TLS off", role, v)
			}
		}
		notes := files["fathom/templates/NOTES.txt"]
		if !strings.Contains(notes, "WARNING: plaintext") || !strings.Contains(notes, "steer every node's straggler verdicts") {
			t.Errorf("NOTES.txt does not warn of plaintext OTLP:\n%s", notes)
		}
		if notes := chartRender(t, "")["fathom/templates/NOTES.txt"]; strings.Contains(notes, "WARNING") {
			t.Errorf("NOTES.txt warns with TLS on:\n%s", notes)
		}
	})

	for _, c := range []struct {
		name, set, says string
	}{
		{"perNode without gatewaySecret", "otlpTLS.perNode.hostPath=/etc/fathom/node-tls", "otlpTLS.perNode.hostPath needs otlpTLS.perNode.gatewaySecret"},
		{"two ways at once", "otlpTLS.insecure=true,otlpTLS.existingSecrets.gateway=a,otlpTLS.existingSecrets.node=b", "otlpTLS: insecure and existingSecrets are all set"},
		{"an issuer without a name", "otlpTLS.certManager.issuerRef.kind=ClusterIssuer", "otlpTLS.certManager.issuerRef needs a name"},
		{"half the secrets", "otlpTLS.existingSecrets.gateway=a", "otlpTLS.existingSecrets needs node too"},
	} {
		t.Run("refuses "+c.name, func(t *testing.T) {
			out, err := helmRun(t, template(c.set)...)
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Errorf("helm template --set %s: %v, want it to fail saying %q\n%s", c.set, err, c.says, out)
			}
		})
	}
}

// An upgrade keeps the OTLP certificates the install made (and so restarts nothing); it
// renews one in its last 30 days from the same CA (the pods read the new files, no
// restart); and a lost CA makes a new one for both sides, which rolls the pods.
func TestTheChartKeepsItsOTLPCertificatesAcrossUpgrades(t *testing.T) {
	install := decode(t, manifests(chartRender(t, "")))
	checkGeneratedOTLPTLS(t, install, "gpu-obs")
	cluster := func(secrets map[string]corev1.Secret) string {
		var docs []string
		for _, s := range secrets {
			raw, err := yaml.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, string(raw))
		}
		return strings.Join(docs, "---\n")
	}
	otlpCA := func(o objects) string { return o.daemonSets[0].Spec.Template.Annotations["checksum/otlp-ca"] }
	installed := secretsByName(install)

	upgrade := decode(t, manifests(chartRender(t, cluster(installed))))
	checkGeneratedOTLPTLS(t, upgrade, "gpu-obs")
	for name, was := range installed {
		if now := secretsByName(upgrade)[name]; !maps.EqualFunc(now.Data, was.Data, bytes.Equal) || !maps.Equal(now.Annotations, was.Annotations) {
			t.Errorf("an upgrade changed secret %s", name)
		}
	}
	if otlpCA(upgrade) != otlpCA(install) {
		t.Errorf("an upgrade changed the pods' checksum/otlp-ca")
	}

	nearEnd := maps.Clone(installed)
	node := installed["obs-fathom-otlp-node"]
	node.Annotations = maps.Clone(node.Annotations)
	node.Annotations["fathom-gpu.github.io/not-after"] = strconv.FormatInt(time.Now().Add(10*24*time.Hour).Unix(), 10)
	nearEnd[node.Name] = node
	renewed := decode(t, manifests(chartRender(t, cluster(nearEnd))))
	checkGeneratedOTLPTLS(t, renewed, "gpu-obs")
	now := secretsByName(renewed)
	if bytes.Equal(now[node.Name].Data["tls.crt"], node.Data["tls.crt"]) || bytes.Equal(now[node.Name].Data["tls.key"], node.Data["tls.key"]) {
		t.Errorf("a node certificate in its last 30 days was not renewed")
	}
	for _, name := range []string{"obs-fathom-otlp-ca", "obs-fathom-otlp-gateway"} {
		if !maps.EqualFunc(now[name].Data, installed[name].Data, bytes.Equal) {
			t.Errorf("renewing the node certificate changed %s", name)
		}
	}
	if otlpCA(renewed) != otlpCA(install) {
		t.Errorf("renewing a certificate changed the pods' checksum/otlp-ca: they would restart for nothing")
	}

	lost := maps.Clone(installed)
	delete(lost, "obs-fathom-otlp-ca")
	remade := decode(t, manifests(chartRender(t, cluster(lost))))
	checkGeneratedOTLPTLS(t, remade, "gpu-obs")
	for _, name := range []string{"obs-fathom-otlp-ca", "obs-fathom-otlp-gateway", "obs-fathom-otlp-node"} {
		if bytes.Equal(secretsByName(remade)[name].Data["tls.crt"], installed[name].Data["tls.crt"]) {
			t.Errorf("with the CA gone, %s kept its certificate", name)
		}
	}
	if otlpCA(remade) == otlpCA(install) {
		t.Errorf("a new CA did not change the pods' checksum/otlp-ca")
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

// seccompProfile is the OCI runtime's seccomp format, which containerd, CRI-O and
// podman all read, decoded strictly: a field none of them knows fails here.
type seccompProfile struct {
	DefaultAction   string   `json:"defaultAction"`
	DefaultErrnoRet *uint    `json:"defaultErrnoRet"`
	Architectures   []string `json:"architectures"`
	Syscalls        []struct {
		Names    []string `json:"names"`
		Action   string   `json:"action"`
		ErrnoRet *uint    `json:"errnoRet"`
		Args     []struct {
			Index    uint   `json:"index"`
			Value    uint64 `json:"value"`
			ValueTwo uint64 `json:"valueTwo"`
			Op       string `json:"op"`
		} `json:"args"`
	} `json:"syscalls"`
}

// The node's seccomp profile refuses by default, lets the collector's bpf() and
// perf_event_open() through unconditionally, and still refuses what the runtime
// default refuses a container without CAP_SYS_ADMIN and friends (loading modules,
// kexec, setting the clock, ...). Unconfined is a value away, and then no
// profile is named.
func TestTheNodeSeccompProfile(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(collectortest.RepoRoot(t), "deploy", "helm", "fathom", "files", "seccomp", "fathom-node.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p seccompProfile
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("fathom-node.json: %v", err)
	}
	if p.DefaultAction != "SCMP_ACT_ERRNO" || !slices.Contains(p.Architectures, "SCMP_ARCH_X86_64") || !slices.Contains(p.Architectures, "SCMP_ARCH_AARCH64") {
		t.Errorf("default %s, architectures %v", p.DefaultAction, p.Architectures)
	}
	allowed := map[string]bool{}
	for _, rule := range p.Syscalls {
		if rule.Action == "SCMP_ACT_ALLOW" && len(rule.Args) == 0 {
			for _, n := range rule.Names {
				allowed[n] = true
			}
		}
	}
	for _, n := range []string{"bpf", "perf_event_open", "open_by_handle_at", "read", "mmap", "clone3", "epoll_pwait", "process_vm_readv", "kill"} {
		if !allowed[n] {
			t.Errorf("the profile does not allow %s", n)
		}
	}
	for _, n := range []string{"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "settimeofday", "clock_settime", "iopl", "swapon", "acct", "userfaultfd", "chroot"} {
		if allowed[n] {
			t.Errorf("the profile allows %s, which the runtime default refuses the node's capabilities", n)
		}
	}

	o := decode(t, manifests(chartRender(t, "", "node.seccompProfile.type=Unconfined")))
	sc := o.daemonSets[0].Spec.Template.Spec.Containers[0].SecurityContext
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeUnconfined || sc.SeccompProfile.LocalhostProfile != nil {
		t.Errorf("with node.seccompProfile.type=Unconfined: %+v", sc.SeccompProfile)
	}
	for _, cm := range o.configMaps {
		if strings.HasSuffix(cm.Name, "-node-seccomp") {
			t.Errorf("an Unconfined node still renders the profile's ConfigMap %s", cm.Name)
		}
	}
}

// The plain manifests (deploy/manifests/fathom.yaml) are the chart rendered with
// secrets the operator makes; they decode as the chart's objects do.
func TestThePlainManifestsDecode(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(collectortest.RepoRoot(t), "deploy", "manifests", "fathom.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	o := decode(t, string(raw))
	if len(o.daemonSets) != 1 || len(o.statefulSets) != 1 || len(o.secrets) != 0 || len(o.certificates) != 0 {
		t.Fatalf("manifests: %d daemon sets, %d stateful sets, %d secrets, %d certificates (want 1, 1, 0, 0: the operator makes the secrets)",
			len(o.daemonSets), len(o.statefulSets), len(o.secrets), len(o.certificates))
	}

	// Every secret the pods read is one the README has the operator make.
	readme, err := os.ReadFile(filepath.Join(collectortest.RepoRoot(t), "deploy", "manifests", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	made := map[string]bool{}
	for _, m := range regexp.MustCompile(`create secret \S+ (\S+)`).FindAllStringSubmatch(string(readme), -1) {
		made[m[1]] = true
	}
	for _, pod := range []corev1.PodSpec{o.daemonSets[0].Spec.Template.Spec, o.statefulSets[0].Spec.Template.Spec} {
		for _, v := range pod.Volumes {
			if v.Secret != nil && !made[v.Secret.SecretName] {
				t.Errorf("the pods mount secret %s, which deploy/manifests/README.md does not make", v.Secret.SecretName)
			}
		}
		for _, e := range pod.Containers[0].Env {
			if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && !made[r.SecretKeyRef.Name] {
				t.Errorf("%s reads secret %s, which deploy/manifests/README.md does not make", e.Name, r.SecretKeyRef.Name)
			}
		}
	}
}

// systemd-analyze verify accepts the three units, with ExecStart pointed at the built
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
	for _, name := range []string{"fathom-node.service", "fathom-gateway.service", "fathom-standalone.service"} {
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

// One-host mode from the chart: standalone.enabled (with the node collectors and the
// gateway off) renders one DaemonSet that runs deploy/configs/standalone.yaml itself,
// with the node collector's privileges and host mounts, its store and its socket in
// two host directories, no port, no probe, no Service, no Secret, and a NetworkPolicy
// that lets nothing in or out. With the node collectors or the gateway still on, the
// render stops and says what to set.
func TestTheChartsOneHostMode(t *testing.T) {
	chart := filepath.Join(collectortest.RepoRoot(t), "deploy", "helm", "fathom")
	standalone := "standalone.enabled=true,node.enabled=false,gateway.enabled=false"
	if out := helm(t, "lint", "--strict", chart, "--set", standalone); !strings.Contains(out, "0 chart(s) failed") {
		t.Fatalf("helm lint:\n%s", out)
	}
	o := decode(t, helm(t, "template", "obs", chart, "--namespace", "gpu-obs", "--set", standalone,
		"--set", "standalone.socketMode=0660,standalone.socketGroup=2500"))
	if len(o.daemonSets) != 1 || len(o.statefulSets) != 0 || len(o.services) != 0 || len(o.secrets) != 0 || len(o.accounts) != 1 || len(o.policies) != 1 {
		t.Fatalf("rendered %d daemon sets, %d stateful sets, %d services, %d secrets, %d service accounts, %d network policies; want 1, 0, 0, 0, 1, 1",
			len(o.daemonSets), len(o.statefulSets), len(o.services), len(o.secrets), len(o.accounts), len(o.policies))
	}
	ds := o.daemonSets[0]
	if ds.Name != "obs-fathom-standalone" {
		t.Errorf("daemon set %q", ds.Name)
	}
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	if !slices.Equal(c.Args, []string{"--config", "/etc/fathom/standalone.yaml"}) {
		t.Errorf("args %v", c.Args)
	}
	if len(c.Ports) != 0 || c.LivenessProbe != nil || c.ReadinessProbe != nil {
		t.Errorf("ports %v, probes %v %v: nothing listens off the pod's loopback", c.Ports, c.LivenessProbe, c.ReadinessProbe)
	}
	shipped, err := os.ReadFile(filepath.Join(collectortest.RepoRoot(t), "deploy", "configs", "standalone.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var config string
	for _, cm := range o.configMaps {
		if cm.Name == "obs-fathom-standalone" {
			config = cm.Data["standalone.yaml"]
		}
	}
	if strings.TrimSpace(config) != strings.TrimSpace(string(shipped)) {
		t.Errorf("the ConfigMap obs-fathom-standalone does not hold deploy/configs/standalone.yaml")
	}
	env := envOf(pod)
	for name, want := range map[string]string{"FATHOM_ECHO_DB": "/var/lib/fathom/echo.duckdb", "FATHOM_ECHO_SOCKET": "/run/fathom/echo.sock",
		"FATHOM_ECHO_SOCKET_MODE": "0660", "FATHOM_PROC_ROOT": "/host/proc"} {
		if env[name].Value != want {
			t.Errorf("%s = %q, want %q", name, env[name].Value, want)
		}
	}
	if e := env["FATHOM_NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("FATHOM_NODE_NAME is not the node's name: %+v", e)
	}
	sc := c.SecurityContext
	var caps []string
	for _, c := range sc.Capabilities.Add {
		caps = append(caps, string(c))
	}
	if !pod.HostPID || *sc.Privileged || !*sc.ReadOnlyRootFilesystem || sc.RunAsGroup == nil || *sc.RunAsGroup != 2500 ||
		!slices.Equal(caps, []string{"BPF", "PERFMON", "SYS_PTRACE", "DAC_READ_SEARCH", "KILL"}) {
		t.Errorf("hostPID %v, security context %+v, capabilities %v", pod.HostPID, sc, caps)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	hostPaths := map[string]corev1.HostPathVolumeSource{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[mounts[v.Name]] = *v.HostPath
		}
	}
	for mount, host := range map[string]string{"/var/lib/fathom": "/var/lib/fathom", "/run/fathom": "/run/fathom",
		"/host/proc": "/proc", "/sys/fs/bpf": "/sys/fs/bpf", "/sys/kernel/btf": "/sys/kernel/btf"} {
		if hostPaths[mount].Path != host {
			t.Errorf("%s is host path %q, want %q", mount, hostPaths[mount].Path, host)
		}
	}
	if typ := hostPaths["/run/fathom"].Type; typ == nil || *typ != corev1.HostPathDirectoryOrCreate {
		t.Errorf("the socket's host directory is not made when missing: %v", typ)
	}
	p := o.policies[0].Spec
	if !slices.Equal(p.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) || len(p.Ingress) != 0 || len(p.Egress) != 0 ||
		!labelsMatch(p.PodSelector.MatchLabels, ds.Spec.Template.Labels) {
		t.Errorf("network policy %+v: want every ingress and egress of the standalone pods denied", p)
	}

	_, err = helmRun(t, "template", "obs", chart, "--set", "standalone.enabled=true")
	if err == nil || !strings.Contains(err.Error(), "set node.enabled=false and gateway.enabled=false") {
		t.Errorf("standalone with the node collectors and gateway on: %v; want the render refused, naming what to set", err)
	}
}
