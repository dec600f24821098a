package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

var (
	standinOnce sync.Once
	standinDir  string
	standinPath string
	standinErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if standinDir != "" {
		os.RemoveAll(standinDir)
	}
	os.Exit(code)
}

// standin builds testdata/standin once: a few MB that link libc through cgo, as the
// real collector does, instead of the collector's 170 MB.
func standin(t *testing.T) string {
	t.Helper()
	standinOnce.Do(func() {
		standinDir, standinErr = os.MkdirTemp("", "fathom-standin-")
		if standinErr != nil {
			return
		}
		standinPath = filepath.Join(standinDir, "fathom")
		cmd := exec.Command("go", "build", "-o", standinPath, "./testdata/standin")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			standinErr = err
			standinPath = string(out)
		}
	})
	if standinErr != nil {
		t.Fatalf("building the stand-in collector: %v\n%s", standinErr, standinPath)
	}
	return standinPath
}

func testSpec(t *testing.T, binary string) Spec {
	configs, err := filepath.Glob("../../deploy/configs/*.yaml")
	if err != nil || len(configs) == 0 {
		t.Fatalf("no configs in deploy/configs: %v", err)
	}
	return Spec{
		Binary: binary, Configs: configs, Version: "9.8.7", Revision: "0123456789abcdef0123456789abcdef01234567",
		Source: "https://github.com/fathom-gpu/fathom", Reference: "localhost/fathom-imagebuild-test:9.8.7",
		Created: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC), CompressionLevel: gzip.BestSpeed,
	}
}

// readImage opens the tarball the way a consumer would: unpacked, as an OCI layout,
// through go-containerregistry's reader; one image, named in ref.name.
func readImage(t *testing.T, tarball string) (v1.Image, v1.Descriptor) {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if hdr.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(target, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	index, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("the tarball is not an OCI layout: %v", err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want the one linux/amd64 image", len(manifest.Manifests))
	}
	desc := manifest.Manifests[0]
	img, err := index.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img, desc
}

// imageFiles is the flattened file system: path to content (a symlink's target for a
// link) and header.
func imageFiles(t *testing.T, img v1.Image) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files, headers := map[string][]byte{}, map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := "/" + strings.TrimSuffix(hdr.Name, "/")
		headers[name] = hdr
		switch hdr.Typeflag {
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[name] = b
		case tar.TypeSymlink:
			files[name] = []byte(hdr.Linkname)
		}
	}
	return files, headers
}

func TestImageHoldsTheCollectorItsConfigsUserLabelsAndSBOM(t *testing.T) {
	binary := standin(t)
	spec := testSpec(t, binary)
	out := filepath.Join(t.TempDir(), "fathom.oci.tar")
	res, err := Build(spec, out)
	if err != nil {
		t.Fatal(err)
	}

	img, desc := readImage(t, out)
	if got := desc.Annotations["org.opencontainers.image.ref.name"]; got != spec.Reference {
		t.Errorf("ref.name = %q, want %q (podman names the loaded image from it)", got, spec.Reference)
	}
	if digest, _ := img.Digest(); digest != res.Digest {
		t.Errorf("the layout's image is %s, Build said %s", digest, res.Digest)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cfg.OS, cfg.Architecture)
	}
	if got := cfg.Config.User; got != "65532:65532" {
		t.Errorf("user %q, want 65532:65532: the gateway runs as non-root fathom", got)
	}
	if got := strings.Join(cfg.Config.Entrypoint, " "); got != "/usr/bin/fathom" {
		t.Errorf("entrypoint %q", got)
	}
	if got := strings.Join(cfg.Config.Cmd, " "); got != "--config /etc/fathom/gateway.yaml" {
		t.Errorf("cmd %q", got)
	}
	for label, want := range map[string]string{
		"org.opencontainers.image.version":  "9.8.7",
		"org.opencontainers.image.source":   "https://github.com/fathom-gpu/fathom",
		"org.opencontainers.image.revision": spec.Revision,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.title":    "fathom",
	} {
		if got := cfg.Config.Labels[label]; got != want {
			t.Errorf("label %s = %q, want %q", label, got, want)
		}
	}
	if !cfg.Created.Time.Equal(spec.Created) {
		t.Errorf("created %v, want %v", cfg.Created.Time, spec.Created)
	}

	files, headers := imageFiles(t, img)
	want, _ := os.ReadFile(binary)
	if !bytes.Equal(files["/usr/bin/fathom"], want) {
		t.Error("/usr/bin/fathom is not the binary it was built from")
	}
	if headers["/usr/bin/fathom"].Mode&0o111 == 0 {
		t.Error("/usr/bin/fathom is not executable")
	}
	for _, c := range spec.Configs {
		want, _ := os.ReadFile(c)
		in := "/etc/fathom/" + filepath.Base(c)
		if !bytes.Equal(files[in], want) {
			t.Errorf("%s differs from %s", in, c)
		}
	}
	if !strings.Contains(string(files["/etc/passwd"]), "fathom:x:65532:65532:") {
		t.Errorf("/etc/passwd has no fathom user 65532:\n%s", files["/etc/passwd"])
	}
	for _, dir := range []string{"/var/lib/fathom", "/var/log/fathom"} {
		if h := headers[dir]; h == nil || h.Uid != UserID {
			t.Errorf("%s missing or not owned by %d: the gateway's store and audit log go there", dir, UserID)
		}
	}
	// The loader and libc the stand-in links, where ld.so looks for them, and the
	// interpreter path its ELF header names.
	for _, lib := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"} {
		if len(files[lib]) == 0 {
			t.Errorf("%s is not in the image", lib)
		}
	}
	if got := string(files["/lib64/ld-linux-x86-64.so.2"]); got != "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" {
		t.Errorf("/lib64/ld-linux-x86-64.so.2 -> %q, want a link to the loader", got)
	}
	for name, h := range headers {
		if !h.ModTime.Equal(spec.Created) {
			t.Errorf("%s has time %v, want every file at %v", name, h.ModTime, spec.Created)
			break
		}
	}

	if !bytes.Equal(files[SBOMPath], res.SBOM) {
		t.Errorf("%s in the image differs from the SBOM Build returned", SBOMPath)
	}
	checkSBOM(t, res.SBOM, binary)
}

