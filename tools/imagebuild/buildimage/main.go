// Command buildimage writes Fathom's OCI image as an OCI layout tarball (what `podman
// load -i` reads) and its SPDX SBOM beside it, without a container daemon. `make image`
// runs it; see docs/distribution.md.
package main

import (
	"debug/buildinfo"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fathom-gpu/fathom/tools/imagebuild"
)

func main() {
	binary := flag.String("binary", "bin/fathom", "the collector binary (linux/amd64)")
	configs := flag.String("configs", "deploy/configs/*.yaml", "configs copied to /etc/fathom (a glob)")
	version := flag.String("version", "", "the image's version and tag: the chart's appVersion")
	repository := flag.String("repository", "ghcr.io/fathom-gpu/fathom", "the repository the image is named for")
	source := flag.String("source", "https://github.com/fathom-gpu/fathom", "org.opencontainers.image.source")
	revision := flag.String("revision", "", "the git commit; default: the one Go stamped in the binary")
	epoch := flag.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "the image's time in Unix seconds; default SOURCE_DATE_EPOCH, else the commit time Go stamped in the binary")
	caBundle := flag.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "the system roots copied into the image; empty leaves them out")
	out := flag.String("out", "", "the OCI layout tarball to write (default build/image/fathom-<version>.oci.tar)")
	sbomOut := flag.String("sbom", "", "where the SPDX SBOM is written too (default beside -out, .spdx.json)")
	flag.Parse()
	log.SetFlags(0)
	if *version == "" {
		log.Fatal("buildimage: -version is required (the chart's appVersion)")
	}
	cfgFiles, err := filepath.Glob(*configs)
	if err != nil || len(cfgFiles) == 0 {
		log.Fatalf("buildimage: no configs match %s", *configs)
	}
	if *out == "" {
		*out = filepath.Join("build", "image", "fathom-"+*version+".oci.tar")
	}
	if *sbomOut == "" {
		*sbomOut = filepath.Join(filepath.Dir(*out), "fathom-"+*version+".spdx.json")
	}

	info, err := buildinfo.ReadFile(*binary)
	if err != nil {
		log.Fatalf("buildimage: %v", err)
	}
	stamped := map[string]string{}
	for _, s := range info.Settings {
		stamped[s.Key] = s.Value
	}
	if *revision == "" {
		*revision = stamped["vcs.revision"]
		if stamped["vcs.modified"] == "true" {
			// Built from a tree with uncommitted changes: say so rather than name a
			// commit whose source is not what is in the image.
			*revision += "-dirty"
		}
	}
	if *revision == "" {
		log.Fatal("buildimage: the binary carries no vcs.revision; pass -revision")
	}
	created, err := imageTime(*epoch, stamped["vcs.time"])
	if err != nil {
		log.Fatalf("buildimage: %v", err)
	}
	if *caBundle != "" {
		if _, err := os.Stat(*caBundle); err != nil {
			log.Fatalf("buildimage: the CA bundle: %v (install ca-certificates, or pass -ca-bundle= to leave it out)", err)
		}
	}

	start := time.Now()
	res, err := imagebuild.Build(imagebuild.Spec{
		Binary: *binary, Configs: cfgFiles, Version: *version, Revision: *revision, Source: *source,
		Reference: *repository + ":" + *version, Created: created, CABundle: *caBundle,
	}, *out)
	if err != nil {
		log.Fatalf("buildimage: %v", err)
	}
	if err := os.WriteFile(*sbomOut, res.SBOM, 0o644); err != nil {
		log.Fatalf("buildimage: %v", err)
	}
	st, err := os.Stat(*out)
	if err != nil {
		log.Fatalf("buildimage: %v", err)
	}
	fmt.Printf("%s: %s:%s, linux/amd64, %s, %d MiB, %d library paths, revision %s, created %s, in %.1fs\n",
		*out, *repository, *version, res.Digest, st.Size()>>20, len(res.Libraries), *revision,
		created.Format(time.RFC3339), time.Since(start).Seconds())
	fmt.Printf("%s: SPDX 2.3 (also at %s in the image)\n", *sbomOut, imagebuild.SBOMPath)
}

// imageTime is the image's timestamp: SOURCE_DATE_EPOCH (or -created), else the commit
// time Go stamped in the binary.
func imageTime(epoch, vcsTime string) (time.Time, error) {
	if epoch != "" {
		secs, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("-created/SOURCE_DATE_EPOCH %q is not Unix seconds", epoch)
		}
		return time.Unix(secs, 0).UTC(), nil
	}
	if vcsTime != "" {
		return time.Parse(time.RFC3339, vcsTime)
	}
	return time.Time{}, fmt.Errorf("no SOURCE_DATE_EPOCH and no vcs.time in the binary: pass -created")
}
