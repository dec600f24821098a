package imagebuild

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Library is one shared object the binary needs, where it comes from on this host and
// where the image puts it (the path the dynamic loader looks in, as ldd prints it).
type Library struct {
	Name      string // the DT_NEEDED name, or the interpreter's path
	ImagePath string
	HostFile  string         // the real file copied (symlinks resolved)
	Package   *DebianPackage // the Debian package that owns it; nil when dpkg does not know
}

// DebianPackage names a package of this system, for the SBOM.
type DebianPackage struct {
	Name, Version, Architecture string
}

// debianMultiarchDirs is where Debian's amd64 ld.so looks without an ld.so.cache.
var debianMultiarchDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"}

// NeededLibraries follows the binary's PT_INTERP and DT_NEEDED entries, and each
// library's own, to the files in dirs (Debian's amd64 multiarch directories when nil).
// A static binary needs none.
func NeededLibraries(binary string, dirs []string) ([]Library, error) {
	if dirs == nil {
		dirs = debianMultiarchDirs
	}
	f, err := elf.Open(binary)
	if err != nil {
		return nil, fmt.Errorf("reading %s as ELF: %w", binary, err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%s is built for %s; the image is linux/amd64", binary, f.Machine)
	}
	var libs []Library
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(b, 0); err != nil {
			return nil, fmt.Errorf("reading %s's interpreter: %w", binary, err)
		}
		interp := strings.TrimRight(string(b), "\x00")
		real, err := filepath.EvalSymlinks(interp)
		if err != nil {
			return nil, fmt.Errorf("%s's interpreter %s: %w", binary, interp, err)
		}
		libs = append(libs, Library{Name: interp, ImagePath: interp, HostFile: real, Package: owningPackage(interp, real)})
	}

	seen := map[string]bool{}
	queue, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("reading %s's needed libraries: %w", binary, err)
	}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if seen[name] {
			continue
		}
		seen[name] = true
		found := ""
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, name)); err == nil {
				found = filepath.Join(d, name)
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("%s needs %s, which is in none of %v", binary, name, dirs)
		}
		real, err := filepath.EvalSymlinks(found)
		if err != nil {
			return nil, err
		}
		libs = append(libs, Library{
			Name: name, ImagePath: path.Join(debianMultiarchDirs[0], name), HostFile: real,
			Package: owningPackage(found, real),
		})
		lf, err := elf.Open(real)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", real, err)
		}
		more, err := lf.ImportedLibraries()
		lf.Close()
		if err != nil {
			return nil, fmt.Errorf("reading %s's needed libraries: %w", real, err)
		}
		queue = append(queue, more...)
	}
	sort.Slice(libs, func(i, j int) bool { return libs[i].ImagePath < libs[j].ImagePath })
	return libs, nil
}

// owningPackage asks dpkg which package holds a file. Since Debian merged /usr, dpkg's
// lists name some files by their /lib path and others by the real /usr/lib one, so
// both are tried. No dpkg, or no owner: nil, and the SBOM says NOASSERTION.
func owningPackage(paths ...string) *DebianPackage {
	var tries []string
	for _, p := range paths {
		tries = append(tries, p)
		if rest, ok := strings.CutPrefix(p, "/usr"); ok {
			tries = append(tries, rest)
		} else {
			tries = append(tries, "/usr"+p)
		}
	}
	for _, p := range tries {
		out, err := exec.Command("dpkg-query", "-S", p).Output()
		if err != nil {
			continue
		}
		// "libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6"
		owner, _, ok := strings.Cut(strings.TrimSpace(string(out)), ": ")
		if !ok || strings.Contains(owner, ",") {
			continue
		}
		if pkg := debianPackageByName(owner); pkg != nil {
			return pkg
		}
	}
	return nil
}

// debianPackageByName is the installed package's version and architecture; nil when
// dpkg does not have it.
func debianPackageByName(name string) *DebianPackage {
	out, err := exec.Command("dpkg-query", "-W", "-f=${Package}\t${Version}\t${Architecture}", name).Output()
	if err != nil {
		return nil
	}
	fields := strings.Split(strings.TrimSpace(string(out)), "\t")
	if len(fields) != 3 || fields[1] == "" {
		return nil
	}
	return &DebianPackage{Name: fields[0], Version: fields[1], Architecture: fields[2]}
}
