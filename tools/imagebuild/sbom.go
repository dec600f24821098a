package imagebuild

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"time"
	"unicode"
)

// The SPDX 2.3 JSON shape, only the fields this SBOM fills.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	DocumentDescribes []string           `json:"documentDescribes"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string            `json:"name"`
	SPDXID           string            `json:"SPDXID"`
	VersionInfo      string            `json:"versionInfo,omitempty"`
	Supplier         string            `json:"supplier,omitempty"`
	DownloadLocation string            `json:"downloadLocation"`
	FilesAnalyzed    bool              `json:"filesAnalyzed"`
	LicenseConcluded string            `json:"licenseConcluded"`
	LicenseDeclared  string            `json:"licenseDeclared"`
	LicenseComments  string            `json:"licenseComments,omitempty"`
	CopyrightText    string            `json:"copyrightText"`
	Checksums        []spdxChecksum    `json:"checksums,omitempty"`
	ExternalRefs     []spdxExternalRef `json:"externalRefs,omitempty"`
	Comment          string            `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

const noAssertion = "NOASSERTION"

// SBOM is an SPDX 2.3 document for the image: the image as the described package, which
// contains the fathom binary (its Go modules, read from the build information Go
// embeds in it) and the Debian packages whose files were copied in.
func SBOM(spec Spec, libs []Library, caPackage *DebianPackage) ([]byte, error) {
	info, err := buildinfo.ReadFile(spec.Binary)
	if err != nil {
		return nil, fmt.Errorf("reading the Go build information in %s: %w", spec.Binary, err)
	}
	sum, err := fileSHA256(spec.Binary)
	if err != nil {
		return nil, err
	}
	created := spec.Created.UTC().Format(time.RFC3339)
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              "fathom-" + spec.Version,
		DocumentNamespace: fmt.Sprintf("%s/sbom/fathom-%s-%s", strings.TrimSuffix(spec.Source, "/"), spec.Version, spec.Revision),
		CreationInfo: spdxCreationInfo{
			Created:  created,
			Creators: []string{"Tool: fathom-imagebuild", "Organization: Fathom"},
		},
		DocumentDescribes: []string{"SPDXRef-Image"},
	}
	doc.Packages = append(doc.Packages, spdxPackage{
		Name: "fathom-image", SPDXID: "SPDXRef-Image", VersionInfo: spec.Version,
		DownloadLocation: noAssertion, LicenseConcluded: noAssertion, LicenseDeclared: noAssertion,
		CopyrightText: noAssertion,
		ExternalRefs: []spdxExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl",
			ReferenceLocator: "pkg:oci/fathom@" + spec.Version + "?repository_url=" + strings.SplitN(spec.Reference, ":", 2)[0]}},
		Comment: "the OCI image " + spec.Reference + ", built from scratch by tools/imagebuild",
	}, spdxPackage{
		Name: info.Main.Path, SPDXID: "SPDXRef-Fathom", VersionInfo: moduleVersion(info.Main, spec.Version),
		Supplier: "Organization: Fathom", DownloadLocation: "git+" + spec.Source + "@" + spec.Revision,
		LicenseConcluded: "Apache-2.0", LicenseDeclared: "Apache-2.0", CopyrightText: noAssertion,
		Checksums: []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: sum}},
		Comment:   fmt.Sprintf("%s in the image, built with %s", BinaryPath, info.GoVersion),
	})
	doc.Relationships = append(doc.Relationships,
		spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", "SPDXRef-Image"},
		spdxRelationship{"SPDXRef-Image", "CONTAINS", "SPDXRef-Fathom"},
	)

	modCache := goModCache()
	deps := append([]*debug.Module(nil), info.Deps...)
	sort.Slice(deps, func(i, j int) bool { return deps[i].Path < deps[j].Path })
	for _, dep := range deps {
		mod := dep
		if dep.Replace != nil {
			mod = dep.Replace
		}
		license, how := moduleLicense(modCache, mod)
		p := spdxPackage{
			Name: dep.Path, SPDXID: spdxID("SPDXRef-Go-", dep.Path+"-"+mod.Version), VersionInfo: mod.Version,
			DownloadLocation: "https://proxy.golang.org/" + dep.Path + "/@v/" + mod.Version + ".zip",
			LicenseConcluded: noAssertion, LicenseDeclared: license, LicenseComments: how,
			CopyrightText: noAssertion,
			ExternalRefs: []spdxExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl",
				ReferenceLocator: "pkg:golang/" + dep.Path + "@" + mod.Version}},
		}
		if mod.Sum != "" {
			p.Comment = "go.sum " + mod.Sum
		}
		if dep.Replace != nil {
			p.Comment = strings.TrimSpace(p.Comment + "; replaced by " + mod.Path + " " + mod.Version)
		}
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-Fathom", "DEPENDS_ON", p.SPDXID})
	}

	debs := map[string]*spdxPackage{}
	var debOrder []string
	addDeb := func(pkg *DebianPackage, file string) {
		id := spdxID("SPDXRef-Deb-", pkg.Name+"-"+pkg.Version)
		if p, ok := debs[id]; ok {
			p.Comment += ", " + file
			return
		}
		debs[id] = &spdxPackage{
			Name: pkg.Name, SPDXID: id, VersionInfo: pkg.Version, Supplier: "Organization: Debian",
			DownloadLocation: noAssertion, LicenseConcluded: noAssertion, LicenseDeclared: noAssertion,
			LicenseComments: "see /usr/share/doc/" + pkg.Name + "/copyright on a Debian system",
			CopyrightText:   noAssertion,
			ExternalRefs: []spdxExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl",
				ReferenceLocator: fmt.Sprintf("pkg:deb/debian/%s@%s?arch=%s&distro=%s", pkg.Name, pkg.Version, pkg.Architecture, debianRelease())}},
			Comment: "copied from the build host into the image: " + file,
		}
		debOrder = append(debOrder, id)
	}
	for _, l := range libs {
		if l.Package == nil {
			doc.Packages = append(doc.Packages, spdxPackage{
				Name: l.Name, SPDXID: spdxID("SPDXRef-File-", l.ImagePath), DownloadLocation: noAssertion,
				LicenseConcluded: noAssertion, LicenseDeclared: noAssertion, CopyrightText: noAssertion,
				Comment: "copied from " + l.HostFile + " on the build host; dpkg names no package that owns it",
			})
			doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-Image", "CONTAINS", spdxID("SPDXRef-File-", l.ImagePath)})
			continue
		}
		addDeb(l.Package, l.ImagePath)
	}
	if caPackage != nil {
		addDeb(caPackage, CABundle+" (the bundle update-ca-certificates writes from this package)")
	}
	for _, id := range debOrder {
		doc.Packages = append(doc.Packages, *debs[id])
		doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-Image", "CONTAINS", id})
	}

	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// moduleVersion is the main module's version: Go stamps "(devel)" on a build from a
// checkout, so the release version stands in.
func moduleVersion(m debug.Module, fallback string) string {
	if m.Version == "" || m.Version == "(devel)" {
		return fallback
	}
	return m.Version
}

var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// spdxID makes an SPDX identifier (letters, digits, '.', '-') from a module path.
func spdxID(prefix, s string) string {
	return prefix + strings.Trim(spdxIDUnsafe.ReplaceAllString(s, "-"), "-")
}

func fileSHA256(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func goModCache() string {
	if dir := os.Getenv("GOMODCACHE"); dir != "" {
		return dir
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// licenseTexts tells the common licenses apart by a phrase only their text has. A
// module whose files match none, or more than one, is NOASSERTION: a guess would be
// worse than saying nothing.
var licenseTexts = []struct{ id, phrase string }{
	{"Apache-2.0", "Apache License Version 2.0"},
	{"Apache-2.0", "Licensed under the Apache License, Version 2.0"},
	{"MIT", "Permission is hereby granted, free of charge, to any person obtaining a copy"},
	{"BSD-3-Clause", "Neither the name of"},
	{"BSD-2-Clause", "Redistribution and use in source and binary forms"},
	{"MPL-2.0", "Mozilla Public License Version 2.0"},
	{"MPL-2.0", "Mozilla Public License, version 2.0"},
	{"ISC", "Permission to use, copy, modify, and/or distribute this software for any"},
	{"ISC", "Permission to use, copy, modify, and distribute this software for any"},
}

// moduleLicense reads the LICENSE/COPYING files at the root of the module's source in
// the module cache and names the license they hold, saying how it knows.
func moduleLicense(modCache string, mod *debug.Module) (license, how string) {
	if modCache == "" {
		return noAssertion, "the module cache was not found"
	}
	dir := filepath.Join(modCache, escapeModulePath(mod.Path)+"@"+mod.Version)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return noAssertion, "the module's source is not in the module cache"
	}
	found := map[string]bool{}
	var files []string
	for _, e := range entries {
		upper := strings.ToUpper(e.Name())
		if e.IsDir() || !(strings.HasPrefix(upper, "LICENSE") || strings.HasPrefix(upper, "LICENCE") || strings.HasPrefix(upper, "COPYING")) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		files = append(files, e.Name())
		// Compare with every run of white space as one space: the texts wrap lines
		// anywhere.
		flat := strings.Join(strings.Fields(string(b)), " ")
		ids := map[string]bool{}
		for _, lt := range licenseTexts {
			if strings.Contains(flat, lt.phrase) {
				ids[lt.id] = true
			}
		}
		// A BSD-3-Clause text holds both phrases; "Neither the name of" alone is not BSD.
		if ids["BSD-3-Clause"] {
			if ids["BSD-2-Clause"] {
				delete(ids, "BSD-2-Clause")
			} else {
				delete(ids, "BSD-3-Clause")
			}
		}
		for id := range ids {
			found[id] = true
		}
	}
	if len(files) == 0 {
		return noAssertion, "no LICENSE or COPYING file at the module's root"
	}
	if len(found) == 0 {
		return noAssertion, strings.Join(files, ", ") + ": no license recognised"
	}
	if len(found) > 1 {
		// Several texts in one module (Apache-2.0 with a vendored file's BSD terms, say):
		// which applies to what is for a person to read, so it is named, not concluded.
		var ids []string
		for id := range found {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		return noAssertion, fmt.Sprintf("%s: holds the texts of %s", strings.Join(files, ", "), strings.Join(ids, ", "))
	}
	for id := range found {
		license = id
	}
	return license, "recognised in the module's " + strings.Join(files, ", ")
}

// escapeModulePath is the module cache's spelling of a path: each capital letter as
// '!' and its lower case, so that case-insensitive file systems keep modules apart.
func escapeModulePath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// debianRelease is the host's Debian codename for the purl's distro, "debian" when
// unknown.
func debianRelease() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return "debian"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VERSION_CODENAME="); ok && v != "" {
			return "debian-" + strings.Trim(v, `"`)
		}
	}
	return "debian"
}
