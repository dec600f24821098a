// Package podman runs the image as the Helm chart runs it, under podman and runc: each
// container's security context, host mounts and environment are read from `helm
// template` of deploy/helm/fathom and turned into podman's flags, so what the node
// needs beyond the chart's context fails here.
package podman

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/fathom-gpu/fathom/internal/testsupport/collectortest"
)

// rendered is what the test takes from the chart: the two workloads and the
// ConfigMaps they mount (the collectors' configs, the node's seccomp profile).
type rendered struct {
	node       appsv1.DaemonSet
	gateway    appsv1.StatefulSet
	configMaps map[string]corev1.ConfigMap
}

// renderChart runs the chart's pinned Helm (deploy/helm/tools) with its default values.
func renderChart(t *testing.T) rendered {
	t.Helper()
	root := collectortest.RepoRoot(t)
	cmd := exec.Command("go", "tool", "helm", "template", "obs", filepath.Join(root, "deploy", "helm", "fathom"), "--namespace", "gpu-obs")
	cmd.Dir = filepath.Join(root, "deploy", "helm", "tools")
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	r := rendered{configMaps: map[string]corev1.ConfigMap{}}
	for _, doc := range strings.Split(string(out), "\n---") {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		switch head.Kind {
		case "DaemonSet":
			err = yaml.UnmarshalStrict([]byte(doc), &r.node)
		case "StatefulSet":
			err = yaml.UnmarshalStrict([]byte(doc), &r.gateway)
		case "ConfigMap":
			var cm corev1.ConfigMap
			err = yaml.UnmarshalStrict([]byte(doc), &cm)
			r.configMaps[cm.Name] = cm
		}
		if err != nil {
			t.Fatalf("%s: %v", head.Kind, err)
		}
	}
	if r.node.Name == "" || r.gateway.Name == "" {
		t.Fatal("the chart rendered no node DaemonSet or no gateway StatefulSet")
	}
	return r
}

// stand-ins for what the kubelet would provide: a directory for each volume that is
// not a hostPath (a ConfigMap's files, a secret's, a claim, an emptyDir), and a value
// for each variable the downward API or a secret fills, or that the test must change
// (ports: both containers share the host's network here).
type standIns struct {
	volumes map[string]string
	env     map[string]string
	// extraEnv is set beyond the chart's: listeners whose defaults would collide
	// with other collectors on the host's network.
	extraEnv map[string]string
	// seccompDir holds Localhost profiles, as the kubelet's seccomp directory does.
	seccompDir string
}

