// Package imagebuild builds Fathom's OCI image without a container daemon: the
// collector binary, the shared libraries it links (from this Debian system, since no
// base image can be pulled here), the example configs, a non-root user, and an SPDX SBOM,
// written as an OCI layout tarball that `podman load` reads. `make image` runs it
// through ./tools/imagebuild/buildimage.
package imagebuild

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Paths and identities inside the image; the chart and the tests name the same ones.
const (
	BinaryPath = "/usr/bin/fathom"
	ConfigDir  = "/etc/fathom"
	SBOMPath   = "/usr/share/doc/fathom/sbom.spdx.json"
	// The gateway runs as this user (the chart's gateway securityContext says 65532 too);
	// the node's DaemonSet overrides it with runAsUser: 0 because loading BPF needs root.
	UserID   = 65532
	UserName = "fathom"
	// CABundle is the system roots, for exporters that reach HTTPS back ends.
	CABundle = "/etc/ssl/certs/ca-certificates.crt"
)

// Spec is what goes into one image.
type Spec struct {
	Binary    string   // the collector, built for linux/amd64
	Configs   []string // copied to /etc/fathom/<base name>
	Version   string   // the chart's appVersion: the tag and org.opencontainers.image.version
	Revision  string   // the git commit the binary was built from
	Source    string   // the repository URL
	Reference string   // the name podman gives the loaded image, e.g. ghcr.io/fathom-gpu/fathom:0.1.0
	// Created stamps the image config, its history and every file in the layers, so the
	// same inputs give the same digests (SOURCE_DATE_EPOCH or the commit time).
	Created time.Time
	// CompressionLevel is the layers' gzip level; 0 means gzip.DefaultCompression.
	CompressionLevel int
	// LibraryDirs are searched, in order, for the binary's DT_NEEDED libraries; nil
	// means Debian's amd64 multiarch directories.
	LibraryDirs []string
	// CABundle is the host's roots file copied to /etc/ssl/certs; "" leaves it out.
	CABundle string
}

// Result says what Build wrote and what went in.
type Result struct {
	Digest    v1.Hash   // the image manifest's digest
	Libraries []Library // the shared libraries copied in
	SBOM      []byte    // the SPDX document, also at SBOMPath in the image
}

// Build writes the image as an OCI layout tarball at out and returns its SBOM.
func Build(spec Spec, out string) (*Result, error) {
	if spec.Version == "" || spec.Reference == "" {
		return nil, fmt.Errorf("the image needs a version and a reference (got %q, %q)", spec.Version, spec.Reference)
	}
	created := spec.Created.UTC()
	libs, err := NeededLibraries(spec.Binary, spec.LibraryDirs)
	if err != nil {
		return nil, err
	}
	var caPackage *DebianPackage
	if spec.CABundle != "" {
		// update-ca-certificates writes the bundle from the package's certificates, so
		// dpkg owns none of it; the SBOM names the package it came from.
		caPackage = debianPackageByName("ca-certificates")
	}
	sbom, err := SBOM(spec, libs, caPackage)
	if err != nil {
		return nil, err
	}

	work, err := os.MkdirTemp("", "fathom-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)

	runtimeEntries := []layerEntry{
		{path: "/etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:Fathom collector:/var/lib/fathom:/sbin/nologin\n", UserName, UserID, UserID))},
		{path: "/etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\n%s:x:%d:\n", UserName, UserID))},
		// glibc reads this for user and host lookups (cgo's resolver, os/user).
		{path: "/etc/nsswitch.conf", mode: 0o644, data: []byte("passwd: files\ngroup: files\nhosts: files dns\n")},
		{path: "/tmp", dir: true, mode: 0o1777},
		{path: "/var/lib/fathom", dir: true, mode: 0o750, uid: UserID, gid: UserID},
		{path: "/var/log/fathom", dir: true, mode: 0o750, uid: UserID, gid: UserID},
	}
	if spec.CABundle != "" {
		runtimeEntries = append(runtimeEntries, layerEntry{path: CABundle, mode: 0o644, source: spec.CABundle})
	}
	copied := map[string]string{} // host file -> where it went first
	for _, l := range libs {
		if first, ok := copied[l.HostFile]; ok {
			// The loader is named twice, by PT_INTERP (/lib64) and by libc's
			// DT_NEEDED: one file and a link, as on Debian.
			runtimeEntries = append(runtimeEntries, layerEntry{path: l.ImagePath, symlink: first})
			continue
		}
		copied[l.HostFile] = l.ImagePath
		runtimeEntries = append(runtimeEntries, layerEntry{path: l.ImagePath, mode: 0o755, source: l.HostFile})
	}
	fathomEntries := []layerEntry{
		{path: BinaryPath, mode: 0o755, source: spec.Binary},
		{path: SBOMPath, mode: 0o644, data: sbom},
	}
	for _, c := range spec.Configs {
		fathomEntries = append(fathomEntries, layerEntry{path: path.Join(ConfigDir, filepath.Base(c)), mode: 0o644, source: c})
	}

	level := spec.CompressionLevel
	if level == 0 {
		level = gzip.DefaultCompression
	}
	runtimeLayer, err := writeLayer(filepath.Join(work, "runtime.tar.gz"), runtimeEntries, created, level)
	if err != nil {
		return nil, fmt.Errorf("the runtime layer: %w", err)
	}
	fathomLayer, err := writeLayer(filepath.Join(work, "fathom.tar.gz"), fathomEntries, created, level)
	if err != nil {
		return nil, fmt.Errorf("the fathom layer: %w", err)
	}

	labels := map[string]string{
		"org.opencontainers.image.title":       "fathom",
		"org.opencontainers.image.description": "Fathom: an OpenTelemetry Collector distribution that finds why GPU clusters are slow",
		"org.opencontainers.image.version":     spec.Version,
		"org.opencontainers.image.source":      spec.Source,
		"org.opencontainers.image.revision":    spec.Revision,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
	}
	cfg := &v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Created:      v1.Time{Time: created},
		Config: v1.Config{
			Entrypoint: []string{BinaryPath},
			Cmd:        []string{"--config", path.Join(ConfigDir, "gateway.yaml")},
			User:       fmt.Sprintf("%d:%d", UserID, UserID),
			WorkingDir: "/",
			Env:        []string{"PATH=/usr/bin:/bin"},
			Labels:     labels,
			ExposedPorts: map[string]struct{}{
				"4317/tcp": {}, "4318/tcp": {}, // OTLP gRPC and HTTP from the nodes
			},
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: runtimeLayer, MediaType: types.OCILayer, History: v1.History{
			Created: v1.Time{Time: created}, CreatedBy: "fathom imagebuild: glibc and C++ runtime from the build host, passwd, CA roots",
		}},
		mutate.Addendum{Layer: fathomLayer, MediaType: types.OCILayer, History: v1.History{
			Created: v1.Time{Time: created}, CreatedBy: "fathom imagebuild: /usr/bin/fathom, /etc/fathom, the SBOM",
		}},
	)
	if err != nil {
		return nil, err
	}
	img = mutate.Annotations(img, map[string]string{
		"org.opencontainers.image.version":  spec.Version,
		"org.opencontainers.image.revision": spec.Revision,
		"org.opencontainers.image.source":   spec.Source,
		"org.opencontainers.image.created":  created.Format(time.RFC3339),
	}).(v1.Image)
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}

	layoutDir := filepath.Join(work, "layout")
	lp, err := layout.Write(layoutDir, empty.Index)
	if err != nil {
		return nil, err
	}
	// podman names the loaded image from ref.name; a full reference keeps the
	// registry and repository the chart pulls.
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": spec.Reference,
	})); err != nil {
		return nil, fmt.Errorf("writing the OCI layout: %w", err)
	}
	if err := tarDirectory(layoutDir, out, created); err != nil {
		return nil, err
	}
	return &Result{Digest: digest, Libraries: libs, SBOM: sbom}, nil
}