// checkSBOM: SPDX 2.3 JSON naming every module Go recorded in the binary at its
// version, and libc6 with the host's version.
func checkSBOM(t *testing.T, sbom []byte, binary string) {
	t.Helper()
	var doc struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			Name, SPDXID, VersionInfo, LicenseDeclared string
		} `json:"packages"`
		Relationships []struct {
			SPDXElementID, RelationshipType, RelatedSPDXElement string
		} `json:"relationships"`
	}
	if err := json.Unmarshal(sbom, &doc); err != nil {
		t.Fatalf("the SBOM is not JSON: %v", err)
	}
	if doc.SPDXVersion != "SPDX-2.3" {
		t.Errorf("spdxVersion %q", doc.SPDXVersion)
	}
	versions := map[string]string{}
	licenses := map[string]string{}
	for _, p := range doc.Packages {
		versions[p.Name] = p.VersionInfo
		licenses[p.Name] = p.LicenseDeclared
	}
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Deps) == 0 {
		t.Fatal("the stand-in records no modules")
	}
	for _, dep := range info.Deps {
		if got := versions[dep.Path]; got != dep.Version {
			t.Errorf("the SBOM has %s at %q, the binary %q", dep.Path, got, dep.Version)
		}
	}
	const ggcr = "github.com/google/go-containerregistry"
	if licenses[ggcr] != "Apache-2.0" {
		t.Errorf("%s's license %q, want Apache-2.0 (its LICENSE in the module cache)", ggcr, licenses[ggcr])
	}
	if _, err := exec.LookPath("dpkg-query"); err == nil {
		if versions["libc6"] == "" {
			t.Error("the SBOM names no libc6 package, though libc.so.6 was copied from it")
		}
	}
	relations := 0
	for _, r := range doc.Relationships {
		if r.SPDXElementID == "SPDXRef-Fathom" && r.RelationshipType == "DEPENDS_ON" {
			relations++
		}
	}
	if relations != len(info.Deps) {
		t.Errorf("%d DEPENDS_ON relationships for %d modules", relations, len(info.Deps))
	}
}

func TestTheSameInputsGiveTheSameImageBytes(t *testing.T) {
	spec := testSpec(t, standin(t))
	sums := make([][32]byte, 2)
	for i := range sums {
		out := filepath.Join(t.TempDir(), "fathom.oci.tar")
		if _, err := Build(spec, out); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		sums[i] = sha256.Sum256(b)
	}
	if sums[0] != sums[1] {
		t.Errorf("two builds of the same inputs differ: %x vs %x", sums[0], sums[1])
	}
}