// podmanArgs translates a pod's container into `podman run` flags: exactly the
// chart's security context, its mounts (hostPath volumes from the host, others from
// the stand-ins), its environment and arguments. It fails the test on anything in
// the spec it cannot translate, so a new field in the chart is not silently dropped.
func podmanArgs(t *testing.T, pod corev1.PodSpec, c corev1.Container, s standIns) (flags, args []string) {
	t.Helper()
	if pod.HostPID {
		flags = append(flags, "--pid", "host")
	}
	if pod.HostNetwork || pod.HostIPC {
		t.Fatalf("the pod asks for hostNetwork %v hostIPC %v: translate them", pod.HostNetwork, pod.HostIPC)
	}
	// The user: the container's context over the pod's.
	var user, group *int64
	if psc := pod.SecurityContext; psc != nil {
		user, group = psc.RunAsUser, psc.RunAsGroup
		if psc.FSGroup != nil {
			// The kubelet adds fsGroup to the container's groups and gives volumes
			// to it; the stand-in volumes are made so (see groupReadable).
			flags = append(flags, "--group-add", fmt.Sprint(*psc.FSGroup))
		}
		if psc.SeccompProfile != nil || len(psc.SupplementalGroups) > 0 || psc.RunAsNonRoot != nil && *psc.RunAsNonRoot && user == nil {
			t.Fatalf("pod security context %+v: translate it", psc)
		}
	}
	sc := c.SecurityContext
	if sc == nil {
		t.Fatalf("container %s has no security context", c.Name)
	}
	if sc.RunAsUser != nil {
		user = sc.RunAsUser
	}
	if sc.RunAsGroup != nil {
		group = sc.RunAsGroup
	}
	if user != nil {
		// Without runAsGroup the runtime takes the user's group from the image's
		// /etc/passwd, as podman does for a bare uid.
		u := fmt.Sprint(*user)
		if group != nil {
			u += fmt.Sprintf(":%d", *group)
		}
		flags = append(flags, "--user", u)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Fatalf("container %s is privileged", c.Name)
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		// podman's --read-only adds writable tmpfs at /tmp, /var/tmp and /run, which
		// a pod does not have.
		flags = append(flags, "--read-only", "--read-only-tmpfs=false")
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		flags = append(flags, "--security-opt", "no-new-privileges")
	}
	if caps := sc.Capabilities; caps != nil {
		for _, d := range caps.Drop {
			flags = append(flags, "--cap-drop", string(d))
		}
		for _, a := range caps.Add {
			flags = append(flags, "--cap-add", string(a))
		}
	}
	if p := sc.SeccompProfile; p != nil {
		switch p.Type {
		case corev1.SeccompProfileTypeLocalhost:
			flags = append(flags, "--security-opt", "seccomp="+filepath.Join(s.seccompDir, *p.LocalhostProfile))
		case corev1.SeccompProfileTypeUnconfined:
			flags = append(flags, "--security-opt", "seccomp=unconfined")
		case corev1.SeccompProfileTypeRuntimeDefault:
			// podman's default profile
		}
	}
	if sc.SELinuxOptions != nil || sc.AppArmorProfile != nil || sc.ProcMount != nil || sc.RunAsNonRoot != nil {
		t.Fatalf("container security context %+v: translate it", sc)
	}
	if mem, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		flags = append(flags, "--memory", fmt.Sprint(mem.Value()))
	}

	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	// As the kubelet does (MakeNestedMountpoints), a volume mounted inside another
	// gets its mount point made in the outer volume first: the outer one may be
	// read-only, and the runtime could not make it there.
	for _, outer := range c.VolumeMounts {
		for _, inner := range c.VolumeMounts {
			rel, err := filepath.Rel(outer.MountPath, inner.MountPath)
			if dir := s.volumes[outer.Name]; dir != "" && err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
				if err := os.MkdirAll(filepath.Join(dir, rel), 0o755); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		src := s.volumes[m.Name]
		switch {
		case ok && v.HostPath != nil:
			src = v.HostPath.Path
		case src == "":
			t.Fatalf("no stand-in for volume %s (mounted at %s)", m.Name, m.MountPath)
		}
		opts := []string{}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		if m.MountPropagation != nil {
			switch *m.MountPropagation {
			case corev1.MountPropagationHostToContainer:
				opts = append(opts, "rslave")
			case corev1.MountPropagationBidirectional:
				opts = append(opts, "rshared")
			}
		}
		spec := src + ":" + m.MountPath
		if len(opts) > 0 {
			spec += ":" + strings.Join(opts, ",")
		}
		flags = append(flags, "-v", spec)
	}

	for _, e := range c.Env {
		value, override := s.env[e.Name]
		switch {
		case override:
		case e.ValueFrom != nil:
			t.Fatalf("%s comes from %+v: give the test a stand-in", e.Name, e.ValueFrom)
		default:
			value = e.Value
		}
		flags = append(flags, "--env", e.Name+"="+value)
	}
	for name, value := range s.extraEnv {
		flags = append(flags, "--env", name+"="+value)
	}
	if len(c.Command) > 0 {
		t.Fatalf("container %s replaces the entrypoint with %q: translate it", c.Name, c.Command)
	}
	return flags, c.Args
}
