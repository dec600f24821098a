// Package discovery finds the GPU libraries processes have loaded, by reading
// /proc/PID/maps, and the executables that carry the CUDA runtime linked in. Paths are
// returned as seen from the host: through /proc/PID/root, so a library inside a
// container image (or a Python wheel in a virtualenv) is probed in the same file the
// process runs.
package discovery

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/fathom-gpu/fathom/internal/probes"
)

// libraryPatterns match file names of the probed libraries: the soname, an unversioned
// or fully versioned name, and the hash-suffixed copies pip wheels ship
// (libcudart-d0da41ae.so.11.0).
var libraryPatterns = map[probes.Library]*regexp.Regexp{
	probes.LibCUDART: regexp.MustCompile(`^libcudart(-[0-9a-f]{8})?\.so(\.[0-9.]+)?$`),
	probes.LibCUDA:   regexp.MustCompile(`^libcuda\.so(\.[0-9.]+)?$`),
	probes.LibHIP:    regexp.MustCompile(`^libamdhip64\.so(\.[0-9.]+)?$`),
	// libnccl.so.2 from the CUDA repos or the nvidia-nccl-cu12 wheel (nvidia/nccl/lib),
	// and PyTorch's libraries that may carry NCCL linked in: they are probed for the NCCL
	// symbols they export, and left alone when they export none. RCCL (librccl.so.1),
	// AMD's NCCL, exports NCCL's API under the same names.
	probes.LibNCCL:    regexp.MustCompile(`^(libnccl(-[0-9a-f]{8})?\.so(\.[0-9.]+)?|librccl\.so(\.[0-9.]+)?|libtorch_cuda\.so|libtorch_global_deps\.so)$`),
	probes.LibIBVerbs: regexp.MustCompile(`^libibverbs\.so(\.[0-9.]+)?$`),
}

// MatchLibrary says which probed library a file name is, if any.
func MatchLibrary(name string) (probes.Library, bool) {
	base := filepath.Base(name)
	for lib, re := range libraryPatterns {
		if re.MatchString(base) {
			return lib, true
		}
	}
	return "", false
}

// Mapping is one probed library mapped into one process.
type Mapping struct {
	PID uint32
	// Path is the library's path inside the process's mount namespace; HostPath is the
	// same file reached from the collector (procRoot/PID/root/Path).
	Path, HostPath string
	Library        probes.Library
}

// ScanPID lists the probed libraries process pid has mapped, and its executable when the
// CUDA runtime is linked into it.
func ScanPID(procRoot string, pid uint32) ([]Mapping, error) {
	dir := filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10))
	f, err := os.Open(filepath.Join(dir, "maps"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Mapping
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// address perms offset dev inode pathname
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.HasPrefix(fields[5], "/") {
			continue
		}
		path := strings.Join(fields[5:], " ")
		if strings.HasSuffix(path, " (deleted)") || seen[path] {
			continue
		}
		lib, ok := MatchLibrary(path)
		if !ok {
			continue
		}
		seen[path] = true
		out = append(out, Mapping{PID: pid, Path: path, HostPath: filepath.Join(dir, "root", path), Library: lib})
	}
	if err := sc.Err(); err != nil {
		return out, err
	}
	if exe, ok := executableWithRuntime(dir); ok && !seen[exe] {
		out = append(out, Mapping{PID: pid, Path: exe, HostPath: filepath.Join(dir, "root", exe), Library: probes.LibCUDART})
	}
	return out, nil
}

// Scan lists the probed libraries of every process under procRoot. Processes that
// vanish or cannot be read mid-scan are skipped: they are not an error for the host.
func Scan(procRoot string) ([]Mapping, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	var out []Mapping
	for _, e := range entries {
		pid, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || !e.IsDir() {
			continue
		}
		m, err := ScanPID(procRoot, uint32(pid))
		if err != nil {
			continue
		}
		out = append(out, m...)
	}
	return out, nil
}
