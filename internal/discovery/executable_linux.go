//go:build linux

package discovery

import (
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/fathom-gpu/fathom/internal/probes"
)

// runtimeSymbols are the functions the probes attach to in a libcudart: an executable
// that defines one of them carries the CUDA runtime itself.
var runtimeSymbols = func() map[string]bool {
	names := map[string]bool{}
	for _, api := range probes.APIs {
		if api.Library == probes.LibCUDART {
			names[api.Symbol] = true
		}
	}
	return names
}()

// executables remembers, per executable file, whether it carries the CUDA runtime:
// every scan looks at every process's executable, and each file's symbols are read once.
var executables = struct {
	sync.Mutex
	hasRuntime map[fileID]bool
}{hasRuntime: map[fileID]bool{}}

// fileID names a file's content: an inode number can be reused after a file is removed,
// and a file rewritten in place changes its ctime.
type fileID struct {
	dev, ino uint64
	ctime    syscall.Timespec
}

// maxExecutables bounds the memory of executables; past it the memory starts over.
const maxExecutables = 4096

// executableWithRuntime returns the path, inside its mount namespace, of the executable
// of the process at dir when the CUDA runtime is linked into it: nvcc links
// libcudart_static.a by default, and no libcudart file is then mapped. Only the
// executable's dynamic symbols count (a program linked with -rdynamic), because they
// are what the probes attach to (internal/probes reads .dynsym); a runtime whose
// symbols are only in .symtab is not matched.
func executableWithRuntime(dir string) (string, bool) {
	exe, err := os.Readlink(filepath.Join(dir, "exe"))
	if err != nil || !strings.HasPrefix(exe, "/") || strings.HasSuffix(exe, " (deleted)") {
		return "", false
	}
	host := filepath.Join(dir, "root", exe)
	var st syscall.Stat_t
	if err := syscall.Stat(host, &st); err != nil {
		return "", false
	}
	id := fileID{dev: st.Dev, ino: st.Ino, ctime: st.Ctim}
	executables.Lock()
	has, known := executables.hasRuntime[id]
	executables.Unlock()
	if !known {
		has = definesRuntime(host)
		executables.Lock()
		if len(executables.hasRuntime) >= maxExecutables {
			executables.hasRuntime = map[fileID]bool{}
		}
		executables.hasRuntime[id] = has
		executables.Unlock()
	}
	return exe, has
}

// definesRuntime says whether the ELF file at path defines (not merely calls) a probed
// CUDA runtime function among its dynamic symbols.
func definesRuntime(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return false
	}
	for _, s := range syms {
		if runtimeSymbols[s.Name] && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF && s.Value != 0 {
			return true
		}
	}
	return false
}