// layerEntry is one directory, symbolic link or file in a layer: a file's data
// inline, or source a host file whose bytes are copied.
type layerEntry struct {
	path     string
	dir      bool
	mode     int64
	uid, gid int
	data     []byte
	source   string
	symlink  string // the target, for a symbolic link
}

// writeLayer writes entries, their parent directories first, sorted by path with every
// timestamp at created, as a gzipped tar, and opens it as a layer.
func writeLayer(file string, entries []layerEntry, created time.Time, level int) (v1.Layer, error) {
	byPath := map[string]layerEntry{}
	for _, e := range entries {
		for dir := path.Dir(e.path); dir != "/"; dir = path.Dir(dir) {
			if _, ok := byPath[dir]; !ok {
				byPath[dir] = layerEntry{path: dir, dir: true, mode: 0o755}
			}
		}
	}
	for _, e := range entries {
		byPath[e.path] = e
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zw, err := gzip.NewWriterLevel(f, level)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, p := range paths {
		e := byPath[p]
		hdr := &tar.Header{
			Name: strings.TrimPrefix(p, "/"), Mode: e.mode, Uid: e.uid, Gid: e.gid,
			ModTime: created, Format: tar.FormatPAX,
		}
		if e.dir {
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, err
			}
			continue
		}
		if e.symlink != "" {
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, e.symlink, 0o777
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, err
			}
			continue
		}
		hdr.Typeflag = tar.TypeReg
		if e.source == "" {
			hdr.Size = int64(len(e.data))
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, err
			}
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
			continue
		}
		if err := copyFileInto(tw, hdr, e.source); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	// Already compressed: go-containerregistry reads it as it is, without recompressing.
	return tarball.LayerFromFile(file, tarball.WithMediaType(types.OCILayer))
}

func copyFileInto(tw *tar.Writer, hdr *tar.Header, source string) error {
	src, err := os.Open(source)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	hdr.Size = st.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.Copy(tw, src); err != nil {
		return fmt.Errorf("copying %s: %w", source, err)
	}
	return nil
}

// tarDirectory writes dir as an uncompressed tar at out (what `podman load` reads as an
// OCI archive), oci-layout and index.json first, fixed timestamps and owners.
func tarDirectory(dir, out string, created time.Time) error {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files = append(files, rel)
		return nil
	})
	if err != nil {
		return err
	}
	rank := func(name string) int {
		switch name {
		case "oci-layout":
			return 0
		case "index.json":
			return 1
		}
		return 2
	}
	sort.Slice(files, func(i, j int) bool {
		if ri, rj := rank(files[i]), rank(files[j]); ri != rj {
			return ri < rj
		}
		return files[i] < files[j]
	})
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".partial"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, rel := range files {
		full := filepath.Join(dir, rel)
		st, err := os.Stat(full)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: created, Format: tar.FormatPAX}
		if st.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		hdr.Typeflag, hdr.Mode = tar.TypeReg, 0o644
		if err := copyFileInto(tw, hdr, full); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
